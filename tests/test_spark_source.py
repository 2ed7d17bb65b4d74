"""The ``element_log`` Spark source (exactly once across batches and restarts) and window assignment.

One Spark session for the module, left running for the next module of this test worker that drives Spark: starting
one costs 5–15 s on this machine.
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from pipeline.assignment import assign_one, assign_windows  # noqa: E402
from pipeline.element_source import (  # noqa: E402
    SCHEMA,
    ElementLogReader,
    LogSlice,
    batch_due,
    start_element_pipeline,
    stop_element_pipeline,
    write_due_hints,
)
from pipeline.spark import SparkSettings, spark_session  # noqa: E402
from sparql_ext.window_data import AssignmentRow  # noqa: E402
from sparql_ext.window_kinds import WindowSpec  # noqa: E402
from sparql_ext.window_state import assign_ranges  # noqa: E402
from tests.test_log_reading import append, element, log_file  # noqa: E402  (logs written by hand: the store's tests)

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs
S = 1_000_000
M = 60 * S


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    """The process-wide session (``getOrCreate``), left running for the next module of this test worker that drives
    Spark: a start costs ≈ 10 s here."""
    return spark_session(SparkSettings(app_name="test-spark-source"))


# ------------------------------------------------------------------------- offsets, without Spark running


def test_a_flood_gets_a_batch_a_second_a_steady_stream_every_quarter_second() -> None:
    # 1,000 elements/s of ≈ 100-byte records, 0.3 s after the previous batch: 30 KB, not a flood
    assert batch_due(0.3, 30_000, 0.25, 1.0)
    assert not batch_due(0.2, 30_000, 0.25, 1.0)  # never before the short interval
    # 25,000 elements/s: 750 KB in 0.3 s, 2.5 MB/s: a flood waits for the long interval
    assert not batch_due(0.3, 750_000, 0.25, 1.0)
    assert not batch_due(0.99, 2_475_000, 0.25, 1.0)
    assert batch_due(1.0, 2_500_000, 0.25, 1.0)
    assert batch_due(0.3, 750_000, 0.25, 0.0)  # no flood interval: as before


def test_the_reader_holds_a_flood_back_until_the_flood_interval(tmp_path: Path) -> None:
    append(tmp_path, "a", element(1, T0))
    reader = ElementLogReader(tmp_path, min_batch_interval=0.0, flood_batch_interval=30.0)
    first = reader.next_end({"a": 0})
    assert first["a"] > 0  # an isolated element: at once
    append(tmp_path, "a", *(element(o, T0 + o) for o in range(2, 40_000)))  # ≈ 2 MB just after: a flood
    assert reader.next_end(first) == first
    steady = ElementLogReader(tmp_path, min_batch_interval=0.0)
    assert steady.next_end(first)["a"] > first["a"]


def test_the_element_that_completes_a_window_starts_a_batch_at_once_the_others_wait(tmp_path: Path) -> None:
    # The due file says stream a's next window ends at T0 + 1 s (a time window) and stream c's at ordinal 5 (a count
    # window); b has a sequence whose t0 waits for its anchor (null: cannot tell).
    write_due_hints(tmp_path, {"a": [T0 + S, None], "b": None, "c": [None, 5]})
    append(tmp_path, "a", element(1, T0))
    reader = ElementLogReader(tmp_path, min_batch_interval=0.25, due_file=tmp_path / "_due.json",
                              idle_batch_interval=30.0)
    first = reader.next_end({})
    assert first["a"] > 0  # the first batch of a reader: long after "the previous one"
    # elements of the current window only: they wait (for the idle interval, 30 s here)
    append(tmp_path, "a", element(2, T0 + S // 2), element(3, T0 + S - 1))
    assert reader.next_end(first) == first
    # the element at the window's end completes it: at once, well before the short interval too
    append(tmp_path, "a", element(4, T0 + S))
    assert reader.next_end(first)["a"] == log_file(tmp_path, "a").stat().st_size
    second = reader.next_end(first)
    # a punctuation completes whatever it holds: at once
    append(tmp_path, "a", {"p": T0 + 2 * S, "c": 1})
    third = reader.next_end(second)
    assert third["a"] > second["a"]
    # c: ordinals 1..4 wait, ordinal 5 completes its count window
    append(tmp_path, "c", *(element(o, T0 + o) for o in range(1, 5)))
    assert reader.next_end(third) == third
    append(tmp_path, "c", element(5, T0 + 5))
    fourth = reader.next_end(third)
    assert fourth["c"] == log_file(tmp_path, "c").stat().st_size
    # b cannot tell: the short interval, as without a due file
    append(tmp_path, "b", element(1, T0))
    assert reader.next_end(fourth) == fourth
    time.sleep(0.3)
    assert reader.next_end(fourth)["b"] > 0


def test_offsets_stop_at_the_last_complete_line(tmp_path: Path) -> None:
    append(tmp_path, "a", element(1, T0), {"p": T0 + S, "c": 1}, partial='{"o": 2, "t"')
    (tmp_path / "empty-dir").mkdir()  # no log yet: not a stream
    reader = ElementLogReader(tmp_path)
    assert reader.initialOffset() == {"a": 0}
    end = reader.next_end({"a": 0})
    assert end == {"a": log_file(tmp_path, "a").read_bytes().rindex(b"\n") + 1}
    assert ElementLogReader(tmp_path, "latest").initialOffset() == end
    rows = [row for batch in reader.read_slice(reader.slices({}, end)[0]) for row in batch.to_pylist()]
    second = log_file(tmp_path, "a").read_bytes().index(b"\n") + 1
    found = [(r["kind"], r["ordinal"], r["position"]) for r in rows]
    assert found == [("element", 1, 0), ("punctuation", None, second)]
    assert rows[1]["time"] == datetime(2016, 6, 20, 10, 0, 1, tzinfo=UTC)


def test_a_batch_is_read_where_its_end_is_decided_and_read_again_alike(tmp_path: Path) -> None:
    # what Spark calls: read(start) -> (the batch's records, its end), nothing while no batch is due; after a
    # restart, readBetweenOffsets(start, end) gives the same rows
    append(tmp_path, "a", element(1, T0), element(2, T0 + S))
    append(tmp_path, "b", {"p": T0 + 2 * S, "c": 1})
    reader = ElementLogReader(tmp_path, min_batch_interval=30.0)
    records, end = reader.read({})
    rows = [(r["stream"], r["kind"], r["ordinal"]) for batch in records for r in batch.to_pylist()]
    assert rows == [("a", "element", 1), ("a", "element", 2), ("b", "punctuation", None)]
    assert end == {"a": log_file(tmp_path, "a").stat().st_size, "b": log_file(tmp_path, "b").stat().st_size}
    append(tmp_path, "a", element(3, T0 + 3 * S))
    records, same = reader.read(end)  # within the interval: no batch
    assert same == end and list(records) == []
    again = [(r["stream"], r["kind"], r["ordinal"]) for batch in reader.readBetweenOffsets({}, end)
             for r in batch.to_pylist()]
    assert again == rows


def test_deleted_stream_reads_nothing_and_leaves_the_offsets(tmp_path: Path) -> None:
    append(tmp_path, "a", element(1, T0))
    append(tmp_path, "b", element(1, T0))
    reader = ElementLogReader(tmp_path)
    end = reader.next_end({})
    slices = reader.slices({}, end)
    shutil.rmtree(tmp_path / "b")  # between the offsets and the read
    assert [len(list(reader.read_slice(s))) for s in slices] == [1, 0]
    assert list(reader.next_end(end)) == ["a"]
    assert list(reader.read_slice(LogSlice("x", str(log_file(tmp_path, "x").parent), 0, 10))) == []


# ---------------------------------------------------------------------------------- the streaming source


class Collector:
    """on_batch that remembers every row it saw, with its batch id."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, str, int | None, int]] = []
        self.batches: list[int] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.batches.append(batch_id)
        for r in df.collect():
            self.rows.append((batch_id, r.stream, r.kind, r.ordinal, r.position))

    def seen(self) -> list[tuple[str, str, int | None]]:
        return sorted((s, k, o) for _, s, k, o, _ in self.rows)


def test_source_exactly_once_across_batches_and_restart(spark: SparkSession, tmp_path: Path) -> None:
    root, checkpoint = tmp_path / "streams", tmp_path / "checkpoint"
    append(root, "a", element(1, T0), element(2, T0 + S), partial='{"o": 3, "t": ')
    got = Collector()
    query = start_element_pipeline(spark, root, checkpoint, got)
    try:
        query.processAllAvailable()
        assert got.seen() == [("a", "element", 1), ("a", "element", 2)]  # not the partial line
        # batch 2: the partial line completes, and a stream appears after the start
        with open(log_file(root, "a"), "a") as f:
            f.write(f'{T0 + 2 * S}, "g": "urn:g:3", "u": "u-3", "c": 0}}\n')
        append(root, "b", element(1, T0), {"r": "seq-1", "c": 0})
        query.processAllAvailable()
        # batch 3: both grow; punctuation
        append(root, "a", element(4, T0 + 3 * S), {"p": T0 + 4 * S, "c": 0})
        append(root, "b", element(2, T0 + S))
        query.processAllAvailable()
    finally:
        assert stop_element_pipeline(query, checkpoint)
    assert len(set(got.batches)) >= 3
    assert got.seen() == [
        ("a", "element", 1), ("a", "element", 2), ("a", "element", 3), ("a", "element", 4),
        ("a", "punctuation", None),
        ("b", "element", 1), ("b", "element", 2), ("b", "registration", None),
    ]  # fmt: skip
    last_batch = max(got.batches)

    # appended while stopped; then a restart from the checkpoint resumes after the last committed batch
    append(root, "a", element(5, T0 + 5 * S))
    append(root, "c", element(1, T0))
    again = Collector()
    query = start_element_pipeline(spark, root, checkpoint, again)
    try:
        query.processAllAvailable()
    finally:
        stop_element_pipeline(query, checkpoint)
    assert again.seen() == [("a", "element", 5), ("c", "element", 1)]
    assert min(again.batches) == last_batch + 1
    positions = [(s, p) for _, s, _, _, p in got.rows + again.rows]
    assert len(positions) == len(set(positions))


# ---------------------------------------------------------------------------------------- window assignment


def Spec(kind: str, backward: bool, origin: int | None, width: int, step: int, step_kind: str,
         first: int, count: int | None) -> WindowSpec:
    """A resolved spec, written out field by field."""
    return WindowSpec("test", kind, backward, origin, width, step, step_kind, first, count)  # type: ignore[arg-type]


def row(spec: WindowSpec) -> AssignmentRow:
    """The batch job's row of a spec (nothing open yet)."""
    found = spec.window_kind.row(spec.first, {})
    assert found is not None
    return found


def at(h: int, m: int, s: int = 0, us: int = 0) -> int:
    return T0 + ((h - 10) * 3600 + m * 60 + s) * S + us


# Each case: its own stream, the elements (ordinal, µs), and the expected (k, ordinal) pairs worked by hand.
CASES: list[tuple[str, Spec, list[tuple[int, int]], set[tuple[int, int]]]] = [
    (
        # [10:00+k, 10:05+k), k ≥ 0. 10:00 → starts in (9:55, 10:00] → k 0 only; 10:02:30 → (9:57:30, 10:02:30]
        # → 0, 1, 2; 10:05 → (10:00, 10:05] → 1..5 (window 0 excludes its end); 10:07 → (10:02, 10:07] → 3..7
        "forward-sliding",
        Spec("time", False, at(10, 0), 5 * M, M, "time", 0, None),
        [(1, at(10, 0)), (2, at(10, 2, 30)), (3, at(10, 5)), (4, at(10, 7))],
        {(0, 1), (0, 2), (1, 2), (2, 2), (1, 3), (2, 3), (3, 3), (4, 3), (5, 3)}
        | {(3, 4), (4, 4), (5, 4), (6, 4), (7, 4)},
    ),
    (
        # (10:00+k−5, 10:00+k], k ≥ 1: element at t is in windows whose end is in [t, t+5m).
        # 10:00 → ends 10:00..10:04 → k 0..4 → 1..4; 10:02:30 → ends 10:03..10:07 → 3..7;
        # 10:05 → 10:05..10:09 → 5..9; 10:07 → 7..11
        "backward-sliding",
        Spec("time", True, at(10, 0), 5 * M, M, "time", 1, None),
        [(1, at(10, 0)), (2, at(10, 2, 30)), (3, at(10, 5)), (4, at(10, 7))],
        {(1, 1), (2, 1), (3, 1), (4, 1), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2)}
        | {(5, 3), (6, 3), (7, 3), (8, 3), (9, 3), (7, 4), (8, 4), (9, 4), (10, 4), (11, 4)},
    ),
    (
        # [10:00+5k, 10:05+5k): k = ⌊(t − 10:00)/5m⌋; 9:59:59 is before t0 → k −1 → dropped (k ≥ 0)
        "tumbling",
        Spec("time", False, at(10, 0), 5 * M, 5 * M, "time", 0, None),
        [(1, at(9, 59, 59)), (2, at(10, 0)), (3, at(10, 4, 59, 999_999)), (4, at(10, 5)), (5, at(10, 12))],
        {(0, 2), (0, 3), (1, 4), (2, 5)},
    ),
    (
        # [10:00+5k, 10:01+5k): 10:00 and 10:00:59.999999 in 0; 10:01 in the gap; 10:05:30 in 1; 10:09:59 gap
        "gaps",
        Spec("time", False, at(10, 0), M, 5 * M, "time", 0, None),
        [(1, at(10, 0)), (2, at(10, 0, 59, 999_999)), (3, at(10, 1)), (4, at(10, 5, 30)), (5, at(10, 9, 59))],
        {(0, 1), (0, 2), (1, 4)},
    ),
    (
        # backward with gaps: (10:00+5k−1m, 10:00+5k], k ≥ 1 → window 1 = (10:04, 10:05]:
        # 10:04 excluded, 10:04:00.000001 and 10:05 in, 10:05:00.000001 in the gap; 10:09:30 in window 2
        "backward-gaps",
        Spec("time", True, at(10, 0), M, 5 * M, "time", 1, None),
        [(1, at(10, 4)), (2, at(10, 4, 0, 1)), (3, at(10, 5)), (4, at(10, 5, 0, 1)), (5, at(10, 9, 30))],
        {(1, 2), (1, 3), (2, 5)},
    ),
    (
        # ordinals [3+k, 12+k], k ≥ 0: o1, o2 precede window 0; o3 → k 0; o5 → 0..2; o13 → k with
        # 3+k ≤ 13 ≤ 12+k → 1..10
        "count",
        Spec("count", False, 3, 10, 1, "count", 0, None),
        [(1, at(10, 0)), (2, at(10, 1)), (3, at(10, 2)), (5, at(10, 3)), (13, at(10, 4))],
        {(0, 3), (0, 5), (1, 5), (2, 5)} | {(k, 13) for k in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)},
    ),
    (
        # o0 = −4 (HEAD~9 of a 5-element stream): windows [−4+k, 5+k] starting before ordinal 1 (k < 5) are
        # skipped even though first = 0 here; o1 → k 5; o3 → starts 1..3 → k 5, 6, 7
        "count-before-1",
        Spec("count", False, -4, 10, 1, "count", 0, None),
        [(1, at(10, 0)), (3, at(10, 1))],
        {(5, 1), (5, 3), (6, 3), (7, 3)},
    ),
    (
        # forward-sliding again, R3: only windows 0, 1, 2 → o1 {0}, o2 {0,1,2}, o3 {1,2}, o4 none
        "count-limit",
        Spec("time", False, at(10, 0), 5 * M, M, "time", 0, 3),
        [(1, at(10, 0)), (2, at(10, 2, 30)), (3, at(10, 5)), (4, at(10, 7))],
        {(0, 1), (0, 2), (1, 2), (2, 2), (1, 3), (2, 3)},
    ),
    (
        # t0 = 10:00:07: [10:00:07+k, 10:05:07+k). 10:00:07 → 0; 10:01:06 → starts (9:56:06, 10:01:06] → 0;
        # 10:01:07 → 0, 1; 10:05:07 → (10:00:07, 10:05:07] → 1..5; 10:06:07 → 2..6
        "unaligned-t0",
        Spec("time", False, at(10, 0, 7), 5 * M, M, "time", 0, None),
        [(1, at(10, 0, 7)), (2, at(10, 1, 6)), (3, at(10, 1, 7)), (4, at(10, 5, 7)), (5, at(10, 6, 7))],
        {(0, 1), (0, 2), (0, 3), (1, 3), (1, 4), (2, 4), (3, 4), (4, 4), (5, 4)}
        | {(2, 5), (3, 5), (4, 5), (5, 5), (6, 5)},
    ),
    (
        # t0 = 10:00:07 backward, k ≥ 1: (10:00:07+k−5m, 10:00:07+k]; 10:01:06 → ends in [10:01:06, 10:06:06)
        # → 10:01:07..10:05:07 → 1..5; 10:01:08 → ends [10:01:08, 10:06:08) → 10:02:07..10:06:07 → 2..6
        "unaligned-t0-backward",
        Spec("time", True, at(10, 0, 7), 5 * M, M, "time", 1, None),
        [(1, at(10, 1, 6)), (2, at(10, 1, 8))],
        {(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (2, 2), (3, 2), (4, 2), (5, 2), (6, 2)},
    ),
    (
        # width 150 s not a multiple of step 60 s, t0 = 10:00:07: [t0+60k, t0+60k+150).
        # t0+100 s → starts (t0−50, t0+100] → 0, 1; t0+130 s → (t0−20, t0+130] → 0, 1, 2
        "width-not-multiple",
        Spec("time", False, at(10, 0, 7), 150 * S, M, "time", 0, None),
        [(1, at(10, 1, 47)), (2, at(10, 2, 17))],
        {(0, 1), (1, 1), (0, 2), (1, 2), (2, 2)},
    ),
]


def _batch(spark: SparkSession) -> DataFrame:
    base = datetime(1970, 1, 1, tzinfo=UTC)
    rows = [
        (name, "element", o, base + timedelta(microseconds=t), None, 0, i, None, None, None)
        for name, _, elements, _ in CASES
        for i, (o, t) in enumerate(elements)
    ]
    rows.append(("forward-sliding", "punctuation", None, base + timedelta(microseconds=at(10, 3)), None, 0, 99,
                 *[None] * 3))
    rows.append(("elsewhere", "element", 1, base + timedelta(microseconds=at(10, 0)), None, 0, 0, *[None] * 3))
    return spark.createDataFrame(rows, SCHEMA)


@pytest.fixture(scope="module")
def assigned(spark: SparkSession) -> dict[str, set[tuple[int, int]]]:
    sequences = [(f"seq-{name}", name, row(spec)) for name, spec, _, _ in CASES]
    assert Spec("time", False, None, M, M, "time", 0, None).window_kind.row(0, {}) is None  # pending: no row
    found: dict[str, set[tuple[int, int]]] = {}
    for r in assign_windows(_batch(spark), sequences).collect():
        assert r.sequence == f"seq-{r.stream}"
        found.setdefault(r.stream, set()).add((r.k, r.ordinal))
    return found


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_assignment_by_hand(assigned: dict[str, set[tuple[int, int]]], name: str) -> None:
    expected = next(case[3] for case in CASES if case[0] == name)
    assert assigned.get(name, set()) == expected


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_assignment_matches_reference(assigned: dict[str, set[tuple[int, int]]], name: str) -> None:
    """Same windows as the pure-Python reference (docs/streams.md: the Spark pipeline is tested against it)."""
    windowing = pytest.importorskip("sparql_ext.windowing")
    _, spec, elements, _ = next(case for case in CASES if case[0] == name)
    index = windowing.ListIndex([])
    expected = set()
    for k in range(spec.first, spec.first + (spec.count or 20)):
        start, end = windowing.bounds(spec, k, index)
        for o, t in elements:
            v = o if spec.kind == "count" else t
            inside = start < v <= end if spec.backward else start <= v < end
            if spec.kind == "count":
                inside = start <= v <= end and start >= 1
            if inside:
                expected.add((k, o))
    assert assigned.get(name, set()) == expected


def test_time_width_with_count_step_is_left_to_the_caller(spark: SparkSession) -> None:
    spec = Spec("time", False, T0, 5 * M, 10, "count", 0, None)
    assert spec.window_kind.row(0, {}) is None
    assert assign_one(_batch(spark), "s", "a", spec.window_kind.row(0, {})) is None


def test_no_sequences_gives_an_empty_frame(spark: SparkSession) -> None:
    out = assign_windows(_batch(spark), [])
    assert out.columns == ["sequence", "stream", "k", "ordinal", "time"] and out.count() == 0


def _via_spark_window(elements: DataFrame, spec: Spec) -> DataFrame:
    """(k, ordinal) of a time spec through Spark's own ``functions.window`` (literal durations, one plan per
    spec): windows [start, start + width) with start ≡ t0 (mod step), k = (start − t0) / step. Backward
    windows (end − width, end] are [start, end) of ``time − 1 µs``."""
    from pyspark.sql import functions as F

    t0, width, step = spec.origin, spec.width, spec.step
    assert t0 is not None and step <= width  # window() refuses a slide longer than the duration
    start_time = (t0 - width) % step if spec.backward else t0 % step
    shifted = F.timestamp_micros(F.unix_micros("time") - 1) if spec.backward else F.col("time")
    windowed = elements.where("kind = 'element'").withColumn(
        "_w", F.window(shifted, f"{width} microseconds", f"{step} microseconds", f"{start_time} microseconds"))
    anchor = F.unix_micros("_w.start") + (width if spec.backward else 0)  # window k's start (end if backward)
    k = ((anchor - F.lit(t0)) / F.lit(step)).cast("long")
    return windowed.select(k.alias("k"), "ordinal").where(F.col("k") >= spec.first)


@pytest.mark.parametrize("backward", [False, True])
def test_time_arithmetic_equals_spark_window(spark: SparkSession, backward: bool) -> None:
    """The data-driven arithmetic computes the windows Spark's ``window()`` computes (fixed spec, t0 not
    aligned, width not a multiple of the step, elements on and around every boundary)."""
    spec = Spec("time", backward, at(10, 0, 7), 150 * S, M, "time", 1 if backward else 0, None)
    base = datetime(1970, 1, 1, tzinfo=UTC)
    offsets = sorted({b + d for b in range(-200 * S, 600 * S, 10 * S) for d in (-1, 0, 1)})
    rows = [("a", "element", o, base + timedelta(microseconds=spec.origin + off), None, 0, o, *[None] * 3)
            for o, off in enumerate(offsets, start=1)]
    batch = spark.createDataFrame(rows, SCHEMA)
    ours = {(r.k, r.ordinal) for r in assign_windows(batch, [("s", "a", row(spec))]).collect()}
    theirs = {(r.k, r.ordinal) for r in _via_spark_window(batch, spec).collect()}
    assert ours == theirs and len(ours) > len(rows)


def test_session_windows_in_spark(spark: SparkSession) -> None:
    """Session rows (gap 3 minutes) through the plan's window functions, the same as numpy's form. Stream "fresh":
    nothing open, t0 = 10:00: 10:00, 10:01 | 10:06 (5 after 10:01), 10:07 | 10:15 → windows 0, 0, 1, 1, 2; "two":
    the same with R2 (windows 0 and 1 only). Stream "open": t0 = 09:58 and window 4 open with its latest time 10:00
    (from an earlier batch): 09:57 is before t0 (no window), 10:02 joins window 4 (2 after 10:00), 10:05 starts 5
    (3 after 10:02), 10:06 joins it."""
    spec = Spec("session", False, at(10, 0), 3 * M, 3 * M, "time", 0, None)
    fresh = [(1, at(10, 0)), (2, at(10, 1)), (3, at(10, 6)), (4, at(10, 7)), (5, at(10, 15))]
    opened = [(6, at(9, 57)), (7, at(10, 2)), (8, at(10, 5)), (9, at(10, 6))]
    rows = {"fresh": row(spec), "two": Spec("session", False, at(10, 0), 3 * M, 3 * M, "time", 0, 2).window_kind.row(
        0, {}), "open": Spec("session", False, at(9, 58), 3 * M, 3 * M, "time", 0, None).window_kind.row(
        4, {4: [at(9, 59), at(10, 0)]})}
    elements = {"fresh": fresh, "two": fresh, "open": opened}
    base = datetime(1970, 1, 1, tzinfo=UTC)
    batch = spark.createDataFrame([(name, "element", o, base + timedelta(microseconds=t), None, 0, o, *[None] * 3)
                                   for name, found in elements.items() for o, t in found], SCHEMA)
    sequences = [(f"seq-{name}", name, found) for name, found in rows.items() if found is not None]
    assigned: dict[str, set[tuple[int, int]]] = {}
    for r in assign_windows(batch, sequences).collect():
        assigned.setdefault(r.stream, set()).add((r.k, r.ordinal))
    assert assigned == {"fresh": {(0, 1), (0, 2), (1, 3), (1, 4), (2, 5)}, "two": {(0, 1), (0, 2), (1, 3), (1, 4)},
                        "open": {(4, 7), (5, 8), (5, 9)}}
    for name, found in rows.items():
        assert found is not None
        ordinals = np.array([o for o, _ in elements[name]], np.int64)
        lo, hi = assign_ranges(found, ordinals, np.array([t for _, t in elements[name]], np.int64))
        assert {(k, int(o)) for o, a, b in zip(ordinals, lo.tolist(), hi.tolist(), strict=True)
                for k in range(a, b + 1)} == assigned[name]


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_the_cores_assignment_is_the_same_arithmetic(name: str) -> None:
    """``sparql_ext.window_state.assign_ranges`` (numpy: the pure window core's history assignment, and its tests'
    stand-in for the batch job) gives the hand-worked windows too."""
    _, spec, elements, expected = next(case for case in CASES if case[0] == name)
    ordinals = np.array([o for o, _ in elements], np.int64)
    times = np.array([t for _, t in elements], np.int64)
    lo, hi = assign_ranges(row(spec), ordinals, times)
    found = {(k, int(o)) for o, a, b in zip(ordinals, lo.tolist(), hi.tolist(), strict=True) for k in range(a, b + 1)}
    assert found == expected
