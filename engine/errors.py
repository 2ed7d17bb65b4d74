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


class ServiceLoop(EngineError):
    """A SERVICE call that would go deeper than the hops a chain of SERVICE calls may take (508 Loop Detected,
    RFC 5842): a query that calls this server back, directly or through other servers."""

    status_hint = 508


class ServiceFailed(EngineError):
    """A remote SERVICE endpoint that did not answer with SPARQL results (its status is named, never its body)."""

    status_hint = 502


class EvaluationStopped(EngineError):
    """An evaluation ended on purpose before it finished (its client went away: nobody is left to answer)."""

    status_hint = 503


class EventSourceInvalid(EngineError):
    """An EVENT that reads no stream of this server (or none at all where no stream is being queried)."""

    status_hint = 400


class QueryBudgetExceeded(EngineError):
    """A query that ran (or waited for a query process) past its time budget (``timeout=``, at most the server's
    ``--query-timeout``): it was stopped, its worker process killed. The server is not broken but busy or the query
    too costly: 503 with ``Retry-After``."""

    status_hint = 503


class ClientQueryLimit(EngineError):
    """A client that already has ``--queries-per-client`` queries running or waiting (429 with ``Retry-After``)."""

    status_hint = 429


class QueryQueueFull(EngineError):
    """Every query process is busy and the queue of waiting queries is at its bound (``--query-queue``), or the
    queries in flight would take the request threads kept for everything else: 503 with ``Retry-After``."""

    status_hint = 503


class ResultNotAcceptable(EngineError):
    """A query result of a form (solutions, triples) the request's ``Accept`` offers no format for; the message is
    the protocol's, chosen before the query went to a worker process."""

    status_hint = 406


class QueryProcessFailed(EngineError):
    """A query's worker process ended without an answer (killed by the system, a crash): a fresh one replaces it."""

    status_hint = 500
