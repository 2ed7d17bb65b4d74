"""Stream elements framed out of an RDF body as it is parsed (docs/streams.md, "Upload").

A stream element is one named graph plus one timestamp triple ``<g> ts-predicate "…"^^xsd:dateTime``
in the default graph. In TriG/N-Quads the timestamp triple may come just before or just after its
graph block; an element is complete when a quad of another element arrives or the body ends. An
element with a timestamp and no content is punctuation: it only advances stream time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, cast

from pyoxigraph import BlankNode, DefaultGraph, Literal, NamedNode, Quad, RdfFormat, parse

from sparql_ext.errors import RevisionSyntaxError
from sparql_ext.revision import parse_datetime_stamp
from sparql_ext.windowing import to_micros
from store.errors import ElementRejected, ElementTooLarge, RdfSyntaxError, StatementTooLarge
from store.limits import ELEMENT_LIMIT, guarded
from store.staging import TOKEN_TOO_LONG, parser_overflow

PROV_GENERATED_AT_TIME = "http://www.w3.org/ns/prov#generatedAtTime"
_DATETIME_TYPES = frozenset({
    "http://www.w3.org/2001/XMLSchema#dateTime",
    "http://www.w3.org/2001/XMLSchema#dateTimeStamp",
})
ElementName = NamedNode | BlankNode


@dataclass
class ParsedElement:
    """An element read from a body, not yet validated against its stream nor committed."""

    graph: ElementName
    quads: list[Quad] = field(default_factory=list)
    time: int | None = None  # µs since the epoch; None: stamp with receipt time
    stamp: Literal | None = None  # the timestamp literal exactly as it came (None: written from ``time``)
    offset: int = 0  # bytes of the body read when the element began (the parser reads ahead)
    origin: str | None = None  # what made it, when a rule did ("rule/sequence/window/position"): exactly-once
    # Framed uploads (store.framing) carry their content as canonical TriG instead of ``quads``: the graph block
    # ``<g> { … }`` and the timestamp triple's line as it came (None: written from ``time``).
    block: bytes | None = None
    stamp_line: bytes | None = None

    @property
    def is_punctuation(self) -> bool:
        return not self.quads and not self.block and self.time is not None


def parse_timestamp(lexical: str, where: str) -> int:
    """An xsd:dateTimeStamp lexical form (timezone required, at most microseconds) as µs since the epoch.
    The literal itself is kept as it came (``ParsedElement.stamp``): the instant only orders and windows."""
    try:
        return to_micros(parse_datetime_stamp(lexical, f"{where}: timestamp {lexical!r}"))
    except RevisionSyntaxError as error:
        raise ElementRejected(error.message) from None


class _CountingReader:
    """A file-like view that counts the bytes handed to the parser (for error positions)."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        self.consumed = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._source.read(size if size and size > 0 else 1 << 16)
        self.consumed += len(chunk)
        return chunk

    def readable(self) -> bool:
        return True


class QuadFramer:
    """Groups the quads of a TriG / N-Quads body into elements, one Python quad per statement: the precise path
    of ``store.framing.ElementFramer`` (which it hands what its fast path does not frame), and the framer of
    records replayed from files.

    ``first_ordinal`` only labels elements in error messages ("element 7"); the stream assigns the real
    ordinals when it accepts them. ``seen``: the graph names (N-Triples form, as bytes) of the body's elements
    framed already; ``byte_offset``: where ``source`` starts in the body (for error positions).
    """

    def __init__(self, source: IO[bytes], rdf_format: RdfFormat, timestamp_predicate: str,
                 *, base_iri: str | None = None, first_ordinal: int = 1, seen: set[bytes] | None = None,
                 byte_offset: int = 0) -> None:
        self._reader = _CountingReader(guarded(source, rdf_format.media_type))  # never too deep
        self._format = rdf_format
        self._predicate = NamedNode(timestamp_predicate)
        self._base_iri = base_iri
        self.next_label = first_ordinal
        self._seen = seen if seen is not None else set()
        self._byte_offset = byte_offset

    @property
    def bytes_read(self) -> int:
        return self._byte_offset + self._reader.consumed

    def __iter__(self) -> Iterator[ParsedElement]:
        # Blank nodes keep their labels: they are shared across the elements of one stream.
        parser = parse(input=cast(IO[bytes], self._reader), format=self._format, base_iri=self._base_iri,
                       rename_blank_nodes=False)
        current: ParsedElement | None = None
        current_graph: object = None
        content: list[Quad] = []
        try:
            for quad in parser:  # the hot loop: one comparison and one append per quad
                graph = quad.graph_name
                if graph == current_graph:
                    content.append(quad)
                    continue
                key, is_timestamp = self._classify(quad, current)
                if current is None or key != current.graph:
                    if current is not None:
                        yield self._finish(current)
                    if str(key).encode() in self._seen:
                        raise ElementRejected(
                            f"element {self.next_label} near byte {self.bytes_read}: graph {key} appears again "
                            "after other elements (an element's quads and timestamp must be contiguous, and "
                            "element graph names are unique in a stream)"
                        )
                    current = ParsedElement(key, offset=self.bytes_read)
                    content = current.quads
                    current_graph = key
                if is_timestamp:
                    self._set_time(current, quad)
                else:
                    content.append(quad)
        except SyntaxError as error:
            # The element being read is not known complete (its timestamp may follow its block), so
            # the error is in it or in the first statement of the next: neither is committed.
            where = (f"element {self.next_label} (graph {current.graph}) or the element after it"
                     if current is not None else f"element {self.next_label}")
            raise RdfSyntaxError(f"{where}, near byte {self.bytes_read}: {error}") from None
        except MemoryError as error:  # a token longer than the parser's buffer: where, as for a syntax error
            if not parser_overflow(error):
                raise
            where = (f"element {self.next_label} (graph {current.graph}) or the element after it"
                     if current is not None else f"element {self.next_label}")
            raise StatementTooLarge(f"{where}, near byte {self.bytes_read}: {TOKEN_TOO_LONG}") from None
        if current is not None:
            yield self._finish(current)

    def _classify(self, quad: Quad, current: ParsedElement | None) -> tuple[ElementName, bool]:
        graph = quad.graph_name
        if not isinstance(graph, DefaultGraph):
            return graph, False
        if quad.predicate == self._predicate and isinstance(quad.subject, (NamedNode, BlankNode)):
            return quad.subject, True
        where = f"element {self.next_label}" + (f" (graph {current.graph})" if current else "")
        raise ElementRejected(
            f"{where} near byte {self.bytes_read}: the default graph of a stream upload holds only timestamp "
            f"triples <graph> {self._predicate} \"…\"^^xsd:dateTime; found {quad.subject} {quad.predicate} "
            f"{quad.object}"
        )

    def _set_time(self, element: ParsedElement, quad: Quad) -> None:
        where = f"element {self.next_label} (graph {element.graph}) near byte {self.bytes_read}"
        if element.time is not None:
            raise ElementRejected(f"{where}: a second timestamp triple")
        value = quad.object
        if not isinstance(value, Literal) or value.datatype.value not in _DATETIME_TYPES:
            raise ElementRejected(f"{where}: timestamp {value} is not an xsd:dateTime literal")
        element.time = parse_timestamp(value.value, where)
        element.stamp = value

    def _finish(self, element: ParsedElement) -> ParsedElement:
        self._seen.add(str(element.graph).encode())
        if not element.is_punctuation:
            self.next_label += 1
        return element


def single_element(source: IO[bytes], rdf_format: RdfFormat, graph: ElementName, time: int | None,
                   *, base_iri: str | None = None, max_bytes: int = ELEMENT_LIMIT) -> ParsedElement:
    """A Turtle / N-Triples body: the whole body is one element in ``graph``, of at most ``max_bytes``."""
    reader = _CountingReader(guarded(source, rdf_format.media_type))  # never too deep for the parser
    element = ParsedElement(graph, time=time)
    try:
        quads = parse(input=cast(IO[bytes], reader), format=rdf_format, base_iri=base_iri, rename_blank_nodes=False)
        for quad in quads:
            element.quads.append(Quad(quad.subject, quad.predicate, quad.object, graph))
            if reader.consumed > max_bytes:
                raise ElementTooLarge(f"element (graph {graph}): more than {max_bytes:,} bytes as sent, over the "
                                      "element limit")
    except SyntaxError as error:
        raise RdfSyntaxError(f"element (graph {graph}): {error}") from None
    except MemoryError as error:  # a token longer than the parser's buffer
        if not parser_overflow(error):
            raise
        raise StatementTooLarge(f"element (graph {graph}): {TOKEN_TOO_LONG}") from None
    return element


