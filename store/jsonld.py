"""Stream elements framed out of a JSON-LD upload: each top-level named graph object (``@id`` + ``@graph``)
is one element, and its timestamp is its ``prov:generatedAtTime`` (the stream's timestamp predicate), which JSON-LD
puts in the default graph — the element shape of a TriG upload.

pyoxigraph's JSON-LD parser streams (it yields a named graph's quads as soon as it has read them, not after the
whole body), so a JSON array of such objects is framed as it arrives by the same quad-by-quad framer as TriG and
N-Quads (``store.elements.QuadFramer``): an element is complete when the next one begins or the body ends, and a
refusal names the element and keeps what came before it. This module only adapts that framer's errors to JSON-LD
(the TriG/N-Quads fast path, ``store.framing``, is untouched).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from pyoxigraph import RdfFormat

from store.elements import ParsedElement, QuadFramer
from store.errors import RdfSyntaxError

# pyoxigraph's words when a document names a remote @context: the server fetches nothing while parsing an upload
_REMOTE_CONTEXT = "LoadDocumentCallback"


class JsonLdFramer:
    """The elements of a JSON-LD body, lazily, as bytes arrive. ``first_ordinal`` only labels elements in error
    messages; the stream assigns the real ordinals."""

    def __init__(self, source: IO[bytes], timestamp_predicate: str, *, base_iri: str | None = None,
                 first_ordinal: int = 1) -> None:
        self._framer = QuadFramer(source, RdfFormat.JSON_LD, timestamp_predicate, base_iri=base_iri,
                                  first_ordinal=first_ordinal)

    def __iter__(self) -> Iterator[ParsedElement]:
        try:
            yield from self._framer
        except RdfSyntaxError as error:
            if _REMOTE_CONTEXT in error.message:
                raise RdfSyntaxError(
                    f"{error.message} — a JSON-LD upload must carry its @context inline (an object, not a URL): "
                    "the server fetches nothing while it parses") from None
            raise
