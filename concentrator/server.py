"""Serve the Flask app with gunicorn's threaded worker, with request headers read outside the threads.

One worker process: the on-disk store can be opened by one process only. gunicorn's ``gthread``
worker hands request bodies to the app as they arrive (chunked uploads stream), unlike servers
that buffer whole bodies.

gthread hands a connection to a thread as soon as it is readable, and the thread then reads the request's
headers with blocking reads: a client that sends a request line and stalls holds a thread until it goes away, and
``--threads`` of them stop the server. ``HeaderGateWorker`` reads the headers in the worker's event loop instead
(non-blocking, into a buffer) and hands a connection to a thread only once its headers are complete; a connection
whose headers take longer than ``header_timeout`` gets ``408`` and is closed. Bodies are not bounded: a stream
upload may last for days, and a continuous response is as long as its client wants (docs/http.md, "Limits").
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from protocol import ServerConfig, create_app

HEADER_TIMEOUT = 10.0  # seconds a request's headers may take to arrive (--header-timeout)
RECV_BYTES = 65536


@dataclass
class _Gate:
    """What a connection waiting for its request's headers has sent so far, and until when it may send them."""

    deadline: float
    data: bytearray = field(default_factory=bytearray)

    def complete(self) -> bool:
        """Whether the headers have ended (a blank line; gunicorn also accepts bare LF line ends)."""
        return b"\r\n\r\n" in self.data or b"\n\n" in self.data


def request_timeout_answer(header_timeout: float) -> bytes:
    """The 408 sent to a connection whose request's headers did not arrive in time."""
    body = f"the request's headers took longer than {header_timeout:g} s\n".encode()
    return (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


class HeaderGateWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's ``gthread`` worker, except that a connection gets a thread only once its request's headers have
    arrived whole: until then its bytes are read in the event loop (the worker's main thread, which never blocks
    on a socket), and after ``header_timeout`` seconds it is answered 408 (or just closed if it sent nothing).
    Every connection, new or kept alive between requests, passes through ``enqueue_req``: that is the gate."""

    header_timeout = HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gated: dict[TConn, _Gate] = {}
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
        if gate.complete():
            self.open_gate(conn)

    def on_gated_readable(self, conn: TConn, _sock: Any) -> None:
        gate = self.gated[conn]
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # reset by the client: as gone as EOF
        if not data:  # the client left before its headers ended: nothing to answer
            self.drop_gated(conn, answer=False)
            return
        gate.data += data
        if gate.complete() or len(gate.data) > self.header_limit:
            self.open_gate(conn)

    def open_gate(self, conn: TConn) -> None:
        """Hand the connection to a thread, its headers (and whatever followed them) ready in its parser."""
        gate = self.gated.pop(conn)
        self.poller.unregister(conn.sock)
        if conn.parser is None:  # a new connection (TConn.init keeps a parser it already has)
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(gate.data))
        conn.data_ready = True  # no waiting for data in the thread: it is there
        super().enqueue_req(conn)

    def drop_gated(self, conn: TConn, answer: bool) -> None:
        """Close a connection whose headers did not arrive: with a 408 if it had started a request."""
        self.gated.pop(conn, None)
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        if answer:
            try:  # a few hundred bytes into an empty send buffer: a non-blocking send takes them whole
                conn.sock.send(request_timeout_answer(self.header_timeout))
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


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, config: ServerConfig, options: dict[str, Any], make_app: Callable[[ServerConfig], Any]) -> None:
        self._config = config
        self._make_app = make_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Called in the worker process, after the fork: the stores and Spark's JVM belong to it.
        return self._make_app(self._config)


def serve(config: ServerConfig, host: str, port: int, threads: int = 16, header_timeout: float = HEADER_TIMEOUT,
          make_app: Callable[[ServerConfig], Any] = create_app) -> None:
    worker = type("HeaderGateWorker", (HeaderGateWorker,), {"header_timeout": header_timeout})
    _Gunicorn(config, {
        "bind": f"{host}:{port}",
        "workers": 1,
        "worker_class": worker,
        "threads": threads,
        "timeout": 0,  # long uploads and continuous responses are normal here
        "graceful_timeout": 10,
        "accesslog": "-",
        "loglevel": "info",
    }, make_app).run()
