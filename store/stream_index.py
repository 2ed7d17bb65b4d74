"""A stream's element index: ordinal → timestamp, graph name and commit time of every retained element, the
stream time, and the origins of rule outputs (exactly-once). Rebuilt from the element log at start-up; updated by
the committer after each group's log lines are durable. It is the ``ElementIndex`` that window resolution and the
window core read (``sparql_ext.windowing``, ``sparql_ext.window_state``).

Parallel lists by ``ordinal - first_ordinal`` (expired elements are cut off the front); with a configured lateness
timestamps are not ordered by ordinal, so a time-ordered copy (``_by_time``) answers time look-ups.
"""

from __future__ import annotations

import bisect
import threading
import uuid
from array import array
from collections.abc import Callable

from sparql_ext.windowing import Element
from store.durable import now_micros
from store.element_log import Location
from store.log_records import ElementRecord

PUNCTUATIONS_KEPT = 10_000  # punctuation commit times kept for ``reached_at`` (between this and twice as many)


class StreamIndex:
    """The index of one stream; ``Stream`` extends it with storage and committing."""

    def __init__(self, uuid_prefix: int, *, time_ordered: bool) -> None:
        self.first_ordinal = 1
        self._uuid_prefix = uuid_prefix  # the high 64 bits of the stream's revision UUIDs
        self._time_ordered = time_ordered  # keep ``_by_time`` (a lateness is configured)
        # parallel columns by ordinal - first_ordinal; numbers in arrays (8 bytes each: the index of a long stream
        # stays small)
        self._times = array("q")
        self._graphs: list[str] = []
        self._commits = array("q")
        self._segments = array("q")  # where each element's content is in the element log (Location)
        self._offsets = array("q")
        self._lengths = array("q")
        self._graph_ordinals: dict[str, int] = {}
        self._by_time: list[tuple[int, int]] = []  # (time, ordinal), sorted; only kept with a lateness
        self._origins: set[str] = set()  # origins of committed elements a rule made (ParsedElement.origin)
        self._origin_of: dict[int, str] = {}  # the same by ordinal (a rule's publication picks its own outputs)
        self.stream_time: int | None = None  # max timestamp or punctuation committed
        self.punctuations = 0
        # the latest punctuations: the running maximum of their times (so it only grows) and their commit times
        self._punctuation_reach = array("q")
        self._punctuation_commits = array("q")
        self._changed = threading.Condition()  # notified after every commit

    # -- sparql_ext.windowing.ElementIndex ---------------------------------------------------------------------

    def head(self) -> int:
        return self.first_ordinal + len(self._times) - 1

    def __len__(self) -> int:
        return len(self._times)

    def time_of(self, ordinal: int) -> int | None:
        i = ordinal - self.first_ordinal
        return self._times[i] if 0 <= i < len(self._times) else None

    def ordinal_of(self, revision_uuid: uuid.UUID) -> int | None:
        value = revision_uuid.int
        if value >> 64 != self._uuid_prefix:
            return None
        ordinal = value & ((1 << 62) - 1)
        return ordinal if self.time_of(ordinal) is not None else None

    def last_at_or_before(self, time: int) -> int | None:
        if self._by_time:
            i = bisect.bisect_right(self._by_time, (time, 1 << 62))
            return self._by_time[i - 1][1] if i else None
        i = bisect.bisect_right(self._times, time)
        return self.first_ordinal + i - 1 if i else None

    def elements(self, first: int, last: int) -> list[Element]:
        """Retained elements with ordinals first..last."""
        lo = max(first, self.first_ordinal) - self.first_ordinal
        hi = min(last, self.head()) - self.first_ordinal
        return [Element(self.first_ordinal + i, self._times[i]) for i in range(lo, hi + 1)]

    def between(self, start: int, end: int, *, backward: bool) -> list[Element]:
        """Elements with time in [start, end), or (start, end] if backward."""
        if self._by_time:
            pairs = self._by_time
            lo = bisect.bisect_right(pairs, (start, 1 << 62)) if backward else bisect.bisect_left(pairs, (start, 0))
            hi = bisect.bisect_right(pairs, (end, 1 << 62)) if backward else bisect.bisect_left(pairs, (end, 0))
            return sorted((Element(o, t) for t, o in pairs[lo:hi]), key=lambda e: e.ordinal)
        times = self._times
        lo = bisect.bisect_right(times, start) if backward else bisect.bisect_left(times, start)
        hi = bisect.bisect_right(times, end) if backward else bisect.bisect_left(times, end)
        return [Element(self.first_ordinal + i, times[i]) for i in range(lo, hi)]

    # -- more look-ups ------------------------------------------------------------------------------------------

    def first_at_or_after(self, time: int) -> Element | None:
        """The retained element with the earliest timestamp at or after ``time`` (the lowest ordinal among equals)."""
        if self._by_time:
            i = bisect.bisect_left(self._by_time, (time, 0))
            return Element(self._by_time[i][1], self._by_time[i][0]) if i < len(self._by_time) else None
        i = bisect.bisect_left(self._times, time)
        return Element(self.first_ordinal + i, self._times[i]) if i < len(self._times) else None

    def record(self, ordinal: int) -> ElementRecord | None:
        i = ordinal - self.first_ordinal
        if not 0 <= i < len(self._times):
            return None
        return ElementRecord(ordinal, self._times[i], self._graphs[i], self._commits[i])

    def uuid_of(self, ordinal: int) -> uuid.UUID:
        return uuid.UUID(int=(self._uuid_prefix << 64) | (1 << 63) | ordinal)

    def ordinal_of_graph(self, graph: str) -> int | None:
        return self._graph_ordinals.get(graph)

    def location(self, ordinal: int) -> Location | None:
        """Where the element's content is in the element log."""
        i = ordinal - self.first_ordinal
        if not 0 <= i < len(self._times):
            return None
        return Location(self._segments[i], self._offsets[i], self._lengths[i])

    def graph_of(self, ordinal: int) -> str | None:
        i = ordinal - self.first_ordinal
        return self._graphs[i] if 0 <= i < len(self._graphs) else None

    def has_origin(self, origin: str) -> bool:
        """Whether an element made by ``origin`` (a rule firing's output) is committed: a firing repeated after a
        crash skips what its first run already committed."""
        with self._changed:
            return origin in self._origins

    def origin_of(self, ordinal: int) -> str | None:
        """What made a committed element, when a rule did ("rule/sequence/window/position")."""
        return self._origin_of.get(ordinal)

    def rate(self, period: int) -> float:
        """Elements committed per second over the last ``period`` µs."""
        since = now_micros() - period
        recent = len(self._commits) - bisect.bisect_left(self._commits, since)
        return round(recent / (period / 1_000_000), 3)

    def rate_history(self, width: int, buckets: int, now: int | None = None) -> list[float]:
        """Elements committed per second in each of the last ``buckets`` periods of ``width`` µs, oldest first (the
        newest ends now): the stream's rate over the last minutes, from the commit times the index holds."""
        now = now_micros() if now is None else now
        edges = [now - width * (buckets - i) for i in range(buckets + 1)]
        with self._changed:
            counts = [bisect.bisect_right(self._commits, edge) for edge in edges]
        return [round((counts[i + 1] - counts[i]) / (width / 1_000_000), 3) for i in range(buckets)]

    def reached_at(self, time: int) -> int | None:
        """When stream time first reached ``time``: the commit time (µs) of the first committed record, element or
        punctuation, whose timestamp is at or after it; None when no retained record is. (The start of a window's
        latency: a time window completes once stream time reaches its end plus the lateness.)"""
        found: list[int] = []
        with self._changed:
            if self._by_time:  # with a lateness, later ordinals may hold earlier times: the first ordinal after it
                later = self._by_time[bisect.bisect_left(self._by_time, (time, 0)):]
                if later:
                    found.append(self._commits[min(ordinal for _, ordinal in later) - self.first_ordinal])
            else:
                i = bisect.bisect_left(self._times, time)
                if i < len(self._times):
                    found.append(self._commits[i])
            j = bisect.bisect_left(self._punctuation_reach, time)
            if j < len(self._punctuation_reach):
                found.append(self._punctuation_commits[j])
        return min(found, default=None)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` holds after a commit, or ``timeout`` seconds pass."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    # -- changes (the committer's, and recovery's) ---------------------------------------------------------------

    def _keep_time_order(self) -> None:
        """From now on keep the time-ordered copy (a lateness was configured); once kept, always kept (elements
        committed with a lateness stay out of ordinal order)."""
        if not self._time_ordered:
            with self._changed:
                self._by_time = sorted((t, self.first_ordinal + i) for i, t in enumerate(self._times))
                self._time_ordered = True

    def _index(self, ordinal: int, time: int, graph: str, commit: int, origin: str | None = None,
               location: Location | None = None) -> None:
        """Add a committed element (ordinal 0: a punctuation) to the index."""
        if ordinal == 0:
            self.punctuations += 1
            reach = self._punctuation_reach
            if len(reach) >= 2 * PUNCTUATIONS_KEPT:  # keep the latest: older ones completed their windows long ago
                del reach[:PUNCTUATIONS_KEPT], self._punctuation_commits[:PUNCTUATIONS_KEPT]
            reach.append(max(time, reach[-1]) if reach else time)
            self._punctuation_commits.append(commit)
        else:
            if not self._times:
                self.first_ordinal = ordinal
            self._times.append(time)
            self._graphs.append(graph)
            self._commits.append(commit)
            assert location is not None, "an element's content is in the log"
            self._segments.append(location.segment)
            self._offsets.append(location.offset)
            self._lengths.append(location.length)
            self._graph_ordinals[graph] = ordinal
            if self._time_ordered:
                bisect.insort(self._by_time, (time, ordinal))
            if origin is not None:
                self._origins.add(origin)
                self._origin_of[ordinal] = origin
        self.stream_time = time if self.stream_time is None else max(self.stream_time, time)

    def _cut(self, before: int) -> list[str]:
        """Drop the elements with ordinals below ``before`` (retention); returns their graph names."""
        count = max(0, min(before, self.head() + 1) - self.first_ordinal)
        dropped = self._graphs[:count]
        for column in (self._times, self._graphs, self._commits, self._segments, self._offsets, self._lengths):
            del column[:count]
        for graph in dropped:
            self._graph_ordinals.pop(graph, None)
        for ordinal in range(self.first_ordinal, self.first_ordinal + count):
            self._origin_of.pop(ordinal, None)
        if self._by_time:
            self._by_time = [pair for pair in self._by_time if pair[1] >= self.first_ordinal + count]
        self.first_ordinal += count
        return dropped
