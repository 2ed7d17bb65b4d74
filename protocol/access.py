"""Who may do what (docs/access.md): decided once per request, on its parsed route and parameters, before the view
runs and before anything is written.

Every view declares what it needs with one of three decorators, next to its route:

- ``@reads_only``: the route only reads, whatever its method and parameters;
- ``@writes``: every request to the route changes the server;
- ``@needs(decide)``: ``decide(parsed)`` says, for the routes where the method or the parameters make the
  difference (a query or an update posted to ``/sparql``, a query or an upload posted to a stream).

A view that declares nothing is a write (**deny by default**): a new route needs the write token until its author
says otherwise. ``decide`` functions read the request as the view reads it (``ParsedRequest``: the decoded query
string and form, never raw bytes), so what the check sees is what the view does.

- ``token``: writes need ``Authorization: Bearer <token>`` (a WebSocket opening handshake without that header may
  carry the token as ``access_token=`` in its query string instead, RFC 6750 §2.3: a browser cannot set headers on
  one; ``TakesUriToken`` removes it from every request before anything reads or logs the request): none → 401
  (with ``WWW-Authenticate``), a token this server does not know → 401 with ``error="invalid_token"`` (RFC 6750
  §3.1), a known token without the right to write (a read token, another stream's) → 403 with
  ``error="insufficient_scope"``. Nothing is written either way: the check runs before the view, and reads no body
  but a form's.
- ``read_tokens`` (``--read-token``): every read needs one of them or the write token, with the same 401s and 403s,
  unless the server is ``public`` or the read is of a stream marked ``public`` (its ``/streams/NAME…`` routes). Routes
  declared ``@open_to_all`` (``/status``, the console's static files) and ``OPTIONS`` need nothing; a route that
  declares nothing, or no route at all (a 404), is guarded like a read at least, so new routes are covered.
- **per-stream write tokens** (``PUT /streams/NAME?write-token=…``, kept as a SHA-256): the writes a route marks
  with ``stream=`` (the stream's uploads, punctuations, reconfiguration and deletion) also accept that token, and
  need it when the server has none. ``check_stream_write`` applies the same rule where a view learns the stream
  only from its body (a rule's output stream).
- ``read_only``: every write → 403.
- ``rate_limit``: requests per second per client address (a token bucket of one second's worth); beyond it →
  429 with ``Retry-After``.

``trusted()`` tells a view whether the request carries the server's write token (or no token is configured): a
read that creates durable state (a window sequence) is bounded per client unless it does (protocol/resume.py).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar
from urllib.parse import unquote_plus, unquote_to_bytes

from flask import Flask, current_app, g, request
from werkzeug.datastructures import MultiDict
from werkzeug.routing import Rule

from protocol.errors import HttpProblem
from protocol.services import ServerConfig, services
from store import windows

FORM = "application/x-www-form-urlencoded"
View = TypeVar("View", bound=Callable[..., Any])


@dataclass(frozen=True)
class Need:
    """What a request needs: a write (``write``) or a read; ``stream``: the stream whose own write token also
    allows this write; ``what``: the write, named in refusals."""

    write: bool
    stream: str | None = None
    what: str = ""


READ = Need(False)


@dataclass(frozen=True)
class ParsedRequest:
    """A request as the views read it: method, route arguments, decoded query string, media type, and the decoded
    form fields (a form body only: uploads are never read here)."""

    method: str
    view_args: dict[str, Any]
    args: MultiDict[str, str]
    mimetype: str
    form: MultiDict[str, str] = field(default_factory=MultiDict)
    websocket: bool = False

    def parameter(self, name: str) -> bool:
        """Whether the query string or the form has ``name``."""
        return name in self.args or name in self.form


Decide = Callable[[ParsedRequest], Need]


def reads_only(view: View) -> View:
    """Declare a route that only reads."""
    view.access = lambda _: READ  # type: ignore[attr-defined]
    return view


def open_to_all(view: View) -> View:
    """Declare a route that only reads and needs no read token either: it shows nothing of the data (``/status``'s
    counts and names, the console's static files)."""
    view.open_to_all = True  # type: ignore[attr-defined]
    return reads_only(view)


def writes(what: str, *, stream_token: bool = False) -> Callable[[View], View]:
    """Declare a route whose every request changes the server (``stream_token``: the route's ``<name>`` stream's
    own token also allows it)."""
    def decide(parsed: ParsedRequest) -> Need:
        return Need(True, parsed.view_args.get("name") if stream_token else None, what)

    return needs(decide)


def needs(decide: Decide) -> Callable[[View], View]:
    """Declare a route whose method or parameters decide whether it writes."""
    def declare(view: View) -> View:
        view.access = decide  # type: ignore[attr-defined]
        return view

    return declare


def declared(view: Callable[..., Any] | None) -> Decide | None:
    """The access a view declared, None when it declared none (then it is a write)."""
    decide: Decide | None = getattr(view, "access", None)
    return decide


def parsed_request() -> ParsedRequest:
    """The current request, parsed as the views parse it (the form only for a form body)."""
    mimetype = (request.mimetype or "").lower()
    form: MultiDict[str, str] = request.form if mimetype == FORM else _NO_FORM  # parsed once, as the view reads it
    return ParsedRequest(request.method, request.view_args or {}, request.args, mimetype, form,
                         is_websocket(request.environ))


_NO_FORM: MultiDict[str, str] = MultiDict()


def need_of(app: Flask, parsed: ParsedRequest, rule: Rule | None) -> Need:
    """What a request matching ``rule`` needs; a route without a declaration is a write."""
    if rule is None:  # no route matched: the 404/405 the view never runs for
        return READ
    if parsed.method == "OPTIONS" and getattr(rule, "provide_automatic_options", False):  # Flask answers it alone
        return READ
    endpoint = rule.endpoint
    decide = declared(app.view_functions.get(endpoint))
    if decide is None:
        return Need(True, None, f"{parsed.method} {request.path}")
    return decide(parsed)


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


def install(app: Flask, config: ServerConfig) -> None:
    """Check every request before its view runs (see the module docstring)."""
    app.wsgi_app = TakesUriToken(app.wsgi_app)  # type: ignore[method-assign]
    token = config.token
    limiter = RateLimiter(config.rate_limit) if config.rate_limit else None

    @app.before_request
    def _check() -> None:
        if limiter is not None:
            wait = limiter.allow(request.remote_addr or "")
            if wait is not None:
                raise HttpProblem(f"too many requests from {request.remote_addr}: the limit is {limiter.rate:g} per "
                                  f"second; retry in {wait:.1f} s", 429, {"Retry-After": str(max(1, round(wait)))})
        need = need_of(app, parsed_request(), request.url_rule)
        g.access_trusted = token is not None and _bearer_is(token)
        g.access_need = need
        if need.write:
            _check_write(need)
        elif not _needs_no_token(app, request.method):
            _check_read(config)
        if not need.write and not g.access_trusted:  # a read that registers a window sequence is bounded
            client = request.remote_addr or ""
            g.access_registrar = windows.registrar.set(windows.Registrar(client, partial(
                _admit_sequence, client, config.sequences_per_client)))

    @app.teardown_request
    def _forget(_error: BaseException | None) -> None:
        registered = g.pop("access_registrar", None)
        if registered is not None:
            windows.registrar.reset(registered)


def _admit_sequence(client: str, limit: int, ref: str) -> None:
    """A read by ``client`` would register a new window sequence of ``ref``: refuse it past ``limit`` live ones.
    Sequences nobody reads are retired after a while (store.windows.RETIRE_AFTER_SECONDS), which frees the client's
    budget; the server's write token registers without a bound."""
    catalog = services().streams
    held = sum(stream.windows.held_by(client) for stream in map(catalog.find, catalog.names()) if stream is not None)
    if held >= limit:
        raise HttpProblem(
            f"WINDOWS={ref} would register a new window sequence, and {client} already has {held} registered by its "
            f"reads (the limit is {limit}, server option --sequences-per-client): reuse a sequence (sequence=ID, or "
            "the same WindowRef while it is registered), wait until unused ones retire "
            f"({windows.RETIRE_AFTER_SECONDS / 60:g} minutes unused), or send the write token", 429,
            {"Retry-After": str(int(windows.RETIRE_AFTER_SECONDS))})


def _needs_no_token(app: Flask, method: str) -> bool:
    """``OPTIONS`` (a browser's preflight carries no token) and the routes declared ``@open_to_all``."""
    rule = request.url_rule
    view = None if rule is None else app.view_functions.get(rule.endpoint)
    return method == "OPTIONS" or bool(getattr(view, "open_to_all", False))


def _check_read(config: ServerConfig) -> None:
    """Refuse a read without a token that may read, on a server with read tokens that is not public: 401 without a
    token or with one this server does not know, 403 with a stream's write token (it writes, it does not read)."""
    if not config.read_tokens or config.public or _public_stream():
        return
    given = _bearer()
    what = f"{request.method} {request.path}"
    if not given:
        raise HttpProblem(f"{what} reads this server: {_how_to_send()} with a read token or the write token", 401,
                          {"WWW-Authenticate": f'Bearer realm="{REALM}"'})
    if any(hmac.compare_digest(given.encode(), known.encode())
           for known in (*config.read_tokens, *((config.token,) if config.token else ()))):
        return
    if _stream_token_of_any(given):
        raise HttpProblem(f"the bearer token is a stream's write token, which does not read: {what} needs a read "
                          "token or the server's write token", 403, _INSUFFICIENT_SCOPE)
    raise _invalid_token()


def _public_stream() -> bool:
    """Whether the request is to a ``/streams/NAME…`` route of a stream marked public."""
    rule = request.url_rule
    name = (request.view_args or {}).get("name")
    if rule is None or not rule.rule.startswith("/streams/<name>") or not isinstance(name, str):
        return False
    stream = services().streams.find(name)
    return stream is not None and stream.config.public


REALM = "concentrator"
_INSUFFICIENT_SCOPE = {"WWW-Authenticate": f'Bearer realm="{REALM}", error="insufficient_scope"'}


def _invalid_token() -> HttpProblem:
    """RFC 6750 §3.1: a token the server does not know is a 401, so the client knows to get another."""
    return HttpProblem("the bearer token is not one this server knows", 401, {
        "WWW-Authenticate": f'Bearer realm="{REALM}", error="invalid_token", '
                            'error_description="the token is not one this server knows"'})


def _stream_token_of_any(given: str) -> bool:
    """Whether ``given`` is the write token of some stream (a known token, so a refusal is 403, not 401)."""
    digest = token_hash(given)
    catalog = services().streams
    return any(stream is not None and stream.config.write_token_sha256 is not None
               and hmac.compare_digest(digest, stream.config.write_token_sha256)
               for stream in map(catalog.find, catalog.names()))


def _check_write(need: Need) -> None:
    """Refuse a write the server's mode or the request's bearer token does not allow: 403 on a read-only server,
    else 401 without a token or with one the server does not know, 403 with a known token that may not write here
    (a read token, another stream's write token)."""
    what = need.what or f"{request.method} {request.path}"
    config: ServerConfig = current_app.config["CONCENTRATOR"]
    if config.read_only:
        raise HttpProblem(f"this server is read-only: {what} would change it", 403)
    token = config.token
    stream_token = _stream_token(need.stream)
    if token is None and stream_token is None:
        return
    given = _bearer()
    if not given:
        raise HttpProblem(f"{what} changes the server: {_how_to_send()}", 401,
                          {"WWW-Authenticate": f'Bearer realm="{REALM}"'})
    if token is not None and hmac.compare_digest(given.encode(), token.encode()):
        return
    if stream_token is not None and hmac.compare_digest(token_hash(given), stream_token):
        return
    if any(hmac.compare_digest(given.encode(), known.encode()) for known in config.read_tokens) \
            or _stream_token_of_any(given):
        which = "this server's or this stream's" if stream_token is not None else "this server's"
        raise HttpProblem(f"the bearer token is not {which} write token: {what} needs it", 403, _INSUFFICIENT_SCOPE)
    raise _invalid_token()


def check_stream_write(stream: str, what: str) -> None:
    """For a write a view finds only in its body: refuse it unless the request may write to ``stream`` (its own
    token, or the server's; nothing needed when neither is set). The route's own check has already run."""
    _check_write(Need(True, stream, what))


def ensure_write(what: str, stream: str | None = None) -> None:
    """Called by a view just before it writes, where its route declared that the parameters decide: if the
    declaration classified this request as a read, the write check runs now (a declaration that disagrees with its
    view can refuse a write, never let one through)."""
    need: Need | None = g.get("access_need")
    if need is None or not need.write:
        _check_write(Need(True, stream, what))


def trusted() -> bool:
    """Whether the current request carries the server's write token (on a server without one, none does)."""
    return bool(g.get("access_trusted", False))


def client_name() -> str:
    """Who the current request is, for per-client limits (queries running at once, ``engine.workers``): the holder of
    the server's write token wherever it connects from, else the remote address. Another bearer token names no one:
    a read token is shared by its readers, and a made-up token per request would escape every per-client limit."""
    return "the write token's holder" if trusted() else (request.remote_addr or "")


def _bearer() -> str:
    """The request's bearer token: its ``Authorization`` header's, else a WebSocket handshake's ``access_token``."""
    header = request.headers.get("Authorization")
    if header is None:
        return str(request.environ.get(URI_TOKEN, "")) if is_websocket(request.environ) else ""
    scheme, _, given = header.partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


def _how_to_send() -> str:
    """How to send the token, in a 401: a request that tried ``access_token=`` where it is not taken is told why."""
    if is_websocket(request.environ):
        return (f"send Authorization: Bearer <token>, or {URI_TOKEN_PARAMETER}=<token> in the query string (a "
                "browser's WebSocket cannot set headers)")
    if URI_TOKEN in request.environ:
        return (f"{URI_TOKEN_PARAMETER}= is taken from WebSocket handshakes only (RFC 6750 §2.3: a URL is logged "
                "and shared); send Authorization: Bearer <token>")
    return "send Authorization: Bearer <token>"


#: RFC 6750 §2.3: the query parameter a WebSocket handshake may carry its bearer token in
URI_TOKEN_PARAMETER = "access_token"
URI_TOKEN = "concentrator.access_token"  # the WSGI environ key TakesUriToken keeps it under


class TakesUriToken:
    """WSGI middleware: takes ``access_token`` out of every request's query string, and out of the request URI
    gunicorn's access log writes (``RAW_URI``, ``REQUEST_URI``), before anything reads or logs the request; keeps it
    under ``URI_TOKEN`` for ``_bearer()``, which takes it from WebSocket handshakes only. So the token is no
    parameter of any view (not a near miss, not part of a window sequence's, a registration's or a cache's key),
    and no log or ``/status`` shows it."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        take_uri_token(environ)
        return self.app(environ, start_response)


def take_uri_token(environ: dict[str, Any]) -> None:
    """Remove ``access_token`` from ``environ``'s query string and request URIs; keep its (first) value under
    ``URI_TOKEN``. A WSGI query string is the raw bytes as latin-1; the value is decoded as Werkzeug decodes one.

    >>> environ = {"QUERY_STRING": "%61ccess_token=r%2Bt&WINDOWS=R/HEAD/PT1M", "RAW_URI": "/s?access_token=x"}
    >>> take_uri_token(environ); environ
    {'QUERY_STRING': 'WINDOWS=R/HEAD/PT1M', 'RAW_URI': '/s?WINDOWS=R/HEAD/PT1M', 'concentrator.access_token': 'r+t'}
    """
    query = str(environ.get("QUERY_STRING", ""))
    if URI_TOKEN_PARAMETER not in query and "%" not in query:  # the common case: nothing to take
        return
    kept: list[str] = []
    taken: list[str] = []
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if unquote_plus(name) == URI_TOKEN_PARAMETER:
            raw = unquote_to_bytes(value.replace("+", " ").encode("latin-1", "replace"))
            taken.append(raw.decode("utf-8", "replace"))
        else:
            kept.append(part)
    if not taken:
        return
    environ["QUERY_STRING"] = "&".join(kept)
    environ[URI_TOKEN] = taken[0]
    for key in ("RAW_URI", "REQUEST_URI"):
        if isinstance(environ.get(key), str):
            path = environ[key].partition("?")[0]
            environ[key] = f"{path}?{environ['QUERY_STRING']}" if environ["QUERY_STRING"] else path


def _bearer_is(token: str) -> bool:
    given = _bearer()
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


def is_websocket(environ: dict[str, object]) -> bool:
    """A WebSocket opening handshake (RFC 6455 §4.1: ``Upgrade: websocket``)."""
    return str(environ.get("HTTP_UPGRADE", "")).lower() == "websocket"


def token_hash(token: str) -> str:
    """How a stream keeps its write token (never the token itself)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _stream_token(name: str | None) -> str | None:
    """The write-token hash of stream ``name``, if it exists and has one."""
    if name is None:
        return None
    stream = services().streams.find(name)
    return None if stream is None else stream.config.write_token_sha256
