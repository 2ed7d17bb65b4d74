"""Window kinds: the arithmetic of one kind of window sequence, written once (docs/streams.md, "WindowRef").

A WindowRef resolved against a stream is a ``WindowSpec``; ``spec.window_kind`` is its kind, and everything that
depends on the kind asks it: window k's bounds and members (``sparql_ext.windowing``, the reference, is written on
them), when a window is complete, which window an element falls in (``locate``), and what the pipeline's step
needs (``sparql_ext.window_state``: when the next window is due, where history starts, what retention may drop).
The batch job's arithmetic is one ``AssignmentRow`` per sequence (``row``): the kind's ``ranges`` computes it on numpy
arrays (``window_state.assign_ranges``), ``pipeline/assignment.py`` in Spark SQL, from the same row.

=====================  ======================================================================================
kind                   window k
=====================  ======================================================================================
``TimeWindows``        [t0+k·step, t0+k·step+width) forward, (t0+k·step−width, t0+k·step] backward
``CountWindows``       the elements o0+k·step … o0+k·step+width−1 (windows starting before ordinal 1 skipped)
``ElementStepWindows`` a time width starting (or ending) at the time of element o0+k·step: placed from the index
                       when complete, not assigned by the batch job
``SessionWindows``     the k-th run of elements (from t0 on, in arrival order) in which each comes less than ``gap``
                       after the latest before it: [its earliest time, its latest time + gap)
=====================  ======================================================================================

A kind is a class here with its ``name`` (``WindowSpec.kind``), the one row of the table above, and its Spark form
in ``pipeline/assignment.py`` when its row is not an arithmetic progression. A kind written in a WindowRef by name
(``R/HEAD/SESSION/PT5M``: ``NAMED_KINDS``) resolves its own spec (``spec_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import ClassVar, Literal

import numpy as np

from sparql_ext.errors import WindowRefSyntaxError
from sparql_ext.window_data import AssignmentRow, Element, ElementIndex, Window
from sparql_ext.windowref import WindowRef

_MICROSECOND = timedelta(microseconds=1)
_NEVER = 1 << 62  # µs: later than any element (an open end)
_NONE = np.iinfo(np.int64).min  # "no element before": every time is at least a gap after it

#: The open windows' time spans the pipeline keeps for kinds whose bounds come from their elements (sessions):
#: window k -> [earliest, latest] element time read so far.
Spans = Mapping[int, list[int]]


@dataclass(frozen=True)
class WindowSpec:
    """A WindowRef resolved against a stream when it is registered; window k is ``bounds(spec, k, …)``.

    ``kind`` names its ``WindowKind`` (``time``, ``count``, ``session``; a time width with a count step is
    ``time`` with ``step_kind`` ``count``). ``origin`` is t0 (µs) for windows anchored in time — ``None`` while
    pending on element ``anchor`` — and the ordinal o0 for count windows (never pending). ``anchor`` is the ordinal
    of the element whose timestamp is t0 (time windows anchored at an element; also the o0 of an element-count
    step), None for an ``xsd:dateTime`` anchor and for count windows. Session windows: ``width`` and ``step`` are
    the gap.
    """

    ref: str
    kind: str
    backward: bool
    origin: int | None  # t0 in µs for time windows (None: pending on `anchor`), o0 for count windows
    width: int  # µs (positive) or number of elements
    step: int  # µs or number of elements
    step_kind: Literal["time", "count"]
    first: int  # first window index k (0; 1 for repeating backward time windows; skips for count windows)
    count: int | None  # number of windows; None = unbounded
    anchor: int | None = None  # ordinal whose timestamp is t0, for element-anchored time windows

    @property
    def pending(self) -> bool:
        """True while t0 waits for the anchor element (e.g. HEAD of a stream that was empty)."""
        return self.origin is None

    @cached_property
    def window_kind(self) -> WindowKind:
        """The arithmetic of this spec's windows."""
        if self.kind == "time" and self.step_kind == "count":
            return ElementStepWindows(self)
        return KINDS[self.kind](self)


class WindowKind:
    """The windows of one spec. Bounds are in µs, or in ordinals where ``axis`` is ``count``; ``keeps_spans``: the
    bounds come from the elements, so the pipeline keeps each open window's earliest and latest time."""

    name: ClassVar[str]
    axis: ClassVar[Literal["time", "count"]] = "time"
    keeps_spans: ClassVar[bool] = False

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec

    @classmethod
    def spec_of(cls, ref: WindowRef, text: str, origin: int | None, anchor: int | None) -> WindowSpec:
        """The spec of a ref naming this kind (``R/a/NAME/duration``), anchored at t0 = ``origin`` (element
        ``anchor``, None for a dateTime anchor); only kinds a WindowRef names have one."""
        raise NotImplementedError(f"WINDOWS={text}: {cls.__name__} is not named in WindowRefs")

    # -- the reference: windows from the stream's index --------------------------------------------------------

    def bounds(self, k: int, index: ElementIndex) -> tuple[int, int] | None:
        """Bounds of window k, or None while not determinable (pending t0, count-step element not arrived)."""
        raise NotImplementedError

    def members(self, k: int, start: int, end: int, index: ElementIndex) -> tuple[int, ...]:
        """The ordinals of window k (bounds ``start``, ``end``) the index holds now."""
        return tuple(e.ordinal for e in index.between(start, end, backward=self.spec.backward))

    def window(self, k: int, index: ElementIndex) -> Window | None:
        """Window k with the elements it holds so far; None while its bounds are unknown."""
        found = self.bounds(k, index)
        return None if found is None else Window(k, found[0], found[1], self.members(k, *found, index))

    def complete(self, k: int, index: ElementIndex, watermark: int | None, seen: int) -> bool:
        """Whether window k is complete: time windows once the watermark (stream time known to have passed) reached
        their end (forward excludes it, backward includes it, and timestamps only increase up to the watermark);
        count windows once element ``seen`` is their last one or later."""
        found = self.bounds(k, index)
        return found is not None and watermark is not None and watermark >= found[1]

    def locate(self, k: int, ordinal: int, time: int, index: ElementIndex) -> tuple[int, Window | None]:
        """The oldest window holding element ``ordinal`` (at ``time``), searched from window k on: ``(k, window)``,
        window None when none holds it (before the first window, in a gap) or its bounds are not known yet."""
        position = ordinal if self.axis == "count" else time
        inclusive_end = self.axis == "count" or self.spec.backward
        while (found := self.bounds(k, index)) is not None:
            start, end = found
            if position > end or (position == end and not inclusive_end):
                k += 1
                continue
            before = position < start or (position == start and self.spec.backward and self.axis == "time")
            return k, None if before else Window(k, start, end, self.members(k, start, end, index))
        return k, None

    # -- the pipeline: what the batch job computes, and what the step needs --------------------------------------

    @staticmethod
    def ranges(row: AssignmentRow, ordinals: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per element (in ordinal order), the windows ``lo..hi`` of the row's sequence holding it (none where
        ``lo > hi``); here windows in arithmetic progression (``AssignmentRow``)."""
        value = (times if row.by_time else ordinals).astype(np.int64) - row.back - row.base
        lo = np.maximum((value - row.width) // row.step + 1, row.kmin)
        hi = value // row.step
        return lo, hi if row.kmax is None else np.minimum(hi, row.kmax)

    def row(self, next_index: int, spans: Spans) -> AssignmentRow | None:
        """The batch job's row (``spans``: the open windows the pipeline keeps for this sequence); None when the
        batch job does not assign this kind (its windows are placed from the index when complete)."""
        return None

    def read_bounds(self, k: int, index: ElementIndex, spans: Spans) -> tuple[int, int] | None:
        """Window k's bounds as the pipeline knows them (what it read: ``spans``)."""
        return self.bounds(k, index)

    def read_complete(self, k: int, index: ElementIndex, watermark: int | None, seen: int, spans: Spans) -> bool:
        """``complete`` as the pipeline knows it."""
        return self.complete(k, index, watermark, seen)

    def due(self, k: int, index: ElementIndex, lateness: int, spans: Spans) -> tuple[int | None, int | None] | None:
        """What completes window k: an element read at or after a time, or with an ordinal at or past one
        (``(time, ordinal)``, either None); None when that cannot be told yet."""
        found = self.read_bounds(k, index, spans)
        return None if found is None else (found[1] + lateness, None)

    def history_start(self, index: ElementIndex, lateness: int) -> int:
        """The first ordinal the sequence's first window can hold (where its history is assigned from)."""
        return 1

    def kept_from(self, k: int, live: bool, index: ElementIndex, unknown: int, first_ordinal: int
                  ) -> tuple[int | None, int | None] | None:
        """What window k and later ones may still need (k: the next to materialize; ``live``: registration read):
        ``(ordinal, time)`` such that they need no element below the ordinal, none before the time (either None:
        no bound of that kind); None when nothing may expire. ``unknown``: a time the stream has not reached minus
        the width, for windows whose start is not known yet; ``first_ordinal``: the index's first retained element."""
        return None

    def first_incomplete(self, watermark: int) -> int | None:
        """The first window whose end is past ``watermark`` (every earlier one is complete), when arithmetic tells."""
        return None

    @property
    def settle_span(self) -> int:
        """How far stream time must pass the latest element for every window holding an element to complete."""
        return 0


class TimeWindows(WindowKind):
    """A time width stepped by a duration."""

    name = "time"

    def bounds(self, k: int, index: ElementIndex) -> tuple[int, int] | None:
        spec = self.spec
        origin = spec.origin if spec.origin is not None or spec.anchor is None else index.time_of(spec.anchor)
        if origin is None:
            return None
        at = origin + k * spec.step
        return (at - spec.width, at) if spec.backward else (at, at + spec.width)

    def row(self, next_index: int, spans: Spans) -> AssignmentRow | None:
        spec = self.spec
        if spec.origin is None:
            return None
        base = spec.origin - (spec.width if spec.backward else 0)
        kmax = None if spec.count is None else spec.first + spec.count - 1
        return AssignmentRow(self.name, True, int(spec.backward), base, spec.width, spec.step, spec.first, kmax)

    def history_start(self, index: ElementIndex, lateness: int) -> int:
        spec = self.spec
        if lateness or spec.origin is None:
            return 1  # timestamps are not ordered by ordinal: no cheap lower bound
        at = spec.origin + spec.first * spec.step
        start = at - spec.width if spec.backward else at
        # forward windows hold [start, …): first element at or after start; backward (start, …]: after it
        return (index.last_at_or_before(start if spec.backward else start - 1) or 0) + 1

    def kept_from(self, k: int, live: bool, index: ElementIndex, unknown: int, first_ordinal: int
                  ) -> tuple[int | None, int | None] | None:
        found = self.bounds(k, index)
        if found is None:
            return None, unknown
        return None, found[0] + 1 if self.spec.backward else found[0]  # forward [start, …), backward (start, …]

    def first_incomplete(self, watermark: int) -> int | None:
        spec = self.spec
        if spec.origin is None:
            return None
        reach = watermark - spec.origin - (0 if spec.backward else spec.width)
        return reach // spec.step + 1

    @property
    def settle_span(self) -> int:
        return self.spec.width + self.spec.step


class CountWindows(WindowKind):
    """Element ranges stepped by a number of elements."""

    name = "count"
    axis = "count"

    def bounds(self, k: int, index: ElementIndex) -> tuple[int, int] | None:
        assert self.spec.origin is not None, "count windows are never pending"
        start = self.spec.origin + k * self.spec.step
        return start, start + self.spec.width - 1

    def members(self, k: int, start: int, end: int, index: ElementIndex) -> tuple[int, ...]:
        return tuple(e.ordinal for e in index.elements(start, end))

    def complete(self, k: int, index: ElementIndex, watermark: int | None, seen: int) -> bool:
        found = self.bounds(k, index)
        return found is not None and seen >= found[1]

    def due(self, k: int, index: ElementIndex, lateness: int, spans: Spans) -> tuple[int | None, int | None] | None:
        found = self.bounds(k, index)
        return None if found is None else (None, found[1])

    def row(self, next_index: int, spans: Spans) -> AssignmentRow | None:
        spec = self.spec
        assert spec.origin is not None
        if spec.backward:
            raise NotImplementedError(f"window sequence {spec.ref}: backward count windows are not defined")
        kmin = max(spec.first, -((spec.origin - 1) // spec.step))  # ⌈(1 − o0)/step⌉: windows start at ordinal ≥ 1
        kmax = None if spec.count is None else spec.first + spec.count - 1
        return AssignmentRow(self.name, False, 0, spec.origin, spec.width, spec.step, kmin, kmax)

    def history_start(self, index: ElementIndex, lateness: int) -> int:
        assert self.spec.origin is not None
        return max(1, self.spec.origin + self.spec.first * self.spec.step)

    def kept_from(self, k: int, live: bool, index: ElementIndex, unknown: int, first_ordinal: int
                  ) -> tuple[int | None, int | None] | None:
        assert self.spec.origin is not None
        return max(1, self.spec.origin + k * self.spec.step), None


class ElementStepWindows(TimeWindows):
    """A time width stepped by a number of elements: window k starts (forward) or ends (backward) at the time of
    element o0 + k·step."""

    def bounds(self, k: int, index: ElementIndex) -> tuple[int, int] | None:
        spec = self.spec
        anchor = self._anchor(index)
        at = None if anchor is None else index.time_of(anchor + k * spec.step)
        if at is None:
            return None
        return (at - spec.width, at) if spec.backward else (at, at + spec.width)

    def _anchor(self, index: ElementIndex) -> int | None:
        """o0: the anchor element, or for a dateTime anchor the first element at or after t0 (determinable once one
        has arrived; timestamps increase)."""
        if self.spec.anchor is not None:
            return self.spec.anchor
        assert self.spec.origin is not None, "a dateTime anchor is never pending"
        first_after = (index.last_at_or_before(self.spec.origin - 1) or 0) + 1
        return first_after if first_after <= index.head() else None

    def row(self, next_index: int, spans: Spans) -> AssignmentRow | None:
        return None

    def due(self, k: int, index: ElementIndex, lateness: int, spans: Spans) -> tuple[int | None, int | None] | None:
        return None  # a window starts at every step-th element: not told by a timestamp or an ordinal

    def history_start(self, index: ElementIndex, lateness: int) -> int:
        return 1

    def kept_from(self, k: int, live: bool, index: ElementIndex, unknown: int, first_ordinal: int
                  ) -> tuple[int | None, int | None] | None:
        limit = None
        if self.spec.anchor is None:
            # a dateTime anchor: bounds() finds o0 as the element after the last one before t0 — keep that one
            assert self.spec.origin is not None
            limit = index.last_at_or_before(self.spec.origin - 1)
            if limit is None and first_ordinal > 1:
                return None
        found = self.bounds(k, index)
        return limit, unknown if found is None else (found[0] + 1 if self.spec.backward else found[0])

    def first_incomplete(self, watermark: int) -> int | None:
        return None

    @property
    def settle_span(self) -> int:
        return self.spec.width


class SessionWindows(WindowKind):
    """Runs of elements less than a gap apart (``R/HEAD/SESSION/PT5M``): from t0 on, in arrival order, an element
    at least ``gap`` after the latest time before it starts the next window; window k is [its earliest time, its
    latest time + gap), complete once the watermark reaches that end (no later element can join it then)."""

    name = "session"
    keeps_spans = True

    @classmethod
    def spec_of(cls, ref: WindowRef, text: str, origin: int | None, anchor: int | None) -> WindowSpec:
        assert ref.duration is not None
        if ref.duration <= timedelta(0):
            raise WindowRefSyntaxError(f"WINDOWS={text}: a session gap is positive (e.g. R/HEAD/SESSION/PT5M)")
        gap = ref.duration // _MICROSECOND
        return WindowSpec(text, cls.name, False, origin, gap, gap, "time", 0, ref.count, anchor)

    def _sessions(self, index: ElementIndex, upto: int) -> list[list[Element]]:
        """Windows ``first`` … ``upto`` (those that have started), from the index."""
        spec = self.spec
        origin = spec.origin if spec.origin is not None or spec.anchor is None else index.time_of(spec.anchor)
        sessions: list[list[Element]] = []
        if origin is None:
            return sessions
        latest: int | None = None
        for element in index.between(origin, _NEVER, backward=False):
            if latest is None or element.time >= latest + spec.width:
                if len(sessions) > upto - spec.first:
                    break
                sessions.append([])
            sessions[-1].append(element)
            latest = element.time if latest is None else max(latest, element.time)
        return sessions

    def bounds(self, k: int, index: ElementIndex) -> tuple[int, int] | None:
        sessions = self._sessions(index, k)
        if k < self.spec.first or len(sessions) <= k - self.spec.first:
            return None
        times = [e.time for e in sessions[k - self.spec.first]]
        return min(times), max(times) + self.spec.width

    def members(self, k: int, start: int, end: int, index: ElementIndex) -> tuple[int, ...]:
        return tuple(e.ordinal for e in self._sessions(index, k)[k - self.spec.first])

    def locate(self, k: int, ordinal: int, time: int, index: ElementIndex) -> tuple[int, Window | None]:
        while (found := self.window(k, index)) is not None:
            if ordinal in found.elements:
                return k, found
            if found.elements[-1] > ordinal:
                return k, None  # before window k (an element before t0)
            k += 1
        return k, None

    @staticmethod
    def ranges(row: AssignmentRow, ordinals: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        times = times.astype(np.int64)
        inside = times >= row.base
        latest = np.concatenate(([_NONE if row.last is None else row.last], np.where(inside, times, _NONE)))
        before = np.maximum.accumulate(latest)[:-1]  # the latest time before each element
        k = row.kmin + np.cumsum(inside & (times >= before + row.width))  # windows started up to each element
        lo, hi = np.where(inside, k, 1), np.where(inside, k, 0)
        return lo, hi if row.kmax is None else np.minimum(hi, row.kmax)

    def row(self, next_index: int, spans: Spans) -> AssignmentRow | None:
        spec = self.spec
        if spec.origin is None:
            return None
        kmax = None if spec.count is None else spec.first + spec.count - 1
        opened = max(spans, default=next_index - 1)
        last = spans[opened][1] if opened in spans else None
        return AssignmentRow(self.name, True, 0, spec.origin, spec.width, spec.width, opened, kmax, last)

    def read_bounds(self, k: int, index: ElementIndex, spans: Spans) -> tuple[int, int] | None:
        return (spans[k][0], spans[k][1] + self.spec.width) if k in spans else None

    def read_complete(self, k: int, index: ElementIndex, watermark: int | None, seen: int, spans: Spans) -> bool:
        found = self.read_bounds(k, index, spans)
        return found is not None and watermark is not None and watermark >= found[1]

    def due(self, k: int, index: ElementIndex, lateness: int, spans: Spans) -> tuple[int | None, int | None] | None:
        found = self.read_bounds(k, index, spans)
        if found is None:  # not started: an element opening it and one a gap later may both come in the next batch
            return (self.spec.origin or 0) + self.spec.width + lateness, None
        return found[1] + lateness, None

    def kept_from(self, k: int, live: bool, index: ElementIndex, unknown: int, first_ordinal: int
                  ) -> tuple[int | None, int | None] | None:
        if self.spec.origin is None:
            return None, unknown
        if live:
            return None, None  # its open windows hold what it needs; later windows hold elements not read yet
        return None, self.spec.origin  # its history, assigned when its registration is read: from t0

    @property
    def settle_span(self) -> int:
        return self.spec.width


#: The kinds by ``WindowSpec.kind``.
KINDS: dict[str, type[WindowKind]] = {kind.name: kind for kind in (TimeWindows, CountWindows, SessionWindows)}

#: Kinds a WindowRef names (``R/HEAD/SESSION/PT5M``), by that name.
NAMED_KINDS: dict[str, type[WindowKind]] = {"SESSION": SessionWindows}
