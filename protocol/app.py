"""The Flask application factory: one blueprint per protocol, one error handler, one services object."""

from __future__ import annotations

from flask import Flask

from protocol import (
    access,
    console,
    cors,
    encoding,
    gsp,
    gsp_dydra,
    hops,
    ldes,
    metrics,
    publications,
    queries,
    rules,
    sparql,
    status,
    streams,
)
from protocol.errors import register_error_handlers
from protocol.services import EXTENSION, ServerConfig, Services


def create_app(config: ServerConfig, services: Services) -> Flask:
    """The HTTP app over ``services`` (built by the composition root: ``concentrator.compose``, whose ``http_app``
    gives the app over the dataset, streams and rules of ``config.data_dir`` without a pipeline, as tests use it)."""
    app = Flask("concentrator", static_folder=None)  # the console serves its own files
    app.config["CONCENTRATOR"] = config
    app.extensions[EXTENSION] = services
    cors.install(app, config.cors_origins)  # first: a browser's preflight carries no token
    encoding.install(app)  # before the access check, which may read a form
    access.install(app, config)
    hops.install(app)
    for blueprint in (sparql.bp, gsp_dydra.bp, gsp.bp, status.bp, streams.bp, publications.bp, ldes.bp, rules.bp,
                      console.bp):
        app.register_blueprint(blueprint)
    app.register_blueprint(queries.bp)
    queries.install(app)  # registered queries hold their window sequences from start-up
    metrics.install(app)
    register_error_handlers(app)
    return app
