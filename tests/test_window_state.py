"""The window core without a JVM (issue 13): ``sparql_ext.window_state.advance`` driven batch by batch as the Spark
pipeline drives it (each batch summarized, the assignable sequences' windows assigned with the same arithmetic),
checked against hand-worked windows and against the reference ``sparql_ext.windowing.windows``.

The hand-worked cases and the property come from ``tests/test_pipeline.py``, which ran them through Spark; the
pipeline there now only summarizes batches, so the semantics are tested here (milliseconds instead of a minute) and
a few end-to-end tests keep Spark in the loop. Times are µs; ``hm("10:05")`` is 2016-06-20T10:05:00Z."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparql_ext.window_state import (
    MAX_EMPTY_RUN,
    BatchSummary,
    Due,
    PipelineState,
    WindowDraft,
    advance,
    assign,
    assignable,
    next_due,
)
from sparql_ext.windowing import Element, ListIndex, WindowSpec, resolve, windows
from sparql_ext.windowref import parse_window_ref

T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z
S = 1_000_000
M = 60 * S

Got = list[tuple[int, int, int, tuple[int, ...]]]  # (k, start, end, ordinals)


def hm(text: str) -> int:
    hours, minutes = text.split(":")
    return T0 + (int(hours) - 10) * 60 * M + int(minutes) * M


def span(first: int, last: int) -> tuple[int, ...]:
    return tuple(range(first, last + 1))


class Index(ListIndex):
    """The stream's element index, with retention's first ordinal."""

    def __init__(self, times: list[int], first_ordinal: int = 1) -> None:
        super().__init__(Element(o, t) for o, t in enumerate(times, start=1))
        self.first_ordinal = first_ordinal


@dataclass(frozen=True)
class Sequence:
    id: str
    spec: WindowSpec


@dataclass
class Simulation:
    """One stream and the pipeline's view of it: records are appended (as uploads and registrations do), batches
    are summarized and advanced (as ``WindowPipeline.apply_batch`` does)."""

    lateness: int = 0
    retention: int | None = None
    times: list[int] = field(default_factory=list)
    records: list[tuple[str, object]] = field(default_factory=list)  # the log: ("element", t) …
    read: int = 0  # records the pipeline has read
    sequences: list[Sequence] = field(default_factory=list)
    state: PipelineState = field(default_factory=PipelineState)
    drafts: dict[str, list[WindowDraft]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    first_ordinal: int = 1

    def add(self, *times: int) -> None:
        for t in times:
            self.times.append(t)
            self.records.append(("element", t))

    def punctuate(self, t: int) -> None:
        self.records.append(("punctuation", t))

    def register(self, ref: str) -> Sequence:
        spec = resolve(parse_window_ref(ref), Index(self.times))
        sequence = Sequence(uuid.uuid4().hex[:8], spec)
        self.sequences.append(sequence)
        self.records.append(("registration", sequence.id))
        self.drafts[sequence.id] = []
        return sequence

    def batch(self, upto: int | None = None) -> None:
        """One micro-batch: the records not read yet (up to ``upto``)."""
        end = len(self.records) if upto is None else upto
        batch, self.read = self.records[self.read:end], end
        if not batch:
            return
        ordinal = sum(1 for kind, _ in self.records[:end - len(batch)] if kind == "element")
        summary, ordinals, times = BatchSummary(), [], []
        for position, (kind, value) in enumerate(batch):
            if kind == "element":
                ordinal += 1
                ordinals.append(ordinal)
                times.append(value)
            elif kind == "punctuation":
                summary.max_punctuation = max(summary.max_punctuation or value, value)  # type: ignore
            else:
                summary.registrations.append((position, value, ordinal))  # type: ignore[arg-type]
        if ordinals:
            summary.max_ordinal, summary.max_time = max(ordinals), max(times)
        # what the pipeline's source is told: records that do not reach it complete no window (checked below)
        due = next_due(self.state, self.sequences, Index(self.times), self.lateness)
        reaches = due is None or any(kind != "element" for kind, _ in batch) or any(
            (due.time is not None and t >= due.time) or (due.ordinal is not None and o >= due.ordinal)
            for o, t in zip(ordinals, times, strict=True))
        assigned = assignable(self.state, self.sequences)
        for ident, row in assigned.items():  # the batch job: the same arithmetic as pipeline/assignment.py
            runs, spans = assign(row, np.array(ordinals, np.int64), np.array(times, np.int64))
            summary.runs[ident] = runs
            if spans:
                summary.spans[ident] = spans
        # the index may be ahead of what the pipeline read (uploads go on): decisions must not depend on it
        step = advance(self.state, summary, self.sequences, Index(self.times, self.first_ordinal),
                       assigned=assigned, lateness=self.lateness, retention=self.retention)
        self.state = step.state
        assert reaches or not step.windows, (due, batch, step.windows)
        for draft in step.windows:
            self.drafts[draft.sequence].append(draft)
        for ident, count in step.skipped.items():
            self.skipped[ident] = self.skipped.get(ident, 0) + count
        if step.expire_before is not None:
            self.first_ordinal = step.expire_before

    def state_and_sequences(self) -> tuple[PipelineState, list[Sequence], Index]:
        return self.state, self.sequences, Index(self.times)

    def got(self, sequence: Sequence) -> Got:
        return [(d.index, d.start, d.end, tuple(o for a, b in d.runs for o in range(a, b + 1)))
                for d in self.drafts[sequence.id]]

    def reference(self, sequence: Sequence) -> Got:
        spec = sequence.spec
        if spec.origin is None and sequence.id in self.state.origins:
            spec = replace(spec, origin=self.state.origins[sequence.id])
        return [(w.index, w.start, w.end, w.elements)
                for w in windows(spec, Index(self.times), self.state.watermark)]


# -- hand-worked windows (the cases of tests/test_pipeline.py, worked out there) --------------------------------

ALL_MINUTES = [hm(f"10:{m:02d}") for m in range(13)]  # 10:00..10:12 = ordinals 1..13


@dataclass
class Case:
    ref: str
    before: list[int]
    phases: list[tuple[list[int], int | None]]  # (elements, punctuation or None): one batch each
    expected: list[Got]  # windows after each phase (cumulative)


def forward(ks: range) -> Got:
    """[10:00+k, 10:05+k) holds minutes k..k+4 = ordinals k+1..k+5."""
    return [(k, hm(f"10:{k:02d}"), hm(f"10:{k + 5:02d}"), span(k + 1, k + 5)) for k in ks]


CASES: dict[str, Case] = {
    # One element at 10:00 (ordinal 1) when registered: t0 = 10:00, window k = [10:00+k min, 10:05+k min).
    # Then 10:01..10:12 (ordinals 2..13) and punctuation 10:13: watermark 10:13, complete while
    # 10:05+k ≤ 10:13, k = 0..8; window k holds minutes k..k+4 = ordinals k+1..k+5.
    "forward": Case("R/HEAD/PT05M/PT01M", ALL_MINUTES[:1], [(ALL_MINUTES[1:], hm("10:13"))], [forward(range(9))]),
    # Backward: window k = (10:00+k−5, 10:00+k], k ≥ 1; same data, watermark 10:13: k = 1..13.
    # k ≤ 4 reach back before 10:00: ordinals 1..k+1; k ≥ 5: minutes k−4..k = ordinals k−3..k+1,
    # capped at 13 (k=13: (10:08, 10:13] = minutes 9..12 = ordinals 10..13).
    "backward": Case("R/HEAD/-PT05M/PT01M", ALL_MINUTES[:1], [(ALL_MINUTES[1:], hm("10:13"))], [[
        (k, T0 + (k - 5) * M, T0 + k * M, span(max(1, k - 3), min(13, k + 1))) for k in range(1, 14)]]),
    # Tumbling: [10:00,10:05) = 1..5, [10:05,10:10) = 6..10; [10:10,10:15) waits (watermark 10:13)
    # until punctuation 10:15 closes it with minutes 10..12 = ordinals 11..13.
    "tumbling": Case("R/HEAD/PT05M", ALL_MINUTES[:1], [(ALL_MINUTES[1:], hm("10:13")), ([], hm("10:15"))], [
        [(0, hm("10:00"), hm("10:05"), span(1, 5)), (1, hm("10:05"), hm("10:10"), span(6, 10))],
        [(0, hm("10:00"), hm("10:05"), span(1, 5)), (1, hm("10:05"), hm("10:10"), span(6, 10)),
         (2, hm("10:10"), hm("10:15"), span(11, 13))],
    ]),
    # Gaps: [10:00+5k, 10:01+5k), one minute in five; complete while 10:01+5k ≤ 10:13: k = 0, 1, 2.
    "gaps": Case("R/HEAD/PT01M/PT05M", ALL_MINUTES[:1], [(ALL_MINUTES[1:], hm("10:13"))], [[
        (0, hm("10:00"), hm("10:01"), (1,)), (1, hm("10:05"), hm("10:06"), (6,)), (2, hm("10:10"), hm("10:11"), (11,)),
    ]]),
    # Count: ten elements 10:00..10:09 exist, HEAD = 10, HEAD~9 = 1: window k = ordinals 1+k..10+k.
    # Window 0 is complete from history alone; ordinals 11..13 complete windows 1..3 (no punctuation needed).
    "count": Case("R/HEAD~9/HEAD/1", ALL_MINUTES[:10], [([], None), (ALL_MINUTES[10:], None)], [
        [(0, 1, 10, span(1, 10))],
        [(0, 1, 10, span(1, 10)), (1, 2, 11, span(2, 11)), (2, 3, 12, span(3, 12)), (3, 4, 13, span(4, 13))],
    ]),
    # R3: windows 0..2 only, [10:00+k, 10:02+k) = {1,2}, {2,3}, {3,4}; nothing after, whatever the watermark.
    "R3": Case("R3/HEAD/PT02M/PT01M", ALL_MINUTES[:1], [(ALL_MINUTES[1:], hm("10:13"))], [[
        (0, hm("10:00"), hm("10:02"), (1, 2)), (1, hm("10:01"), hm("10:03"), (2, 3)),
        (2, hm("10:02"), hm("10:04"), (3, 4)),
    ]]),
    # Anchored in the past, registered after 10:00..10:06 (ordinals 1..7): stream time 10:06 completes
    # windows 0 and 1 from history alone; live 10:07..10:12 and punctuation 10:13 then give 2..8.
    "history": Case("R/2016-06-20T10:00:00Z/PT05M/PT01M", ALL_MINUTES[:7],
                    [([], None), (ALL_MINUTES[7:], hm("10:13"))], [forward(range(2)), forward(range(9))]),
    # Empty stream: HEAD is the first element to come; t0 is pending (no window) until 10:00 arrives.
    "empty": Case("R/HEAD/PT05M/PT01M", [], [([], None), (ALL_MINUTES, hm("10:13"))], [[], forward(range(9))]),
    # Time width, count step (windows placed at completion): a 2-minute window at every 5th element from
    # ordinal 1: [10:00,10:02) = 1,2; ordinal 6 (10:05): 6,7; ordinal 11 (10:10): 11,12; all complete at 10:13.
    "count-step": Case("R/HEAD/PT02M/5", ALL_MINUTES[:1], [(ALL_MINUTES[1:], hm("10:13"))], [[
        (0, hm("10:00"), hm("10:02"), (1, 2)), (1, hm("10:05"), hm("10:07"), (6, 7)),
        (2, hm("10:10"), hm("10:12"), (11, 12)),
    ]]),
    # Sessions with a 3-minute gap from 10:00 (ordinal 1): 10:00, 10:01, 10:02 | 10:06 (4 after 10:02), 10:07 |
    # 10:15 (8 after 10:07). Window k = [its first time, its last + 3 min): [10:00, 10:05) completes at stream time
    # 10:07; [10:06, 10:10) once 10:15 is read; [10:15, 10:18) with the punctuation 10:20.
    "session": Case("R/HEAD/SESSION/PT03M", ALL_MINUTES[:1], [
        ([hm("10:01"), hm("10:02"), hm("10:06"), hm("10:07")], None), ([hm("10:15")], None), ([], hm("10:20"))], [
        [(0, hm("10:00"), hm("10:05"), (1, 2, 3))],
        [(0, hm("10:00"), hm("10:05"), (1, 2, 3)), (1, hm("10:06"), hm("10:10"), (4, 5))],
        [(0, hm("10:00"), hm("10:05"), (1, 2, 3)), (1, hm("10:06"), hm("10:10"), (4, 5)),
         (2, hm("10:15"), hm("10:18"), (6,))],
    ]),
}


def run_case(case: Case) -> tuple[Simulation, Sequence, list[Got]]:
    sim = Simulation()
    sim.add(*case.before)
    sim.batch()
    sequence = sim.register(case.ref)
    snapshots = []
    for elements, punctuation in case.phases:
        sim.add(*elements)
        if punctuation is not None:
            sim.punctuate(punctuation)
        sim.batch()
        snapshots.append(sim.got(sequence))
    return sim, sequence, snapshots


@pytest.mark.parametrize("name", list(CASES))
def test_hand_worked(name: str) -> None:
    case = CASES[name]
    sim, sequence, snapshots = run_case(case)
    assert snapshots == case.expected
    assert snapshots[-1] == sim.reference(sequence)


def test_pending_origin_binds_to_the_first_element() -> None:
    sim = Simulation()
    sequence = sim.register("R/HEAD/PT05M/PT01M")
    sim.batch()
    assert sequence.spec.origin is None and sequence.spec.anchor == 1 and sequence.id not in sim.state.origins
    assert assignable(sim.state, sim.sequences) == {}  # pending: nothing to assign
    sim.add(hm("10:00"))
    sim.batch()
    assert sim.state.origins[sequence.id] == hm("10:00")


def test_next_due_is_the_end_of_the_next_window() -> None:
    # forward 5-minute windows every minute from 10:00; 10:00..10:03 read: window 0 = [10:00, 10:05) is next
    sim = Simulation()
    sim.add(hm("10:00"))
    sequence = sim.register("R/HEAD/PT05M/PT01M")
    sim.add(hm("10:01"), hm("10:02"), hm("10:03"))
    sim.batch()
    index = Index(sim.times)
    assert next_due(sim.state, sim.sequences, index) == Due(hm("10:05"), None)
    assert next_due(sim.state, sim.sequences, index, lateness=30 * S) == Due(hm("10:05") + 30 * S, None)
    sim.add(hm("10:05"))  # completes window 0; window 1 = [10:01, 10:06) is next
    sim.batch()
    assert [k for k, *_ in sim.got(sequence)] == [0]
    assert next_due(sim.state, sim.sequences, Index(sim.times)) == Due(hm("10:06"), None)
    # 10:06..10:10 (ordinals 6..10) complete windows 1..5 (ends 10:06..10:10): window 6 ends at 10:11. A count
    # sequence beside it, registered once ten elements exist: HEAD~9..HEAD = ordinals 1..10 is window 0, complete
    # at once; window 1 is ordinals 2..11, due at ordinal 11
    sim.add(*[hm(f"10:{m:02d}") for m in range(6, 11)])
    sim.register("R/HEAD~9/HEAD/1")
    sim.batch()
    assert next_due(sim.state, sim.sequences, Index(sim.times)) == Due(hm("10:11"), 11)


def test_next_due_cannot_tell_a_pending_origin_or_a_count_step_and_ignores_finished_sequences() -> None:
    pending = Simulation()
    pending.register("R/HEAD/PT05M")  # an empty stream: t0 waits for the first element
    pending.batch()
    assert next_due(pending.state, pending.sequences, Index(pending.times)) is None
    assert next_due(*run_case(CASES["count-step"])[0].state_and_sequences()) is None
    finished, _, _ = run_case(CASES["R3"])
    assert next_due(*finished.state_and_sequences()) == Due(None, None)  # R3: its three windows are out
    assert next_due(PipelineState(), [], Index([])) == Due(None, None)


def test_session_windows_batch_by_batch() -> None:
    # the "session" case one record per batch: the open window's latest time carries from batch to batch
    sim, sequence, _ = run_case(CASES["session"])
    one_by_one = Simulation()
    one_by_one.add(hm("10:00"))
    again = one_by_one.register("R/HEAD/SESSION/PT03M")
    one_by_one.add(hm("10:01"), hm("10:02"), hm("10:06"), hm("10:07"), hm("10:15"))
    one_by_one.punctuate(hm("10:20"))
    for upto in range(1, len(one_by_one.records) + 1):
        one_by_one.batch(upto=upto)
    assert one_by_one.got(again) == sim.got(sequence) == CASES["session"].expected[-1]
    assert sequence.id not in sim.state.spans  # every window materialized: nothing open is kept


def test_session_next_due_is_the_open_window_plus_the_gap() -> None:
    sim = Simulation()
    sim.add(hm("10:00"))
    sim.register("R/HEAD/SESSION/PT03M")
    sim.add(hm("10:01"))
    sim.batch()
    # window 0 holds 10:00, 10:01: it ends 3 minutes after 10:01 unless an element comes before
    assert next_due(*sim.state_and_sequences()) == Due(hm("10:04"), None)
    sim.add(hm("10:03"))
    sim.batch()
    assert next_due(*sim.state_and_sequences()) == Due(hm("10:06"), None)
    sim.punctuate(hm("10:06"))
    sim.batch()
    assert [k for k, *_ in sim.got(sim.sequences[0])] == [0]
    # no window open: one batch may hold the element opening the next and one a gap later that completes it, so
    # anything from t0 (10:00) plus the gap may complete a window
    assert next_due(*sim.state_and_sequences()) == Due(hm("10:03"), None)


def test_session_windows_with_lateness() -> None:
    # lateness 2 minutes, gap 3: 10:00 | 10:05, 10:04 (late: not 3 minutes after 10:05, it joins), | 10:09 (4 after
    # 10:05). Window 0 [10:00, 10:03) completes when 10:05 is read (watermark 10:03), before 10:04 arrives.
    sim = Simulation(lateness=2 * M)
    sim.add(hm("10:00"))
    sequence = sim.register("R/HEAD/SESSION/PT03M")
    sim.add(hm("10:05"))
    sim.batch()
    assert sim.got(sequence) == [(0, hm("10:00"), hm("10:03"), (1,))]
    sim.add(hm("10:04"), hm("10:09"))
    sim.punctuate(hm("10:20"))
    sim.batch()
    assert sim.got(sequence) == [(0, hm("10:00"), hm("10:03"), (1,)), (1, hm("10:04"), hm("10:08"), (2, 3)),
                                 (2, hm("10:09"), hm("10:12"), (4,))] == sim.reference(sequence)


def test_retention_keeps_the_open_session_window() -> None:
    # Retention 1 minute, sessions with a 3-minute gap from 10:00: 10:00 | 10:04, 10:05, 10:06 (open: it ends 3
    # minutes after 10:06). Stream time − retention = 10:05, but the open window needs ordinal 2 (10:04) on: only
    # ordinal 1, in the materialized window [10:00, 10:03), expires.
    sim = Simulation(retention=M)
    sim.add(hm("10:00"))
    sim.register("R/HEAD/SESSION/PT03M")
    sim.add(hm("10:04"), hm("10:05"), hm("10:06"))
    sim.batch()
    assert [k for k, *_ in sim.got(sim.sequences[0])] == [0] and sim.first_ordinal == 2


def test_bounded_sequence_stops() -> None:
    sim, sequence, _ = run_case(CASES["R3"])
    assert sim.state.next_index[sequence.id] == 3 and sequence.id not in sim.state.open
    assert sim.state.watermark == hm("10:13")


def test_long_empty_stretch_is_skipped() -> None:
    # 1 s tumbling windows, one element at 10:00, then 5 h of silence closed by punctuation: 18,000 complete
    # windows. The first holds the element; after MAX_EMPTY_RUN empty ones the rest (up to the first
    # incomplete window, k = 18,000) are skipped and counted, not materialized.
    sim = Simulation()
    sim.add(T0)
    sequence = sim.register("R/HEAD/PT01S")
    sim.punctuate(T0 + 5 * 60 * M)
    sim.batch()
    drafts = sim.drafts[sequence.id]
    assert len(drafts) == 1 + MAX_EMPTY_RUN
    assert drafts[0].runs == ((1, 1),) and drafts[-1].index == MAX_EMPTY_RUN
    assert sim.state.next_index[sequence.id] == 18_000
    assert sim.skipped[sequence.id] == 18_000 - 1 - MAX_EMPTY_RUN


def test_a_registration_before_its_row_is_read_is_not_live() -> None:
    # The log orders a registration among the elements: until the batch holding its row is read the sequence is
    # not live, whatever the store knows.
    sim = Simulation()
    sim.add(hm("10:00"))
    sequence = sim.register("R/HEAD/PT01M")
    sim.add(hm("10:01"), hm("10:03"))
    sim.batch(upto=1)  # the element only
    assert sequence.id not in sim.state.next_index and sim.got(sequence) == []
    sim.batch()
    assert sim.got(sequence) == [(0, hm("10:00"), hm("10:01"), (1,)), (1, hm("10:01"), hm("10:02"), (2,)),
                                 (2, hm("10:02"), hm("10:03"), ())]


def test_retention_expires_what_no_window_needs() -> None:
    # Retention 2 minutes, 1-minute tumbling windows from 10:00. After 10:00..10:05 (ordinals 1..6) and the
    # windows up to [10:04, 10:05) complete (watermark 10:05), the open window is [10:05, 10:06) (needs ordinal 6)
    # and stream time − retention = 10:03: ordinals 1..3 (10:00..10:02) expire, 4 (10:03) stays.
    sim = Simulation(retention=2 * M)
    sim.add(hm("10:00"))
    sim.register("R/HEAD/PT01M")
    sim.add(*[hm(f"10:{m:02d}") for m in range(1, 6)])
    sim.batch()
    assert sim.first_ordinal == 4


def test_the_same_records_in_any_batches_give_the_same_windows() -> None:
    records = [hm(f"10:{m:02d}") for m in range(0, 30, 2)]
    results = []
    for cuts in ([], [3], [1, 2, 3, 4, 5, 6, 7, 8], [10]):
        sim = Simulation()
        sim.add(records[0])
        sequence = sim.register("R/HEAD/PT05M/PT01M")
        sim.add(*records[1:])
        sim.punctuate(hm("10:40"))
        for cut in cuts:
            sim.batch(upto=cut)
        sim.batch()
        results.append(sim.got(sequence))
    assert all(result == results[0] for result in results) and results[0] == sim.reference(sequence)


# -- the property: any stream, any ref, any batching: the reference's windows -----------------------------------

@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], int, str, list[int]]:
    n = draw(st.integers(0, 40))
    gaps = draw(st.lists(st.integers(1, 180), min_size=n, max_size=n))
    times = list(itertools.accumulate(gaps, lambda t, g: t + g * S, initial=T0))[1:]
    split = draw(st.integers(0, n))  # elements before the registration
    cuts = sorted(draw(st.lists(st.integers(0, n + 2), max_size=6)))  # batch boundaries (record positions)
    form = draw(st.sampled_from(["forward", "backward", "tumbling", "gaps", "count", "count-step", "session"]))
    repeat = draw(st.sampled_from(["R", "R", "R1", "R3"]))
    if form == "count":
        width, step = draw(st.integers(1, 8)), draw(st.integers(1, 4))
        return times, split, f"{repeat}/HEAD~{width - 1}/HEAD/{step}", cuts
    width = draw(st.sampled_from([30, 60, 120, 300]))
    anchor = draw(st.sampled_from(["head", "back", "instant", "ordinal"]))
    if anchor == "back" and split >= 2:
        start = f"HEAD~{draw(st.integers(1, split - 1))}"
    elif anchor == "instant":
        start = draw(st.sampled_from(["2016-06-20T09:55:00Z", "2016-06-20T10:00:00Z", "2016-06-20T10:07:30Z",
                                      "2016-06-20T10:15:00Z"]))
    elif anchor == "ordinal":
        start = str(draw(st.integers(1, n + 2)))  # may arrive after registration, or never
    else:
        start = "HEAD"
    if form == "count-step":
        sign = draw(st.sampled_from(["", "-"]))
        return times, split, f"{repeat}/{start}/{sign}PT{width}S/{draw(st.integers(1, 4))}", cuts
    if form == "tumbling":
        return times, split, f"{repeat}/{start}/PT{width}S", cuts
    if form == "session":
        return times, split, f"{repeat}/{start}/SESSION/PT{width}S", cuts
    step = draw(st.sampled_from([10, 30, 60, 120]))
    if form == "gaps":
        step = width + draw(st.sampled_from([10, 60, 120]))
    sign = "-" if form == "backward" else ""
    return times, split, f"{repeat}/{start}/{sign}PT{width}S/PT{step}S", cuts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios())
# a session opened and completed by one batch (10:00:01 … 10:00:21, then 10:00:51, a 30 s gap later): next_due
# must let that batch through although no session was open before it
@example(scenario=([1_466_416_800_000_000 + s * 1_000_000 for s in [*range(1, 22), 51]], 0,
                   "R/2016-06-20T09:55:00Z/SESSION/PT30S", [1, 23]))
def test_the_core_equals_the_reference(scenario: tuple[list[int], int, str, list[int]]) -> None:
    times, split, ref, cuts = scenario
    sim = Simulation()
    sim.add(*times[:split])
    sequence = sim.register(ref)
    sim.add(*times[split:])
    sim.punctuate((times[-1] if times else T0) + 10 * M)  # past any window holding an element
    for cut in cuts:
        if cut > sim.read:
            sim.batch(upto=min(cut, len(sim.records)))
    sim.batch()
    assert sim.got(sequence) == sim.reference(sequence)
    spec = sequence.spec
    if spec.origin is None and spec.anchor is not None and spec.anchor <= len(times):
        assert sim.state.origins[sequence.id] == times[spec.anchor - 1]
