"""Where a continuous response starts, and resuming one where a previous response stopped
(docs/continuous.md, "Resuming").

- ``after=N``: the response sends windows N+1, N+2, … of the sequence: those already materialized are replayed
  from the window log, then it goes on live. The stream operator's previous window is the one an uninterrupted
  response had when it sent window N+1: the latest window ≤ N it evaluated (window N itself when the client
  received N), evaluated again here and not sent (``seed``), so IStream / DStream parts are the same.
- ``from=S``: starts at window S as a new response would: no previous window. A client that received no window
  yet resumes with the ``Window-From`` header of its first response.
- ``Last-Event-ID`` (``event-stream`` only): what a browser's EventSource sends when it reconnects, the ``id:``
  of the last event it received (a window index): the same as ``after=``. It wins over ``after=`` / ``from=``,
  which EventSource repeats unchanged from the URL it was opened with.
- ``sequence=ID``: the ``Window-Sequence`` header of the response being resumed. A ``HEAD`` ref names another
  sequence at every registration (its own t0), so a resume names the one it was reading; without it, the newest
  sequence of the ref is resumed. A sequence nobody read for ``RETIRE_AFTER_SECONDS`` is retired: 410.

Not resumable (400): ``report=content-change`` (evaluated at every arrival: its state is not a window) and
``periodic:`` (its due times count from the first window the original response evaluated, which the server does
not know). Gone (410): a resume point more than ``MAX_LAG`` windows behind the latest (a live response that far
behind is ended too), or whose windows' elements retention has expired (the replayed results would be wrong).
Past the last window of an ``Rn`` ref: 204, which also tells EventSource to stop reconnecting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from delivery.feeds import Start
from protocol.errors import BadRequest, Gone
from sparql_ext.reporting import ReportPolicy, ReportSpec
from sparql_ext.windowing import resolve
from sparql_ext.windowref import WindowRef
from store.stream import Stream
from store.windows import Sequence, WindowRevision

INDEX = re.compile(r"[0-9]{1,15}")


def requested_start(args: Mapping[str, str], last_event_id: str | None, packaging: str) -> Start | None:
    """The resume point a request asks for (``last_event_id``: its ``Last-Event-ID`` header), or None (a new
    response)."""
    last_event = (last_event_id or "").strip() if packaging == "event-stream" else ""
    if last_event:
        return Start(_index(last_event, "Last-Event-ID") + 1, True, f"Last-Event-ID: {last_event}")
    after, start = args.get("after"), args.get("from")
    if after is not None and start is not None:
        raise BadRequest(f"after={after!r} and from={start!r}: give one (after=N resumes after window N, from=S "
                         "starts at window S)")
    if after is not None:
        return Start(_index(after, "after") + 1, True, f"after={after}")
    if start is not None:
        return Start(_index(start, "from"), False, f"from={start}")
    return None


def _index(text: str, parameter: str) -> int:
    if not INDEX.fullmatch(text.strip()):
        raise BadRequest(f"{parameter}={text!r} is not a window index (an integer ≥ 0, as in the Window-Index "
                         "header or the event id of a window)")
    return int(text)


def check_resumable(start: Start, spec: ReportSpec) -> None:
    if ReportPolicy.CONTENT_CHANGE in spec.policies:
        raise BadRequest(f"{start.parameter}: a report=content-change response cannot be resumed (it is evaluated "
                         "at every element arrival, not per window); reconnect without after=/from=")
    if ReportPolicy.PERIODIC in spec.policies:
        raise BadRequest(f"{start.parameter}: a report=periodic:… response cannot be resumed (its due times count "
                         "from the first window the original response evaluated); reconnect without after=/from=")


def subscribed_sequence(stream: Stream, ref: WindowRef, expected: str | None, resuming: bool) -> Sequence:
    """The sequence a continuous response reads. A new response registers ``ref`` as it resolves now (``HEAD`` is
    this moment's HEAD, so a later subscriber gets its own t0 and its own windows; two that resolve alike share
    one). A resumed one reads the sequence it was reading: ``sequence=ID`` (the ``Window-Sequence`` header it got),
    else the newest sequence of this ref (an EventSource reconnects with its first URL and ``Last-Event-ID``)."""
    canonical = str(ref)
    if expected is not None:
        found = stream.windows.sequence(expected)
        if found is not None and found.ref == canonical:
            return found
        if stream.windows.retired(expected):
            raise Gone(f"sequence={expected!r} was retired (nobody read it for a while): reconnect without "
                       "sequence= and after=/from= to start anew")
        if found is not None:
            raise BadRequest(f"sequence={expected!r} is a sequence of {found.ref}, not of {canonical}: the resume "
                             "point belongs to another ref")
        raise BadRequest(f"sequence={expected!r}: stream {stream.config.name!r} has no such sequence of {canonical}")
    if resuming and (registered := stream.windows.with_ref(canonical)):
        return registered[-1]
    return stream.register(canonical, resolve(ref, stream))


def check_available(stream: Stream, sequence: Sequence, start: Start, seed: WindowRevision | None,
                    max_lag: int) -> None:
    """410 when the windows from ``start`` (and its seed) cannot be replayed as they were first sent."""
    latest = stream.windows.latest(sequence.id)
    if latest is not None and latest.index - start.index > max_lag:
        raise Gone(f"{start.parameter}: window {start.index} is {latest.index - start.index} windows behind the "
                   f"latest ({latest.index}), more than the {max_lag} a response may lag: reconnect without "
                   "after=/from= to continue live")
    replayed = stream.windows.windows_from(sequence.id, start.index, 0)
    for revision in ([seed] if seed is not None else []) + replayed[:1]:
        if revision.runs and revision.runs[0][0] < stream.first_ordinal:
            raise Gone(f"{start.parameter}: window {revision.index}'s elements (from ordinal {revision.runs[0][0]}) "
                       f"were expired by the stream's retention (it keeps ordinals from {stream.first_ordinal}): "
                       "reconnect without after=/from= to continue live")


def past_the_end(start: Start, count: int | None, first: int = 0) -> bool:
    """Whether an ``Rn`` response resumed at ``start`` has nothing left to send (windows first … first + n - 1;
    ``first`` is 1 for repeating backward windows)."""
    return count is not None and start.index > first + count - 1
