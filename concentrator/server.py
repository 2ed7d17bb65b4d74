"""Serve the Flask app with gunicorn's threaded worker, with request headers read outside the threads.

One worker process: the on-disk store can be opened by one process only. gunicorn's ``gthread``
worker hands request bodies to the app as they arrive (chunked uploads stream), unlike servers
that buffer whole bodies.

gthread hands a connection to a thread as soon as it is readable, and the thread then reads the request with
blocking reads: a client that sends a request line, or headers and part of a body, and stalls holds a thread until
it goes away, and ``--threads`` of them stop the server. ``HeaderGateWorker`` reads requests in the worker's event
loop instead (non-blocking, into a buffer; h11 says where a request ends) and hands a connection to a thread only
once its headers are complete and its body has arrived, or is a stream upload (which streams for as long as its
client sends), or has passed ``GATED_BODY_BYTES``. Headers that take longer than ``header_timeout``, or a gated body
that takes longer than ``body_timeout`` after them, get ``408`` and the connection is closed. In the thread, a body
that stops for ``body_timeout`` (no byte arrives) ends the request with ``408`` (``BodyIdleTimeout``); what an
upload committed before stays. A continuous response is as long as its client wants (docs/http.md, "Limits").

Requests get threads from three pools, so that no kind of request can take the others' threads: ``/status`` and
``/metrics`` (``CONTROL_THREADS``), writes (uploads, updates, Graph Store writes, rules; ``--threads``) and
reads (queries, continuous responses until they are handed over; ``--threads``). A continuous response, once its
headers are sent, leaves gunicorn altogether: ``release`` (offered to the app as ``RELEASE_SOCKET``) gives its
socket to the fan-out's event loop (``delivery.fanout``), which holds it without a thread.
"""

from __future__ import annotations

import re
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import h11
from gunicorn import http
from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from concentrator.compose import http_app
from protocol import ServerConfig
from protocol.responses import RELEASE_SOCKET
from protocol.services import services_of

HEADER_TIMEOUT = 10.0  # seconds a request's headers may take to arrive (--header-timeout)
BODY_TIMEOUT = 30.0  # seconds a gated body may take after its headers, and a body may stall (--body-timeout)
GATED_BODY_BYTES = 256 << 10  # bodies up to this size arrive whole before the request gets a thread
RECV_BYTES = 65536
#: A request whose body the application reads as it arrives: an upload to a stream IRI (``POST /streams/NAME``
#: without a query), which may last for days
_STREAM_UPLOAD = re.compile(rb"/streams/[^/?#]+(?:\?(?!(?:.*&)?query=).*)?")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"\ncontent-length:[ \t]*([0-9]{1,18})[ \t]*\r")
CONTROL_THREADS = 2  # threads for /status and /metrics alone: they answer whatever the other requests do
_CONTROL = re.compile(rb"(?:GET|HEAD) /(?:status|metrics)(?:[?#][^ ]*)? ")
_READ_METHODS = (b"GET", b"HEAD", b"OPTIONS")


def pool_for(data: bytes | bytearray) -> str:
    """Which threads a request gets, from its first bytes: 'control' (``/status``, ``/metrics``), 'reads' (GET,
    HEAD, OPTIONS, a query POSTed to /sparql) or 'writes' (everything else: uploads, updates, Graph Store writes).
    A POST to /sparql is a query unless it says it is an update (a guess only decides the pool, not the access).

    >>> [pool_for(r) for r in (b"GET /status HTTP/1.1", b"GET /sparql?query=x HTTP/1.1", b"POST /streams/hr HTTP/1.1")]
    ['control', 'reads', 'writes']
    >>> pool_for(b"POST /sparql HTTP/1.1\r\nContent-Type: application/sparql-update\r\n\r\n")
    'writes'
    """
    if _CONTROL.match(data):
        return "control"
    method = bytes(data[:8]).split(b" ", 1)[0]
    if method in _READ_METHODS:
        return "reads"
    if method == b"POST" and bytes(data[5:13]) in (b"/sparql ", b"/sparql?"):
        head = bytes(data[:4096]).lower()
        if b"application/sparql-update" not in head and b"update=" not in head:
            return "reads"
    return "writes"


@dataclass
class ConnectionStats:
    """What the worker holds now (``/status``'s ``connections``)."""

    busy: Counter[str] = field(default_factory=Counter)  # threads handling a request, by pool
    handed_over: int = 0  # connections given to the fan-out since the start
    timed_out: Counter[str] = field(default_factory=Counter)  # 408 by the gate: headers, body


@dataclass
class _Gate:
    """What a connection waiting for its request has sent so far, and until when it may send it. Once its headers
    are complete, ``request`` reads the rest (h11, fed what arrives) to find where its body ends."""

    deadline: float
    data: bytearray = field(default_factory=bytearray)
    request: h11.Connection | None = None
    body: int = 0  # body bytes seen so far

    def headers_complete(self) -> bool:
        """Whether the headers have ended (a blank line; gunicorn also accepts bare LF line ends)."""
        return b"\r\n\r\n" in self.data or b"\n\n" in self.data


def request_timeout_answer(what: str, seconds: float) -> bytes:
    """The 408 sent to a connection whose request's headers (or gated body) did not arrive in time."""
    body = f"the request's {what} took longer than {seconds:g} s\n".encode()
    return (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def whole(data: bytes | bytearray) -> bool:
    """Whether a request whose headers have arrived is whole already: no ``Transfer-Encoding`` and a body of its
    ``Content-Length`` (or none) in ``data``. Most requests are (a GET, a small query): they skip h11 (≈ 55 µs of the
    event loop each); the others are read with it. An unclear header (two lengths, not a number) is h11's to judge.

    >>> whole(b"GET /status HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    True
    >>> [whole(b"POST / HTTP/1.1\\r\\nContent-Length: %d\\r\\n\\r\\nab" % n) for n in (5, 2)]
    [False, True]
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    head = bytes(data[:end + 2]).lower()  # each header line with its CRLF
    if b"\ntransfer-encoding:" in head:
        return False
    lengths = _CONTENT_LENGTH.findall(head)
    if len(lengths) > 1:
        return False
    return len(data) - end - 4 >= (int(lengths[0]) if lengths else 0)


def streams_its_body(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether a request goes to a thread as soon as its headers are in: a stream upload (its elements are committed
    as they arrive), a WebSocket handshake (no body; the thread takes the connection over) or a request waiting for
    ``100 Continue`` from the application (gunicorn sends it when the request starts)."""
    if method == b"POST" and _STREAM_UPLOAD.fullmatch(target):
        return True
    return any(name == b"upgrade" for name, _ in headers)


class HeaderGateWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's ``gthread`` worker, except that a connection gets a thread only once its request's headers have
    arrived whole: until then its bytes are read in the event loop (the worker's main thread, which never blocks
    on a socket), and after ``header_timeout`` seconds it is answered 408 (or just closed if it sent nothing).
    Every connection, new or kept alive between requests, passes through ``enqueue_req``: that is the gate."""

    header_timeout = HEADER_TIMEOUT
    body_timeout = BODY_TIMEOUT
    current: ClassVar[HeaderGateWorker | None] = None  # this process's worker (one per process)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        HeaderGateWorker.current = self
        self.gated: dict[TConn, _Gate] = {}
        self.released: set[socket.socket] = set()  # given up by their request's thread (see ``release``)
        self._released_lock = threading.Lock()
        self.stats = ConnectionStats()
        self.pools: dict[str, ThreadPoolExecutor] = {}
        self.stopping_at: float | None = None
        # gunicorn's parser refuses headers past this size (431/400): past it, the thread may answer that
        line = self.cfg.limit_request_line or 1024 * 1024
        self.header_limit = self.cfg.limit_request_fields * (self.cfg.limit_request_field_size + 2) + 4 + line
        # the gate reads plain HTTP/1.x; TLS or HTTP/2 prior knowledge (not used here) keep gunicorn's own path
        self.gating = not self.cfg.is_ssl and self.cfg.http2_cleartext == "off"

    def enqueue_req(self, conn: TConn) -> None:
        if not self.gating:
            super().enqueue_req(conn)
            return
        # bytes the previous request's parser read ahead belong to the next request
        ahead = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        gate = _Gate(time.monotonic() + self.header_timeout, bytearray(ahead))
        conn.sock.setblocking(False)
        self.gated[conn] = gate
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_gated_readable, conn))
        self.advance(conn, gate, bytes(ahead))

    def on_gated_readable(self, conn: TConn, _sock: Any) -> None:
        gate = self.gated[conn]
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # reset by the client: as gone as EOF
        if not data:  # the client left before its request ended: nothing to answer
            self.drop_gated(conn, answer=False)
            return
        gate.data += data
        self.advance(conn, gate, data)

    def advance(self, conn: TConn, gate: _Gate, data: bytes) -> None:
        """Take ``data`` (just arrived) into account: open the gate once the request may have a thread."""
        if gate.request is None:
            if len(gate.data) > self.header_limit:
                self.open_gate(conn)  # gunicorn answers 431/400
                return
            if not gate.headers_complete():
                return
            if whole(gate.data):
                self.open_gate(conn)
                return
            gate.request = h11.Connection(h11.SERVER, max_incomplete_event_size=self.header_limit)
            gate.deadline = time.monotonic() + self.body_timeout
            data = bytes(gate.data)
        try:
            gate.request.receive_data(data)
            while True:
                event = gate.request.next_event()
                if event is h11.NEED_DATA:
                    return
                if isinstance(event, h11.Request):
                    headers = [(name.lower(), value) for name, value in event.headers]
                    if streams_its_body(event.method, event.target, headers):
                        break
                    if (b"expect", b"100-continue") in headers:
                        conn.sock.send(_CONTINUE)  # a client waiting for it before it sends the body we wait for
                elif isinstance(event, h11.Data):
                    gate.body += len(event.data)
                    if gate.body > GATED_BODY_BYTES:
                        break  # a large body (an upload): read in the thread as it arrives
                else:  # EndOfMessage (the request is whole), or anything h11 does not expect: gunicorn will say
                    break
        except (h11.RemoteProtocolError, OSError):
            pass  # gunicorn's parser answers what h11 refuses (400), in the thread
        self.open_gate(conn)

    def open_gate(self, conn: TConn) -> None:
        """Hand the connection to a thread of its pool, its headers (and whatever followed them) ready in its
        parser."""
        gate = self.gated.pop(conn)
        self.poller.unregister(conn.sock)
        if conn.parser is None:  # a new connection (TConn.init keeps a parser it already has)
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(gate.data))
        conn.data_ready = True  # no waiting for data in the thread: it is there
        pool = pool_for(gate.data)
        if pool not in self.pools:
            threads = CONTROL_THREADS if pool == "control" else self.cfg.threads
            self.pools[pool] = ThreadPoolExecutor(threads, thread_name_prefix=pool)
        future = self.pools[pool].submit(self.handle_counted, pool, conn)
        future.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))

    def handle_counted(self, pool: str, conn: TConn) -> Any:
        with self._released_lock:
            self.stats.busy[pool] += 1
        try:
            return self.handle(conn)
        finally:
            with self._released_lock:
                self.stats.busy[pool] -= 1

    def release(self, sock: socket.socket) -> socket.socket:
        """Called by the app in a request's thread: this connection is no longer gunicorn's (the fan-out writes and
        closes it); ``finish_request`` forgets it without closing it."""
        with self._released_lock:
            self.released.add(sock)
        self.stats.handed_over += 1
        return sock

    def finish_request(self, conn: TConn, fs: Future[Any]) -> None:
        with self._released_lock:
            released = conn.sock in self.released
            self.released.discard(conn.sock)
        if released:
            self.nr_conns -= 1
            return
        super().finish_request(conn, fs)

    def connection_status(self) -> dict[str, Any]:
        """``/status``'s ``connections``: gunicorn's connections (waiting for their request, kept alive, being
        handled), the threads busy per pool and the requests the gate timed out."""
        return {"held": self.nr_conns, "waiting_for_request": len(self.gated), "kept_alive": len(self.keepalived_conns),
                "threads_busy": dict(self.stats.busy), "threads_per_pool": {"control": CONTROL_THREADS,
                                                                            "reads": self.cfg.threads,
                                                                            "writes": self.cfg.threads},
                "handed_over_total": self.stats.handed_over, "timed_out": dict(self.stats.timed_out)}

    def drop_gated(self, conn: TConn, answer: bool) -> None:
        """Close a connection whose request did not arrive: with a 408 if it had started one."""
        gate = self.gated.pop(conn, None)
        gate_request = None if gate is None else gate.request
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        if answer:
            what, seconds = ("headers", self.header_timeout) if gate_request is None else ("body", self.body_timeout)
            self.stats.timed_out[what] += 1
            try:  # a few hundred bytes into an empty send buffer: a non-blocking send takes them whole
                conn.sock.send(request_timeout_answer(what, seconds))
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        """Also close gated connections past their deadline (called about once a second by the event loop);
        a stopping worker gives them as long as its kept-alive connections."""
        super().murder_pending()
        now = time.monotonic()
        if not self.alive and self.stopping_at is None:
            self.stopping_at = now + STOP_KEEPALIVE_LINGER
        for conn, gate in list(self.gated.items()):
            if now >= gate.deadline or (self.stopping_at is not None and now >= self.stopping_at):
                self.drop_gated(conn, answer=bool(gate.data))

    def murder_keepalived(self, force: bool = False) -> None:
        super().murder_keepalived(force)
        if force:  # the worker's last clean-up
            for conn in list(self.gated):
                self.drop_gated(conn, answer=False)
            for pool in self.pools.values():
                pool.shutdown(wait=False)


class OffersRelease:
    """WSGI middleware: offers the app ``RELEASE_SOCKET`` (``HeaderGateWorker.release``), with which a continuous
    response gives its connection to the fan-out."""

    def __init__(self, app: Any, release: Callable[[socket.socket], socket.socket]) -> None:
        self.app = app
        self.release = release

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        environ[RELEASE_SOCKET] = self.release
        return self.app(environ, start_response)


class BodyIdleTimeout:
    """WSGI middleware: while the application handles a request (reads its body), a read that waits ``seconds``
    for a byte raises ``TimeoutError`` (answered 408: protocol/errors.py); the response is written without it (a
    continuous response waits for windows as long as its client wants). WebSocket handshakes are left alone: the
    connection becomes the WebSocket's, which pings on its own."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        sock = environ.get("gunicorn.socket")
        if not isinstance(sock, socket.socket) or str(environ.get("HTTP_UPGRADE", "")).lower() == "websocket":
            return self.app(environ, start_response)
        sock.settimeout(self.seconds)
        try:
            return self.app(environ, start_response)
        finally:
            sock.settimeout(None)


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, config: ServerConfig, options: dict[str, Any], make_app: Callable[[ServerConfig], Any],
                 body_timeout: float) -> None:
        self._config = config
        self._make_app = make_app
        self._options = options
        self._body_timeout = body_timeout
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Called in the worker process, after the fork: the stores and Spark's JVM belong to it.
        app = self._make_app(self._config)
        worker = HeaderGateWorker.current
        if worker is None or not worker.gating:
            return BodyIdleTimeout(app, self._body_timeout)
        services_of(app).connections = worker.connection_status
        return OffersRelease(BodyIdleTimeout(app, self._body_timeout), worker.release)


def serve(config: ServerConfig, host: str, port: int, threads: int = 16, header_timeout: float = HEADER_TIMEOUT,
          make_app: Callable[[ServerConfig], Any] = http_app, body_timeout: float = BODY_TIMEOUT) -> None:
    worker = type("HeaderGateWorker", (HeaderGateWorker,), {"header_timeout": header_timeout,
                                                            "body_timeout": body_timeout})
    _Gunicorn(config, {
        "bind": f"{host}:{port}",
        "workers": 1,
        "worker_class": worker,
        "threads": threads,
        "timeout": 0,  # long uploads and continuous responses are normal here
        "graceful_timeout": 10,
        "accesslog": "-",
        "loglevel": "info",
    }, make_app, body_timeout).run()
