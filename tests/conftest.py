from __future__ import annotations

import os
import subprocess
import threading
import time
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

#: The process writing Spark's class-data archive for this run (its pid, in the environment the test workers inherit).
ARCHIVE_WRITER = "CONCENTRATOR_TEST_ARCHIVE_WRITER"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any test worker starts (xdist starts them after this hook): start writing Spark's class-data archive if
    this installation has none (≈ 35 s, once). Dozens of Spark drivers start in a run; without the archive each costs
    ≈ 13 CPU-seconds more (docs/deployment.md, "Starting Spark"). The tests that need no JVM run meanwhile (they come
    first, ``pytest_collection_modifyitems``), and each JVM test waits for the archive (``pytest_runtest_setup``): the
    35 s overlap the suite instead of preceding it."""
    config = session.config
    if hasattr(config, "workerinput") or "not jvm" in (config.option.markexpr or ""):
        return
    try:
        from pipeline.class_archive import start_class_archive
    except ImportError:  # no pyspark: the Spark tests skip, naming the install command
        return
    writer = start_class_archive()
    if writer is not None:
        config.get_terminal_writer().line("writing Spark's class-data archive (once per installation, ≈ 35 s), "
                                          "beside the tests that need no JVM ...")
        config.stash[_WRITER] = writer
        os.environ[ARCHIVE_WRITER] = str(writer.pid)
        threading.Thread(target=writer.wait, daemon=True).start()  # reaped at once: no zombie for workers to wait on


def pytest_sessionfinish(session: pytest.Session) -> None:
    writer = session.config.stash.get(_WRITER, None)
    if writer is not None:
        writer.wait()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A JVM test starts once the archive is written (or its writer has given up)."""
    pid = os.environ.get(ARCHIVE_WRITER)
    if pid is None or item.get_closest_marker("jvm") is None:
        return
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and _alive(int(pid)):
        time.sleep(0.2)
    del os.environ[ARCHIVE_WRITER]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_WRITER = pytest.StashKey[subprocess.Popen[str]]()

#: The files that take longest (wall seconds within `make test`, measured with ``--durations``), run first among the
#: JVM files: with a file per worker (``--dist loadfile --no-loadscope-reorder``), handing out the longest first keeps
#: one worker from starting a minute-long file while the others have nothing left. Files not listed keep their order
#: after these.
LONGEST_FIRST = ("test_resume_crash.py", "test_cluster.py", "test_csrbench_oracle.py", "test_crash.py",
                 "test_pipeline.py", "test_mqtt.py", "test_spark_source.py", "test_rules_bulk.py", "test_limits.py",
                 "test_continuous.py", "test_resume.py", "test_replay.py", "test_rules.py", "test_websocket.py",
                 "test_connected_patient.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that need no JVM first (they run while Spark's archive is written), then the longest JVM files (the
    same order on every worker: xdist checks that they collected alike)."""
    rank = {name: number for number, name in enumerate(LONGEST_FIRST)}
    jvm_files = {item.path.name for item in items if item.get_closest_marker("jvm") is not None}
    items.sort(key=lambda item: (item.path.name in jvm_files, rank.get(item.path.name, len(rank))))


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
