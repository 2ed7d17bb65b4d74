"""What the HTTP layer serves, in one typed object: built once by the composition root
(``concentrator.compose``) and handed to ``create_app(config, services)``; views reach it with ``services()``.

The continuous responses running now (``Registrations``) and the window results they share (``SharedResults``)
live here too: they are the HTTP layer's own state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import requests
from flask import Flask, current_app

from engine.errors import EvaluationStopped
from engine.evaluation import ExtendedEvaluator, HttpSession
from protocol.window_results import SharedResults
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


@dataclass
class QueryStats:
    """The queries being evaluated for clients now, and those stopped because their client went away (``/status``,
    ``queries``)."""

    running: int = 0
    stopped_client_gone: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

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
        finally:
            with self._lock:
                self.running -= 1

    def status(self) -> dict[str, int]:
        return {"running": self.running, "stopped_client_gone": self.stopped_client_gone}


@dataclass(frozen=True)
class Publication:
    """A standing order to publish to an MQTT topic (``PUT /streams/{stream}/publications/{name}``; docs/connectors.md,
    "MQTT out"): each window result of ``windows`` (a repeating WindowRef; ``query`` over each window, None: the
    window dataset, as a continuous response gives it), or, with ``windows`` None, each element of the stream (only
    those a rule made when ``rule`` names it: a rule's ``publish=``)."""

    stream: str
    name: str
    topic: str
    windows: str | None = None
    query: str | None = None
    media_type: str = "application/trig"
    report: str | None = None
    operator: str | None = None
    retain: bool = False
    base: str = ""  # the server's base URL: resolves the query's IRIs of this server
    rule: str | None = None


def rule_publication(rule: str, output: str, topic: str, base: str) -> Publication:
    """What a rule's ``publish=`` topic is: a publication of its output elements, named after it."""
    return Publication(output, f"rule-{rule}", topic, base=base, rule=rule)


class PublicationRegistry(Protocol):
    """What the HTTP layer asks of the MQTT publisher (``connectors.mqtt_out.Publications`` implements it)."""

    def put(self, publication: Publication) -> tuple[dict[str, object], bool]:
        """Start (or replace) a publication; returns its description and whether it is new."""
        ...

    def delete(self, stream: str, name: str) -> None: ...

    def describe(self, stream: str, name: str | None = None) -> list[dict[str, object]]: ...


def _no_connectors() -> dict[str, object]:
    return {"broker": None}


@dataclass
class Connectors:
    """The transports other than HTTP that the composition root started (``serve --mqtt``): the broker's address
    (None: none), their status for ``/status``, and the MQTT publications."""

    broker: str | None = None
    status: Callable[[], dict[str, object]] = _no_connectors
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
    connector_status: Callable[[], dict[str, object]] = dict  # what feeds streams besides uploads (LDES followers)
    continuous: Registrations = field(default_factory=Registrations)  # the continuous responses running now
    window_results: SharedResults[Any] = field(default_factory=SharedResults)  # shared by continuous responses
    connectors: Connectors = field(default_factory=Connectors)  # MQTT (serve --mqtt), set by the composition root
    event_rules: EventRules | None = None  # the workers of rules with MATCH (fired per element, no pipeline needed)
    framing: FramingProcesses = field(default_factory=lambda: FramingProcesses(0))  # uploads' large segments
    queries: QueryStats = field(default_factory=QueryStats)  # queries being evaluated for clients

    @classmethod
    def open(cls, config: ServerConfig) -> Services:
        """The dataset, the streams, the evaluator and the rules of ``config.data_dir``, without a pipeline (tests,
        and the parts ``concentrator.compose`` adds the pipeline and rule firing to)."""
        dataset = RevisionedDataset(config.data_dir, in_memory=config.in_memory, retention=config.retention)
        streams = StreamCatalog(config.data_dir / "streams", in_memory=config.in_memory)
        allow = None if config.service_allow is None else frozenset(config.service_allow)
        http = cast(HttpSession, requests.Session())  # what the evaluator uses of it (engine imports no HTTP library)
        evaluator = ExtendedEvaluator(dataset, streams, list(config.base_urls), http, allow_hosts=allow)
        rules = RuleRegistry(config.data_dir / "rules", evaluator)
        return cls(dataset, streams, evaluator, rules, event_rules=EventRules(rules),
                   framing=FramingProcesses(config.framing_processes))

    def close(self) -> None:
        if self.event_rules is not None:  # they append to streams: stopped (their state saved) first
            self.event_rules.close()
        self.rules.flush_statuses()
        self.framing.close()
        self.streams.close()
        self.dataset.close()


def services() -> Services:
    """The services of the app handling the current request."""
    return services_of(current_app)


def services_of(app: Flask) -> Services:
    found = app.extensions[EXTENSION]
    assert isinstance(found, Services)
    return found
