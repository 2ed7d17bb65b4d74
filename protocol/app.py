"""The Flask application factory: one blueprint per protocol, one error handler, one services object."""

from __future__ import annotations

from flask import Flask

from protocol import access, console, gsp, hops, ldes, metrics, publications, rules, sparql, status, streams
from protocol.errors import register_error_handlers
from protocol.services import EXTENSION, ServerConfig, Services


def create_app(config: ServerConfig, services: Services | None = None) -> Flask:
    """The HTTP app over ``services`` (built by the composition root; by default the dataset, streams and rules of
    ``config.data_dir`` without a pipeline, as tests use it)."""
    app = Flask("concentrator", static_folder=None)  # the console serves its own files
    app.config["CONCENTRATOR"] = config
    app.extensions[EXTENSION] = services or Services.open(config)
    access.install(app, config)
    hops.install(app)
    for blueprint in (sparql.bp, gsp.bp, status.bp, streams.bp, publications.bp, ldes.bp, rules.bp, console.bp):
        app.register_blueprint(blueprint)
    metrics.install(app)
    register_error_handlers(app)
    return app
