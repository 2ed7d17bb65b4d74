"""The one reference of window semantics: WindowRef forms, window bounds, completeness (docs/streams.md, "WindowRef").

The store's one-shot look-ups and the Spark pipeline must produce the windows this module produces;
it is written to be obviously correct, not fast. Times are integer microseconds since the epoch
(UTC), so window arithmetic is exact. A stream is seen through ``ElementIndex``.

Resolution happens once, when a request or rule is registered: ``resolve`` fixes the anchor
(HEAD means the HEAD *at registration*). If the anchor element has not arrived yet (HEAD of an
empty stream means its first element), the spec's ``origin`` is ``None`` — *pending* — and
``anchor`` names the element whose timestamp will be t0; ``bind_origin`` fills it in once that
element exists. ``bounds``/``windows`` accept a pending spec and bind it on the fly from the index.

What window k of a sequence is depends on its kind (time, count, session, …): ``spec.window_kind``
(``sparql_ext.window_kinds``) answers it; the functions here are the reference written on it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from sparql_ext.errors import SparqlExtError
from sparql_ext.revision import Head, Instant, Ordinal, RevisionDesignator, RevisionId
from sparql_ext.window_data import Element, ElementIndex, Window
from sparql_ext.window_kinds import NAMED_KINDS, WindowSpec
from sparql_ext.windowref import WindowRef, format_revision

__all__ = ["EPOCH", "Element", "ElementIndex", "ListIndex", "Window", "WindowNotResolvable", "WindowSpec",
           "bind_origin", "bounds", "format_micros", "from_micros", "is_complete", "resolve", "to_micros", "window",
           "windows"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(at: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact: no float on the way).

    >>> to_micros(datetime(2016, 6, 20, 10, tzinfo=UTC))
    1466416800000000
    """
    if at.utcoffset() is None:
        raise ValueError(f"{at.isoformat()} has no timezone; stream time is absolute")
    since = at - EPOCH  # integer arithmetic: a timedelta's floor division is slower (a timestamp per element)
    return (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds


def format_micros(value: int) -> str:
    """µs since the epoch as an xsd:dateTime in UTC, in XSD's canonical form (no trailing zeros in the
    fraction, as pyoxigraph writes dateTimes back), so lexical forms compare equal.

    >>> format_micros(1_466_416_815_526_860), format_micros(1_466_416_800_000_000)
    ('2016-06-20T10:00:15.52686Z', '2016-06-20T10:00:00Z')
    """
    seconds, micros_part = divmod(value, 1_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{micros_part:06d}".rstrip("0") + "Z" if micros_part else f"{text}Z"


def from_micros(micros: int) -> datetime:
    """The UTC datetime of a number of microseconds since the epoch (inverse of ``to_micros``)."""
    return EPOCH + timedelta(microseconds=micros)


class WindowNotResolvable(SparqlExtError):
    """A well-formed WindowRef that names nothing in this stream (404) or an empty/backwards range (400)."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status_hint = status


class ListIndex:
    """``ElementIndex`` over a list of elements (ordinals 1..n in order), by linear scans."""

    def __init__(self, elements: Iterable[Element], uuids: Mapping[uuid.UUID, int] | None = None) -> None:
        self._elements = tuple(elements)
        for position, element in enumerate(self._elements, start=1):
            if element.ordinal != position:
                raise ValueError(f"element {element} is at position {position}: ordinals must be 1..n in order")
        self._uuids = dict(uuids or {})

    @classmethod
    def of_times(cls, times: Iterable[int], uuids: Mapping[uuid.UUID, int] | None = None) -> ListIndex:
        """The stream whose element n has the n-th of ``times``."""
        return cls((Element(ordinal, time) for ordinal, time in enumerate(times, start=1)), uuids)

    def head(self) -> int:
        return len(self._elements)

    def time_of(self, ordinal: int) -> int | None:
        return self._elements[ordinal - 1].time if 1 <= ordinal <= len(self._elements) else None

    def ordinal_of(self, revision_uuid: uuid.UUID) -> int | None:
        return self._uuids.get(revision_uuid)

    def last_at_or_before(self, time: int) -> int | None:
        return max((element.ordinal for element in self._elements if element.time <= time), default=None)

    def elements(self, first: int, last: int) -> list[Element]:
        return [element for element in self._elements if first <= element.ordinal <= last]

    def between(self, start: int, end: int, *, backward: bool) -> list[Element]:
        if backward:
            return [element for element in self._elements if start < element.time <= end]
        return [element for element in self._elements if start <= element.time < end]


def resolve(ref: WindowRef, index: ElementIndex) -> WindowSpec:
    """Fix a WindowRef's anchor against the stream as it is now (registration)."""
    text = str(ref)
    if ref.kind is not None:
        kind = NAMED_KINDS.get(ref.kind)
        if kind is None:
            raise WindowNotResolvable(f"WINDOWS={text}: {ref.kind!r} names no window kind (the kinds: "
                                      f"{', '.join(sorted(NAMED_KINDS))})", status=400)
        return kind.spec_of(ref, text, *_time_anchor(text, ref.start, index))
    if ref.width is not None:
        origin, anchor = _time_anchor(text, ref.start, index)
        backward = ref.width < timedelta(0)
        width = abs(ref.width) // _MICROSECOND
        step, step_kind = _step(ref, width)
        first = 1 if backward and ref.repeating else 0
        return WindowSpec(text, "time", backward, origin, width, step, step_kind, first, ref.count, anchor)
    if ref.end is not None and ref.is_time_range:
        start, anchor = _instant_of(text, ref.start, index)
        end, _ = _instant_of(text, ref.end, index)
        if end <= start:
            raise WindowNotResolvable(
                f"WINDOWS={text}: the range ends at {from_micros(end).isoformat()}, not after its start "
                f"{from_micros(start).isoformat()}", status=400)
        step, step_kind = _step(ref, end - start)
        return WindowSpec(text, "time", False, start, end - start, step, step_kind, 0, ref.count, anchor)
    first_ordinal = _ordinal_of(text, ref.start, index)
    last_ordinal = _ordinal_of(text, ref.end, index) if ref.end is not None else first_ordinal
    if last_ordinal < first_ordinal:
        raise WindowNotResolvable(
            f"WINDOWS={text}: {format_revision(ref.end or ref.start)} is element {last_ordinal}, before "
            f"{format_revision(ref.start)} (element {first_ordinal})", status=400)
    if not ref.repeating:  # one-shot: the elements of the range that can exist ("the last 10" of 5 is 5)
        first_ordinal = max(first_ordinal, 1)
        if last_ordinal < first_ordinal:
            raise WindowNotResolvable(f"WINDOWS={text}: names no element of the stream (ordinal {last_ordinal})")
    if isinstance(ref.step, timedelta):  # the parser refuses it; a hand-built WindowRef may not
        raise WindowNotResolvable(f"WINDOWS={text}: an element range steps by elements, not a duration", status=400)
    width = last_ordinal - first_ordinal + 1
    step = ref.step if ref.step is not None else width
    first = 0 if first_ordinal >= 1 else -((first_ordinal - 1) // step)  # skip windows starting before 1
    return WindowSpec(text, "count", False, first_ordinal, width, step, "count", first, ref.count)


def bind_origin(spec: WindowSpec, index: ElementIndex) -> WindowSpec:
    """The spec with t0 fixed once its anchor element has arrived; unchanged otherwise."""
    if spec.origin is None and spec.anchor is not None and (time := index.time_of(spec.anchor)) is not None:
        return replace(spec, origin=time)
    return spec


def bounds(spec: WindowSpec, k: int, index: ElementIndex) -> tuple[int, int] | None:
    """Bounds of window k, or None while not determinable (pending t0, count-step element not arrived)."""
    return spec.window_kind.bounds(k, index)


def is_complete(spec: WindowSpec, k: int, index: ElementIndex, watermark: int | None) -> bool:
    """Time window: the watermark (stream time known to have passed) reached its end; count: its last
    element arrived. Both membership conventions need w ≥ end: forward excludes end, backward includes it,
    and timestamps only increase up to w."""
    return spec.window_kind.complete(k, index, watermark, index.head())


def window(spec: WindowSpec, k: int, index: ElementIndex) -> Window | None:
    """Window k with the elements it holds so far (complete or not); None while its bounds are unknown."""
    return spec.window_kind.window(k, index)


def windows(spec: WindowSpec, index: ElementIndex, watermark: int | None) -> list[Window]:
    """Every complete window from ``spec.first`` on, in order (empty time windows included), stopping at
    the first incomplete one or after ``spec.count`` windows. Windows complete in order of k."""
    result: list[Window] = []
    k = spec.first
    while (spec.count is None or k < spec.first + spec.count) and is_complete(spec, k, index, watermark):
        found = window(spec, k, index)
        assert found is not None, "a complete window has bounds"
        result.append(found)
        k += 1
    return result


def _step(ref: WindowRef, width: int) -> tuple[int, Literal["time", "count"]]:
    if isinstance(ref.step, int):
        return ref.step, "count"
    if ref.step is not None:
        return ref.step // _MICROSECOND, "time"
    return width, "time"  # ISO 8601 default: tumbling


def _head_ordinal(index: ElementIndex) -> int:
    """HEAD is the latest element; in an empty stream, the first one (still to come)."""
    return index.head() or 1


def _ordinal_of(text: str, revision: RevisionDesignator, index: ElementIndex) -> int:
    """The element a designator names (may be < 1 for HEAD~n, or not yet arrived for HEAD/ordinals)."""
    match revision:
        case Head(back=back):
            return _head_ordinal(index) - back
        case Ordinal(number=number):
            return number
        case RevisionId(uuid=value):
            ordinal = index.ordinal_of(value)
            if ordinal is None:
                raise WindowNotResolvable(f"WINDOWS={text}: no element of this stream is revision {value}")
            return ordinal
        case Instant(at=at):
            ordinal = index.last_at_or_before(to_micros(at))
            if ordinal is None:
                raise WindowNotResolvable(f"WINDOWS={text}: no element at or before {at.isoformat()}")
            return ordinal
    raise TypeError(f"not a revision designator: {revision!r}")


def _time_anchor(text: str, revision: RevisionDesignator, index: ElementIndex) -> tuple[int | None, int | None]:
    """(t0, anchor ordinal) of a time window; t0 is None while the anchor element has not arrived."""
    if isinstance(revision, Instant):
        return to_micros(revision.at), None
    ordinal = _ordinal_of(text, revision, index)
    if ordinal < 1:
        raise WindowNotResolvable(
            f"WINDOWS={text}: {format_revision(revision)} names no element (the stream has {index.head()})")
    return index.time_of(ordinal), ordinal


def _instant_of(text: str, revision: RevisionDesignator, index: ElementIndex) -> tuple[int, int | None]:
    """(time, ordinal) of one end of a time range; an element end must have arrived."""
    origin, anchor = _time_anchor(text, revision, index)
    if origin is None:
        raise WindowNotResolvable(
            f"WINDOWS={text}: {format_revision(revision)} (element {anchor}) has not arrived, so the range "
            "has no time bound yet")
    return origin, anchor
