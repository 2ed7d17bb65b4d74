"""Request bodies parsed as they stream in, into an N-Quads staging file (no store lock held).

Parsing the whole body before the store is touched is what makes a write atomic: a syntax error
anywhere in the body is found while the store is still untouched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from pyoxigraph import Quad, RdfFormat, parse, serialize

from store.errors import BodyTooLarge, RdfSyntaxError
from store.terms import GraphName


class _LimitedReader:
    """A file-like view of a byte stream that refuses to read past ``limit`` bytes."""

    def __init__(self, source: IO[bytes], limit: int | None) -> None:
        self._source = source
        self._limit = limit
        self.consumed = 0
        self.exceeded = False

    def read(self, size: int = -1) -> bytes:
        chunk = self._source.read(size if size and size > 0 else 1 << 16)
        self.consumed += len(chunk)
        if self._limit is not None and self.consumed > self._limit:
            self.exceeded = True
            raise BodyTooLarge(f"request body exceeds the limit of {self._limit} bytes")
        return chunk

    def readable(self) -> bool:
        return True


@dataclass
class StagedQuads:
    """Parsed, validated quads waiting in a file for a transaction to apply them."""

    path: Path
    count: int = 0
    graphs: set[GraphName] = field(default_factory=set)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def stage_rdf(
    source: IO[bytes] | bytes,
    rdf_format: RdfFormat,
    directory: Path,
    *,
    base_iri: str | None = None,
    to_graph: GraphName | None = None,
    max_bytes: int | None = None,
    rename_blank_nodes: bool = True,
) -> StagedQuads:
    """Parse ``source`` into a staging file. ``to_graph``: put every triple there and refuse
    named graphs (a Graph Store request that targets one graph)."""
    fd, name = tempfile.mkstemp(suffix=".nq", dir=directory)
    os.close(fd)
    staged = StagedQuads(Path(name))
    reader = _LimitedReader(source, max_bytes) if not isinstance(source, bytes) else None
    label = "request body"

    def quads() -> Iterator[Quad]:
        parser = parse(
            input=cast(IO[bytes], reader) if reader is not None else source,
            format=rdf_format,
            base_iri=base_iri,
            without_named_graphs=to_graph is not None,
            rename_blank_nodes=rename_blank_nodes,
        )
        graphs = staged.graphs
        for quad in parser:
            if to_graph is not None:
                quad = Quad(quad.subject, quad.predicate, quad.object, to_graph)
            graphs.add(quad.graph_name)
            staged.count += 1
            yield quad

    try:
        with staged.path.open("wb") as out:
            serialize(quads(), out, RdfFormat.N_QUADS)
    except BodyTooLarge:
        staged.discard()
        raise
    except SyntaxError as error:
        staged.discard()
        raise RdfSyntaxError(f"{label} is not valid {rdf_format.name}: {_describe(error)}") from None
    except (OSError, ValueError, UnicodeDecodeError) as error:
        staged.discard()
        if reader is not None and reader.exceeded:
            raise BodyTooLarge(f"request body exceeds the limit of {max_bytes} bytes") from None
        raise RdfSyntaxError(f"{label} could not be read as {rdf_format.name}: {error}") from None
    if to_graph is not None:
        staged.graphs.add(to_graph)
    return staged


def _describe(error: SyntaxError) -> str:
    text = str(error.msg if hasattr(error, "msg") and error.msg else error)
    if error.lineno is not None and "line" not in text:
        return f"{text} (line {error.lineno}, column {error.offset})"
    return text


def concatenate(parts: list[StagedQuads], directory: Path) -> StagedQuads:
    """One staged file holding every part (N-Quads files concatenate), parts discarded."""
    fd, name = tempfile.mkstemp(suffix=".nq", dir=directory)
    merged = StagedQuads(Path(name))
    with os.fdopen(fd, "wb") as out:
        for part in parts:
            with part.path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            merged.count += part.count
            merged.graphs |= part.graphs
            part.discard()
    return merged
