"""The stream store without HTTP: element framing, validation, group commit into the element log, the index,
window datasets loaded from the log, and recovery from a crash between writing a group's contents and its
records."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pyoxigraph import NamedNode, Quad, RdfFormat, parse

from store.elements import ParsedElement
from store.errors import ElementOutOfOrder, ElementRejected, RdfSyntaxError
from store.framing import ElementFramer
from store.stream import Stream, StreamConfig

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
MINUTE = 60_000_000
T10 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z


def stamp(name: str, minute: int) -> str:
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"'
            '^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n')


def frame(text: str) -> list[ParsedElement]:
    return list(ElementFramer(io.BytesIO(text.encode()), RdfFormat.TRIG, PROV))


def statements(element: ParsedElement) -> int:
    """The content statements of a framed element (its graph block; the timestamp triple apart)."""
    return len(list(parse(element.block, RdfFormat.TRIG))) if element.block else len(element.quads)


def test_framing_timestamp_before_or_after_and_punctuation() -> None:
    elements = frame(stamp("a", 0) + "<http://ex/a> { <x:s> <x:p> 1 . <x:s> <x:p> 2 . }\n"
                     "<http://ex/b> { <x:s> <x:p> 3 . }\n" + stamp("b", 1) + stamp("tick", 5))
    assert [(e.graph.value, statements(e), e.time) for e in elements] == [
        ("http://ex/a", 2, T10), ("http://ex/b", 1, T10 + MINUTE), ("http://ex/tick", 0, T10 + 5 * MINUTE)]
    assert [e.is_punctuation for e in elements] == [False, False, True]
    assert frame("<http://ex/c> { <x:s> <x:p> 1 . }\n")[0].time is None  # stamped at receipt later


@pytest.mark.parametrize(("text", "error", "words"), [
    ("<http://ex/a> { <x:s> <x:p> 1 . }\n<http://ex/b> { <x:s> <x:p> 2 . }\n<http://ex/a> { <x:s> <x:p> 3 . }\n",
     ElementRejected, "appears again"),
    ("<x:s> <x:p> 1 .\n", ElementRejected, "holds only timestamp triples"),
    (stamp("a", 0) + stamp("a", 1) + "<http://ex/a> { <x:s> <x:p> 1 . }\n", ElementRejected, "second timestamp"),
    ('<http://ex/a> <' + PROV + '> "yesterday" .\n', ElementRejected, "not an xsd:dateTime"),
    ('<http://ex/a> <' + PROV + '> "2016-06-20T10:00:00"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n',
     ElementRejected, "without a timezone"),
    ("<http://ex/a> { <x:s> <x:p> 1 . }\n<http://ex/b> { <x:s> <x:p> \"open . }\n", RdfSyntaxError,
     "element 1 (graph <http://ex/a>) or the element after it, near byte"),
    (stamp("a", 0) + "<http://ex/a> { <x:s> <x:p> 1 . }\n" + stamp("b", 1) + "<http://ex/b> { <x:s> \"open . }\n",
     RdfSyntaxError, "element 2 (graph <http://ex/b>) or the element after it"),
])
def test_framing_refusals_name_the_element(text: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error) as raised:
        frame(text)
    assert words in str(raised.value)


def element(name: str, minute: int | None, *values: int) -> ParsedElement:
    graph = NamedNode(f"http://ex/{name}")
    quads = [Quad(NamedNode("x:s"), NamedNode("x:p"), NamedNode(f"x:{v}"), graph) for v in values]
    return ParsedElement(graph, quads, None if minute is None else T10 + minute * MINUTE)


@pytest.fixture
def stream(tmp_path: Path) -> Stream:
    s = Stream.create(tmp_path / "s", StreamConfig("s"))
    yield s
    s.close()


def test_accept_commit_and_index(stream: Stream) -> None:
    for i, minute in enumerate([0, 1, 2, 5, 9]):
        assert stream.accept(element(f"e{i}", minute, i), received=0) == i + 1
    stream.flush()
    assert stream.head() == 5 and len(stream) == 5 and stream.stream_time == T10 + 9 * MINUTE
    assert [e.ordinal for e in stream.between(T10 + MINUTE, T10 + 5 * MINUTE, backward=False)] == [2, 3]
    assert [e.ordinal for e in stream.between(T10 + MINUTE, T10 + 5 * MINUTE, backward=True)] == [3, 4]
    assert stream.last_at_or_before(T10 + 4 * MINUTE) == 3
    assert stream.ordinal_of(stream.uuid_of(4)) == 4
    quads = list(stream.dataset_quads([2, 4]))
    assert len(quads) == 4  # 2 timestamp triples + 2 content triples
    assert {q.graph_name.value for q in quads if q.predicate.value != PROV} == {"http://ex/e1", "http://ex/e3"}


def test_window_store_is_the_window_dataset_loaded_from_the_log(tmp_path: Path) -> None:
    stream = Stream.create(tmp_path / "w", StreamConfig("w"))
    body = "".join(stamp(f"e{m}", m) + f"<http://ex/e{m}> {{ _:shared <http://ex/hr> {70 + m} . }}\n" for m in range(4))
    for parsed in frame(body):
        stream.accept(parsed, received=0)
    stream.flush()
    hr = "SELECT ?t ?b ?v WHERE { ?g <http://www.w3.org/ns/prov#generatedAtTime> ?t GRAPH ?g { ?b <http://ex/hr> ?v } }"

    def rows(store_: object) -> list[tuple[str, str, str]]:
        return sorted((str(r["t"]), str(r["b"]), str(r["v"])) for r in store_.query(hr))  # type: ignore[attr-defined]

    live = stream.window_store([2, 4])
    assert stream.window_store([2, 4]) is live  # kept: the same window is not loaded twice
    found = rows(live)
    assert [(t, v) for t, _, v in found] == [
        ('"2016-06-20T10:01:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>',
         '"71"^^<http://www.w3.org/2001/XMLSchema#integer>'),
        ('"2016-06-20T10:03:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>',
         '"73"^^<http://www.w3.org/2001/XMLSchema#integer>')]  # default graph: exactly the window's timestamp triples
    assert found[0][1] == found[1][1] and found[0][1].startswith("_:")  # one blank node, shared by the elements
    assert len(live) == 4
    stream.close()
    reopened = Stream.open(tmp_path / "w")  # nothing in memory: loaded from the log, the same dataset
    again = rows(reopened.window_store([2, 4]))
    assert [(t, v) for t, _, v in again] == [(t, v) for t, _, v in found] and again[0][1] == again[1][1]
    # the dataset as uploaded: blank node labels and literals are the uploaded text
    assert {str(q.subject) for q in reopened.dataset_quads([2, 4]) if q.predicate.value == "http://ex/hr"} == \
        {"_:shared"}
    reopened.close()


def test_refusals_store_nothing(stream: Stream) -> None:
    stream.accept(element("a", 5, 1), received=0)
    with pytest.raises(ElementOutOfOrder, match="not after the stream time"):
        stream.accept(element("b", 5, 2), received=0)
    with pytest.raises(ElementOutOfOrder, match="already an element"):
        stream.accept(element("a", 6, 3), received=0)
    with pytest.raises(ElementRejected, match="reserved"):
        stream.accept(ParsedElement(NamedNode("urn:x-concentrator:x"), [], T10 + 7 * MINUTE), received=0)
    stream.flush()
    assert stream.head() == 1 and len(list(stream.dataset_quads([1]))) == 2  # a's triple and a's timestamp


def test_accept_many_queues_the_elements_before_a_refused_one(stream: Stream) -> None:
    """An upload accepts a framed segment's elements together: those before a refused element are committed and
    counted, the refused one and those after it are not."""
    accepted: list[int | None] = []
    batch = [element("a", 1, 1), ParsedElement(NamedNode("http://ex/p"), [], T10 + 2 * MINUTE),  # a punctuation
             element("b", 3, 2), element("c", 2, 3), element("d", 4, 4)]  # c goes back in time
    with pytest.raises(ElementOutOfOrder, match="element 3 .*http://ex/c"):
        stream.accept_many(batch, 0, accepted)
    assert accepted == [1, None, 2]
    stream.flush()
    assert stream.head() == 2 and stream.stream_time == T10 + 3 * MINUTE
    assert [stream.graph_of(1), stream.graph_of(2), stream.graph_of(3)] == ["<http://ex/a>", "<http://ex/b>", None]
    stream.accept_many([element("d", 4, 4)], 0, accepted)  # the stream goes on from there
    assert accepted == [1, None, 2, 3]


def test_receipt_time_is_strictly_increasing(stream: Stream) -> None:
    stream.accept(element("a", None, 1), received=1000)
    stream.accept(element("b", None, 2), received=1000)  # same receipt instant: stamped 1 µs later
    stream.flush()
    assert [e.time for e in stream.elements(1, 2)] == [1000, 1001]


def test_punctuation_advances_stream_time_only(stream: Stream) -> None:
    stream.accept(element("a", 0, 1), received=0)
    stream.punctuate(T10 + 10 * MINUTE)
    stream.flush()
    assert stream.head() == 1 and stream.stream_time == T10 + 10 * MINUTE and stream.punctuations == 1
    with pytest.raises(ElementOutOfOrder):
        stream.accept(element("b", 9, 2), received=0)


def test_reopen_rebuilds_the_index_and_drops_a_torn_line(tmp_path: Path) -> None:
    s = Stream.create(tmp_path / "s", StreamConfig("s"))
    for i in range(3):
        s.accept(element(f"e{i}", i, i), received=0)
    s.flush()
    s.close()
    with (tmp_path / "s" / "log" / "00000000000000000000.jsonl").open("a") as log:
        log.write('{"o": 4, "t": ')  # the process died while appending a line
    s = Stream.open(tmp_path / "s")
    assert s.head() == 3 and [e.time for e in s.elements(1, 3)] == [T10, T10 + MINUTE, T10 + 2 * MINUTE]
    s.accept(element("e3", 3, 3), received=0)
    s.flush()
    assert s.head() == 4
    s.close()


def test_content_whose_record_never_became_durable_is_ignored(tmp_path: Path) -> None:
    s = Stream.create(tmp_path / "s", StreamConfig("s"))
    s.accept(element("kept", 0, 1), received=0)
    s.flush()
    s.close()
    # Simulate a crash after a group's contents reached the log's .dat but before its records did.
    content = tmp_path / "s" / "log" / "00000000000000000000.dat"
    referenced = content.stat().st_size
    with content.open("ab") as out:
        out.write(b"<http://ex/lost> { <x:s> <x:p> <x:2> . }\n")
    s = Stream.open(tmp_path / "s")
    assert s.head() == 1 and content.stat().st_size == referenced  # the unreferenced content is cut
    s.accept(element("next", 1, 3), received=0)
    s.flush()
    graphs = {q.graph_name.value for q in s.dataset_quads([1, 2]) if q.predicate.value != PROV}
    assert graphs == {"http://ex/kept", "http://ex/next"}  # nothing of "lost"
    s.close()


def test_lateness_keeps_a_time_ordered_index(tmp_path: Path) -> None:
    s = Stream.create(tmp_path / "s", StreamConfig("s", lateness=2 * MINUTE))
    for name, minute in [("a", 10), ("b", 9), ("c", 11)]:
        s.accept(element(name, minute, 0), received=0)
    s.flush()
    # ordinals 1..3 at 10:10, 10:09, 10:11: [10:09, 10:11) holds b (2) and a (1), by ordinal.
    assert [e.ordinal for e in s.between(T10 + 9 * MINUTE, T10 + 11 * MINUTE, backward=False)] == [1, 2]
    assert s.last_at_or_before(T10 + 9 * MINUTE + 1) == 2
    s.close()


def test_a_stream_of_the_earlier_layout_moves_into_the_element_log(tmp_path: Path) -> None:
    """Earlier versions kept element graphs in a RocksDB store (each timestamp triple in a graph of its own) and
    records without content in log.jsonl: opening the catalog moves them into the element log, once."""
    from pyoxigraph import Literal, Store

    from store.streams import StreamCatalog

    directory = tmp_path / "data" / "streams" / "old"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(StreamConfig("old", uuid_prefix=0x1234).to_json()))
    old = Store(str(directory / "store"))
    xsd = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
    records = []
    for ordinal, minute in ((1, 0), (2, 1)):
        graph = NamedNode(f"http://ex/e{ordinal}")
        old.add(Quad(NamedNode("x:s"), NamedNode("x:p"), Literal("0" + str(ordinal), datatype=NamedNode(
            "http://www.w3.org/2001/XMLSchema#integer")), graph))
        old.add(Quad(graph, NamedNode(PROV), Literal(f"2016-06-20T12:{minute:02d}:00+02:00", datatype=xsd),
                     NamedNode(f"urn:x-concentrator:timestamp:{ordinal}")))
        records.append({"o": ordinal, "t": T10 + minute * MINUTE, "g": f"<http://ex/e{ordinal}>", "c": 7})
    records.insert(1, {"p": T10 + 30_000_000, "c": 7})
    (directory / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    del old
    catalog = StreamCatalog(tmp_path / "data" / "streams")
    stream = catalog.get("old")
    assert stream.head() == 2 and [e.time for e in stream.elements(1, 2)] == [T10, T10 + MINUTE]
    assert stream.punctuations == 1 and stream.record(2).commit == 7  # type: ignore[union-attr]
    quads = {str(q) for q in stream.dataset_quads([1, 2])}
    # what the old store held (it wrote typed literals back canonically: "01" became "1"), as it held it
    assert '<x:s> <x:p> "1"^^<http://www.w3.org/2001/XMLSchema#integer> <http://ex/e1>' in quads
    assert f'<http://ex/e2> <{PROV}> "2016-06-20T12:01:00+02:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>' \
        in quads
    assert (directory / "log.jsonl.migrated").exists() and (directory / "store.migrated").exists()
    assert (tmp_path / "data" / "spark" / "pipeline-reset").exists()  # the pipeline starts a new checkpoint
    catalog.close()
    again = StreamCatalog(tmp_path / "data" / "streams")  # once: the element log is read as it is
    assert again.get("old").head() == 2
    again.close()
