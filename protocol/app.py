"""The Flask application factory: one blueprint per protocol, one error handler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flask import Flask

from protocol import gsp, sparql, status
from protocol.errors import register_error_handlers
from store import RevisionedDataset


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    max_body_bytes: int | None = None  # RDF request bodies; None: no limit
    retention: int | None = None  # revisions whose history is kept; None: all
    in_memory: bool = False  # tests only: the store lives in memory, its history on disk


def create_app(config: ServerConfig, dataset: RevisionedDataset | None = None) -> Flask:
    app = Flask("concentrator")
    app.config["CONCENTRATOR"] = config
    app.extensions["dataset"] = dataset or RevisionedDataset(
        config.data_dir, in_memory=config.in_memory, retention=config.retention)
    for blueprint in (sparql.bp, gsp.bp, status.bp):
        app.register_blueprint(blueprint)
    register_error_handlers(app)
    return app
