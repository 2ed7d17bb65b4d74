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
  arrival, over the oldest window holding the element with the elements arrived so far
  (``delivery.feeds.arrivals_items``), not at window completions; results go through the Reporter as bags.
- **No thread while waiting**: once validated and its headers sent, the response's connection is handed to the
  fan-out (``delivery.fanout``), which writes every subscriber's windows from one event loop; subscribers that
  cannot get different results share one evaluation per window. Ingestion never waits for a subscriber; one
  that falls more than ``MAX_LAG`` windows behind the latest, or reads too slowly, is ended (its last part says
  so where the packaging can). Without the fan-out (a server other than ``concentrator serve``, such as
  Werkzeug's), a thread follows the response (``followed_body``).
- **Registrations** are listed in ``/status`` (``continuous``) while the response runs; a client that disconnects
  is noticed at once by the fan-out (within ``POLL_SECONDS`` by a following thread) and its registration removed.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from flask import Response, request

from delivery.fanout import Fanout, Subscription
from delivery.feeds import (
    MAX_LAG,
    Item,
    Notice,
    Start,
    Step,
    arrivals_items,
    first_arrival,
    first_index,
    last_index,
    seed_window,
    stateless,
    windows_items,
)
from delivery.results import PinnedQuery, kind_of, producer
from delivery.subscriptions import Registration, Registrations
from protocol.errors import BadRequest
from protocol.packaging import WEBSOCKET, Packager, choose
from protocol.responses import RELEASE_SOCKET, gunicorn_client_gone
from protocol.resume import check_available, check_resumable, past_the_end, requested_start, subscribed_sequence
from protocol.services import services
from sparql_ext.reporting import ReportPolicy, parse_report
from sparql_ext.windowing import format_micros
from sparql_ext.windowref import WindowRef, parse_window_ref
from store.durable import now_micros
from store.stream import Stream
from store.windows import Sequence

POLL_SECONDS = 0.5  # how long a following thread waits for a window before it checks its client is still there


def registration_for(stream: Stream, ref: WindowRef, packager: Packager, client: str, sequence: Sequence
                     ) -> Registration:
    return Registration(uuid.uuid4().hex[:12], stream.config.name, str(ref), packager.packaging,
                        packager.media_type, client, format_micros(now_micros()), sequence=sequence.id)


def followed_body(subscription: Subscription, packager: Packager, registrations: Registrations,
                  client_gone: Callable[[], bool], steps: Iterator[Step]) -> Generator[bytes]:
    """A continuous response's body followed by the request's thread (``steps`` waiting ``POLL_SECONDS``): for a
    server without the fan-out. Its ``finally`` ends the registration (disconnect, Rn reached, error)."""
    registrations.add(subscription.registration)
    subscription.stream.windows.hold(subscription.sequence)
    try:
        if subscription.opening:
            yield subscription.opening
        for step in steps:
            if step is None:
                if client_gone():
                    return
                keepalive = packager.keepalive()
                if keepalive:
                    yield keepalive
            elif isinstance(step, Notice):
                yield packager.notice(step.message)
                return
            else:
                yield subscription.registration.delivered(step.index, packager.part(step.headers, step.body))
        if packager.packaging == "multipart":
            yield packager.closing()
    finally:
        registrations.remove(subscription.registration.id)
        subscription.stream.windows.release(subscription.sequence)


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


class _HandOver:
    """The body gunicorn iterates once the headers are sent: iterating it hands the connection to the fan-out (after
    the WSGI middleware returned, so that nothing else changes the socket) and yields nothing."""

    def __init__(self, hand_over: Callable[[], None]) -> None:
        self.hand_over = hand_over

    def __iter__(self) -> Iterator[bytes]:
        self.hand_over()
        return iter(())


class FannedOut(HeadersAtOnce):
    """A continuous response served by the fan-out: gunicorn sends its status and headers (``Connection: close``:
    the connection is the response's), then gives its socket up (``RELEASE_SOCKET``, set by
    ``concentrator.server``) to ``Fanout.subscribe``, which frames the chunks itself. Under another server it is
    followed by the request's thread (``followed``)."""

    def __init__(self, fanout: Fanout, subscription: Subscription, followed: Generator[bytes],
                 **kwargs: Any) -> None:
        super().__init__(followed, **kwargs)
        self.followed = followed
        self.fanout = fanout
        self.subscription = subscription

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        release = environ.get(RELEASE_SOCKET)
        sock = environ.get("gunicorn.socket")
        if release is None or not isinstance(sock, socket.socket):
            return super().__call__(environ, start_response)
        self.followed.close()  # not used: ended unstarted
        _, status, headers = self.get_wsgi_response(environ)
        write = start_response(status, headers)
        sent = write.__self__  # gunicorn's response: its framing is decided, nothing is sent yet
        sent.force_close()
        write(b"")
        chunked = bool(sent.chunked)
        sent.chunked = False  # the fan-out writes the chunks, and the last one
        return _HandOver(lambda: self.fanout.subscribe(release(sock), self.subscription, chunked))


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
    registered): its subscription (None: nothing left to send, 204), its headers and its packager. ``steps(wait)``
    makes a feed of its own."""

    subscription: Subscription | None
    headers: dict[str, str]
    packager: Packager
    steps: Callable[[float], Iterator[Step]] | None = None


@dataclass(frozen=True)
class Registered:
    """A registered query's results (protocol/queries.py): its evaluation, the sequence it follows and its report
    policy and operator, in place of the request's ``query=``, ``sequence=``, ``report=`` and ``operator=``."""

    pinned: PinnedQuery
    sequence: str
    report: str
    operator: str


def continuous_plan(stream: Stream, windows: str, query: str | None, websocket: bool = False,
                    registered: Registered | None = None) -> Plan:
    """The subscription and headers of a continuous response to this request (``websocket``: one JSON message per
    window, over a WebSocket at the same IRI, see ``protocol.websocket``; ``registered``: a registered query's)."""
    ref = parse_window_ref(windows)
    base = request.host_url.rstrip("/")
    evaluator = services().evaluator.with_local_bases([base])
    kind = kind_of(query, request.base_url)
    if websocket:
        packaging, media_type = WEBSOCKET, choose(kind, None, "multipart", request.args.get("format"))[1]
    else:
        packaging, media_type = choose(kind, request.headers.get("Accept"), request.args.get("packaging"),
                                       request.args.get("format"))
    if registered is None:
        spec = parse_report(request.args.get("report"), request.args.get("operator"))
    else:
        spec = parse_report(registered.report, registered.operator)
    resumed = requested_start(request.args, request.headers.get("Last-Event-ID"), packaging)
    sequence = subscribed_sequence(stream, ref, registered.sequence if registered else request.args.get("sequence"),
                                   resumed is not None)
    packager = Packager(packaging, media_type)
    produce = producer(stream, query, evaluator, request.base_url, spec, media_type,
                       services().window_results, registered.pinned if registered else None)
    registration = registration_for(stream, ref, packager, request.remote_addr or "", sequence)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Window-Sequence": sequence.id,
               "Report-Policy": ",".join(sorted(p.value for p in spec.policies)),
               "Stream-Operator": spec.operator.value}
    last = last_index(ref, sequence)
    opening = b"" if websocket else packager.opening()

    def subscription(start: int, steps: Callable[[float], Iterator[Step]]) -> Subscription:
        # a feed of its own ends itself after an Rn ref's last window (arrivals give several items per window)
        return Subscription(stream, sequence.id, registration, packager, opening, start, None, partial(steps, 0.0))

    if ReportPolicy.CONTENT_CHANGE in spec.policies and resumed is None:
        arrivals = partial(arrivals_items, stream, sequence, first_arrival(ref, stream), last, produce)
        return Plan(subscription(-1, arrivals), headers, packager, arrivals)
    start = resumed or Start(first_index(ref, sequence, stream), False, "")
    if resumed is not None:
        check_resumable(resumed, spec)
        if past_the_end(resumed, ref.count, sequence.spec.first):
            return Plan(None, headers, packager)  # nothing left; EventSource stops reconnecting
        seed = seed_window(stream, sequence, resumed, spec)
        check_available(stream, sequence, resumed, seed, MAX_LAG)
        if seed is not None:  # evaluated, not sent: the operator's previous window, as before the interruption
            produce(list(seed.ordinals()), seed.commit, seed.end)
    headers["Window-From"] = str(start.index)
    own = partial(windows_items, stream, sequence, start.index, last, produce)
    if resumed is None and last is None and stateless(spec):
        # what a window gives cannot differ between these subscribers: one feed, one evaluation per window
        # (one producer serves: the shared feed under the fan-out, ``own`` under a server without it)
        feed = _SharedWindows(stream, sequence, start.index, produce)
        key = (stream.config.name, sequence.id, query, request.base_url, media_type, spec)
        return Plan(Subscription(stream, sequence.id, registration, packager, opening, start.index, last,
                                 feed.steps, key, feed.position), headers, packager, own)
    return Plan(subscription(start.index, own), headers, packager, own)


class _SharedWindows:
    """A feed of a sequence's windows that subscribers may join: it tells where it is (``position``)."""

    def __init__(self, stream: Stream, sequence: Sequence, start: int,
                 produce: Callable[[list[int], int, int], bytes | None]) -> None:
        self.stream, self.sequence, self.produce = stream, sequence, produce
        self.index = start

    def position(self) -> int:
        return self.index

    def steps(self) -> Iterator[Step]:
        for step in windows_items(self.stream, self.sequence, self.index, None, self.produce, 0.0):
            if isinstance(step, Item):
                self.index = step.index + 1
            yield step


def continuous_response(stream: Stream, windows: str, query: str | None, registered: Registered | None = None
                        ) -> Response:
    if request.args.get("packaging") == WEBSOCKET:
        raise BadRequest("packaging=websocket: open a WebSocket to this IRI instead (an HTTP Upgrade request, e.g. "
                         "new WebSocket('ws://…/streams/NAME?WINDOWS=R/…') in a browser)")
    plan = continuous_plan(stream, windows, query, registered=registered)
    if plan.subscription is None or plan.steps is None:
        return Response(status=204, headers=plan.headers)
    followed = followed_body(plan.subscription, plan.packager, services().continuous,
                             gunicorn_client_gone(request.environ), plan.steps(POLL_SECONDS))
    fanout = services().fanout
    kwargs: dict[str, Any] = {"mimetype": None, "content_type": plan.packager.content_type, "headers": plan.headers}
    if fanout is None:
        return HeadersAtOnce(followed, **kwargs)
    return FannedOut(fanout, plan.subscription, followed, **kwargs)
