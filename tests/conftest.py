from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from conformance.server import RunningServer, running_server
from protocol import ServerConfig, create_app
from store import RevisionedDataset


@pytest.fixture
def dataset(tmp_path: Path) -> Iterator[RevisionedDataset]:
    """An on-disk dataset in a fresh directory."""
    ds = RevisionedDataset(tmp_path / "data")
    yield ds
    ds.close()


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    config = ServerConfig(tmp_path / "data", max_body_bytes=1_000_000)
    return create_app(config)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(scope="session")
def spark_server() -> Iterator[RunningServer]:
    """One server with the Spark pipeline per test worker, shared by the tests that need only that: starting Spark
    costs ≈ 20 CPU-seconds, most of what such a test takes. Its users name their streams, rules and outputs after
    themselves (no two tests share a name) and leave no continuous response open. ``127.0.0.1:9`` (where nothing
    listens) is an allowed SERVICE host, for rules that must fail at run time; 40 threads serve the 14 continuous
    responses of the CSRBench oracle run at once."""
    with running_server(["--service-allow", "127.0.0.1:9", "--threads", "40"]) as server:
        yield server
