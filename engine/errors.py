"""Errors of extended-SPARQL evaluation. Query evaluation errors of pyoxigraph are translated where the engine calls
it (``engine.evaluation``); the protocol layer never catches pyoxigraph's exceptions."""

from __future__ import annotations

from sparql_ext.errors import ConcentratorError


class EngineError(ConcentratorError):
    """Base of every error raised by ``engine``."""


class WindowNotComplete(EngineError):
    """A prospective window that did not complete within the request's timeout."""

    status_hint = 503


class ServiceNotAllowed(EngineError):
    """A SERVICE to a host that is not on the server's allowlist."""

    status_hint = 403


class EventSourceInvalid(EngineError):
    """An EVENT that reads no stream of this server (or none at all where no stream is being queried)."""

    status_hint = 400
