"""The window core: one pure step of the continuous pipeline (windows and when they are complete:
``sparql_ext.windowing``).

What the Spark job does per micro-batch is *summarize* it: per stream, the largest element ordinal and timestamp
read, the latest punctuation, the sequence registrations read, and for each assignable sequence the windows k
each element of the batch falls in (its kind's ``AssignmentRow``: ``assign_ranges`` is the arithmetic
Spark runs, on numpy arrays). Everything else is
:func:`advance`, a pure function of the pipeline's state, that summary, the registered sequences and the stream's
element index:

1. registrations read make their sequences *live* (the log orders a registration among the elements: what came
   before it is history, what comes after it is live); a live time sequence whose ``HEAD`` anchor has arrived
   binds its t0;
2. a sequence that became assignable in this batch is assigned its history, every element read so far, from
   the index (``history_runs``: the same arithmetic over the index's elements);
3. the assignments join the open windows, stream time and the watermark advance;
4. every window that is now complete is materialized (``WindowDraft``), in order of k; a long empty stretch is
   skipped rather than emitted window by window;
5. retention: the first ordinal every open or future window can still need (``expiry_cut``).

Decisions use only what the pipeline has read (``PipelineState.seen`` / ``stream_time``), never the stream's live
head, so a batch replayed after a crash decides exactly as before. The windows produced are those of
:func:`sparql_ext.windowing.windows` (the reference) with the same watermark; ``tests/test_window_state.py``
checks that without a JVM.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as Sequences
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from sparql_ext.window_data import (
    AssignmentRow,
    OpenRuns,
    OpenSpans,
    Runs,
    SequenceRuns,
    SequenceSpans,
    fold_runs,
    fold_spans,
    merge_runs,
    merge_spans,
    runs_of,
)
from sparql_ext.window_kinds import KINDS
from sparql_ext.windowing import ElementIndex, WindowSpec, window

#: Consecutive empty windows one sequence may emit in one batch before the rest of the empty stretch is
#: skipped (a stream quiet for a day under a 1 s step would otherwise emit 86,400 empty revisions at once).
MAX_EMPTY_RUN = 10_000


@dataclass
class PipelineState:
    """What the pipeline must remember between batches (and across restarts), per stream."""

    batch: int = -1  # last Spark batch id applied
    watermark: int | None = None  # stream time known to have passed, µs
    open: dict[str, OpenRuns] = field(default_factory=dict)  # sequence -> k -> runs
    next_index: dict[str, int] = field(default_factory=dict)  # sequence -> next window to materialize
    origins: dict[str, int] = field(default_factory=dict)  # sequence -> t0 bound after registration
    # The pipeline's own view of the log, so that a replayed batch decides exactly as the first run did
    # (the stream index may be ahead of what the pipeline has read):
    stream_time: int | None = None  # max element timestamp or punctuation read so far, µs
    seen: int = 0  # last element ordinal read so far (count windows complete against it)
    spans: SequenceSpans = field(default_factory=dict)  # sequence -> k -> open window's times (session windows)

    def to_json(self) -> dict[str, object]:
        return {"batch": self.batch, "watermark": self.watermark, "next_index": self.next_index,
                "origins": self.origins, "stream_time": self.stream_time, "seen": self.seen,
                "open": {seq: {str(k): runs for k, runs in ws.items()} for seq, ws in self.open.items()},
                "spans": {seq: {str(k): span for k, span in ws.items()} for seq, ws in self.spans.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PipelineState:
        opened = {seq: {int(k): runs for k, runs in ws.items()}
                  for seq, ws in data.get("open", {}).items()}  # type: ignore[attr-defined]
        spans = {seq: {int(k): span for k, span in ws.items()}
                 for seq, ws in data.get("spans", {}).items()}  # type: ignore[attr-defined]
        return cls(data["batch"], data.get("watermark"), opened, dict(data.get("next_index", {})),  # type: ignore
                   dict(data.get("origins", {})), data.get("stream_time"), data.get("seen", 0), spans)  # type: ignore


@dataclass
class BatchSummary:
    """What one micro-batch holds for one stream."""

    max_ordinal: int | None = None
    max_time: int | None = None
    max_punctuation: int | None = None
    registrations: list[tuple[int, str, int]] = field(default_factory=list)  # (log position, sequence, h)
    runs: SequenceRuns = field(default_factory=dict)  # the batch's elements in windows of assignable sequences
    spans: SequenceSpans = field(default_factory=dict)  # their times per window, for session windows


class RegisteredSequence(Protocol):
    """A sequence as the store keeps it (``store.windows.Sequence``)."""

    @property
    def id(self) -> str: ...

    @property
    def spec(self) -> WindowSpec: ...


class StreamIndex(ElementIndex, Protocol):
    """The element index of a stream with retention: ordinals below ``first_ordinal`` have expired."""

    @property
    def first_ordinal(self) -> int: ...


@dataclass(frozen=True)
class WindowDraft:
    """A window that became complete: the store gives it a commit time and a UUID when it commits it."""

    sequence: str
    index: int
    start: int  # µs (time windows) or ordinal (count windows)
    end: int
    runs: Runs


@dataclass
class Step:
    """The result of one ``advance``: the state to commit, the windows that completed, and retention's cut."""

    state: PipelineState
    windows: list[WindowDraft]
    expire_before: int | None = None  # drop elements with ordinals below it (None: nothing expires)
    skipped: dict[str, int] = field(default_factory=dict)  # sequence -> empty windows skipped in this batch


def bound_spec(spec: WindowSpec, state: PipelineState, ident: str) -> WindowSpec | None:
    """The spec with the origin the pipeline bound (``None`` while it is pending)."""
    if spec.origin is not None:
        return spec
    if ident in state.origins:
        return replace(spec, origin=state.origins[ident])
    return None


def assignable(state: PipelineState, sequences: Iterable[RegisteredSequence]) -> dict[str, AssignmentRow]:
    """The sequences the batch job assigns elements to, as its rows: live (registration read), t0 bound, and of a
    kind it assigns (a time width with a count step, whose window starts at every step-th element, is placed at
    completion from the index instead)."""
    result = {}
    for sequence in sequences:
        spec = bound_spec(sequence.spec, state, sequence.id)
        if sequence.id in state.next_index and spec is not None:
            row = spec.window_kind.row(state.next_index[sequence.id], state.spans.get(sequence.id, {}))
            if row is not None:
                result[sequence.id] = row
    return result


@dataclass(frozen=True)
class Due:
    """When a stream's next window can complete: an element read with a timestamp ≥ ``time`` (µs) or an ordinal ≥
    ``ordinal`` (``None``: no window of that kind is waiting). Other records (a punctuation, a registration) may
    complete or start windows whatever they hold."""

    time: int | None
    ordinal: int | None


def next_due(state: PipelineState, sequences: Iterable[RegisteredSequence], index: ElementIndex,
             lateness: int = 0) -> Due | None:
    """What the stream's records must reach before the next ``advance`` can complete a window, as of ``state``
    (lets the pipeline start a batch at once for the element that completes a window, and wait for the others).

    A time window k completes when the watermark (stream time − ``lateness``) reaches its end, a count window when
    its last ordinal is read (``_complete``): the earliest of those over the next window of each live sequence
    (its kind's ``due``). A sequence registered but not read yet is left out (its registration record comes first).
    ``None`` when it cannot be told from a timestamp or an ordinal: a t0 that waits for its anchor, a time width
    with a count step.
    """
    due_time: int | None = None
    due_ordinal: int | None = None
    for sequence in sequences:
        if sequence.id not in state.next_index:
            continue
        spec = bound_spec(sequence.spec, state, sequence.id)
        if spec is None:
            return None
        k = state.next_index[sequence.id]
        if spec.count is not None and k >= spec.first + spec.count:
            continue  # every window of the sequence was materialized
        due = spec.window_kind.due(k, index, lateness, state.spans.get(sequence.id, {}))
        if due is None:
            return None
        if due[0] is not None:
            due_time = due[0] if due_time is None else min(due_time, due[0])
        if due[1] is not None:
            due_ordinal = due[1] if due_ordinal is None else min(due_ordinal, due[1])
    return Due(due_time, due_ordinal)


# -- assignment: the arithmetic the Spark job runs, on numpy arrays --------------------------------------------

def assign_ranges(row: AssignmentRow, ordinals: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The batch job's arithmetic on numpy arrays (``pipeline/assignment.py`` runs it in Spark SQL): per element, in
    ordinal order, the windows ``lo..hi`` of the row's sequence holding it (none where ``lo > hi``)."""
    return KINDS[row.kind].ranges(row, ordinals, times)


def assign(row: AssignmentRow, ordinals: np.ndarray, times: np.ndarray) -> tuple[OpenRuns, OpenSpans]:
    """The elements (in ordinal order) in the windows of one sequence: runs per window k, and for kinds that keep
    spans each window's earliest and latest time (what the batch job gives the step for that sequence)."""
    lo, hi = assign_ranges(row, ordinals, times)
    return fold_runs(ordinals, lo, hi), (fold_spans(times, lo, hi) if KINDS[row.kind].keeps_spans else {})


def history_runs(spec: WindowSpec, row: AssignmentRow, index: StreamIndex, last: int, lateness: int
                 ) -> tuple[OpenRuns, OpenSpans]:
    """The windows of a sequence that became assignable (as ``row``), over every element read so far (up to
    ``last``)."""
    span = history_range(spec, index, last, lateness)
    if span is None:
        return {}, {}
    found = index.elements(*span)
    ordinals = np.fromiter((e.ordinal for e in found), np.int64, len(found))
    times = np.fromiter((e.time for e in found), np.int64, len(found))
    return assign(row, ordinals, times)


def history_range(spec: WindowSpec, index: StreamIndex, last: int, lateness: int) -> tuple[int, int] | None:
    """Ordinals of the index to assign as history: from the first window's start up to ``last``."""
    if last < 1:
        return None
    assert spec.origin is not None
    lo = max(spec.window_kind.history_start(index, lateness), index.first_ordinal)
    return (lo, last) if lo <= last else None


# -- the step ------------------------------------------------------------------------------------------------------

def advance(state: PipelineState, summary: BatchSummary, sequences: Sequences[RegisteredSequence], index: StreamIndex,
            *, assigned: Iterable[str], lateness: int = 0, retention: int | None = None) -> Step:
    """One batch of one stream (see the module doc). ``assigned``: the sequences the batch job assigned
    (``assignable`` before the job); ``sequences``: every sequence registered on the stream now. The given
    state is not modified."""
    state = copy.deepcopy(state)
    registered = {sequence.id: sequence for sequence in sequences}
    state.seen = max(state.seen, summary.max_ordinal or 0)
    for retired in [ident for ident in {*state.open, *state.spans} if ident not in registered]:
        state.open.pop(retired, None)  # its next_index stays: its revisions remain readable by id
        state.spans.pop(retired, None)
    for _, ident, _head in summary.registrations:
        if ident in registered and ident not in state.next_index:
            state.next_index[ident] = registered[ident].spec.first
    specs = _live_specs(state, sequences, index)
    runs: SequenceRuns = {ident: dict(by_k) for ident, by_k in summary.runs.items()}
    already = set(assigned)
    for ident, spec in specs.items():
        row = None if ident in already else spec.window_kind.row(state.next_index[ident], {})
        if row is not None:
            # became assignable in this batch (registration read, or t0 bound): every element read so far,
            # this batch's included, is its history
            history, spans = history_runs(spec, row, index, state.seen, lateness)
            for k, new in history.items():
                into = runs.setdefault(ident, {})
                into[k] = merge_runs(into.get(k, []), new)
            if spans:
                merge_spans(state.spans.setdefault(ident, {}), spans)
    for ident, by_k in runs.items():
        opened = state.open.setdefault(ident, {})
        for k, new in by_k.items():
            opened[k] = merge_runs(opened.get(k, []), new)
    for ident, by_k_spans in summary.spans.items():
        merge_spans(state.spans.setdefault(ident, {}), by_k_spans)
    times = [t for t in (state.stream_time, summary.max_time, summary.max_punctuation) if t is not None]
    if times:
        state.stream_time = max(times)
        state.watermark = state.stream_time - lateness
    drafts: list[WindowDraft] = []
    skipped: dict[str, int] = {}
    for ident, spec in specs.items():
        drafts.extend(_materialize(state, ident, spec, index, skipped))
    cut = expiry_cut(state, sequences, index, lateness, retention)
    return Step(state, drafts, cut, skipped)


def _live_specs(state: PipelineState, sequences: Sequences[RegisteredSequence], index: StreamIndex
                ) -> dict[str, WindowSpec]:
    """Live sequences with their bound spec; a HEAD anchor read by now binds t0 (recorded in the state)."""
    specs: dict[str, WindowSpec] = {}
    for sequence in sequences:
        ident = sequence.id
        if ident not in state.next_index:
            continue  # registration row not read yet: not live
        spec = bound_spec(sequence.spec, state, ident)
        anchor = sequence.spec.anchor
        if spec is None and anchor is not None and anchor <= state.seen and (t0 := index.time_of(anchor)) is not None:
            state.origins[ident] = t0
            spec = replace(sequence.spec, origin=t0)
        if spec is not None:
            specs[ident] = spec
    return specs


def _complete(spec: WindowSpec, ident: str, k: int, index: ElementIndex, state: PipelineState) -> bool:
    """``windowing.is_complete`` with the pipeline's own head (count windows) and open windows (session windows),
    for deterministic replays."""
    return spec.window_kind.read_complete(k, index, state.watermark, state.seen, state.spans.get(ident, {}))


def _materialize(state: PipelineState, ident: str, spec: WindowSpec, index: ElementIndex,
                 skipped: dict[str, int]) -> list[WindowDraft]:
    """Every window of one sequence that became complete, in order of k, popped from the open windows."""
    out: list[WindowDraft] = []
    opened = state.open.setdefault(ident, {})
    spans = state.spans.get(ident, {})
    k = state.next_index[ident]
    limit = None if spec.count is None else spec.first + spec.count
    by_job = spec.window_kind.row(k, spans) is not None
    empty_run = 0
    while (limit is None or k < limit) and _complete(spec, ident, k, index, state):
        if not by_job:
            # not assigned by the batch job (a window starts at every step-th element): its members are read from
            # the index; complete means the watermark passed its end, so every member has been read already
            found = window(spec, k, index)
            assert found is not None
            start, end, members = found.start, found.end, runs_of(found.elements)
            opened.pop(k, None)
        else:
            window_bounds = spec.window_kind.read_bounds(k, index, spans)
            assert window_bounds is not None
            start, end = window_bounds
            members = tuple((first, last) for first, last in opened.pop(k, []))
            spans.pop(k, None)
        if not members:
            empty_run += 1
            if empty_run > MAX_EMPTY_RUN:
                target = _skip_target(spec, k, opened, state, limit)
                if target > k:
                    skipped[ident] = skipped.get(ident, 0) + target - k
                    k, empty_run = target, 0
                    continue
        else:
            empty_run = 0
        out.append(WindowDraft(ident, k, start, end, members))
        k += 1
    state.next_index[ident] = k
    for stale in [j for j in opened if j < k]:  # cannot happen within the lateness rules; keep the state small
        del opened[stale]
    if not opened:
        state.open.pop(ident, None)
    if not spans:
        state.spans.pop(ident, None)
    return out


def _skip_target(spec: WindowSpec, k: int, opened: OpenRuns, state: PipelineState, limit: int | None) -> int:
    """After a long empty stretch of a sequence whose bounds are arithmetic in time: the next window holding an
    element read so far, or the first window not complete yet — every complete window in between is empty."""
    first_incomplete = None if state.watermark is None else spec.window_kind.first_incomplete(state.watermark)
    if first_incomplete is None:
        return k
    target = min([first_incomplete] + [j for j in opened if j > k])
    return max(k, target if limit is None else min(target, limit))


# -- retention -----------------------------------------------------------------------------------------------------

def expiry_cut(state: PipelineState, sequences: Sequences[RegisteredSequence], index: StreamIndex, lateness: int,
               retention: int | None) -> int | None:
    """Retention (elements older than every registered window and the retention expire): the first ordinal to
    keep, when elements below it may go — those older than the stream time minus ``retention`` that no open or
    future window of any registered sequence can hold and that the pipeline has read. ``None``: nothing expires."""
    if retention is None or state.stream_time is None or index.first_ordinal > state.seen:
        return None
    bound = _expiry_bound(state, sequences, index, lateness)
    if bound is None:
        return None
    limit, threshold = bound
    threshold = min(threshold, state.stream_time - retention)
    cut = index.first_ordinal
    limit = min(limit, state.seen + 1)  # never what the pipeline has not read (and assigned) yet
    while cut < limit and (t := index.time_of(cut)) is not None and t < threshold:
        cut += 1
    return cut if cut > index.first_ordinal else None


def _expiry_bound(state: PipelineState, sequences: Sequences[RegisteredSequence], index: StreamIndex,
                  lateness: int) -> tuple[int, int] | None:
    """(ordinal, time): every element still needed by an open window or by the next window of a registered
    sequence (live or not yet read) has an ordinal ≥ the first and a time ≥ the second; ``None`` if nothing
    may expire (a sequence whose anchor the index must still resolve)."""
    assert state.stream_time is not None
    limit, threshold = index.head() + 1, state.stream_time
    for by_k in state.open.values():
        for runs in by_k.values():
            limit = min([limit] + [first for first, _ in runs])
    # A window whose start is not known yet starts after a time the stream has not reached (its anchor is
    # still to come, and elements come at most `lateness` late): (stream time − lateness, …) forward,
    # (… − width, …] backward.
    for sequence in sequences:
        spec = bound_spec(sequence.spec, state, sequence.id) or sequence.spec
        k = state.next_index.get(sequence.id, spec.first)
        if spec.count is not None and k >= spec.first + spec.count:
            continue  # finished: needs nothing
        unknown = state.stream_time - lateness - spec.width + 1
        kept = spec.window_kind.kept_from(k, sequence.id in state.next_index, index, unknown, index.first_ordinal)
        if kept is None:
            return None
        if kept[0] is not None:
            limit = min(limit, kept[0])
        if kept[1] is not None:
            threshold = min(threshold, kept[1])
    return limit, threshold
