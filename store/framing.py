"""Framing stream elements out of a TriG / N-Quads body as it arrives, with pyoxigraph doing the per-statement
work in Rust and Python handling one record per element (DESIGN §2 "Completeness, order, time"; issue 14).

1. **Segments.** The body is read as bytes arrive and cut at statement boundaries: N-Quads after its last
   newline; TriG after a top-level ``}`` or ``.`` at a line end, a cut confirmed by parsing the segment (the
   prefixes and base declared so far are carried to the next segment).
2. **Canonical TriG.** Each segment goes through ``serialize(parse(segment), TRIG)``: pyoxigraph parses and
   writes it back in one pass without a Python object in the loop, keeping every literal's lexical form and
   every blank node label. Its output has a fixed shape: a default-graph triple is a top-level line, and a
   named graph's quads are a block ``<g> {`` … ``}``, one line per subject, literals without raw newlines.
3. **Elements.** The canonical text is cut into elements with byte searches, one step per top-level
   statement: an element is a graph block and its timestamp triple (``<g> <ts> "…"^^xsd:dateTime .``, just
   before or just after the block, read with one regular expression), complete when the next element starts
   or the body ends. A timestamp without a block is punctuation.

The framed element carries its block as bytes (``ParsedElement.block``): the element log stores them, and window
datasets are loaded from them. Anything that does not fit the fast path (a syntax error, a default-graph triple
that is not a timestamp, a timestamp that does not parse) is framed again by ``QuadFramer`` (one Python quad per
statement), which says precisely which element is wrong and yields the ones before it.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from pyoxigraph import BlankNode, NamedNode, RdfFormat, parse, serialize

from sparql_ext.errors import InstantSyntaxError
from sparql_ext.revision import parse_datetime_stamp
from sparql_ext.windowing import to_micros
from store.elements import (
    PROV_GENERATED_AT_TIME,
    ElementName,
    ParsedElement,
    QuadFramer,
    parse_timestamp,
)
from store.errors import ElementRejected, RdfSyntaxError

_READ = 1 << 16
_MAX_PENDING = 8 << 20  # bytes of a TriG body read without a confirmed cut before the precise path takes over
_CANDIDATES = 4  # TriG cut candidates tried from the end of what has arrived
_XSD = "http://www.w3.org/2001/XMLSchema#"
_TRIG_END = re.compile(rb"(?:\}|\.)[ \t]*\r?\n")
# In canonical TriG a statement ends at " , " (object list), " ;\n" (predicate list) or " .\n", outside literals
# (a literal's own newlines are escaped, and IRIs and blank node labels hold no spaces).
_STATEMENT_ENDS = re.compile(rb'"(?:[^"\\]|\\.)*"|( , | ;\n| \.\n)')


@dataclass
class _Pending:
    """The element being framed: it is complete once another element starts, or the body ends."""

    graph: bytes  # N-Triples form: <iri> or _:label
    stamp: bytes | None = None  # the canonical timestamp line
    block: bytes = b""
    offset: int = 0


class ElementFramer:
    """The elements of a TriG / N-Quads body, lazily, as bytes arrive (see the module doc).

    ``first_ordinal`` only labels elements in error messages ("element 7"); the stream assigns the real
    ordinals when it accepts them."""

    def __init__(self, source: IO[bytes], rdf_format: RdfFormat, timestamp_predicate: str,
                 *, base_iri: str | None = None, first_ordinal: int = 1) -> None:
        self._source = source
        self._format = rdf_format
        self._predicate = timestamp_predicate
        self._base_iri = base_iri
        self.next_label = first_ordinal
        self.bytes_read = 0
        self.seconds = 0.0  # spent canonicalizing and cutting (not waiting for bytes)
        self._seen: set[bytes] = set()
        self._added: list[bytes] = []  # graphs the segment being framed added to _seen
        self._prefixes: dict[str, str] = {}
        self._stamp = re.compile(
            rb"^((?:<[^>]*>)|(?:_:\S+)) <" + re.escape(timestamp_predicate.encode()) +
            rb'> "([^"\\]*)"\^\^<' + re.escape(_XSD.encode()) + rb"dateTime(?:Stamp)?> \.\n\Z")

    def __iter__(self) -> Iterator[ParsedElement]:
        buffer, base, eof = b"", 0, False
        pending: _Pending | None = None
        while not eof:
            data = self._source.read(_READ)
            self.bytes_read += len(data)
            eof = not data
            buffer += data
            started = time.perf_counter()
            cut, canonical = self._segment(buffer, eof)
            if cut is None:  # nothing confirmed: the precise path frames what is left and raises
                yield from self._precise(pending, buffer, base)
                return
            if cut:
                try:
                    framed, pending_after = self._frame(canonical, base, pending)
                except _OffFastPath:  # the precise path frames this segment again, and what follows
                    yield from self._precise(pending, buffer, base)
                    return
                self.seconds += time.perf_counter() - started
                yield from framed
                pending = pending_after
                buffer, base = buffer[cut:], base + cut
        if buffer.strip():
            yield from self._precise(pending, buffer, base)
            return
        if pending is not None:
            yield self._finish(pending)

    # -- 1, 2: segments in canonical TriG ------------------------------------------------------------------------

    def _segment(self, buffer: bytes, eof: bool) -> tuple[int | None, bytes]:
        """(cut, the canonical TriG of ``buffer[:cut]``): cut 0 when no boundary has arrived yet, None when what
        has arrived cannot be framed on the fast path (an error somewhere in it)."""
        if self._format == RdfFormat.N_QUADS:
            cut = len(buffer) if eof else buffer.rfind(b"\n") + 1
            if not cut:
                return 0, b""
            canonical = self._canonical(buffer[:cut])
            return (cut, canonical) if canonical is not None else (None, b"")
        ends = [m.end() for m in _TRIG_END.finditer(buffer, max(0, len(buffer) - _MAX_PENDING))]
        candidates = ([len(buffer)] if eof else []) + ends[::-1][:_CANDIDATES]
        for cut in candidates:
            canonical = self._canonical(buffer[:cut], keep_prefixes=True)
            if canonical is not None:
                return cut, canonical
        if eof or len(buffer) > _MAX_PENDING:
            return None, b""
        return 0, b""

    def _canonical(self, segment: bytes, *, keep_prefixes: bool = False) -> bytes | None:
        """``segment`` written back by pyoxigraph as canonical TriG; None if it does not parse as it is."""
        declarations = "".join(f"@prefix {name}: <{iri}> .\n" for name, iri in self._prefixes.items()).encode()
        parser = parse(declarations + segment, self._format, base_iri=self._base_iri, rename_blank_nodes=False)
        try:
            canonical = serialize(parser, format=RdfFormat.TRIG)
        except SyntaxError:
            return None
        if keep_prefixes:
            self._prefixes = dict(parser.prefixes)
            self._base_iri = parser.base_iri or self._base_iri
        return canonical or b""

    # -- 3: elements ---------------------------------------------------------------------------------------------

    def _frame(self, canonical: bytes, base: int, pending: _Pending | None
               ) -> tuple[list[ParsedElement], _Pending | None]:
        """The elements one canonical segment completes, and the one still pending after it (it may go on);
        ``_OffFastPath`` before anything is given out when the segment is not for the fast path."""
        framed: list[ParsedElement] = []
        label_before, self._added = self.next_label, []
        try:
            pending = self._frame_into(canonical, base, pending, framed)
        except (_OffFastPath, ElementRejected):
            # undo what this segment added (copying the set instead would make a long upload quadratic)
            self._seen.difference_update(self._added)
            self.next_label = label_before
            raise _OffFastPath() from None
        return framed, pending

    def _frame_into(self, canonical: bytes, base: int, pending: _Pending | None,
                    framed: list[ParsedElement]) -> _Pending | None:
        position, end = 0, len(canonical)
        while position < end:
            line_end = canonical.index(b"\n", position) + 1
            if canonical[line_end - 3: line_end] == b" {\n":
                graph = canonical[position: line_end - 3]
                block_end = canonical.index(b"\n}\n", line_end - 1) + 3
                block, position = canonical[position:block_end], block_end
                if pending is not None and pending.graph == graph:
                    pending.block += block  # the same element's block, continued
                    continue
                if pending is not None:
                    framed.append(self._finish(pending))
                pending = self._start(graph, base)
                pending.block = block
                continue
            statement, position = canonical[position:line_end], line_end
            match = self._stamp.match(statement)
            if match is None:
                raise _OffFastPath()
            graph = match[1]
            if pending is not None and pending.graph == graph:
                if pending.stamp is not None:
                    raise _OffFastPath()  # a second timestamp triple: the precise path says so
                pending.stamp = statement
                continue
            if pending is not None:
                framed.append(self._finish(pending))
            pending = self._start(graph, base)
            pending.stamp = statement
        return pending

    def _start(self, graph: bytes, base: int) -> _Pending:
        if graph in self._seen:
            raise _OffFastPath()  # a graph that appears again after other elements
        return _Pending(graph, offset=base)

    def _finish(self, pending: _Pending) -> ParsedElement:
        self._seen.add(pending.graph)
        self._added.append(pending.graph)
        name = pending.graph.decode()
        term: ElementName = BlankNode(name[2:]) if name.startswith("_:") else NamedNode(name[1:-1])
        time = None
        stamp = None
        if pending.stamp is not None:
            match = self._stamp.match(pending.stamp)
            assert match is not None
            lexical = match[2].decode()
            try:  # the message is only written when there is one to give
                time = to_micros(parse_datetime_stamp(lexical, ""))
            except InstantSyntaxError:
                time = parse_timestamp(lexical, f"element {self.next_label} (graph {name}) near byte {pending.offset}")
            stamp = pending.stamp
        element = ParsedElement(term, time=time, offset=pending.offset, block=pending.block or None,
                                stamp_line=stamp)
        if not element.is_punctuation:
            self.next_label += 1
        return element

    # -- the precise path ----------------------------------------------------------------------------------------

    def _precise(self, pending: _Pending | None, rest: bytes, base: int) -> Iterator[ParsedElement]:
        """Frame ``rest`` (and the element still pending) one quad at a time: the elements before a problem are
        yielded, then the problem is raised naming its element."""
        carried = b"" if pending is None else (pending.stamp or b"") + pending.block
        if self._format == RdfFormat.N_QUADS:  # the pending element goes first, as N-Quads too
            head = serialize(parse(carried, RdfFormat.TRIG, rename_blank_nodes=False), format=RdfFormat.N_QUADS)
            head = head or b""
        else:
            declarations = "".join(f"@prefix {name}: <{iri}> .\n" for name, iri in self._prefixes.items())
            head = declarations.encode() + carried
        if pending is not None:
            self._seen.discard(pending.graph)
        precise = QuadFramer(io.BytesIO(head + rest), self._format, self._predicate, base_iri=self._base_iri,
                             first_ordinal=self.next_label, seen=self._seen, byte_offset=base - len(head))
        for element in precise:
            if not element.is_punctuation:
                self.next_label += 1
            yield element


def statements_in_block(block: bytes) -> int:
    """How many statements a canonical TriG text (an element's block, as framed) holds, without parsing it."""
    if b" , " not in block:  # no object list: line ends only, which no literal holds (raw newlines are escaped)
        return block.count(b" ;\n") + block.count(b" .\n")
    ends = _STATEMENT_ENDS.findall(block)  # group 1: b"" where a literal matched
    return len(ends) - ends.count(b"")


class _OffFastPath(Exception):
    """Canonical text the fast path does not frame itself (the precise path reads it again and explains)."""


def frame_elements(source: IO[bytes], rdf_format: RdfFormat, timestamp_predicate: str = PROV_GENERATED_AT_TIME,
                   *, base_iri: str | None = None, first_ordinal: int = 1) -> Iterator[ParsedElement]:
    """``ElementFramer`` with the fast path's deviations handed to the precise one (see the module doc)."""
    return iter(ElementFramer(source, rdf_format, timestamp_predicate, base_iri=base_iri,
                              first_ordinal=first_ordinal))


__all__ = ["ElementFramer", "RdfSyntaxError", "ElementRejected", "frame_elements"]
