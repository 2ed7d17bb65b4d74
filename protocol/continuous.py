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
import select
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from flask import Response, current_app, request
from pyoxigraph import NamedNode, QueryBoolean, QuerySolutions, QueryTriples, RdfFormat, Store, serialize

from protocol.errors import BadRequest, NotAcceptable
from protocol.negotiation import DATASET_FORMATS, GRAPH_FORMATS, RESULTS_FORMATS, best_media_type
from protocol.resume import (
    Start,
    check_available,
    check_resumable,
    past_the_end,
    requested_start,
    seed_window,
    subscribed_sequence,
)
from protocol.window_results import SharedResults
from sparql_ext import THEN_FUNCTION
from sparql_ext.reporting import Reporter, ReportPolicy, ReportSpec, parse_report
from sparql_ext.windowing import Window, WindowSpec, bind_origin, bounds, window
from sparql_ext.windowref import WindowRef, parse_window_ref
from store.evaluation import (
    ConstructedQuads,
    ConstructedTriples,
    ExtendedEvaluator,
    QueryTarget,
    checked_query,
    solutions_from_rows,
)
from store.selection import bounds_headers
from store.stream import Stream, format_micros, now_micros
from store.windows import Sequence

PACKAGINGS = ("chunked", "lines", "multipart", "event-stream")
POLL_SECONDS = 0.5
MAX_LAG = 1_000
LINE_FORMATS = {"application/n-quads": RdfFormat.N_QUADS, "application/n-triples": RdfFormat.N_TRIPLES}


@dataclass
class Registration:
    """One running continuous response (shown in /status)."""

    id: str
    stream: str
    ref: str
    packaging: str
    media_type: str
    client: str
    started: str
    windows_sent: int = 0
    last_window: int | None = None

    def delivered(self, index: int, part: bytes) -> bytes:
        """Count a window's part as sent (for /status) and pass it on."""
        self.windows_sent += 1
        self.last_window = index
        return part


@dataclass
class Registrations:
    """The continuous responses running now."""

    _items: dict[str, Registration] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, registration: Registration) -> None:
        with self._lock:
            self._items[registration.id] = registration

    def remove(self, ident: str) -> None:
        with self._lock:
            self._items.pop(ident, None)

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(r) for r in self._items.values()]


# -- what one window gives --------------------------------------------------------------------------------------

@dataclass
class WindowResult:
    """A window's answer: ``kind`` is 'quads' (the window dataset, or a quad template), 'triples', 'solutions'
    (``variables`` and rows as tuples, None = unbound) or 'boolean'."""

    kind: str
    items: list[Any]
    variables: tuple[str, ...] = ()


def window_result(stream: Stream, ordinals: list[int], commit: int, query: str | None, evaluator: ExtendedEvaluator,
                  base_iri: str) -> WindowResult:
    """The result of ``query`` (None: the window dataset) over the window dataset of these elements."""
    window = stream.window_store(ordinals)
    if query is None:
        return WindowResult("quads", list(window))
    result = evaluator.query(query, QueryTarget(window, None, None, commit, base_iri, None, stream))
    if isinstance(result, ConstructedQuads):
        return WindowResult("quads", list(result))
    if isinstance(result, ConstructedTriples):
        return WindowResult("triples", list(result))
    if isinstance(result, QueryBoolean):
        return WindowResult("boolean", [bool(result)])
    assert isinstance(result, QuerySolutions)
    names = tuple(v.value for v in result.variables)
    return WindowResult("solutions", [tuple(s[n] for n in names) for s in result], names)


def kind_of(query: str | None, base_iri: str | None) -> str:
    """The result kind of a query, known before any window so that the response's type is fixed up front: the
    rewritten query (extension parts cut out: nothing is fetched) runs once on an empty store."""
    if query is None:
        return "quads"
    extended = checked_query(query, base_iri)
    if extended.template is not None:
        return "quads"
    result = Store().query(extended.sparql, base_iri=base_iri,
                           custom_functions={NamedNode(THEN_FUNCTION): lambda: None})
    return "triples" if isinstance(result, QueryTriples) else "boolean" if isinstance(result, QueryBoolean) \
        else "solutions"


def numbered(items: list[Any]) -> list[tuple[Any, int]]:
    """Equal items numbered ``(item, 1), (item, 2), …``: a bag as a set, so that the Reporter's set difference
    (IStream, DStream) is bag difference — a solution found twice now and once before is new once.

    >>> numbered(["a", "b", "a"])
    [('a', 1), ('b', 1), ('a', 2)]
    """
    seen: Counter[Any] = Counter()
    result = []
    for item in items:
        seen[item] += 1
        result.append((item, seen[item]))
    return result


def producer(stream: Stream, query: str | None, evaluator: ExtendedEvaluator, base_iri: str, spec: ReportSpec,
             media_type: str, shared: SharedResults[WindowResult] | None = None,
             ) -> Callable[[list[int], int, int], bytes | None]:
    """What each evaluation gives the client: ``produce(ordinals, commit, at)`` evaluates the query over those
    elements (a window, or with ``content-change`` the window active at an arrival) and passes its result, as a
    bag, through the report policy and the stream operator (RStream: the result; IStream: what is new since the
    previous evaluation; DStream: what left it); ``at`` is the window's end or the arrival's time (µs)."""
    reporter = Reporter(spec)

    def produce(ordinals: list[int], commit: int, at: int) -> bytes | None:
        if ReportPolicy.NON_EMPTY_CONTENT in spec.policies and not ordinals:
            return None  # not evaluated, and not the previous window of the next one
        def evaluate() -> WindowResult:
            return window_result(stream, ordinals, commit, query, evaluator, base_iri)

        if shared is None or not ordinals:
            result = evaluate()
        else:  # every response asking this query of this window shares one evaluation
            key = (stream.config.name, ordinals[0], ordinals[-1], len(ordinals), commit, query, base_iri)
            result = shared.get(key, evaluate)
        kept = reporter.report(at, numbered(result.items), len(ordinals))
        if kept is None:
            return None
        return serialize_items(result.kind, [item for item, _ in kept], result.variables, media_type)

    return produce


def serialize_items(kind: str, items: list[Any], variables: tuple[str, ...], media_type: str) -> bytes:
    if kind == "quads":
        return serialize(items, format=DATASET_FORMATS[media_type])  # type: ignore[no-any-return]
    if kind == "triples":
        return serialize(items, format=GRAPH_FORMATS[media_type])  # type: ignore[no-any-return]
    if kind == "boolean":
        solutions: Any = Store().query("ASK {}" if items and items[0] else "ASK { FILTER(false) }")
    else:
        solutions = solutions_from_rows(list(variables),
                                        [{n: t for n, t in zip(variables, row, strict=True) if t is not None}
                                         for row in items])
    return solutions.serialize(format=RESULTS_FORMATS[media_type])  # type: ignore[no-any-return]


# -- packaging ----------------------------------------------------------------------------------------------------

OFFERED = {"quads": DATASET_FORMATS, "triples": GRAPH_FORMATS, "solutions": RESULTS_FORMATS,
           "boolean": RESULTS_FORMATS}
LINE_DEFAULT = {"quads": "application/n-quads", "triples": "application/n-triples"}


def choose(kind: str, accept: str | None, packaging: str | None, format_: str | None) -> tuple[str, str]:
    """(packaging, media type of each window's document) for this request."""
    if packaging is None:
        wanted = best_media_type(accept, ["multipart/mixed", "text/event-stream"]) if accept else None
        explicit = wanted is not None and wanted in (accept or "")
        packaging = {"multipart/mixed": "multipart", "text/event-stream": "event-stream"}.get(
            wanted or "", "chunked") if explicit else "chunked"
    if packaging not in PACKAGINGS:
        raise BadRequest(f"packaging={packaging!r}: use one of {', '.join(PACKAGINGS)}")
    offered = list(OFFERED[kind])
    if packaging == "lines":
        if kind not in LINE_DEFAULT:
            raise BadRequest("packaging=lines is a continuous N-Quads / N-Triples stream: it needs the window "
                             "dataset or a CONSTRUCT; use chunked, multipart or event-stream for SELECT / ASK")
        return packaging, LINE_DEFAULT[kind]
    if format_ is not None:
        if format_ not in offered:
            raise NotAcceptable(f"format={format_!r}: this result is available as {', '.join(offered)}")
        return packaging, format_
    if packaging == "event-stream" and kind in LINE_DEFAULT:
        return packaging, LINE_DEFAULT[kind]  # one line per data: field
    if packaging == "chunked":
        media_type = best_media_type(accept, offered)
        if media_type is None:
            raise NotAcceptable(f"this result is available as {', '.join(offered)} (one document per window)")
        return packaging, media_type
    return packaging, offered[0]


@dataclass
class Packager:
    packaging: str
    media_type: str
    boundary: str = field(default_factory=lambda: f"window-{uuid.uuid4().hex}")

    @property
    def content_type(self) -> str:
        if self.packaging == "multipart":
            return f"multipart/mixed; boundary={self.boundary}"
        if self.packaging == "event-stream":
            return "text/event-stream; charset=utf-8"
        return self.media_type

    def opening(self) -> bytes:
        """Sent when the response starts (before any window; the headers go before it, see ``HeadersAtOnce``):
        multipart's first delimiter, so that every part can end with the next delimiter and be complete as soon as
        it is sent; an SSE comment. Nothing for bare documents, whose every chunk is a window's document."""
        if self.packaging == "multipart":
            return f"--{self.boundary}".encode()
        if self.packaging == "event-stream":
            return b": window results follow\n\n"
        return b""

    def part(self, headers: dict[str, str], body: bytes) -> bytes:
        if self.packaging == "multipart":
            head = "".join(f"{k}: {v}\r\n" for k, v in {"Content-Type": self.media_type, **headers}.items())
            return f"\r\n{head}\r\n".encode() + body + f"\r\n--{self.boundary}".encode()
        if self.packaging == "event-stream":
            lines = body.decode("utf-8").splitlines() or [""]
            data = "".join(f"data: {line}\n" for line in lines)
            return f"event: window\nid: {headers.get('Window-Index', '')}\n{data}\n".encode()
        return body

    def closing(self) -> bytes:
        """Ends a multipart body (after the last part's delimiter)."""
        return b"--\r\n" if self.packaging == "multipart" else b""

    def notice(self, message: str) -> bytes:
        """A closing remark where the packaging has room for one (none in a bare document stream)."""
        if self.packaging == "multipart":
            return f"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{message}\r\n--{self.boundary}--\r\n".encode()
        if self.packaging == "event-stream":
            return f"event: end\ndata: {message}\n\n".encode()
        return b""

    def keepalive(self) -> bytes:
        return b": keep-alive\n\n" if self.packaging == "event-stream" else b""


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


def gunicorn_client_gone(environ: dict[str, Any]) -> Callable[[], bool]:
    """Whether the client closed its connection (gunicorn's socket reads EOF); never, elsewhere."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, socket.socket):
        return lambda: False

    def gone() -> bool:
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    return gone


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


def continuous_response(stream: Stream, windows: str, query: str | None) -> Response:
    ref = parse_window_ref(windows)
    base = request.host_url.rstrip("/")
    evaluator = current_app.extensions["evaluator"].with_local_bases([base])
    kind = kind_of(query, request.base_url)
    packaging, media_type = choose(kind, request.headers.get("Accept"), request.args.get("packaging"),
                                   request.args.get("format"))
    spec = parse_report(request.args.get("report"), request.args.get("operator"))
    resumed = requested_start(request.args, request.headers, packaging)
    sequence = subscribed_sequence(stream, ref, request.args.get("sequence"), resumed is not None)
    packager = Packager(packaging, media_type)
    produce = producer(stream, query, evaluator, request.base_url, spec, media_type,
                       current_app.extensions["window_results"])
    registration = registration_for(stream, ref, packager, request.remote_addr or "")
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Window-Sequence": sequence.id,
               "Report-Policy": ",".join(sorted(p.value for p in spec.policies)),
               "Stream-Operator": spec.operator.value}
    if ReportPolicy.CONTENT_CHANGE in spec.policies and resumed is None:
        body = arrivals_body(stream, ref, sequence, first_arrival(ref, stream), produce, packager, registration,
                             current_app.extensions["continuous"], gunicorn_client_gone(request.environ))
        return HeadersAtOnce(body, mimetype=None, content_type=packager.content_type, headers=headers)
    start = resumed or Start(first_index(ref, sequence, stream), False, "")
    if resumed is not None:
        check_resumable(resumed, spec)
        if past_the_end(resumed, ref.count, sequence.spec.first):
            return Response(status=204, headers=headers)  # nothing left; EventSource stops reconnecting
        seed = seed_window(stream, sequence, resumed, spec)
        check_available(stream, sequence, resumed, seed, MAX_LAG)
        if seed is not None:  # evaluated, not sent: the operator's previous window, as before the interruption
            produce(list(seed.ordinals()), seed.commit, seed.end)
    body = windows_body(stream, ref, sequence, start.index, produce, packager, registration,
                        current_app.extensions["continuous"], gunicorn_client_gone(request.environ))
    return HeadersAtOnce(body, mimetype=None, content_type=packager.content_type,
                         headers={**headers, "Window-From": str(start.index)})
