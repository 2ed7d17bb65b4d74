"""Starting the real server (``python -m concentrator serve``) on 127.0.0.1 for tests, conformance
runs and benchmarks: one helper instead of one per caller."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 90.0


@dataclass(frozen=True)
class RunningServer:
    url: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_server(args: Sequence[str] = (), *, data_dir: Path | None = None,
                   timeout: float = STARTUP_TIMEOUT, ready_path: str = "/status",
                   port: int | None = None) -> Iterator[RunningServer]:
    """Start the server on a fresh (or the given) data directory, on a free port (or the given one: a restart
    where clients reconnect); yield it; stop it."""
    with tempfile.TemporaryDirectory(prefix="concentrator-", ignore_cleanup_errors=True) as tmp:
        data = data_dir or Path(tmp) / "data"
        data.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        command = [sys.executable, "-m", "concentrator", "serve", "--data", str(data),
                   "--host", "127.0.0.1", "--port", str(port), *args]
        log_path = Path(tmp) / "server.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=log)
            server = RunningServer(f"http://127.0.0.1:{port}", data, log_path, process)
            try:
                _wait_until_ready(server, timeout, ready_path)
                yield server
            finally:
                stop(process)


@contextlib.contextmanager
def stalled_connections(url: str, count: int, request: bytes = b"GET /status HTTP/1.1\r\nHost: x\r\n",
                        ) -> Iterator[list[socket.socket]]:
    """``count`` connections to the server at ``url`` that send the start of a request (by default a request line
    and one header, no blank line ending the headers) and stall; closed on exit."""
    address = urlsplit(url)
    sockets = []
    try:
        for _ in range(count):
            sock = socket.create_connection((address.hostname, address.port), timeout=5)
            sock.sendall(request)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def _wait_until_ready(server: RunningServer, timeout: float, ready_path: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with code {server.process.returncode}:\n{server.log_tail()}")
        try:
            if requests.get(server.url + ready_path, timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server did not answer GET {ready_path} in {timeout:g} s:\n{server.log_tail()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def children_of() -> dict[int, list[int]]:
    """Every process's children, by parent pid (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    children, tree, frontier = children_of(), [], [pid]
    while frontier:
        current = frontier.pop()
        tree.append(current)
        frontier.extend(children.get(current, []))
    return tree


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants (gunicorn's worker, Spark's JVM and Python workers): a crash."""
    for member in process_tree(pid):
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text("utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])
