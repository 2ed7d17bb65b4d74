"""The continuous window pipeline: Spark assigns, the driver completes, revisions equal the reference.

One Spark session and one running pipeline for the module (a session costs ~6 s); every test uses its
own stream(s) in the pipeline's catalog. Times are µs; ``hm("10:05")`` is 2016-06-20T10:05:00Z.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from pyoxigraph import Literal, NamedNode, Quad  # noqa: E402

from concentrator.element_source import SCHEMA  # noqa: E402
from concentrator.pipeline import MAX_EMPTY_RUN, WindowPipeline  # noqa: E402
from concentrator.spark import SparkSettings, spark_session  # noqa: E402
from sparql_ext.windowing import resolve, windows  # noqa: E402
from sparql_ext.windowref import parse_window_ref  # noqa: E402
from store.elements import ParsedElement  # noqa: E402
from store.stream import Stream, StreamConfig, format_micros  # noqa: E402
from store.streams import StreamCatalog  # noqa: E402
from store.windows import Sequence  # noqa: E402

T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z
S = 1_000_000
M = 60 * S
WAIT = 60.0
_names = itertools.count()

Got = list[tuple[int, int, int, tuple[int, ...]]]  # (k, start, end, ordinals)


def hm(text: str) -> int:
    """'10:05' or '09:56' on 2016-06-20, in µs."""
    hours, minutes = text.split(":")
    return T0 + (int(hours) - 10) * 60 * M + int(minutes) * M


@dataclass
class Env:
    catalog: StreamCatalog
    pipeline: WindowPipeline


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    data = tmp_path_factory.mktemp("pipeline")
    spark_session(SparkSettings(app_name="test-pipeline"))
    catalog = StreamCatalog(data / "streams")
    pipeline = WindowPipeline(catalog, data, SparkSettings(app_name="test-pipeline"))
    pipeline.start()
    assert pipeline.ready.is_set()
    yield Env(catalog, pipeline)
    pipeline.stop(stop_session=True)
    catalog.close()


# ----------------------------------------------------------------------------------------------- helpers


def new_stream(catalog: StreamCatalog, prefix: str = "s") -> Stream:
    return catalog.put(StreamConfig(f"{prefix}{next(_names)}"))[0]


def add(stream: Stream, *times: int) -> None:
    for t in times:
        graph = NamedNode(f"urn:e:{stream.config.name}:{t}")
        quads = [Quad(NamedNode("urn:x:s"), NamedNode("urn:x:v"), Literal(str(t)), graph)]
        stream.accept(ParsedElement(graph, quads, t), received=t)


def register(stream: Stream, ref: str) -> Sequence:
    """Resolve against the committed stream (HEAD = the last element added) and register."""
    stream.flush()
    return stream.register(ref, resolve(parse_window_ref(ref), stream))


def settle(env: Env, stream: Stream) -> None:
    stream.flush()
    assert env.pipeline.wait_caught_up(stream, WAIT), env.pipeline.status()


def got(stream: Stream, sequence: Sequence) -> Got:
    return [(r.index, r.start, r.end, tuple(r.ordinals())) for r in stream.windows.revisions(sequence.id)]


def reference(stream: Stream, sequence: Sequence) -> Got:
    """``windowing.windows`` with the spec as the pipeline bound it and the pipeline's watermark."""
    state = stream.windows.state
    spec = sequence.spec
    if spec.origin is None and sequence.id in state.origins:
        spec = replace(spec, origin=state.origins[sequence.id])
    return [(w.index, w.start, w.end, w.elements) for w in windows(spec, stream, state.watermark)]


def span(first: int, last: int) -> tuple[int, ...]:
    return tuple(range(first, last + 1))


MINUTES_1_TO_12 = [hm(f"10:{m:02d}") for m in range(1, 13)]  # ordinals 2..13 after the one at 10:00


# ----------------------------------------------------------------------------------- hand-worked windows


def test_forward_sliding(env: Env) -> None:
    # One element at 10:00 (ordinal 1), registered: t0 = 10:00, window k = [10:00+k', 10:05+k') (k' = k min).
    # Then 10:01..10:12 (ordinals 2..13) and punctuation 10:13: watermark 10:13, so k with 10:05+k ≤ 10:13,
    # k = 0..8; window k holds minutes k..k+4 = ordinals k+1..k+5.
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R/HEAD/PT05M/PT01M")
    add(stream, *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    expected = [
        (0, hm("10:00"), hm("10:05"), span(1, 5)),
        (1, hm("10:01"), hm("10:06"), span(2, 6)),
        (2, hm("10:02"), hm("10:07"), span(3, 7)),
        (3, hm("10:03"), hm("10:08"), span(4, 8)),
        (4, hm("10:04"), hm("10:09"), span(5, 9)),
        (5, hm("10:05"), hm("10:10"), span(6, 10)),
        (6, hm("10:06"), hm("10:11"), span(7, 11)),
        (7, hm("10:07"), hm("10:12"), span(8, 12)),
        (8, hm("10:08"), hm("10:13"), span(9, 13)),
    ]
    assert got(stream, seq) == expected == reference(stream, seq)
    assert stream.windows.state.watermark == hm("10:13")


def test_backward_sliding(env: Env) -> None:
    # t0 = 10:00; window k = (10:00+k−5, 10:00+k], k ≥ 1. Same data, watermark 10:13: k = 1..13.
    # k=1 (09:56,10:01] minutes 0,1 = ordinals 1,2; … k=4 (09:59,10:04] ordinals 1..5;
    # k ≥ 5: minutes k−4..k = ordinals k−3..k+1 (capped at 13: k=13 (10:08,10:13] minutes 9..12 = 10..13).
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R/HEAD/-PT05M/PT01M")
    add(stream, *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    expected = [
        (1, hm("09:56"), hm("10:01"), span(1, 2)),
        (2, hm("09:57"), hm("10:02"), span(1, 3)),
        (3, hm("09:58"), hm("10:03"), span(1, 4)),
        (4, hm("09:59"), hm("10:04"), span(1, 5)),
        (5, hm("10:00"), hm("10:05"), span(2, 6)),
        (6, hm("10:01"), hm("10:06"), span(3, 7)),
        (7, hm("10:02"), hm("10:07"), span(4, 8)),
        (8, hm("10:03"), hm("10:08"), span(5, 9)),
        (9, hm("10:04"), hm("10:09"), span(6, 10)),
        (10, hm("10:05"), hm("10:10"), span(7, 11)),
        (11, hm("10:06"), hm("10:11"), span(8, 12)),
        (12, hm("10:07"), hm("10:12"), span(9, 13)),
        (13, hm("10:08"), hm("10:13"), span(10, 13)),
    ]
    assert got(stream, seq) == expected == reference(stream, seq)


def test_tumbling_then_punctuation_closes_the_last(env: Env) -> None:
    # [10:00,10:05) = 1..5, [10:05,10:10) = 6..10; [10:10,10:15) waits for 10:15 (watermark 10:13),
    # then punctuation 10:15 closes it with minutes 10..12 = 11..13.
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R/HEAD/PT05M")
    add(stream, *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    first_two = [(0, hm("10:00"), hm("10:05"), span(1, 5)), (1, hm("10:05"), hm("10:10"), span(6, 10))]
    assert got(stream, seq) == first_two
    stream.punctuate(hm("10:15"))
    settle(env, stream)
    assert got(stream, seq) == [*first_two, (2, hm("10:10"), hm("10:15"), span(11, 13))] == reference(stream, seq)


def test_hopping_with_gaps(env: Env) -> None:
    # [10:00+5k, 10:01+5k): one minute every five; complete while 10:01+5k ≤ 10:13: k = 0, 1, 2.
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R/HEAD/PT01M/PT05M")
    add(stream, *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    expected = [(0, hm("10:00"), hm("10:01"), (1,)), (1, hm("10:05"), hm("10:06"), (6,)),
                (2, hm("10:10"), hm("10:11"), (11,))]
    assert got(stream, seq) == expected == reference(stream, seq)


def test_count_window_last_ten_sliding_by_one(env: Env) -> None:
    # Ten elements 10:00..10:09 exist: HEAD = 10, HEAD~9 = 1, window k = ordinals 1+k..10+k.
    # Window 0 is complete from history; 10:10..10:12 (ordinals 11..13) complete windows 1..3.
    stream = new_stream(env.catalog)
    add(stream, *[hm(f"10:{m:02d}") for m in range(10)])
    seq = register(stream, "R/HEAD~9/HEAD/1")
    add(stream, hm("10:10"), hm("10:11"), hm("10:12"))
    settle(env, stream)
    expected = [(0, 1, 10, span(1, 10)), (1, 2, 11, span(2, 11)), (2, 3, 12, span(3, 12)), (3, 4, 13, span(4, 13))]
    assert got(stream, seq) == expected == reference(stream, seq)


def test_exactly_three_windows(env: Env) -> None:
    # R3: windows 0..2 only, [10:00+k, 10:02+k): {1,2}, {2,3}, {3,4}; nothing after, whatever the watermark.
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R3/HEAD/PT02M/PT01M")
    add(stream, *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    expected = [(0, hm("10:00"), hm("10:02"), (1, 2)), (1, hm("10:01"), hm("10:03"), (2, 3)),
                (2, hm("10:02"), hm("10:04"), (3, 4))]
    assert got(stream, seq) == expected == reference(stream, seq)
    assert stream.windows.state.next_index[seq.id] == 3
    assert seq.id not in stream.windows.state.open


def test_anchored_in_the_past_replays_history_then_continues(env: Env) -> None:
    # Elements 10:00..10:06 (ordinals 1..7) exist when the sequence is registered: they are history.
    # Stream time 10:06 completes [10:00,10:05) = 1..5 and [10:01,10:06) = 2..6 from history alone.
    stream = new_stream(env.catalog)
    add(stream, *[hm(f"10:{m:02d}") for m in range(7)])
    settle(env, stream)
    seq = register(stream, "R/2016-06-20T10:00:00Z/PT05M/PT01M")
    settle(env, stream)
    history = [(0, hm("10:00"), hm("10:05"), span(1, 5)), (1, hm("10:01"), hm("10:06"), span(2, 6))]
    assert got(stream, seq) == history
    # Live: 10:07..10:12 (ordinals 8..13), punctuation 10:13: windows 2..8 as in the forward case.
    add(stream, *[hm(f"10:{m:02d}") for m in range(7, 13)])
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    live = [(k, hm(f"10:{k:02d}"), hm(f"10:{k + 5:02d}"), span(k + 1, k + 5)) for k in range(2, 9)]
    assert got(stream, seq) == history + live == reference(stream, seq)


def test_registration_on_an_empty_stream_waits_for_the_first_element(env: Env) -> None:
    # HEAD of an empty stream is its first element: t0 is pending until it arrives (10:00), then the
    # windows are those of the forward case.
    stream = new_stream(env.catalog)
    seq = register(stream, "R/HEAD/PT05M/PT01M")
    assert seq.spec.origin is None and seq.spec.anchor == 1
    settle(env, stream)
    assert env.pipeline.status()["streams"][stream.config.name]["sequences"][seq.id]["pending"]
    add(stream, hm("10:00"), *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    assert stream.windows.state.origins[seq.id] == hm("10:00")
    expected = [(k, hm(f"10:{k:02d}"), hm(f"10:{k + 5:02d}"), span(k + 1, k + 5)) for k in range(9)]
    assert got(stream, seq) == expected == reference(stream, seq)


def test_time_width_count_step(env: Env) -> None:
    # R/HEAD/PT02M/5: a 2-minute window starting at every 5th element from HEAD (ordinal 1, 10:00):
    # k=0 [10:00,10:02) = 1,2; k=1 starts at ordinal 6 (10:05): 6,7; k=2 at ordinal 11 (10:10): 11,12.
    # Watermark 10:13 ≥ 10:12: all three complete; k=3 would start at ordinal 16, not there yet.
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R/HEAD/PT02M/5")
    add(stream, *MINUTES_1_TO_12)
    stream.punctuate(hm("10:13"))
    settle(env, stream)
    expected = [(0, hm("10:00"), hm("10:02"), (1, 2)), (1, hm("10:05"), hm("10:07"), (6, 7)),
                (2, hm("10:10"), hm("10:12"), (11, 12))]
    assert got(stream, seq) == expected == reference(stream, seq)


def test_long_empty_stretch_is_skipped(env: Env) -> None:
    # 1 s tumbling windows, one element at 10:00, then 5 h of silence closed by punctuation: 18,000 complete
    # windows. The first holds the element; after MAX_EMPTY_RUN empty ones the rest (up to the first
    # incomplete window, k = 18,000) are skipped and counted, not materialized.
    stream = new_stream(env.catalog)
    add(stream, T0)
    seq = register(stream, "R/HEAD/PT01S")
    stream.punctuate(T0 + 5 * 60 * M)
    settle(env, stream)
    revisions = stream.windows.revisions(seq.id)
    assert len(revisions) == 1 + MAX_EMPTY_RUN
    assert revisions[0].runs == ((1, 1),) and revisions[-1].index == MAX_EMPTY_RUN
    assert stream.windows.state.next_index[seq.id] == 18_000
    skipped = env.pipeline.status()["skipped_empty_windows"][f"{stream.config.name}/{seq.id}"]
    assert skipped == 18_000 - 1 - MAX_EMPTY_RUN


def test_two_streams_same_ref_and_unregistered_sequences(env: Env) -> None:
    # The same ref on two streams is one sequence id per stream: runs must not mix across streams.
    a, b = new_stream(env.catalog), new_stream(env.catalog)
    add(a, hm("10:00"))
    add(b, hm("10:00"), hm("10:00") + S)
    seq_a, seq_b = register(a, "R/HEAD/PT01M"), register(b, "R/HEAD/PT01M")
    assert seq_a.id == seq_b.id
    add(a, hm("10:01"))
    add(b, hm("10:01"))
    a.punctuate(hm("10:02"))
    b.punctuate(hm("10:02"))
    settle(env, a)
    settle(env, b)
    assert got(a, seq_a) == [(0, hm("10:00"), hm("10:01"), (1,)), (1, hm("10:01"), hm("10:02"), (2,))]
    assert got(b, seq_b) == [(0, hm("10:00") + S, hm("10:01") + S, (2, 3))]


# --------------------------------------------------------------------------------------- property test


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], int, str]:
    n = draw(st.integers(0, 40))
    gaps = draw(st.lists(st.integers(1, 180), min_size=n, max_size=n))
    times = list(itertools.accumulate(gaps, lambda t, g: t + g * S, initial=T0))[1:]
    split = draw(st.integers(0, n))  # elements before the registration
    form = draw(st.sampled_from(["forward", "backward", "tumbling", "gaps", "count", "count-step"]))
    repeat = draw(st.sampled_from(["R", "R", "R1", "R3"]))
    if form == "count":
        width, step = draw(st.integers(1, 8)), draw(st.integers(1, 4))
        return times, split, f"{repeat}/HEAD~{width - 1}/HEAD/{step}"
    width = draw(st.sampled_from([30, 60, 120, 300]))
    anchor = draw(st.sampled_from(["head", "back", "instant", "ordinal"]))
    if anchor == "back" and split >= 2:
        start = f"HEAD~{draw(st.integers(1, split - 1))}"
    elif anchor == "instant":
        start = format_micros(T0 + draw(st.integers(-300, 900)) * S)
    elif anchor == "ordinal":
        start = str(draw(st.integers(1, n + 2)))  # may arrive after registration, or never
    else:
        start = "HEAD"
    if form == "count-step":
        sign = draw(st.sampled_from(["", "-"]))
        return times, split, f"{repeat}/{start}/{sign}PT{width}S/{draw(st.integers(1, 4))}"
    if form == "tumbling":
        return times, split, f"{repeat}/{start}/PT{width}S"
    step = draw(st.sampled_from([10, 30, 60, 120]))
    if form == "gaps":
        step = width + draw(st.sampled_from([10, 60, 120]))
    sign = "-" if form == "backward" else ""
    return times, split, f"{repeat}/{start}/{sign}PT{width}S/PT{step}S"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios())
def test_pipeline_equals_the_reference(env: Env, scenario: tuple[list[int], int, str]) -> None:
    times, split, ref = scenario
    stream = new_stream(env.catalog, "p")
    add(stream, *times[:split])
    seq = register(stream, ref)
    add(stream, *times[split:])
    stream.punctuate((times[-1] if times else T0) + 10 * M)  # past any window holding an element
    settle(env, stream)
    expected = reference(stream, seq)
    assert got(stream, seq) == expected
    spec = seq.spec
    if spec.origin is None and spec.anchor is not None and stream.time_of(spec.anchor) is not None:
        assert stream.windows.state.origins[seq.id] == stream.time_of(spec.anchor)


# ---------------------------------------------------------------------------------------------- restart


def test_restart_materializes_nothing_twice_and_loses_nothing(tmp_path: Path, env: Env) -> None:
    catalog = StreamCatalog(tmp_path / "streams")
    stream = catalog.put(StreamConfig("restart"))[0]
    times = [T0 + i * 20 * S for i in range(60)]
    add(stream, *times[:5])
    refs = ["R/HEAD/PT01M", "R/HEAD~2/HEAD/1", "R/HEAD/-PT02M/PT30S"]
    sequences = [register(stream, ref) for ref in refs]
    first = WindowPipeline(catalog, tmp_path, SparkSettings(app_name="test-pipeline"))
    first.start()
    try:
        for t in times[5:30]:
            add(stream, t)
        stream.flush()
        assert stream.windows.wait_for_window(sequences[1].id, 5, WAIT) is not None
    finally:
        first.stop()
    batch_before = stream.windows.state.batch
    add(stream, *times[30:45])  # written while no pipeline runs
    second = WindowPipeline(catalog, tmp_path, SparkSettings(app_name="test-pipeline"))
    second.start()
    try:
        add(stream, *times[45:])
        stream.punctuate(times[-1] + 10 * M)
        stream.flush()
        assert second.wait_caught_up(stream, WAIT), second.status()
        assert stream.windows.state.batch > batch_before
    finally:
        second.stop()
        catalog.close()
    lines = (tmp_path / "streams" / "restart" / "windows" / "revisions.jsonl").read_text().splitlines()
    for sequence in sequences:
        result = got(stream, sequence)
        assert [k for k, *_ in result] == list(range(sequence.spec.first, sequence.spec.first + len(result)))
        assert result == reference(stream, sequence) and result
    keys = [(entry["s"], entry["k"]) for entry in map(json.loads, lines)]
    assert len(keys) == len(set(keys))  # no window written twice, even by a replayed batch


def test_replayed_batch_changes_nothing(env: Env) -> None:
    # A batch id the stream already committed (crash after its commit, before Spark's) is skipped.
    stream = new_stream(env.catalog)
    add(stream, hm("10:00"))
    seq = register(stream, "R/HEAD/PT01M")
    add(stream, hm("10:01"), hm("10:02"))
    settle(env, stream)
    before = (got(stream, seq), stream.windows.state.to_json())
    spark = env.pipeline.spark
    assert spark is not None
    rows = [(stream.config.name, "element", 3, None, None, None, None, 0, 0)]
    env.pipeline.apply_batch(spark.createDataFrame(rows, SCHEMA), stream.windows.state.batch)
    assert (got(stream, seq), stream.windows.state.to_json()) == before
    assert len(before[0]) == 2
