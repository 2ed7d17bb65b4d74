"""Continuous responses: a repeating windowed IRI (``?WINDOWS=R…``) answered with one result per window, as each
window completes (seed 003, "alternative stream packaging options"; docs/continuous.md).

- **Packaging** (``packaging=``, or ``Accept: multipart/mixed`` / ``text/event-stream``):
  ``chunked`` (default: one complete document per HTTP chunk, the boundary is significant), ``lines`` (a
  continuous N-Quads / N-Triples stream: boundaries are not significant), ``multipart`` (``multipart/mixed``, a
  part per window with its own headers), ``event-stream`` (``text/event-stream`` for browsers: an event per
  window, ``id:`` its index). The document type of each window: ``format=`` or the Accept header.
- **Which windows**: from the first window completing after the request (a ``R/<dateTime>/…`` ref anchored in
  the past replays the sequence from its first window, then continues live); ``Rn`` ends the response after its
  sequence's window n-1. ``after=N`` / ``from=S`` / ``Last-Event-ID`` resume where an interrupted response stopped
  (``protocol/resume.py``); the ``Window-From`` header says where a response starts.
- **Content change** (``report=`` containing ``content-change``): the query is evaluated at every element
  arrival, over the oldest window holding the element with the elements arrived so far (``arrivals_body``), not
  at window completions; results go through the Reporter as bags (``numbered``).
- **Pull, not push**: the response reads window revisions from the stream's window log at the client's pace.
  Nothing is buffered per client and ingestion never waits for one; a client that falls more than
  ``MAX_LAG`` windows behind the latest is ended (its last part says so where the packaging can).
- **Registrations** are listed in ``/status`` (``continuous``) while the response runs; a client that disconnects
  is noticed within ``POLL_SECONDS`` (gunicorn's socket is polled while waiting) and its registration removed.
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flask import Response, request

from protocol.errors import BadRequest
from protocol.packaging import WEBSOCKET, Packager, choose
from protocol.responses import bounds_headers, gunicorn_client_gone
from protocol.resume import (
    Start,
    check_available,
    check_resumable,
    past_the_end,
    requested_start,
    seed_window,
    subscribed_sequence,
)
from protocol.services import Registration, Registrations, services
from protocol.window_results import kind_of, producer
from sparql_ext.reporting import ReportPolicy, parse_report
from sparql_ext.windowing import Window, WindowSpec, bind_origin, bounds, format_micros, window
from sparql_ext.windowref import WindowRef, parse_window_ref
from store.durable import now_micros
from store.stream import Stream
from store.windows import Sequence

POLL_SECONDS = 0.5
MAX_LAG = 1_000


# -- the response body ----------------------------------------------------------------------------------------

def first_index(ref: WindowRef, sequence: Sequence, stream: Stream) -> int:
    """Where a new continuous response starts: the whole sequence for a ref anchored at a past dateTime (a
    replay), else the first window not yet materialized."""
    if type(ref.start).__name__ == "Instant":
        return 0
    return stream.windows.state.next_index.get(sequence.id, 0)


def windows_body(stream: Stream, ref: WindowRef, sequence: Sequence, start: int,
                 produce: Callable[[list[int], int, int], bytes | None], packager: Packager,
                 registration: Registration, registrations: Registrations,
                 client_gone: Callable[[], bool]) -> Iterator[bytes]:
    """The body of a continuous response; its ``finally`` ends the registration (disconnect, Rn reached, error)."""
    last = None if ref.count is None else sequence.spec.first + ref.count - 1  # Rn: n windows from the first
    index = start
    registrations.add(registration)
    stream.windows.hold(sequence.id)
    try:
        opening = packager.opening()
        if opening:
            yield opening
        while last is None or index <= last:
            revisions = stream.windows.windows_from(sequence.id, index, POLL_SECONDS)
            if not revisions:
                if client_gone():
                    return
                keepalive = packager.keepalive()
                if keepalive:
                    yield keepalive
                continue
            latest = stream.windows.latest(sequence.id)
            if latest is not None and latest.index - revisions[0].index > MAX_LAG:
                yield packager.notice(f"this response fell {latest.index - revisions[0].index} windows behind "
                                      f"(more than {MAX_LAG}) and was ended: reconnect to continue live")
                return
            for revision in itertools.takewhile(lambda r: last is None or r.index <= last, revisions):
                body = produce(list(revision.ordinals()), revision.commit, revision.end)
                index = revision.index + 1
                if body is None:
                    continue  # the report policy says nothing for this window
                kind = sequence.spec.kind
                headers = {"Window-Index": str(revision.index), "Window-Id": revision.uuid,
                           "Window-Committed": format_micros(revision.commit), **bounds_headers(kind, revision.start,
                                                                                               revision.end)}
                yield registration.delivered(revision.index, packager.part(headers, body))
        if packager.packaging == "multipart":
            yield packager.closing()
    finally:
        registrations.remove(registration.id)
        stream.windows.release(sequence.id)


def active_window(spec: WindowSpec, k: int, ordinal: int, at: int, index: Stream) -> tuple[int, Window | None]:
    """The oldest window of ``spec`` holding the element ``ordinal`` (time ``at``), searched from window ``k`` on
    (arrivals come in order, so the search only moves forward): ``(k, window)``, window None when no window holds
    the element (before the first window, or in a gap between hopping windows). Its ``elements`` are all those of
    the window known now; the caller keeps the ones arrived so far."""
    while True:
        window_bounds = bounds(spec, k, index)
        if window_bounds is None:
            return k, None  # t0 or a count step not known yet
        start, end = window_bounds
        position = ordinal if spec.kind == "count" else at
        past = position > end if spec.kind == "count" or spec.backward else position >= end
        if past:
            k += 1
            continue
        before = position < start if spec.kind == "count" or not spec.backward else position <= start
        return k, None if before else window(spec, k, index)


def arrivals_body(stream: Stream, ref: WindowRef, sequence: Sequence, first_ordinal: int,
                  produce: Callable[[list[int], int, int], bytes | None], packager: Packager,
                  registration: Registration, registrations: Registrations,
                  client_gone: Callable[[], bool]) -> Iterator[bytes]:
    """The body of a continuous response with ``report=content-change``: the query is evaluated at **every
    element arrival**, over the oldest window holding the element with the elements arrived so far (the CSRBench
    oracle's content-change policy, CQELS's behaviour), not at window completions. Each report is a part whose
    ``Window-*`` headers name that window, with ``Arrival-Ordinal`` / ``Arrival-Time`` the element's.

    Arrivals are followed on the stream's index (``Stream.wait_for``), in ordinal order; ``Rn`` ends the response
    once an arrival falls after window n-1 or the window log has completed window n-1 (its end has passed: every
    element of it has arrived)."""
    spec = sequence.spec
    last = None if ref.count is None else spec.first + ref.count - 1
    ordinal, k = first_ordinal, spec.first
    registrations.add(registration)
    stream.windows.hold(sequence.id)
    try:
        opening = packager.opening()
        if opening:
            yield opening
        while True:
            if ordinal > stream.head():
                latest = stream.windows.latest(sequence.id)
                if last is not None and latest is not None and latest.index >= last and ordinal > stream.head():
                    break  # window n-1 is complete and every arrival up to it was evaluated
                if not stream.wait_for(functools.partial(arrived, stream, ordinal), POLL_SECONDS):
                    if client_gone():
                        return
                    keepalive = packager.keepalive()
                    if keepalive:
                        yield keepalive
                continue
            record = stream.record(ordinal)
            if record is None:  # expired before it was read: go on with the oldest retained element
                ordinal = max(ordinal + 1, stream.first_ordinal)
                continue
            spec = bind_origin(spec, stream)
            k, active = active_window(spec, k, ordinal, record.time, stream)
            if last is not None and k > last:
                break
            if active is None:
                if spec.origin is None and spec.kind == "time":
                    stream.wait_for(functools.partial(origin_bound, spec, stream), POLL_SECONDS)
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
            yield registration.delivered(active.index, packager.part(headers, body))
        if packager.packaging == "multipart":
            yield packager.closing()
    finally:
        registrations.remove(registration.id)
        stream.windows.release(sequence.id)


def arrived(stream: Stream, ordinal: int) -> bool:
    return stream.head() >= ordinal


def origin_bound(spec: WindowSpec, stream: Stream) -> bool:
    return bind_origin(spec, stream).origin is not None


def first_arrival(ref: WindowRef, stream: Stream) -> int:
    """Where a content-change response starts: every retained element for a ref anchored at a past dateTime (a
    replay), else the next element to arrive."""
    if type(ref.start).__name__ == "Instant":
        return stream.first_ordinal
    return stream.head() + 1


def registration_for(stream: Stream, ref: WindowRef, packager: Packager, client: str) -> Registration:
    return Registration(uuid.uuid4().hex[:12], stream.config.name, str(ref), packager.packaging,
                        packager.media_type, client, format_micros(now_micros()))




# -- the Flask side -----------------------------------------------------------------------------------------------

class HeadersAtOnce(Response):
    """A response whose status and headers (``Window-Sequence``, ``Window-From`` …) are sent as soon as it starts,
    not with its first body bytes, which for a bare document stream (chunked, lines) may be the first window,
    minutes later. PEP 3333 lets a server hold the headers until the body's first non-empty bytes, except after the
    application calls the ``write()`` callable that ``start_response`` returns: calling it with nothing sends them
    (and no body bytes, so no HTTP chunk: an empty chunk would end the response)."""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        body, status, headers = self.get_wsgi_response(environ)
        write = start_response(status, headers)
        write(b"")
        return body


ANSWERS = ("continuous", "latest")


def wants_continuous(windows: str, answer: str | None) -> bool:
    """A repeating WindowRef answers continuously unless ``answer=latest`` asks for one response over the latest
    complete window (what a federating engine's ``SERVICE`` call needs: it waits for the response's end)."""
    if answer is not None and answer not in ANSWERS:
        raise BadRequest(f"answer={answer!r}: use continuous (one result per window, the default for R… refs) or "
                         "latest (one response over the latest complete window)")
    return parse_window_ref(windows).repeating and answer != "latest"


@dataclass
class Plan:
    """A continuous response made ready before anything is sent (every parameter checked, the sequence
    registered): its body (None: nothing left to send, 204), its headers and its packager."""

    body: Iterator[bytes] | None
    headers: dict[str, str]
    packager: Packager


def continuous_plan(stream: Stream, windows: str, query: str | None, client_gone: Callable[[], bool],
                    websocket: bool = False) -> Plan:
    """The body and headers of a continuous response to this request (``websocket``: one JSON message per window,
    over a WebSocket at the same IRI, see ``protocol.websocket``)."""
    ref = parse_window_ref(windows)
    base = request.host_url.rstrip("/")
    evaluator = services().evaluator.with_local_bases([base])
    kind = kind_of(query, request.base_url)
    if websocket:
        packaging, media_type = WEBSOCKET, choose(kind, None, "multipart", request.args.get("format"))[1]
    else:
        packaging, media_type = choose(kind, request.headers.get("Accept"), request.args.get("packaging"),
                                       request.args.get("format"))
    spec = parse_report(request.args.get("report"), request.args.get("operator"))
    resumed = requested_start(request.args, request.headers.get("Last-Event-ID"), packaging)
    sequence = subscribed_sequence(stream, ref, request.args.get("sequence"), resumed is not None)
    packager = Packager(packaging, media_type)
    produce = producer(stream, query, evaluator, request.base_url, spec, media_type,
                       services().window_results)
    registration = registration_for(stream, ref, packager, request.remote_addr or "")
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Window-Sequence": sequence.id,
               "Report-Policy": ",".join(sorted(p.value for p in spec.policies)),
               "Stream-Operator": spec.operator.value}
    if ReportPolicy.CONTENT_CHANGE in spec.policies and resumed is None:
        body = arrivals_body(stream, ref, sequence, first_arrival(ref, stream), produce, packager, registration,
                             services().continuous, client_gone)
        return Plan(body, headers, packager)
    start = resumed or Start(first_index(ref, sequence, stream), False, "")
    if resumed is not None:
        check_resumable(resumed, spec)
        if past_the_end(resumed, ref.count, sequence.spec.first):
            return Plan(None, headers, packager)  # nothing left; EventSource stops reconnecting
        seed = seed_window(stream, sequence, resumed, spec)
        check_available(stream, sequence, resumed, seed, MAX_LAG)
        if seed is not None:  # evaluated, not sent: the operator's previous window, as before the interruption
            produce(list(seed.ordinals()), seed.commit, seed.end)
    body = windows_body(stream, ref, sequence, start.index, produce, packager, registration,
                        services().continuous, client_gone)
    return Plan(body, {**headers, "Window-From": str(start.index)}, packager)


def continuous_response(stream: Stream, windows: str, query: str | None) -> Response:
    if request.args.get("packaging") == WEBSOCKET:
        raise BadRequest("packaging=websocket: open a WebSocket to this IRI instead (an HTTP Upgrade request, e.g. "
                         "new WebSocket('ws://…/streams/NAME?WINDOWS=R/…') in a browser)")
    plan = continuous_plan(stream, windows, query, gunicorn_client_gone(request.environ))
    if plan.body is None:
        return Response(status=204, headers=plan.headers)
    return HeadersAtOnce(plan.body, mimetype=None, content_type=plan.packager.content_type, headers=plan.headers)
