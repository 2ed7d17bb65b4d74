"""Following a window sequence: what a continuous response sends, window after window (docs/continuous.md).

A feed is a generator of ``Item`` (a window's result, with its ``Window-*`` headers), ``Notice`` (a closing
remark: the response fell too far behind) and ``None`` ("nothing new within ``wait`` seconds"). With ``wait=0`` it
never blocks: the fan-out (``delivery.fanout``) advances it when the stream commits, from a small pool of threads,
and gives each item to every subscriber of the feed; with ``wait>0`` one thread follows it (a server without the
fan-out, such as Werkzeug's). The generator ends after the last window of an ``Rn`` ref.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sparql_ext.reporting import ReportPolicy, ReportSpec, StreamOperator
from sparql_ext.windowing import Window, WindowSpec, bind_origin, format_micros
from sparql_ext.windowref import WindowRef
from store.stream import Stream
from store.windows import Sequence, WindowRevision

MAX_LAG = 1_000  # windows a response may fall behind the latest before it is ended (reconnect to go on live)

#: ``produce(ordinals, commit, at)``: a window's (or an arrival's) document, or None when the report policy says
#: nothing for it (``delivery.results.producer``)
Produce = Callable[[list[int], int, int], bytes | None]


@dataclass(frozen=True)
class Start:
    """The first window index a response sends; ``seeded``: whether the stream operator's previous window is the
    latest window evaluated before it (a resumed response) rather than none (a new one)."""

    index: int
    seeded: bool
    parameter: str  # how the client asked for it, for error messages


@dataclass(frozen=True)
class Item:
    """One window's result: its index in the sequence, its headers (``Window-Index``, ``Window-Id``,
    ``Window-Committed``, bounds; ``Arrival-*`` for content-change reports) and its document."""

    index: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Notice:
    """A closing remark: the feed ends after it."""

    message: str


Step = Item | Notice | None


def bounds_headers(kind: str, start: int, end: int) -> dict[str, str]:
    """A window's bounds: instants, or element ordinals for count windows."""
    if kind == "count":
        return {"Window-Start": f"element {start}", "Window-End": f"element {end}"}
    return {"Window-Start": format_micros(start), "Window-End": format_micros(end)}


def first_index(ref: WindowRef, sequence: Sequence, stream: Stream) -> int:
    """Where a new continuous response starts: the whole sequence for a ref anchored at a past dateTime (a
    replay), else the first window not yet materialized."""
    if type(ref.start).__name__ == "Instant":
        return 0
    return stream.windows.state.next_index.get(sequence.id, 0)


def seed_window(stream: Stream, sequence: Sequence, start: Start, spec: ReportSpec) -> WindowRevision | None:
    """The window to evaluate (not send) before ``start``: the latest one before it that the response would have
    fed to its Reporter; None when there is none or the operator does not look back (RStream)."""
    if not start.seeded or spec.operator is StreamOperator.RSTREAM:
        return None
    keep: Callable[[WindowRevision], bool] = lambda _: True  # noqa: E731
    if ReportPolicy.NON_EMPTY_CONTENT in spec.policies:  # windows without elements are not evaluated at all
        keep = lambda revision: revision.count > 0  # noqa: E731
    return stream.windows.last_before(sequence.id, start.index, keep)


def last_index(ref: WindowRef, sequence: Sequence) -> int | None:
    """The last window an ``Rn`` ref asks for (n windows from the sequence's first), None when it repeats
    without end."""
    return None if ref.count is None else sequence.spec.first + ref.count - 1


def stateless(spec: ReportSpec) -> bool:
    """Whether what a window gives depends on that window alone (RStream, reported at window close, possibly only
    when not empty): then every subscriber that starts at the same window can share one feed."""
    return spec.operator is StreamOperator.RSTREAM and spec.policies <= {ReportPolicy.WINDOW_CLOSE,
                                                                           ReportPolicy.NON_EMPTY_CONTENT}


def windows_items(stream: Stream, sequence: Sequence, start: int, last: int | None, produce: Produce,
                  wait: float) -> Iterator[Step]:
    """The items of a sequence's windows from index ``start`` (to ``last`` for an ``Rn`` ref), as they complete."""
    index = start
    while last is None or index <= last:
        revisions = stream.windows.windows_from(sequence.id, index, wait)
        if not revisions:
            yield None
            continue
        latest = stream.windows.latest(sequence.id)
        if latest is not None and latest.index - revisions[0].index > MAX_LAG:
            yield Notice(f"this response fell {latest.index - revisions[0].index} windows behind (more than "
                         f"{MAX_LAG}) and was ended: reconnect to continue live")
            return
        if last is not None and revisions[0].index > last:
            return  # the sequence skipped past the last window (a long empty stretch it did not emit)
        for revision in itertools.takewhile(lambda r: last is None or r.index <= last, revisions):
            body = produce(list(revision.ordinals()), revision.commit, revision.end)
            index = revision.index + 1
            if body is None:
                continue  # the report policy says nothing for this window
            headers = {"Window-Index": str(revision.index), "Window-Id": revision.uuid,
                       "Window-Committed": format_micros(revision.commit),
                       **bounds_headers(sequence.spec.kind, revision.start, revision.end)}
            yield Item(revision.index, headers, body)


def active_window(spec: WindowSpec, k: int, ordinal: int, at: int, index: Stream) -> tuple[int, Window | None]:
    """The oldest window of ``spec`` holding the element ``ordinal`` (time ``at``), searched from window ``k`` on
    (arrivals come in order, so the search only moves forward): ``(k, window)``, window None when no window holds
    the element (before the first window, or in a gap between hopping windows) or its bounds are not known yet (t0
    or a count step). Its ``elements`` are all those of the window known now; the caller keeps the ones arrived so
    far."""
    return spec.window_kind.locate(k, ordinal, at, index)


def first_arrival(ref: WindowRef, stream: Stream) -> int:
    """Where a content-change response starts: every retained element for a ref anchored at a past dateTime (a
    replay), else the next element to arrive."""
    if type(ref.start).__name__ == "Instant":
        return stream.first_ordinal
    return stream.head() + 1


def arrived(stream: Stream, ordinal: int) -> bool:
    return stream.head() >= ordinal


def origin_bound(spec: WindowSpec, stream: Stream) -> bool:
    return bind_origin(spec, stream).origin is not None


def arrivals_items(stream: Stream, sequence: Sequence, first_ordinal: int, last: int | None, produce: Produce,
                   wait: float) -> Iterator[Step]:
    """The items of a ``report=content-change`` response: the query is evaluated at **every element arrival**,
    over the oldest window holding the element with the elements arrived so far (the CSRBench oracle's
    content-change policy, CQELS's behaviour), not at window completions. Each item's ``Window-*`` headers name
    that window, with ``Arrival-Ordinal`` / ``Arrival-Time`` the element's.

    Arrivals are followed on the stream's index (``Stream.wait_for``), in ordinal order; ``Rn`` ends the feed
    once an arrival falls after window n-1 or the window log has completed window n-1 (its end has passed: every
    element of it has arrived)."""
    spec = sequence.spec
    ordinal, k = first_ordinal, spec.first
    while True:
        if ordinal > stream.head():
            latest = stream.windows.latest(sequence.id)
            if last is not None and latest is not None and latest.index >= last and ordinal > stream.head():
                return  # window n-1 is complete and every arrival up to it was evaluated
            if not stream.wait_for(functools.partial(arrived, stream, ordinal), wait):
                yield None
            continue
        record = stream.record(ordinal)
        if record is None:  # expired before it was read: go on with the oldest retained element
            ordinal = max(ordinal + 1, stream.first_ordinal)
            continue
        spec = bind_origin(spec, stream)
        k, active = active_window(spec, k, ordinal, record.time, stream)
        if last is not None and k > last:
            return
        if active is None:
            if spec.pending:
                if not stream.wait_for(functools.partial(origin_bound, spec, stream), wait):
                    yield None
                continue  # t0 not known yet: try this arrival again
            ordinal += 1
            continue
        members = [o for o in active.elements if o <= ordinal]
        body = produce(members, record.commit, record.time)
        ordinal += 1
        if body is None:
            continue
        headers = {"Window-Index": str(active.index), "Window-Id": "",
                   "Window-Committed": format_micros(record.commit),
                   **bounds_headers(spec.kind, active.start, active.end),
                   "Arrival-Ordinal": str(record.ordinal), "Arrival-Time": format_micros(record.time)}
        yield Item(active.index, headers, body)
