"""Serve the Flask app with gunicorn's threaded worker.

One worker process: the on-disk store can be opened by one process only. gunicorn's ``gthread``
worker hands request bodies to the app as they arrive (chunked uploads stream), unlike servers
that buffer whole bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication

from protocol import ServerConfig, create_app


class _Gunicorn(BaseApplication):  # type: ignore[misc]
    def __init__(self, config: ServerConfig, options: dict[str, Any], make_app: Callable[[ServerConfig], Any]) -> None:
        self._config = config
        self._make_app = make_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Called in the worker process, after the fork: the stores and Spark's JVM belong to it.
        return self._make_app(self._config)


def serve(config: ServerConfig, host: str, port: int, threads: int = 16,
          make_app: Callable[[ServerConfig], Any] = create_app) -> None:
    _Gunicorn(config, {
        "bind": f"{host}:{port}",
        "workers": 1,
        "worker_class": "gthread",
        "threads": threads,
        "timeout": 0,  # long uploads and continuous responses are normal here
        "graceful_timeout": 10,
        "accesslog": "-",
        "loglevel": "info",
    }, make_app).run()
