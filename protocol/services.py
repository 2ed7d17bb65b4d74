"""What the HTTP layer serves, in one typed object: built by the composition root only (``concentrator.compose``,
``open_services``; ``tests/test_imports.py`` checks it) and handed to ``create_app(config, services)``; views reach it
with ``services()``.

The continuous responses running now (``Registrations``) and the window results they share (``SharedResults``)
live here too: they are the HTTP layer's own state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flask import Flask, current_app

from delivery.fanout import Fanout
from delivery.publications import PublicationRegistry
from delivery.results import SharedResults
from delivery.subscriptions import Registrations
from engine.budget import DEFAULT_PROCESSES, QueryLimits, in_flight_bound
from engine.errors import EvaluationStopped, QueryBudgetExceeded
from engine.evaluation import ExtendedEvaluator
from engine.snapshots import Snapshots
from engine.workers import QueryPool
from rules.event_rules import EventRules
from rules.registry import RuleRegistry
from store import RevisionedDataset
from store.canonical import FramingProcesses
from store.limits import BODY_LIMIT
from store.streams import StreamCatalog

EXTENSION = "concentrator"


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    max_body_bytes: int | None = BODY_LIMIT  # Graph Store bodies, as sent and as N-Quads; None: no limit
    retention: int | None = None  # revisions whose history is kept; None: all
    in_memory: bool = False  # tests only: the store lives in memory, its history on disk
    token: str | None = None  # writes need "Authorization: Bearer <token>" (protocol/access.py)
    read_only: bool = False  # every write is refused (403)
    rate_limit: float | None = None  # requests per second per client address; None: no limit
    service_allow: tuple[str, ...] | None = None  # hosts SERVICE may reach over HTTP; None: any
    framing_processes: int = 2  # processes writing uploads' large segments (store.canonical); 0: request threads
    sequences_per_client: int = 64  # live window sequences a client's reads may register (protocol/access.py)
    base_urls: tuple[str, ...] = ()  # the URLs this server answers at (a SERVICE to them is evaluated in-process)
    query_timeout: float = 60.0  # seconds a query may take (a request's timeout= may lower it; engine/workers.py)
    query_processes: int = DEFAULT_PROCESSES  # worker processes evaluating plain queries; 0: in the request threads
    queries_per_client: int = 4  # queries a client may have running or waiting; beyond it 429
    query_queue: int = 64  # queries that may wait for a busy worker; beyond it 503
    request_threads: int = 16  # the server's --threads: queries in flight leave some free (engine.workers)
    read_tokens: tuple[str, ...] = ()  # reads need one of these or the write token (protocol/access.py)
    public: bool = False  # serve --public: reads open to anyone on purpose (cli: off-loopback, this or a read token)
    cors_origins: tuple[str, ...] = ()  # origins a browser may call from ('*': any; protocol/cors.py)


@dataclass
class QueryStats:
    """The queries being evaluated for clients now, and those stopped because their client went away or their budget
    ran out (``/status``, ``queries``); ``pool``: their admission, budgets and worker processes, which counts the
    queries waiting for a worker and those refused."""

    running: int = 0  # inside ``evaluating()``: in a worker, waiting for one, or in a request thread
    stopped_client_gone: int = 0
    stopped_budget: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    pool: QueryPool = field(default_factory=QueryPool)

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        with self._lock:
            self.running += 1
        try:
            yield
        except EvaluationStopped:
            with self._lock:
                self.stopped_client_gone += 1
            raise
        except QueryBudgetExceeded:
            with self._lock:
                self.stopped_budget += 1
            raise
        finally:
            with self._lock:
                self.running -= 1

    def status(self) -> dict[str, Any]:
        pool = self.pool.status()
        return {"running": max(0, self.running - pool["queued"]), "stopped_client_gone": self.stopped_client_gone,
                "stopped_budget": self.stopped_budget, **pool}


def _no_broker() -> dict[str, object]:
    return {"broker": None}


@dataclass
class MqttService:
    """What the HTTP layer reaches of MQTT, which the composition root started (``serve --mqtt``): the broker's
    address (None: none), the connector's status for ``/status``, and the publications."""

    broker: str | None = None
    status: Callable[[], dict[str, object]] = _no_broker
    publications: PublicationRegistry | None = None


def _not_running() -> dict[str, object]:
    return {"state": "not running"}


@dataclass
class Services:
    """The server's parts the HTTP layer uses."""

    dataset: RevisionedDataset
    streams: StreamCatalog
    evaluator: ExtendedEvaluator
    rules: RuleRegistry
    pipeline_status: Callable[[], dict[str, object]] = _not_running
    executors_status: Callable[[], dict[str, object]] = _not_running  # rules in Spark executors (rules.tasks)
    ldes_followers_status: Callable[[], dict[str, object]] = dict  # per stream following an LDES (connectors.ldes)
    continuous: Registrations = field(default_factory=Registrations)  # the continuous responses running now
    window_results: SharedResults[Any] = field(default_factory=SharedResults)  # shared by continuous responses
    mqtt: MqttService = field(default_factory=MqttService)  # serve --mqtt: set by the composition root
    event_rules: EventRules | None = None  # the workers of rules with MATCH (fired per element, no pipeline needed)
    framing: FramingProcesses = field(default_factory=lambda: FramingProcesses(0))  # uploads' large segments
    queries: QueryStats = field(default_factory=QueryStats)  # queries being evaluated for clients
    fanout: Fanout | None = None  # holds continuous responses' connections without a thread each (a server's)
    connections: Callable[[], dict[str, Any]] = dict  # the HTTP server's connections and threads (set by it)

    def close(self) -> None:
        self.queries.pool.close()  # first: its workers read snapshots of the dataset
        if self.fanout is not None:
            self.fanout.close()
        if self.event_rules is not None:  # they append to streams: stopped (their state saved) first
            self.event_rules.close()
        self.rules.flush_statuses()
        self.framing.close()
        self.streams.close()
        self.dataset.close()


def query_pool(config: ServerConfig, dataset: RevisionedDataset) -> QueryPool:
    """The query processes of ``config`` over ``dataset``: snapshots in ``<data>/snapshots``, results spooled in
    ``<data>/query-results`` (both emptied at start)."""
    limits = QueryLimits(config.query_timeout, config.query_processes, config.queries_per_client, config.query_queue,
                         in_flight_bound(config.request_threads))
    if not config.query_processes:
        return QueryPool(limits)
    snapshots = Snapshots(config.data_dir / "snapshots", dataset.snapshot, lambda: dataset.head)
    return QueryPool(limits, snapshots, config.data_dir / "query-results")


def services() -> Services:
    """The services of the app handling the current request."""
    return services_of(current_app)


def services_of(app: Flask) -> Services:
    found = app.extensions[EXTENSION]
    assert isinstance(found, Services)
    return found
