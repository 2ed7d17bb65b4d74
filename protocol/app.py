"""The Flask application factory: one blueprint per protocol, one error handler."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from flask import Flask

from protocol import access, gsp, rules, sparql, status, streams
from protocol.continuous import Registrations
from protocol.errors import register_error_handlers
from protocol.window_results import SharedResults
from store import RevisionedDataset
from store.evaluation import ExtendedEvaluator
from store.rules import RuleRegistry
from store.streams import StreamCatalog


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    max_body_bytes: int | None = None  # RDF request bodies; None: no limit
    retention: int | None = None  # revisions whose history is kept; None: all
    in_memory: bool = False  # tests only: the store lives in memory, its history on disk
    token: str | None = None  # writes need "Authorization: Bearer <token>" (protocol/access.py)
    read_only: bool = False  # every write is refused (403)
    rate_limit: float | None = None  # requests per second per client address; None: no limit
    service_allow: tuple[str, ...] | None = None  # hosts SERVICE may reach over HTTP; None: any


def create_app(config: ServerConfig, dataset: RevisionedDataset | None = None,
               streams_catalog: StreamCatalog | None = None,
               pipeline_status: Callable[[], dict[str, object]] | None = None,
               rules_registry: RuleRegistry | None = None, evaluator: ExtendedEvaluator | None = None) -> Flask:
    app = Flask("concentrator")
    app.config["CONCENTRATOR"] = config
    app.extensions["dataset"] = dataset or RevisionedDataset(
        config.data_dir, in_memory=config.in_memory, retention=config.retention)
    app.extensions["streams"] = streams_catalog or StreamCatalog(
        config.data_dir / "streams", in_memory=config.in_memory)
    app.extensions["evaluator"] = evaluator or ExtendedEvaluator(
        app.extensions["dataset"], app.extensions["streams"], [], requests.Session(),
        allow_hosts=None if config.service_allow is None else frozenset(config.service_allow))
    app.extensions["rules"] = rules_registry or RuleRegistry(config.data_dir / "rules", app.extensions["evaluator"])
    app.extensions["pipeline_status"] = pipeline_status or (lambda: {"state": "not running"})
    app.extensions["continuous"] = Registrations()  # the continuous responses running now (/status)
    app.extensions["window_results"] = SharedResults()  # window results shared by continuous responses
    access.install(app, config.token, config.read_only, config.rate_limit)
    for blueprint in (sparql.bp, gsp.bp, status.bp, streams.bp, rules.bp):
        app.register_blueprint(blueprint)
    register_error_handlers(app)
    return app
