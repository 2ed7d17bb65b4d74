"""The window functions of event patterns (RSEP-QL §3, Def. 3): at each evaluation time t, the part of a stream a
basic event pattern reads.

An EVENT's WindowRef is read as a window *function* of t. A repeating ref is resolved once, when the pattern
registers (its ``HEAD`` is the HEAD then, as for every repeating ref: ``windowing.resolve``); a one-shot ref is read
afresh at each evaluation (its ``HEAD`` is the latest element at t, as a one-shot request's HEAD is the latest at
request time). The forms (docs/events.md has the table and pictures):

=========================  =================================================================================
``R/a/-α/β``               time-based W^τ(α, β): (t0+kβ−α, t0+kβ] with k = ⌊(t−t0)/β⌋ ≥ 1, t0 = t(a)
``R/a/α/β``, ``R/T1/T2/β``  forward: [t0+kβ, t0+kβ+α) with k = ⌊(t−t0)/β⌋ ≥ 0 (the window opened last)
``HEAD/-α``                sliding on every evaluation: (t−α, t]
``HEAD``, ``HEAD~n/HEAD``  the last 1, n+1 elements (of the input: the stream, or the window it is nested in)
``a/HEAD``                 landmark W^λ from a (an instant, ordinal or UUID) up to and including the latest element
``T1/T2``, ``T/±α``        interval W^⊔: [T1, T2), [T, T+α), (T−α, T]
``o1/o2``                  the elements o1..o2 (ordinals or UUIDs)
=========================  =================================================================================

Every window moves forward only (both bounds are non-decreasing in t), which is what lets the matcher evict and
look only at the new part of a window. Each window is a contiguous run of the stream, computed on a log of the
stream's (ordinal, time) pairs: nesting applies the outer function to the inner one's run.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from sparql_ext.events import EventPatternError, EventWindow
from sparql_ext.revision import Head, Instant, Ordinal, RevisionDesignator, RevisionId
from sparql_ext.window_kinds import TimeWindows
from sparql_ext.windowing import ElementIndex, WindowNotResolvable, resolve, to_micros
from sparql_ext.windowref import WindowRef

_FORMS = ("R/a/-α/β (time-based), HEAD/-α (sliding), HEAD~n/HEAD (last n+1), a/HEAD (landmark), T1/T2 or T/±α "
          "(interval), o1/o2 (elements)")
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Repeating:
    """A repeating time window sequence; ``origin`` None while its anchor element has not arrived."""

    origin: int | None
    anchor: int | None  # the ordinal whose time becomes the origin (pending), else None
    width: int
    step: int
    backward: bool
    first: int
    count: int | None


@dataclass(frozen=True)
class Sliding:
    """(t − width, t]."""

    width: int


@dataclass(frozen=True)
class LastElements:
    """The last ``count`` elements of the input (``sparql_ext.events.Last`` is the pattern operator ``LAST``)."""

    count: int


@dataclass(frozen=True)
class Since:
    """Landmark: from an instant (inclusive) or from an ordinal, up to the latest element."""

    time: int | None
    ordinal: int | None


@dataclass(frozen=True)
class Between:
    """A fixed time interval: [low, high) forward, (low, high] backward."""

    low: int
    high: int
    backward: bool


@dataclass(frozen=True)
class Elements:
    """The fixed elements first..last (ordinals, inclusive)."""

    first: int
    last: int


Level = Repeating | Sliding | LastElements | Since | Between | Elements
_LEVELS: dict[str, type[Level]] = {cls.__name__: cls
                                   for cls in (Repeating, Sliding, LastElements, Since, Between, Elements)}
_LEVELS["Last"] = LastElements  # the name event rules' saved windows may hold


def event_window_form(ref: WindowRef) -> str:
    """The name of the event window form of ``ref``; ``EventPatternError`` naming the forms when it is none.

    >>> from sparql_ext.windowref import parse_window_ref
    >>> event_window_form(parse_window_ref("R/HEAD/-PT05M/PT01M")), event_window_form(parse_window_ref("1/HEAD"))
    ('repeating', 'landmark')
    """
    start, end = ref.start, ref.end
    if ref.kind is not None:
        raise _refuse(ref, f"{ref.kind} windows are not window functions of the evaluation time")
    if ref.repeating:
        if isinstance(ref.step, int) or ref.width is None and not ref.is_time_range:
            raise _refuse(ref, "a repeating event window must step by a duration over time windows")
        return "repeating"
    if ref.step is not None:
        raise _refuse(ref, "a one-shot window with a step is the first window of a sequence; write R/… for one")
    if ref.width is not None:
        if start == Head(0) and ref.width < timedelta(0):
            return "sliding"
        if isinstance(start, Instant):
            return "interval"
        raise _refuse(ref, "a duration from an element: use HEAD/-α for the last α before each evaluation")
    if end is None:
        if start == Head(0):
            return "last"
        raise _refuse(ref, "a single revision other than HEAD")
    if end == Head(0):
        if isinstance(start, Head):
            return "last"
        return "landmark"
    if isinstance(start, Instant) and isinstance(end, Instant):
        return "interval"
    if isinstance(start, Ordinal | RevisionId) and isinstance(end, Ordinal | RevisionId):
        return "elements"
    raise _refuse(ref, "a range mixing HEAD~n with a fixed end")


def resolve_level(ref: WindowRef, index: ElementIndex) -> Level:
    """The window function of one ref, resolved against the stream as it is at registration."""
    form = event_window_form(ref)
    if form == "repeating":
        spec = resolve(ref, index)
        if type(spec.window_kind) is not TimeWindows:  # the form check keeps others out; a hand-built ref may not
            raise _refuse(ref, "a repeating event window must step by a duration over time windows")
        return Repeating(spec.origin, spec.anchor if spec.origin is None else None, spec.width, spec.step,
                         spec.backward, spec.first, spec.count)
    width = abs(ref.width) // _MICROSECOND if ref.width is not None else 0
    if form == "sliding":
        return Sliding(width)
    if form == "last":
        return LastElements(ref.start.back + 1 if isinstance(ref.start, Head) else 1)
    if form == "landmark":
        if isinstance(ref.start, Instant):
            return Since(to_micros(ref.start.at), None)
        return Since(None, _ordinal(ref, ref.start, index))
    if form == "interval":
        assert isinstance(ref.start, Instant)
        low = to_micros(ref.start.at)
        if isinstance(ref.end, Instant):
            return Between(low, to_micros(ref.end.at), False)
        assert ref.width is not None
        return Between(low - width, low, True) if ref.width < timedelta(0) else Between(low, low + width, False)
    assert ref.end is not None
    first, last = _ordinal(ref, ref.start, index), _ordinal(ref, ref.end, index)
    if last < first:
        raise WindowNotResolvable(f"WINDOWS={ref}: element {last} is before element {first}", status=400)
    return Elements(first, last)


@dataclass(frozen=True)
class ResolvedWindow:
    """An EVENT's window function, resolved: levels innermost first."""

    key: str
    stream: str | None
    levels: tuple[Level, ...]

    @classmethod
    def of(cls, window: EventWindow, index: ElementIndex) -> ResolvedWindow:
        return cls(window.key, window.stream, tuple(resolve_level(ref, index) for ref in window.refs))

    @property
    def pending(self) -> bool:
        """True while a repeating level waits for its anchor element (no eviction until then)."""
        return any(isinstance(level, Repeating) and level.origin is None for level in self.levels)

    def bind(self, ordinal: int, time: int) -> ResolvedWindow:
        """The window with the origin of every level anchored at element ``ordinal`` fixed to ``time``."""
        levels = tuple(Repeating(time, None, *_tail(level)) if isinstance(level, Repeating) and level.origin is None
                       and level.anchor == ordinal else level for level in self.levels)
        return ResolvedWindow(self.key, self.stream, levels) if levels != self.levels else self

    def run(self, times: list[int], ordinals: list[int], t: int) -> tuple[int, int]:
        """The window at time t as a slice [i, j) of the stream's log (times and ordinals ascending, every element
        at or before t). Elements before ``i`` can never be in this window again."""
        i, j = 0, len(times)
        for level in self.levels:
            i, j = _apply(level, times, ordinals, i, j, t)
        return i, j

    def to_json(self) -> list[dict[str, Any]]:
        return [{"level": type(level).__name__, **asdict(level)} for level in self.levels]

    @classmethod
    def from_json(cls, window: EventWindow, data: list[dict[str, Any]]) -> ResolvedWindow:
        levels = []
        for item in data:
            fields = dict(item)
            levels.append(_LEVELS[fields.pop("level")](**fields))
        return cls(window.key, window.stream, tuple(levels))


def _apply(level: Level, times: list[int], ordinals: list[int], i: int, j: int, t: int) -> tuple[int, int]:
    match level:
        case Repeating(origin=None):
            return i, i
        case Repeating(origin=origin, width=width, step=step, backward=backward, first=first, count=count):
            assert origin is not None
            k = (t - origin) // step
            if count is not None and k >= first + count:
                return j, j  # the sequence is over: no element can be in a window of it again
            if k < first:  # no window yet: empty, but what the first window can still hold is kept
                at = origin + first * step
                start = _time_run(times, i, j, at - width if backward else at, not backward, None, False)[0]
                return start, start
            at = origin + k * step
            return (_time_run(times, i, j, at - width, False, at, True) if backward
                    else _time_run(times, i, j, at, True, at + width, False))
        case Sliding(width=width):
            return _time_run(times, i, j, t - width, False, t, True)
        case LastElements(count=count):
            return max(i, j - count), j
        case Since(time=time, ordinal=ordinal):
            if time is not None:
                return _time_run(times, i, j, time, True, None, False)
            assert ordinal is not None
            return bisect_left(ordinals, ordinal, i, j), j
        case Between(low=low, high=high, backward=backward):
            return _time_run(times, i, j, low, not backward, high, backward)
        case Elements(first=first, last=last):
            return bisect_left(ordinals, first, i, j), max(i, bisect_right(ordinals, last, i, j))
    raise TypeError(f"not a window level: {level!r}")


def _time_run(times: list[int], i: int, j: int, low: int, low_in: bool, high: int | None,
              high_in: bool) -> tuple[int, int]:
    """The part of times[i:j] after ``low`` (inclusive if ``low_in``) and before ``high`` (None: no bound)."""
    start = (bisect_left if low_in else bisect_right)(times, low, i, j)
    if high is None:
        return start, j
    end = (bisect_right if high_in else bisect_left)(times, high, i, j)
    return start, max(start, end)


def _tail(level: Repeating) -> tuple[int, int, bool, int, int | None]:
    return level.width, level.step, level.backward, level.first, level.count


def _ordinal(ref: WindowRef, revision: RevisionDesignator, index: ElementIndex) -> int:
    if isinstance(revision, Ordinal):
        return revision.number
    if isinstance(revision, RevisionId):
        ordinal = index.ordinal_of(revision.uuid)
        if ordinal is None:
            raise WindowNotResolvable(f"WINDOWS={ref}: no element of this stream is revision {revision.uuid}")
        return ordinal
    raise TypeError(f"not an element designator: {revision!r}")


def _refuse(ref: WindowRef, why: str) -> EventPatternError:
    return EventPatternError(f"WINDOWS={ref} is not an event window ({why}); event windows are {_FORMS}")

