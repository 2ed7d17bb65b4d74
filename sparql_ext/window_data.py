"""The values windowing passes around: elements and the index they are read from, windows, the batch job's rows
(one per sequence) and the ordinal runs and time spans folded from its assignments (vectorized, numpy)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

Runs = tuple[tuple[int, int], ...]  # inclusive ordinal ranges, ascending
OpenRuns = dict[int, list[list[int]]]  # window k -> inclusive ordinal runs assigned so far
SequenceRuns = dict[str, OpenRuns]  # sequence id -> its windows' runs
OpenSpans = dict[int, list[int]]  # window k -> [earliest, latest] element time read so far (session windows)
SequenceSpans = dict[str, OpenSpans]  # sequence id -> its open windows' spans


@dataclass(frozen=True)
class Element:
    """A stream element as windowing sees it: ordinal 1 is the stream's first element."""

    ordinal: int
    time: int  # µs since the epoch


class ElementIndex(Protocol):
    """What resolution and window assignment need from a stream; the store implements it too."""

    def head(self) -> int:
        """Latest ordinal, 0 when the stream is empty."""
        ...

    def time_of(self, ordinal: int) -> int | None:
        """Timestamp of an element, None if it does not exist (yet)."""
        ...

    def ordinal_of(self, revision_uuid: uuid.UUID) -> int | None:
        """Ordinal of the element committed as that revision."""
        ...

    def last_at_or_before(self, time: int) -> int | None:
        """Ordinal of the last element with timestamp ≤ time."""
        ...

    def elements(self, first: int, last: int) -> list[Element]:
        """Elements with first ≤ ordinal ≤ last, by ordinal."""
        ...

    def between(self, start: int, end: int, *, backward: bool) -> list[Element]:
        """Elements with timestamp in [start, end) forward, (start, end] backward, by ordinal."""
        ...


@dataclass(frozen=True)
class Window:
    """Window k: bounds in µs (time: [start, end) forward, (start, end] backward) or ordinals (count:
    start..end inclusive); ``elements`` are the member ordinals in order."""

    index: int
    start: int
    end: int
    elements: tuple[int, ...]


@dataclass(frozen=True)
class AssignmentRow:
    """One sequence as the batch job reads it (``pipeline/assignment.py``, in Spark SQL) and
    ``window_state.assign_ranges`` computes it (on numpy arrays), ``kind`` saying which arithmetic.

    Windows in arithmetic progression (time and count windows): with ``v`` = (time in µs if ``by_time``, else
    ordinal) − ``back`` − ``base``, an element is in windows k ∈ [⌊(v − width)/step⌋ + 1, ⌊v/step⌋] ∩ [kmin, kmax].
    Forward time windows: ``base`` = t0; backward ones, (end − width, end], are [end − width, end) of
    ``time − 1 µs``: ``back`` = 1, ``base`` = t0 − width; count windows: ``base`` = o0, and ``kmin`` also skips
    windows starting before ordinal 1.

    Session windows: elements with time ≥ ``base`` (t0), in ordinal order, each starting a new window when it comes
    at least ``width`` (the gap) after the latest time before it (``last``, the open window's latest time, then the
    batch's earlier elements); an element is in window ``kmin`` + (windows started up to it), ``kmin`` being the
    open window (``first − 1`` when none is open).
    """

    kind: str
    by_time: bool
    back: int
    base: int
    width: int
    step: int
    kmin: int
    kmax: int | None
    last: int | None = None


def fold_spans(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> OpenSpans:
    """Each window's [earliest, latest] element time, for kinds that put an element in one window (``lo == hi``)."""
    keep = lo <= hi
    k, t = lo[keep], times[keep].astype(np.int64)
    if k.size == 0:
        return {}
    order = np.argsort(k, kind="stable")
    k, t = k[order], t[order]
    starts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1])))
    earliest, latest = np.minimum.reduceat(t, starts), np.maximum.reduceat(t, starts)
    return {int(k[s]): [int(a), int(b)] for s, a, b in zip(starts.tolist(), earliest, latest, strict=True)}


def merge_spans(old: OpenSpans, new: OpenSpans) -> None:
    """``new``'s spans into ``old`` (each window's earliest and latest time over both)."""
    for k, (earliest, latest) in new.items():
        span = old.get(k)
        old[k] = [earliest, latest] if span is None else [min(span[0], earliest), max(span[1], latest)]


def fold_runs(ordinals: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> OpenRuns:
    """The elements' k ranges folded into ordinal runs per window k (gaps and islands, vectorized)."""
    keep = lo <= hi
    ordinals, lo, hi = ordinals[keep], lo[keep], hi[keep]
    result: OpenRuns = {}
    if ordinals.size == 0:
        return result
    counts = hi - lo + 1
    take = np.repeat(np.arange(lo.size), counts)
    offsets = np.arange(take.size) - np.repeat(np.cumsum(counts) - counts, counts)
    k, o = lo[take] + offsets, ordinals[take]
    order = np.lexsort((o, k))
    k, o = k[order], o[order]
    breaks = np.ones(k.size, dtype=bool)
    breaks[1:] = (k[1:] != k[:-1]) | (o[1:] != o[:-1] + 1)
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], k.size) - 1
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        result.setdefault(int(k[s]), []).append([int(o[s]), int(o[e])])
    return result


def merge_runs(old: Iterable[list[int]], new: Iterable[list[int]]) -> list[list[int]]:
    """Union of inclusive ordinal runs, sorted, adjacent runs joined.

    >>> merge_runs([[1, 3]], [[4, 5], [7, 7]])
    [[1, 5], [7, 7]]
    """
    merged: list[list[int]] = []
    for first, last in sorted([list(r) for r in old] + [list(r) for r in new]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def runs_of(ordinals: Iterable[int]) -> Runs:
    """Ascending ordinals as inclusive runs.

    >>> runs_of([1, 2, 3, 5])
    ((1, 3), (5, 5))
    """
    runs: list[list[int]] = []
    for o in ordinals:
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    return tuple((a, b) for a, b in runs)
