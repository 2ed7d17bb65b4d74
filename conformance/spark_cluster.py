"""A Spark standalone cluster on 127.0.0.1 — a master and N workers started with pyspark's own
``bin/spark-class`` — for the cluster test and for trying ``serve --spark-master spark://…`` by hand:

    python -m conformance.spark_cluster --workers 2      # prints the master URL; Ctrl-C stops it

The daemons are the ones a real deployment runs (``org.apache.spark.deploy.master.Master`` and
``…deploy.worker.Worker``); only the addresses are loopback. Each runs in its own process group, so stopping
the cluster also ends the executors and Python workers the workers forked.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import requests

from conformance.server import free_port, tail
from pipeline.spark import local_daemon_java_options

STARTUP_TIMEOUT = 90.0
SPARK_HOME = Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    master_url: str  # spark://127.0.0.1:PORT — what ``serve --spark-master`` takes
    ui_url: str  # the master's web UI; ``/json/`` lists workers and applications
    work_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict:  # type: ignore[type-arg]
        """The master's JSON view: ``aliveworkers``, ``workers``, ``activeapps``, ``completedapps``, …"""
        return requests.get(self.ui_url + "/json/", timeout=10).json()  # type: ignore[no-any-return]

    def executor_dirs(self) -> list[Path]:
        """``<worker>/<app>/<executor>`` directories: one per executor a worker launched."""
        return sorted(self.work_dir.glob("worker-*/app-*/*"))

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(f"== {path.name}\n{tail(path, lines)}" for path in sorted(self.work_dir.glob("*.log")))


def _daemon(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           # the workers' own logs and pid files stay in the cluster's directory
           "SPARK_LOG_DIR": str(log_path.parent), "SPARK_PID_DIR": str(log_path.parent),
           # C1 only and the driver's class-data archive, as the server gives its executors on this machine
           "SPARK_DAEMON_JAVA_OPTS": local_daemon_java_options()}
    with log_path.open("wb") as log:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log, stderr=log, env=env,
                                start_new_session=True)


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory: str = "1g",
                       work_dir: Path | None = None) -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers (``cores`` and ``memory`` each); yield once all are registered."""
    with tempfile.TemporaryDirectory(prefix="spark-cluster-", ignore_cleanup_errors=True) as tmp:
        root = work_dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        port, ui_port = free_port(), free_port()
        cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", root)
        try:
            cluster.processes.append(_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                              "--port", str(port), "--webui-port", str(ui_port)],
                                             root / "master.log"))
            for number in range(1, workers + 1):
                worker_dir = root / f"worker-{number}"
                worker_dir.mkdir(exist_ok=True)
                cluster.processes.append(_daemon(
                    ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores),
                     "--memory", memory, "--webui-port", "0", "--work-dir", str(worker_dir), cluster.master_url],
                    root / f"worker-{number}.log"))
            _wait_for_workers(cluster, workers)
            yield cluster
        finally:
            for process in reversed(cluster.processes):
                _stop(process)


def _wait_for_workers(cluster: StandaloneCluster, workers: int) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in cluster.processes):
            raise RuntimeError(f"a Spark daemon exited:\n{cluster.log_tail()}")
        with contextlib.suppress(requests.RequestException, ValueError):
            if cluster.state().get("aliveworkers", 0) >= workers:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{workers} workers did not register in {STARTUP_TIMEOUT:g} s:\n{cluster.log_tail()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a Spark standalone cluster on 127.0.0.1 until Ctrl-C.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker")
    parser.add_argument("--work-dir", type=Path, help="keep logs and executor directories here")
    args = parser.parse_args()
    with standalone_cluster(args.workers, args.cores, args.memory, args.work_dir) as cluster:
        print(f"master {cluster.master_url}  (web UI {cluster.ui_url}); serve --spark-master {cluster.master_url}",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
