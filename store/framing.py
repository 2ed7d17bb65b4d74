"""Framing stream elements out of a TriG / N-Quads body as it arrives, with pyoxigraph doing the per-statement
work in Rust and Python handling one record per element (what an element is: ``store.elements``).

1. **Segments.** The body is read as bytes arrive and cut at statement boundaries: N-Quads after its last
   newline; TriG after a top-level ``}`` or ``.`` at a line end, a cut confirmed by parsing the segment (the
   prefixes and base declared so far are carried to the next segment).
2. **Canonical TriG.** Each segment goes through ``serialize(parse(segment), TRIG)`` (``store.canonical``):
   pyoxigraph parses and writes it back in one pass, keeping every literal's lexical form and every blank node
   label. Its output has a fixed shape: a default-graph triple is a top-level line, and a named graph's quads are
   a block ``<g> {`` … ``}``, one line per subject, literals without raw newlines. An upload's large segments are
   written in the server's framing processes, while this thread cuts the previous segment (step 3).
3. **Elements.** The canonical text is cut into elements with byte searches, one step per top-level
   statement: an element is a graph block and its timestamp triple (``<g> <ts> "…"^^xsd:dateTime .``, just
   before or just after the block, read with one regular expression), complete when the next element starts
   or the body ends. A timestamp without a block is punctuation.

The framed element carries its block as bytes (``ParsedElement.block``): the element log stores them, and window
datasets are loaded from them. Anything that does not fit the fast path (a syntax error, a default-graph triple
that is not a timestamp, a timestamp that does not parse) is framed again by ``QuadFramer`` (one Python quad per
statement), which says precisely which element is wrong and yields the ones before it.

Sizes: an element is at most ``ELEMENT_LIMIT`` bytes as sent (no statement boundary in more than that:
``MAX_PENDING``) and as stored, and holds no statement over ``STATEMENT_LIMIT`` as N-Quads (``oversize``, which
the stream checks for every element it accepts). While a long element arrives, what has arrived is framed again
only once a block's end (TriG) or a line's end (N-Quads) has: its cost stays proportional to its size.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import IO, cast

from pyoxigraph import BlankNode, NamedNode, RdfFormat, parse, serialize

from sparql_ext.errors import InstantSyntaxError
from sparql_ext.revision import parse_datetime_stamp
from sparql_ext.windowing import to_micros
from store.canonical import IN_THIS_THREAD, MAX_PENDING, SegmentWriter, Syntax
from store.elements import (
    PROV_GENERATED_AT_TIME,
    ElementName,
    ParsedElement,
    QuadFramer,
    parse_timestamp,
)
from store.errors import BodyTooLarge, ElementRejected, ElementTooLarge, RdfSyntaxError, StatementTooLarge
from store.limits import ELEMENT_LIMIT, STATEMENT_LIMIT, checked, guarded
from store.staging import TOKEN_TOO_LONG, check_statements, first_long_line, parser_overflow

_READ = 1 << 16
_SEGMENT = 1 << 17  # bytes of a body that has arrived framed as one segment (fewer round trips to a framing process)
_XSD = "http://www.w3.org/2001/XMLSchema#"
_PATIENT = 1 << 18  # bytes of a body without a cut from which it is framed again only when a block's end arrives
_LINE_END = re.compile(rb"[ \t]*\r?\n")
# In canonical TriG a statement ends at " , " (object list), " ;\n" (predicate list) or " .\n", outside literals
# (a literal's own newlines are escaped, and IRIs and blank node labels hold no spaces).
_STATEMENT_ENDS = re.compile(rb'"(?:[^"\\]|\\.)*"|( , | ;\n| \.\n)')


@dataclass
class _Pending:
    """The element being framed: it is complete once another element starts, or the body ends."""

    graph: bytes  # N-Triples form: <iri> or _:label
    stamp: bytes | None = None  # the canonical timestamp line
    lexical: bytes = b""  # its literal's lexical form
    block: bytes = b""
    offset: int = 0


@dataclass
class _Written:
    """A segment written as canonical TriG, not yet cut into elements."""

    canonical: bytes
    raw: bytes  # the segment as it came (the precise path reads it again if the fast path gives up)
    base: int  # body offset of its first byte
    syntax: Syntax  # prefixes and base IRI declared before it


class ElementFramer:
    """The elements of a TriG / N-Quads body, lazily, as bytes arrive (see the module doc).

    ``segments`` writes each segment's canonical TriG: in the caller's thread by default, in the server's framing
    processes for an upload (``store.canonical.FramingProcesses``). While a framing process writes segment *k*,
    this framer cuts segment *k − 1* into elements and its caller accepts them, provided more of the body is
    already waiting (``arriving()`` of the source, when it has one): otherwise segment *k − 1*'s elements are
    given out before the next read, which would wait for the client.

    ``first_ordinal`` only labels elements in error messages ("element 7"); the stream assigns the real
    ordinals when it accepts them."""

    def __init__(self, source: IO[bytes], rdf_format: RdfFormat, timestamp_predicate: str,
                 *, base_iri: str | None = None, first_ordinal: int = 1,
                 segments: SegmentWriter = IN_THIS_THREAD) -> None:
        self._source = guarded(source, rdf_format.media_type)  # every parser reads what came through it
        self._format = rdf_format
        self._media_type = rdf_format.media_type
        self._predicate = timestamp_predicate
        self._segments = segments
        self.next_label = first_ordinal
        self.bytes_read = 0
        self.seconds = 0.0  # spent framing in this thread, or waiting for a framing process (not for bytes)
        self._seen: set[bytes] = set()
        self._added: list[bytes] = []  # graphs the segment being framed added to _seen
        self._syntax = Syntax({}, base_iri)
        self._pending: _Pending | None = None
        self._stamp = re.compile(
            rb"((?:<[^>]*>)|(?:_:\S+)) <" + re.escape(timestamp_predicate.encode()) +
            rb'> "([^"\\]*)"\^\^<' + re.escape(_XSD.encode()) + rb"dateTime(?:Stamp)?> \.\n\Z")

    def __iter__(self) -> Iterator[ParsedElement]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[ParsedElement]]:
        """The elements in order, in lists: those one segment completes together (the precise path: one by one)."""
        buffer, base, eof = bytearray(), 0, False  # a bytearray grows in place: a long element is not copied per read
        written: _Written | None = None  # the segment before the one being written
        unframed = 0  # once framing found no cut in _PATIENT bytes or more: how far the buffer was searched since
        while not eof:
            data = self._source.read(_READ)
            eof = not data
            while data and len(data) < _SEGMENT and self._arriving():  # one segment of what is already here
                more = self._source.read(_READ)
                eof = not more
                data += more
                if eof:
                    break
            self.bytes_read += len(data)
            buffer += data
            if unframed and not eof and not self._may_cut(buffer, unframed):
                if len(buffer) > MAX_PENDING:
                    yield from self._stuck(bytes(buffer), base)  # raises, or the precise path says where the error is
                    return
                unframed = len(buffer)
                continue  # a long element is still arriving (and no segment waits to be given: the last had no cut)
            job = self._segments.submit(bytes(buffer), eof, self._media_type, self._syntax)
            try:  # while the job runs (in a framing process, if it is large), the segment before it
                if written is not None:
                    stopped = yield from self._give(written, buffer)
                    if stopped:
                        return
            finally:  # also when the caller stops early: the framing process is handed back
                started = time.perf_counter()
                segment = job.result()
                self.seconds += time.perf_counter() - started
            written = None
            if segment.cut == 0 and not eof and len(buffer) >= _PATIENT:
                if (yield from self._stuck(bytes(buffer), base)):
                    return
                unframed = len(buffer)
            if segment.cut is None:  # nothing confirmed: the precise path frames what is left and raises
                yield from self._one_by_one(self._precise(bytes(buffer), base, self._syntax))
                return
            if segment.cut:
                unframed = 0
                written = _Written(segment.canonical, bytes(buffer[:segment.cut]), base, self._syntax)
                self._syntax = segment.syntax
                del buffer[:segment.cut]
                base += segment.cut
                if not (job.remote and self._arriving()):  # nothing to overlap: give its elements out now
                    stopped = yield from self._give(written, buffer)
                    if stopped:
                        return
                    written = None
        if written is not None and (yield from self._give(written, buffer)):
            return
        if buffer.strip():
            yield from self._one_by_one(self._precise(bytes(buffer), base, self._syntax))
            return
        if self._pending is not None:
            pending = self._pending
            yield [self._finish(pending.graph, pending.stamp, pending.lexical, pending.block, pending.offset)]

    @staticmethod
    def _one_by_one(elements: Iterator[ParsedElement]) -> Iterator[list[ParsedElement]]:
        for element in elements:
            yield [element]

    def _may_cut(self, buffer: bytearray, searched: int) -> bool:
        """Whether framing a long buffer again may find a cut: a block's end (TriG) or a line's end (N-Quads) arrived
        after ``searched``. Byte searches over what arrived since, nothing per line."""
        if self._format == RdfFormat.N_QUADS:
            return buffer.find(b"\n", searched) >= 0
        brace = buffer.find(b"}", max(0, searched - 64))  # "}" and the line's end may have come in different reads
        while brace >= 0:
            if _LINE_END.match(buffer, brace + 1):
                return True
            brace = buffer.find(b"}", brace + 1)
        return False

    def _stuck(self, buffer: bytes, base: int) -> Generator[list[ParsedElement], None, bool]:
        """``buffer``, ``_PATIENT`` bytes or more, holds no cut. True once the precise path framed it: it holds a
        syntax error before its last line (the precise path says where). Else it is the valid beginning of an element
        still arriving: False, or ``ElementTooLarge`` once it is over ``MAX_PENDING``."""
        declarations = "".join(f"@prefix {name}: <{iri}> .\n" for name, iri in self._syntax.prefixes.items()).encode()
        where = f"element {self.next_label + (self._pending is not None)} near byte {base}"
        try:
            serialize(parse(declarations + buffer, self._format, base_iri=self._syntax.base_iri,
                            rename_blank_nodes=False), cast(IO[bytes], _Discard()), RdfFormat.N_QUADS)
        except SyntaxError as error:
            if error.lineno is not None and error.lineno <= (declarations + buffer).count(b"\n"):
                yield from self._one_by_one(self._precise(buffer, base, self._syntax))
                return True
        except MemoryError as error:
            if not parser_overflow(error):
                raise
            raise StatementTooLarge(f"{where}: {TOKEN_TOO_LONG}") from None
        if len(buffer) <= MAX_PENDING:
            return False
        raise ElementTooLarge(f"{where}: {len(buffer):,} bytes arrived without the end of an element at a line's end: "
                              f"over the element limit of {ELEMENT_LIMIT:,} bytes (64 MiB) as sent")

    def _arriving(self) -> bool:
        """Whether more of the body is waiting to be read (a source that cannot tell: yes)."""
        arriving = getattr(self._source, "arriving", None)
        return True if arriving is None else bool(arriving())

    def _give(self, written: _Written, after: bytes | bytearray) -> Generator[list[ParsedElement], None, bool]:
        """The elements ``written`` completes; True when the fast path gave up on it and the precise path framed it
        and what follows (``after``) instead, which ends the body's framing."""
        started = time.perf_counter()
        error: ElementTooLarge | None = None
        try:
            framed, self._pending = self._frame(written.canonical, written.base, self._pending)
        except _OffFastPath:  # the precise path frames this segment again, and what follows
            yield from self._one_by_one(self._precise(written.raw + after, written.base, written.syntax))
            return True
        except _Refused as refused:  # the elements before the refused one go first
            framed, error = refused.framed, refused.error
        self.seconds += time.perf_counter() - started
        if framed:
            yield framed
        if error is not None:
            raise error
        return False

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
        except ElementTooLarge as error:
            raise _Refused(framed, error) from None
        return framed, pending

    def _frame_into(self, canonical: bytes, base: int, pending: _Pending | None,
                    framed: list[ParsedElement]) -> _Pending | None:
        # The element being framed is held in locals (graph None: none yet) and becomes a _Pending only at the
        # segment's end: this loop runs once per element of every upload.
        graph, stamp, lexical, block, offset = (None, None, b"", b"", 0) if pending is None else (
            pending.graph, pending.stamp, pending.lexical, pending.block, pending.offset)
        seen, index, match_stamp, finish = self._seen, canonical.index, self._stamp.match, self._finish
        position, end = 0, len(canonical)
        while position < end:
            line_end = index(b"\n", position) + 1
            if canonical[line_end - 3: line_end] == b" {\n":
                name = canonical[position: line_end - 3]
                block_end = index(b"\n}\n", line_end - 1) + 3
                if name == graph:
                    block += canonical[position:block_end]  # the same element's block, continued
                    if len(block) > ELEMENT_LIMIT:
                        raise ElementTooLarge(f"element {self.next_label} (graph {graph.decode()}) near byte {offset}: "
                                              f"over the element limit of {ELEMENT_LIMIT:,} bytes (64 MiB) as stored")
                else:
                    if graph is not None:
                        framed.append(finish(graph, stamp, lexical, block, offset))
                    if name in seen:
                        raise _OffFastPath()  # a graph that appears again after other elements
                    graph, stamp, lexical, block, offset = name, None, b"", canonical[position:block_end], base
                position = block_end
                continue
            match = match_stamp(canonical, position, line_end)
            if match is None:
                raise _OffFastPath()
            name = match[1]
            if name == graph:
                if stamp is not None:
                    raise _OffFastPath()  # a second timestamp triple: the precise path says so
            else:
                if graph is not None:
                    framed.append(finish(graph, stamp, lexical, block, offset))
                if name in seen:
                    raise _OffFastPath()
                graph, block, offset = name, b"", base
            stamp, lexical, position = canonical[position:line_end], match[2], line_end
        return None if graph is None else _Pending(graph, stamp, lexical, block, offset)

    def _finish(self, graph: bytes, stamp: bytes | None, lexical: bytes, block: bytes, offset: int) -> ParsedElement:
        self._seen.add(graph)
        self._added.append(graph)
        name = graph.decode()
        term: ElementName = BlankNode(name[2:]) if name.startswith("_:") else NamedNode(name[1:-1])
        time = None
        if stamp is not None:
            text = lexical.decode()
            try:  # the message is only written when there is one to give
                time = to_micros(parse_datetime_stamp(text, ""))
            except InstantSyntaxError:
                time = parse_timestamp(text, f"element {self.next_label} (graph {name}) near byte {offset}")
        element = ParsedElement(term, time=time, offset=offset, block=block or None, stamp_line=stamp)
        if not element.is_punctuation:
            self.next_label += 1
        return element

    # -- the precise path ----------------------------------------------------------------------------------------

    def _precise(self, rest: bytes, base: int, syntax: Syntax) -> Iterator[ParsedElement]:
        """Frame ``rest`` (read with ``syntax``, and the element still pending) one quad at a time: the elements
        before a problem are yielded, then the problem is raised naming its element."""
        pending = self._pending
        carried = b"" if pending is None else (pending.stamp or b"") + pending.block
        if self._format == RdfFormat.N_QUADS:  # the pending element goes first, as N-Quads too
            head = serialize(parse(carried, RdfFormat.TRIG, rename_blank_nodes=False), format=RdfFormat.N_QUADS)
            head = head or b""
        else:
            declarations = "".join(f"@prefix {name}: <{iri}> .\n" for name, iri in syntax.prefixes.items())
            head = declarations.encode() + carried
        if pending is not None:
            self._seen.discard(pending.graph)
        precise = QuadFramer(io.BytesIO(head + rest), self._format, self._predicate, base_iri=syntax.base_iri,
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


class _Discard:
    """A binary output that keeps nothing (pyoxigraph parses and writes; only its errors matter)."""

    def write(self, data: bytes) -> int:
        return len(data)


class _Refused(Exception):
    """An element refused for its size, and the elements of its segment before it (given out first)."""

    def __init__(self, framed: list[ParsedElement], error: ElementTooLarge) -> None:
        super().__init__(error.message)
        self.framed, self.error = framed, error


def oversize(element: ParsedElement) -> BodyTooLarge | None:
    """Why ``element`` is too large to store, or None: over ``ELEMENT_LIMIT`` as stored (its timestamp line and its
    graph block, canonical TriG), or holding a statement over ``STATEMENT_LIMIT`` as N-Quads. An element made of
    quads (JSON-LD, Turtle, a rule's output) gets its block here, written once by pyoxigraph (the log stores it).
    The message says what is wrong, not which element: the stream names it."""
    if element.block is None and element.quads:
        element.block = serialize(element.quads, format=RdfFormat.TRIG) or b""
    block = element.block
    if not block:
        return None
    size = len(block) + len(element.stamp_line or b"")
    if size > ELEMENT_LIMIT:
        return ElementTooLarge(f"{size:,} bytes as stored (canonical TriG), over the element limit of "
                               f"{ELEMENT_LIMIT:,} bytes (64 MiB)")
    # A statement over the limit as N-Quads has a token of a quarter of it, on one line of the block (the line of
    # its subject, of its object, or of its graph's name): only then are the block's statements measured.
    if first_long_line(block, STATEMENT_LIMIT // 4) is not None:
        try:
            check_statements(parse(block, RdfFormat.TRIG, rename_blank_nodes=False), None)
        except StatementTooLarge as error:
            return error
    return None


def frame_elements(source: IO[bytes], rdf_format: RdfFormat, timestamp_predicate: str = PROV_GENERATED_AT_TIME,
                   *, base_iri: str | None = None, first_ordinal: int = 1) -> Iterator[ParsedElement]:
    """``ElementFramer`` with the fast path's deviations handed to the precise one (see the module doc)."""
    return iter(ElementFramer(source, rdf_format, timestamp_predicate, base_iri=base_iri,
                              first_ordinal=first_ordinal))


def one_element(message: bytes, rdf_format: RdfFormat, timestamp_predicate: str, *, base_iri: str | None = None,
                first_ordinal: int = 1) -> ParsedElement:
    """The one element (or punctuation: a timestamp triple alone) a TriG / N-Quads message holds, framed as an upload
    is: a WebSocket upload's message, an MQTT message. Refused (``ElementRejected``, 400) when it holds none or
    several; a message nested too deep is refused whole before it is parsed."""
    elements = list(ElementFramer(checked(message, rdf_format.media_type), rdf_format, timestamp_predicate,
                                  base_iri=base_iri, first_ordinal=first_ordinal))
    if len(elements) != 1:
        raise ElementRejected(f"a message is one element (a named graph and its timestamp triple); this one holds "
                              f"{len(elements)}: send one message per element")
    return elements[0]


__all__ = ["ElementFramer", "RdfSyntaxError", "ElementRejected", "frame_elements", "one_element"]
