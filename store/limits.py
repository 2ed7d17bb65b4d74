"""Size limits: chosen so that whatever the store accepts, every part of it can read back (docs/http.md#limits).
Nesting limits: chosen so that no document crashes the process that parses it (``store.nesting``)."""

from __future__ import annotations

import io
from typing import IO, cast

from store.nesting import DepthScanner, JsonScanner, TurtleScanner
from store.xml_nesting import XmlScanner

# One statement as an N-Quads line (escapes counted): pyoxigraph's Turtle-family parsers refuse a token over 16 MiB
# and its JSON parsers (SPARQL results, JSON-LD) one over ≈ 8,385,000 bytes; history deltas, element contents,
# windows and SERVICE results are all parsed again.
STATEMENT_LIMIT = 8_000_000
# One stream element as sent and as stored (its canonical TriG: timestamp triple and graph block), held in memory.
ELEMENT_LIMIT = 64 << 20
# The default of ``--max-body-bytes``: a Graph Store body, as sent and as staged (N-Quads on disk).
BODY_LIMIT = 1 << 30

# The deepest nesting read, per syntax: beyond, pyoxigraph's parsers overflow a thread's stack (a few thousand levels
# down; measured: store.nesting) or take quadratic time (RDF/XML). Real data stays far below: JSON-LD and Turtle a few
# dozen levels, the RDF/XML of an OWL ontology a few dozen elements.
#: Brackets ``(`` ``[`` ``{`` and ``<<`` open at once in Turtle, TriG, N-Triples, N-Quads (a triple term ``<<( … )>>``
#: is two levels).
TURTLE_NESTING = 128
#: Objects and arrays open at once in JSON (JSON-LD; a SERVICE's SPARQL JSON results).
JSON_NESTING = 128
#: Elements open at once in RDF/XML.
XML_NESTING = 256
#: Bytes of text an RDF/XML document's DTD entities may expand to, at their declarations and references together,
#: beyond the size of the document read so far: "billion laughs" (647 bytes that expand to 300 MB) is refused, an
#: ontology's ``&xsd;`` is not.
ENTITY_EXPANSION = 1 << 20

_LINE_BASED = frozenset({"application/n-triples", "application/n-quads"})
_TURTLE = frozenset({"text/turtle", "application/x-turtle", "application/trig"})
_JSON = frozenset({"application/ld+json", "application/json", "application/sparql-results+json",
                   "application/ld+json;profile=http://www.w3.org/ns/json-ld#streaming"})


def nesting_scanner(media_type: str) -> DepthScanner:
    """The depth scanner of what pyoxigraph parses as ``media_type``, with its limit; ``UnsupportedMediaType`` for a
    syntax that has none (N3, whose lexer reads ``<=`` as an IRI's start or as a keyword, as what follows says)."""
    if media_type in _TURTLE or media_type in _LINE_BASED:
        return TurtleScanner(TURTLE_NESTING, line_based=media_type in _LINE_BASED)
    if media_type in _JSON:
        return JsonScanner(JSON_NESTING)
    if media_type == "application/rdf+xml":
        return XmlScanner(XML_NESTING, expansion=ENTITY_EXPANSION)
    from store.errors import UnsupportedMediaType  # here: a framing process imports these limits, not the errors

    raise UnsupportedMediaType(f"{media_type} is not read by this server: its nesting is not checked")


def check_nesting(data: bytes, media_type: str) -> None:
    """Refuse a whole document (a message, an LDES page, SERVICE results) nested deeper than its syntax's limit, or an
    RDF/XML one whose entities expand too far, before pyoxigraph reads it. Fewer brackets (or tags) than the limit,
    and no DTD: no scan at all."""
    if media_type in _TURTLE or media_type in _LINE_BASED:
        shallow = sum(map(data.count, TurtleScanner.openers)) <= TURTLE_NESTING
    elif media_type in _JSON:
        shallow = sum(map(data.count, JsonScanner.openers)) <= JSON_NESTING
    elif media_type == "application/rdf+xml":
        shallow = data.count(b"<") <= XML_NESTING and b"<!D" not in data and b"<!d" not in data
    else:
        shallow = False  # (nesting_scanner refuses it)
    if not shallow:
        nesting_scanner(media_type).feed(data)


class Checked(io.BytesIO):
    """A whole document ``check_nesting`` has read: ``guarded`` hands it on as it is (a message is checked with a
    count or two, where a guard costs more than the parse of a small one)."""


def checked(data: bytes, media_type: str) -> IO[bytes]:
    """``data`` to parse as ``media_type``, once ``check_nesting`` has found it shallow enough."""
    check_nesting(data, media_type)
    return Checked(data)


class NestingGuard:
    """A binary source (a request body, a message) read through its syntax's depth scanner: what it hands on is never
    nested deeper than the limit. At the first place that is, it hands on the bytes before it, then raises the refusal
    at the next read instead of ending: the parser has given out what those bytes held, so an upload keeps the
    elements before the refused one, as with a syntax error there. ``arriving()`` (``store.framing``) is False from
    then on: what was framed is given out before that read."""

    def __init__(self, source: IO[bytes], media_type: str) -> None:
        self._source = source
        self._scanner = nesting_scanner(media_type)
        self._refusal: Exception | None = None
        self._read = 0  # bytes fed to the scanner

    def read(self, size: int = -1) -> bytes:
        from store.errors import NestedTooDeep

        if self._refusal is not None:
            raise self._refusal
        data = self._source.read(size)
        try:
            self._scanner.feed(data)
        except NestedTooDeep as refusal:
            self._refusal, before = refusal, data[:max(0, refusal.offset - self._read)]
            if not before:  # (ending here would read as the body's end)
                raise
            return before
        self._read += len(data)
        return data

    def readable(self) -> bool:
        return True

    def arriving(self) -> bool:
        arriving = getattr(self._source, "arriving", None)
        return self._refusal is None and (arriving is None or bool(arriving()))


def guarded(source: IO[bytes], media_type: str) -> IO[bytes]:
    """``source`` read through a ``NestingGuard`` (unless ``checked`` made it)."""
    return source if isinstance(source, Checked) else cast(IO[bytes], NestingGuard(source, media_type))
