"""Who may do what (issue 6): bearer tokens for writes, a read-only mode, and a request rate limit.

A **write** is anything that changes the server: SPARQL Update, Graph Store Protocol PUT/POST/DELETE, stream
configuration, upload and punctuation, rule management. Queries are reads, whatever their method (a POST of
``application/sparql-query`` or a ``query=`` form to ``/sparql`` or a stream IRI).

A WebSocket opened to a stream IRI without ``WINDOWS`` is an upload, hence a write.

- ``token``: writes need ``Authorization: Bearer <token>``: none → 401 (with ``WWW-Authenticate``), another →
  403; nothing is written either way (the check runs before the request body is read).
- **per-stream write tokens** (``PUT /streams/NAME?write-token=…``, kept as a SHA-256): the stream's uploads,
  punctuations, reconfiguration and deletion also accept that token (and need it when the server has none).
- ``read_only``: every write → 403.
- ``rate_limit``: requests per second per client address (a token bucket of one second's worth); beyond it →
  429 with ``Retry-After``.

``classify`` is a pure function of method, path and content type, tested alone.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, field

from flask import Flask, request

from protocol.errors import HttpProblem
from protocol.services import services

FORM = "application/x-www-form-urlencoded"


def is_write(method: str, path: str, content_type: str, form_has_update: bool, websocket_upload: bool = False) -> bool:
    """Whether a request changes the server (see the module docstring). ``websocket_upload``: a WebSocket opened
    to a stream IRI without ``WINDOWS`` (its messages are elements: protocol/websocket.py)."""
    method = method.upper()
    if websocket_upload and path.startswith("/streams/"):
        return True
    if method in ("GET", "HEAD", "OPTIONS"):
        return False
    mimetype = content_type.split(";")[0].strip().lower()
    if path == "/sparql" or path.startswith("/sparql/"):
        return mimetype == "application/sparql-update" or (mimetype == FORM and form_has_update)
    if path.startswith("/streams/") and method == "POST":
        # a query posted to a stream or windowed IRI reads; anything else posted to a stream appends to it
        return not (mimetype == "application/sparql-query" or (mimetype == FORM and not form_has_update))
    return path.startswith(("/store", "/streams/", "/rules/"))


@dataclass
class RateLimiter:
    """A token bucket per client address: ``rate`` requests per second, bursts up to ``rate``."""

    rate: float
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # address -> (tokens, last time)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self, address: str, now: float | None = None) -> float | None:
        """None when the request may go; else the seconds until it could."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(address, (self.rate, now))
            tokens = min(self.rate, tokens + (now - last) * self.rate)
            if tokens >= 1:
                self._buckets[address] = (tokens - 1, now)
                return None
            self._buckets[address] = (tokens, now)
            return (1 - tokens) / self.rate


def install(app: Flask, token: str | None, read_only: bool, rate_limit: float | None) -> None:
    """Check every request before it is handled."""
    limiter = RateLimiter(rate_limit) if rate_limit else None

    @app.before_request
    def _check() -> None:
        if limiter is not None:
            wait = limiter.allow(request.remote_addr or "")
            if wait is not None:
                raise HttpProblem(f"too many requests from {request.remote_addr}: the limit is {limiter.rate:g} per "
                                  f"second; retry in {wait:.1f} s", 429, {"Retry-After": str(max(1, round(wait)))})
        form_has_update = "update" in request.args or (
            (request.mimetype or "") == FORM and b"update=" in request.get_data(cache=True)[:65536])
        upload = is_websocket(request.environ) and "WINDOWS" not in request.args
        if not is_write(request.method, request.path, request.content_type or "", form_has_update, upload):
            return
        if read_only:
            raise HttpProblem(f"this server is read-only: {request.method} {request.path} would change it", 403)
        stream_token = _stream_token(request.path)
        if token is None and stream_token is None:
            return
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise HttpProblem(f"{request.method} {request.path} changes the server: send Authorization: Bearer "
                              "<token>", 401, {"WWW-Authenticate": 'Bearer realm="concentrator"'})
        if token is not None and hmac.compare_digest(given.encode(), token.encode()):
            return
        if stream_token is not None and hmac.compare_digest(token_hash(given), stream_token):
            return
        which = "this server's or this stream's" if stream_token is not None else "this server's"
        raise HttpProblem(f"the bearer token is not {which} write token", 403)


def is_websocket(environ: dict[str, object]) -> bool:
    """A WebSocket opening handshake (RFC 6455 §4.1: ``Upgrade: websocket``)."""
    return str(environ.get("HTTP_UPGRADE", "")).lower() == "websocket"


def token_hash(token: str) -> str:
    """How a stream keeps its write token (never the token itself)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _stream_token(path: str) -> str | None:
    """The write-token hash of the stream ``/streams/NAME`` addresses (its uploads, punctuation, reconfiguration
    and deletion), if it has one."""
    parts = path.strip("/").split("/")
    if len(parts) != 2 or parts[0] != "streams":
        return None
    stream = services().streams.find(parts[1])
    return None if stream is None else stream.config.write_token_sha256
