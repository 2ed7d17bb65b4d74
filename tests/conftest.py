from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from concentrator.compose import http_app
from conformance.mqtt_broker import Mosquitto, running_broker, skip_reason_mosquitto
from conformance.server import RunningServer, running_server
from protocol import ServerConfig
from store import RevisionedDataset


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any test worker starts (xdist starts them after this hook): write Spark's class-data archive if this
    installation has none (≈ 35 s, once). Dozens of Spark drivers start in a run; without the archive each costs
    ≈ 13 CPU-seconds more (docs/deployment.md, "Starting Spark"). Measured on a fresh clone, writing it beside the
    first tests instead made the run longer (335 s against 320): those are Spark's longest, and their drivers then
    started without it while it was being written."""
    config = session.config
    if hasattr(config, "workerinput") or "not jvm" in (config.option.markexpr or ""):
        return
    try:
        from pipeline.class_archive import ensure_class_archive
        from pipeline.spark import class_archive_path
    except ImportError:  # no pyspark: the Spark tests skip, naming the install command
        return
    if not class_archive_path().exists():
        config.get_terminal_writer().line("writing Spark's class-data archive (once per installation, ≈ 35 s) ...")
        ensure_class_archive()


#: The files that take longest (wall seconds within `make test`, measured with ``--durations``), run first: with a file
#: per worker (``--dist loadfile --no-loadscope-reorder``), handing out the longest first keeps one worker from
#: starting a minute-long file while the others have nothing left. Files not listed keep their order after these.
LONGEST_FIRST = ("test_cluster.py", "test_csrbench_oracle.py", "test_resume_crash.py", "test_crash.py",
                 "test_resume.py", "test_pipeline.py", "test_spark_source.py", "test_rules_bulk.py", "test_mqtt.py",
                 "test_replay.py", "test_rules.py", "test_websocket.py", "test_connected_patient.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (the same order on every worker: xdist checks that they collected alike)."""
    rank = {name: number for number, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture
def dataset(tmp_path: Path) -> Iterator[RevisionedDataset]:
    """An on-disk dataset in a fresh directory."""
    ds = RevisionedDataset(tmp_path / "data")
    yield ds
    ds.close()


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    config = ServerConfig(tmp_path / "data", max_body_bytes=1_000_000)
    return http_app(config)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(scope="session")
def shared_broker() -> Iterator[Mosquitto | None]:
    """The MQTT broker the shared Spark server is connected to (``serve --mqtt``), or None when Mosquitto is not
    installed (then the tests that need it skip, naming the install command; never on CI)."""
    if skip_reason_mosquitto() is not None:
        yield None
        return
    with running_broker() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark_server(shared_broker: Mosquitto | None) -> Iterator[RunningServer]:
    """One server with the Spark pipeline per test worker, shared by the tests that need only that: starting Spark
    costs ≈ 20 CPU-seconds, most of what such a test takes. Its users name their streams, rules, outputs and MQTT
    topics after themselves (no two tests share a name) and leave no continuous response open. ``127.0.0.1:9``
    (where nothing listens) is an allowed SERVICE host, for rules that must fail at run time; 40 threads serve the
    14 continuous responses of the CSRBench oracle run at once."""
    args = ["--service-allow", "127.0.0.1:9", "--threads", "40"]
    if shared_broker is not None:
        args += ["--mqtt", shared_broker.url]
    with running_server(args) as server:
        yield server
