"""The one place where errors become HTTP responses.

Every package raises its own family of ``sparql_ext.errors.ConcentratorError`` with a status hint, where the
problem is known; the protocol's own problems are ``HttpProblem``s. ``error_response`` answers all of them as
``text/plain`` with a message that names the problem and, where possible, how to fix it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from sparql_ext.errors import ConcentratorError

log = logging.getLogger(__name__)


class HttpProblem(ConcentratorError):
    """A protocol-level error: bad parameters, a wrong method, an unacceptable ``Accept``… (an unsupported media type
    is ``store.errors.UnsupportedMediaType``, whichever layer finds it)."""

    status_hint = 400

    def __init__(self, message: str, status_hint: int | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message, status_hint=status_hint, headers=headers)


class BadRequest(HttpProblem):
    status_hint = 400


class NotFound(HttpProblem):
    status_hint = 404


class NotAcceptable(HttpProblem):
    status_hint = 406


class Forbidden(HttpProblem):
    status_hint = 403


class Gone(HttpProblem):
    """What was asked for existed once and is no longer kept (e.g. a resume point past retention)."""

    status_hint = 410


class MethodNotAllowed(HttpProblem):
    status_hint = 405


class BodyStalled(HttpProblem):
    """A read of the request body timed out (the server's body timeout, concentrator/server.py, raises
    ``TimeoutError`` in the read): the client stopped sending."""

    status_hint = 408

    def __init__(self) -> None:
        super().__init__("the request's body stopped arriving for longer than the server's --body-timeout",
                         headers={"Connection": "close"})


_REFUSED: Counter[int] = Counter()  # this process's answers that refused a request for load or limits, by status
_REFUSED_LOCK = threading.Lock()
REFUSALS = frozenset({408, 413, 429, 503})


def refused_counts() -> dict[str, int]:
    """Requests refused because of a limit or the load (408, 413, 429, 503), by status, since the start."""
    with _REFUSED_LOCK:
        return {str(status): n for status, n in sorted(_REFUSED.items())}


def error_response(error: ConcentratorError) -> Response:
    """An error as the client gets it: its status hint, its message, its headers."""
    if error.status_hint in REFUSALS:
        with _REFUSED_LOCK:
            _REFUSED[error.status_hint] += 1
    if error.status_hint >= 500:
        log.error("%s: %s", type(error).__name__, error.message)
    response = Response(error.message.rstrip() + "\n", status=error.status_hint, mimetype="text/plain")
    response.headers.update(error.headers)
    return response


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(ConcentratorError, error_response)

    @app.errorhandler(TimeoutError)
    def _stalled(_error: TimeoutError) -> Response:
        return error_response(BodyStalled())

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException) -> Response:
        response = Response(f"{error.name}: {error.description}\n", status=error.code or 500, mimetype="text/plain")
        for name, value in error.get_headers():  # a 405's Allow (RFC 9110 §15.5.6), …
            if name.lower() != "content-type":
                response.headers[name] = value
        return response
