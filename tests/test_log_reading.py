"""The store's reading API over its element logs, without Spark: which logs there are, where complete records end,
a range's records as Arrow batches (columnar, and line by line past what does not decode), whether a range may
complete a window, the warm-up log, and element contents by byte runs.

A test of the store: it writes log lines by hand where it needs a torn or foreign line (``append``), which the Spark
source's tests (``tests/test_spark_source.py``) use too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyoxigraph import NamedNode, Quad, RdfFormat, parse

from store.element_log import records_file
from store.elements import ParsedElement
from store.log_contents import ContentRun, read_runs
from store.log_reading import (
    RECORD_SCHEMA,
    WARM_UP_LOG,
    append_warm_up_records,
    list_logs,
    log_directory,
    log_end,
    range_completes,
    read_records,
)
from store.stream import Stream, StreamConfig

T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs
S = 1_000_000

# ------------------------------------------------------------------------------- log lines written by hand


def element(o: int, t: int) -> dict[str, object]:
    """An element's record (``u``: a key the readers do not know, which they ignore)."""
    return {"o": o, "t": t, "g": f"urn:g:{o}", "u": f"u-{o}", "c": t + 1}


def log_file(root: Path, stream: str, base: int = 0) -> Path:
    """The records file of segment ``base`` of a stream's log under the streams' directory ``root``."""
    return records_file(log_directory(root, stream), base)


def append(root: Path, stream: str, *records: dict[str, object], partial: str = "", base: int = 0) -> None:
    """Records as lines at the end of a segment's records file, then ``partial`` (a torn line)."""
    log_file(root, stream, base).parent.mkdir(parents=True, exist_ok=True)
    with open(log_file(root, stream, base), "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records) + partial)


def rows(root: Path, stream: str, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
    directory = log_directory(root, stream)
    end = log_end(directory, start) if end is None else end
    return [row for batch in read_records(stream, directory, start, end) for row in batch.to_pylist()]


def micros(moment: datetime | None) -> int | None:
    return None if moment is None else int((moment - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))


# ------------------------------------------------------------------------------------------------- records


def test_the_logs_are_the_stream_directories_with_one_and_the_warm_up_log(tmp_path: Path) -> None:
    append(tmp_path, "b", element(1, T0))
    append(tmp_path, "a", element(1, T0))
    (tmp_path / "no-log-yet").mkdir()
    (tmp_path / ".hidden" / "log").mkdir(parents=True)  # not a stream's name, not the warm-up log
    append_warm_up_records(tmp_path, 3, T0)
    assert list_logs(tmp_path) == {WARM_UP_LOG: tmp_path / WARM_UP_LOG / "log", "a": tmp_path / "a" / "log",
                                   "b": tmp_path / "b" / "log"}
    assert list_logs(tmp_path / "missing") == {}


def test_the_end_is_just_past_the_last_complete_line(tmp_path: Path) -> None:
    append(tmp_path, "a", element(1, T0), {"p": T0 + S, "c": 1}, partial='{"o": 2, "t"')
    text = log_file(tmp_path, "a").read_bytes()
    directory = log_directory(tmp_path, "a")
    end = text.rindex(b"\n") + 1
    assert log_end(directory, 0) == end
    assert log_end(directory, end) == end  # nothing new
    assert log_end(directory, len(text) + 100) == end  # shorter than where a reader was: re-created, read again
    assert log_end(log_directory(tmp_path, "missing"), 7) == 0
    second = text.index(b"\n") + 1
    found = rows(tmp_path, "a")
    assert [(r["stream"], r["kind"], r["ordinal"], r["position"], r["commit"]) for r in found] == [
        ("a", "element", 1, 0, T0 + 1), ("a", "punctuation", None, second, 1)]
    assert found[1]["time"] == datetime(2016, 6, 20, 10, 0, 1, tzinfo=UTC)
    assert rows(tmp_path, "a", second) == found[1:]  # a range from a line's position


def test_positions_run_on_across_segments_and_retention_removes_whole_ones(tmp_path: Path) -> None:
    append(tmp_path, "a", {**element(1, T0), "d": 0, "n": 70})
    first = log_file(tmp_path, "a").stat().st_size
    append(tmp_path, "a", {**element(2, T0 + S), "d": 0, "n": 80}, base=first)  # the next segment starts there
    end = log_end(log_directory(tmp_path, "a"), 0)
    assert end == first + log_file(tmp_path, "a", first).stat().st_size
    assert [(r["ordinal"], r["position"], r["segment"], r["offset"], r["length"]) for r in rows(tmp_path, "a")] == [
        (1, 0, 0, 0, 70), (2, first, first, 0, 80)]
    assert [r["ordinal"] for r in rows(tmp_path, "a", first)] == [2]
    log_file(tmp_path, "a").unlink()  # retention deleted the first segment: its positions read nothing
    assert [r["ordinal"] for r in rows(tmp_path, "a", 0, end)] == [2]
    assert rows(tmp_path, "missing", 0, 10) == []


def test_records_read_columnar_equal_a_line_by_line_read_and_skip_what_is_not_a_record(tmp_path: Path) -> None:
    """The columnar decode (pyarrow's JSON reader) gives the rows the per-line decode gives, by hand: kinds,
    ordinals (a registration's: the element before it, or null), times, content locations, positions; a line
    that is JSON but not a record is skipped, and a line that is not JSON makes the range read line by line."""
    lines = [element(1, T0) | {"d": 0, "n": 70}, {"r": "q", "h": None, "c": 2}, {"p": T0 + S, "c": 3},
             {"x": 1}, element(2, T0 + 2 * S) | {"d": 70, "n": 5}, {"r": "q2", "h": 2, "c": 4}]
    append(tmp_path, "a", *lines)
    text = log_file(tmp_path, "a").read_bytes()
    starts = [0] + [i + 1 for i, byte in enumerate(text) if byte == 10][:-1]
    expected = [("element", 1, T0, None, 0, 0, 70, starts[0]), ("registration", None, None, "q", None, None, None,
                starts[1]), ("punctuation", None, T0 + S, None, None, None, None, starts[2]),
                ("element", 2, T0 + 2 * S, None, 0, 70, 5, starts[4]),
                ("registration", 2, None, "q2", None, None, None, starts[5])]

    def found() -> list[tuple[object, ...]]:
        return [(r["kind"], r["ordinal"], micros(r["time"]),
                 r["sequence"], r["segment"], r["offset"], r["length"], r["position"]) for r in rows(tmp_path, "a")]

    assert found() == expected
    with open(log_file(tmp_path, "a"), "r+b") as f:  # the unknown record becomes a line that is not JSON at all
        f.seek(starts[3])
        f.write(b"{not json"[: starts[4] - starts[3] - 1].ljust(starts[4] - starts[3] - 1, b" "))
    assert found() == expected
    batches = list(read_records("a", log_directory(tmp_path, "a"), 0, len(text)))
    assert all(batch.schema.equals(RECORD_SCHEMA) for batch in batches)


def test_a_range_may_complete_a_window_when_it_holds_more_than_elements_before_the_due_point(tmp_path: Path) -> None:
    append(tmp_path, "a", element(1, T0), element(2, T0 + S - 1))
    directory = log_directory(tmp_path, "a")
    elements_end = log_end(directory, 0)
    assert not range_completes(directory, 0, elements_end, T0 + S, None)  # both before the window's end
    assert not range_completes(directory, 0, elements_end, None, 3)  # a count window waiting for ordinal 3
    assert range_completes(directory, 0, elements_end, T0 + S - 1, None)  # the second is at the end
    assert range_completes(directory, 0, elements_end, None, 2)
    assert not range_completes(directory, 0, elements_end, None, None)  # no window waits
    append(tmp_path, "a", {"p": T0 + S // 2, "c": 1})  # a punctuation moves stream time: it may complete one
    assert range_completes(directory, elements_end, log_end(directory, 0), T0 + S, None)


def test_the_warm_up_log_holds_elements_without_content_and_starts_again_past_its_size(tmp_path: Path) -> None:
    append_warm_up_records(tmp_path, 3, T0)
    found = rows(tmp_path, WARM_UP_LOG)
    assert [(r["kind"], r["ordinal"], micros(r["time"]), r["commit"], r["offset"], r["length"])
            for r in found] == [("element", o, T0 + 1_000 * o, T0, 0, 1) for o in (1, 2, 3)]
    size = log_file(tmp_path, WARM_UP_LOG).stat().st_size
    append_warm_up_records(tmp_path, 3, T0, restart_past=size)  # not past it yet: appended
    assert log_file(tmp_path, WARM_UP_LOG).stat().st_size == 2 * size
    append_warm_up_records(tmp_path, 3, T0, restart_past=size)  # past it: written again from scratch
    assert log_file(tmp_path, WARM_UP_LOG).stat().st_size == size


# ------------------------------------------------------------------------------- a stream's log, and contents


def committed(tmp_path: Path) -> Stream:
    """Stream ``s`` with elements 1–3 (one statement each) at 10:00, 10:01, 10:02 and a punctuation at 10:05."""
    stream = Stream.create(tmp_path / "s", StreamConfig("s"))
    for o in (1, 2, 3):
        graph = NamedNode(f"http://ex/e{o}")
        stream.accept(ParsedElement(graph, [Quad(NamedNode("x:s"), NamedNode("x:p"), NamedNode(f"x:{o}"), graph)],
                                    T0 + (o - 1) * 60 * S), received=0)
    stream.punctuate(T0 + 5 * 60 * S)
    stream.flush()
    return stream


def test_a_streams_records_say_where_each_elements_content_is(tmp_path: Path) -> None:
    stream = committed(tmp_path)
    try:
        found = rows(tmp_path, "s")
        assert [(r["kind"], r["ordinal"], micros(r["time"])) for r in found] == [
            ("element", 1, T0), ("element", 2, T0 + 60 * S), ("element", 3, T0 + 120 * S),
            ("punctuation", None, T0 + 300 * S)]
        elements = found[:3]
        # the contents are written one after another in the segment's content file, from its start
        assert [r["segment"] for r in elements] == [0, 0, 0] and elements[0]["offset"] == 0
        assert [r["offset"] for r in elements[1:]] == [r["offset"] + r["length"] for r in elements[:2]]
        content = log_file(tmp_path, "s").with_suffix(".dat").read_bytes()
        for o, r in enumerate(elements, 1):
            piece = content[r["offset"]:r["offset"] + r["length"]]
            quads = list(parse(piece, RdfFormat.TRIG))
            assert {q.graph_name for q in quads if q.predicate.value == "x:p"} == {NamedNode(f"http://ex/e{o}")}
    finally:
        stream.close()


def test_contents_are_read_by_runs_neighbours_in_one(tmp_path: Path) -> None:
    stream = committed(tmp_path)
    try:
        together, apart = stream.content_runs([1, 2, 3]), stream.content_runs([1, 3])
        assert len(together) == 1 and len(apart) == 2  # 1–3 are neighbours in the content file; 1 and 3 are not
        assert read_runs(together) == stream.contents([1, 2, 3])
        assert read_runs(apart) == stream.contents([1]) + stream.contents([3])
        assert read_runs([]) == b""
        path, offset, length = together[0]
        with pytest.raises(OSError, match="bytes expected"):
            read_runs([ContentRun(path, offset, length + 10)])  # shorter than its run: e.g. cut by a crash
        with pytest.raises(OSError):
            read_runs([ContentRun(str(tmp_path / "gone.dat"), 0, 10)])  # its segment expired
    finally:
        stream.close()
