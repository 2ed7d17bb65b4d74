"""The one place where errors become HTTP responses.

Every layer raises its own typed errors with a status hint (``store.StoreError``,
``sparql_ext.SparqlExtError``); the protocol's own problems are ``HttpProblem``s. All are answered
as ``text/plain`` with a message that names the problem and, where possible, how to fix it.
"""

from __future__ import annotations

import logging

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from sparql_ext import SparqlExtError
from store import StoreError

log = logging.getLogger(__name__)


class HttpProblem(Exception):
    """A protocol-level error: bad parameters, wrong method, unsupported media type…"""

    code = 400

    def __init__(self, message: str, code: int | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}
        if code is not None:
            self.code = code


class BadRequest(HttpProblem):
    code = 400


class NotAcceptable(HttpProblem):
    code = 406


class Gone(HttpProblem):
    """What was asked for existed once and is no longer kept (e.g. a resume point past retention)."""

    code = 410


class UnsupportedMediaType(HttpProblem):
    code = 415


class MethodNotAllowed(HttpProblem):
    code = 405


def _plain(message: str, code: int) -> Response:
    return Response(message.rstrip() + "\n", status=code, mimetype="text/plain")


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(HttpProblem)
    def _problem(error: HttpProblem) -> Response:
        response = _plain(error.message, error.code)
        response.headers.update(error.headers)
        return response

    @app.errorhandler(StoreError)
    def _store(error: StoreError) -> Response:
        if error.status_hint >= 500:
            log.error("store failure: %s", error.message)
        return _plain(error.message, error.status_hint)

    @app.errorhandler(SparqlExtError)
    def _sparql(error: SparqlExtError) -> Response:
        return _plain(error.message, error.status_hint)

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException) -> Response:
        return _plain(f"{error.name}: {error.description}", error.code or 500)
