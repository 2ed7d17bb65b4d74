"""Request bodies parsed as they stream in, into an N-Quads staging file (no store lock held).

Parsing the whole body before the store is touched is what makes a write atomic: a syntax error
anywhere in the body is found while the store is still untouched. So is a statement over the statement limit
(``StatementGuard``, as the staging file is written): every statement of the dataset, hence of its history's deltas,
can be parsed again.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from pyoxigraph import DefaultGraph, Quad, RdfFormat, parse, serialize

from store.errors import BodyTooLarge, QuadOutsideTarget, RdfSyntaxError, StatementTooLarge
from store.limits import STATEMENT_LIMIT, guarded
from store.terms import GraphName, graph_to_text

_SHOWN = 60  # bytes of an oversized statement quoted in its refusal
# pyoxigraph's words when a token (a literal, an IRI, a comment) outgrows its parser's buffer: a MemoryError
_PARSER_BUFFER = "buffer maximal size"


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
            raise BodyTooLarge(f"request body exceeds the limit of {self._limit:,} bytes "
                               "(server option --max-body-bytes)")
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
    """Parse ``source`` into a staging file. ``to_graph`` (a Graph Store request that targets one graph): the
    triples and the default graph's quads go there, quads naming ``to_graph`` stay, and a quad naming another graph
    is refused (``QuadOutsideTarget``)."""
    fd, name = tempfile.mkstemp(suffix=".nq", dir=directory)
    os.close(fd)
    staged = StagedQuads(Path(name))
    reader = _LimitedReader(source, max_bytes) if not isinstance(source, bytes) else None
    label = "request body"

    def quads() -> Iterator[Quad]:
        parser = parse(  # through the nesting guard: a body too deep for the parser is refused before it
            input=guarded(cast(IO[bytes], reader) if reader is not None else io.BytesIO(cast(bytes, source)),
                          rdf_format.media_type),
            format=rdf_format,
            base_iri=base_iri,
            rename_blank_nodes=rename_blank_nodes,
        )
        graphs = staged.graphs
        for quad in parser:
            if to_graph is not None and quad.graph_name != to_graph:
                if not isinstance(quad.graph_name, DefaultGraph):
                    raise QuadOutsideTarget(
                        f"{label}: a quad names graph {graph_to_text(quad.graph_name)}, but this request writes "
                        f"graph {graph_to_text(to_graph)}; send that graph's quads (or triples, which go into it), "
                        "or send quads of several graphs to /store")
                quad = Quad(quad.subject, quad.predicate, quad.object, to_graph)
            graphs.add(quad.graph_name)
            staged.count += 1
            yield quad

    try:
        with staged.path.open("wb") as out:
            serialize(quads(), cast(IO[bytes], StatementGuard(out, label, max_total=max_bytes)), RdfFormat.N_QUADS)
    except (BodyTooLarge, RdfSyntaxError, QuadOutsideTarget):  # RdfSyntaxError: nested too deep (store.limits)
        staged.discard()
        raise
    except MemoryError as error:
        staged.discard()
        if not parser_overflow(error):
            raise
        raise StatementTooLarge(f"{label}: {TOKEN_TOO_LONG}") from None
    except SyntaxError as error:
        staged.discard()
        raise RdfSyntaxError(f"{label} is not valid {rdf_format.name}: {_describe(error)}") from None
    except (OSError, ValueError, UnicodeDecodeError) as error:
        staged.discard()
        if reader is not None and reader.exceeded:
            raise BodyTooLarge(f"request body exceeds the limit of {max_bytes:,} bytes (server option "
                               "--max-body-bytes)") from None
        raise RdfSyntaxError(f"{label} could not be read as {rdf_format.name}: {error}") from None
    if to_graph is not None:
        staged.graphs.add(to_graph)
    return staged


def _describe(error: SyntaxError) -> str:
    text = str(error.msg if hasattr(error, "msg") and error.msg else error)
    if error.lineno is not None and "line" not in text:
        return f"{text} (line {error.lineno}, column {error.offset})"
    return text


TOKEN_TOO_LONG = (f"a literal or IRI is longer than the parser reads (16 MiB as sent, 8 MiB in JSON-LD), over the "
                  f"statement limit of {STATEMENT_LIMIT:,} bytes as an N-Quads line")


def parser_overflow(error: MemoryError) -> bool:
    """Whether pyoxigraph's parser refused a token longer than its buffer (not the process running out of memory)."""
    return _PARSER_BUFFER in str(error)


def statement_too_large(what: str | None, start: bytes, size: int | None) -> StatementTooLarge:
    """The refusal of a statement of ``what`` whose N-Quads line begins with ``start`` and is ``size`` bytes (None:
    more than the limit, its end not read)."""
    length = f"more than {STATEMENT_LIMIT:,}" if size is None else f"{size:,}"
    shown = start[:_SHOWN].decode("utf-8", "replace")
    return StatementTooLarge(f"{what + ': ' if what else ''}a statement is {length} bytes as an N-Quads line, over the "
                             f"statement limit of {STATEMENT_LIMIT:,} bytes (it begins {shown}…)")


def first_long_line(data: bytes, limit: int, start: int = 0, end: int | None = None) -> int | None:
    """Where the first line of ``data[start:end]`` longer than ``limit`` bytes (its newline counted) begins, or None
    (``start`` is a line's start). One backward byte search per ``limit`` bytes of lines, nothing per line."""
    end = len(data) if end is None else end
    position = start
    while end - position > limit:
        newline = data.rfind(b"\n", position, position + limit)
        if newline < 0:
            return position
        position = newline + 1
    return None


class StatementGuard:
    """A binary output that refuses, as pyoxigraph writes N-Quads into it (8 KiB at a time, a long token at once), a
    line over ``STATEMENT_LIMIT`` bytes, and more than ``max_total`` bytes in all: two byte searches per write,
    nothing per statement. ``out`` None: the N-Quads are only checked."""

    def __init__(self, out: IO[bytes] | None, what: str | None, *, max_total: int | None = None) -> None:
        self._out = out
        self._what = what
        self._max_total = max_total
        self.total = 0
        self._line = 0  # bytes of the unfinished line written so far
        self._start = b""  # its first bytes

    def write(self, data: bytes) -> int:
        size = len(data)
        first = data.find(b"\n")
        if first < 0:
            self._start = ((self._start if self._line else b"") + data[:_SHOWN])[:_SHOWN]
            self._line += size
            if self._line > STATEMENT_LIMIT:
                raise statement_too_large(self._what, self._start, None)
        else:
            last = data.rfind(b"\n")
            if self._line + first + 1 > STATEMENT_LIMIT:
                raise statement_too_large(self._what, self._start + data[:_SHOWN], self._line + first + 1)
            if last - first > STATEMENT_LIMIT:  # lines begun and ended in this write (short, unless it is that long)
                long = first_long_line(data, STATEMENT_LIMIT, first + 1, last + 1)
                if long is not None:
                    raise statement_too_large(self._what, data[long:long + _SHOWN], data.find(b"\n", long) - long + 1)
            self._line = size - last - 1
            self._start = data[last + 1:last + 1 + _SHOWN]
        self.total += size
        if self._max_total is not None and self.total > self._max_total:
            raise BodyTooLarge(f"{self._what or 'the body'}: its statements as N-Quads exceed the limit of "
                               f"{self._max_total:,} bytes (server option --max-body-bytes; prefixed names and "
                               "relative IRIs grow when written out in full)")
        if self._out is not None:
            self._out.write(data)
        return size

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()


def check_statements(quads: Iterable[Quad], what: str | None) -> None:
    """Refuse (``StatementTooLarge``, its message beginning with ``what``) a statement of ``quads`` over the statement
    limit as N-Quads."""
    serialize(quads, cast(IO[bytes], StatementGuard(None, what)), RdfFormat.N_QUADS)


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
