"""One query process as the server sees it (``engine.workers.QueryPool`` keeps them): started from the fork server,
the server's end of its pipe, the snapshot it has open, whose query it runs, and its killing.

The processes come from a ``forkserver`` context, never ``fork``: the server process runs Spark's JVM and dozens of
threads, which a fork would copy in whatever state they are in. What a process does: ``engine.query_process``."""

from __future__ import annotations

import contextlib
import multiprocessing

from engine.query_process import serve

_CONTEXT = multiprocessing.get_context("forkserver")


def preload_fork_server() -> None:
    """Have the fork server import ``engine.query_process`` (pyoxigraph with it) once: each process forked from it
    starts in a few milliseconds."""
    _CONTEXT.set_forkserver_preload(["engine.query_process"])


class WorkerProcess:
    """One query process and the server's end of its connection; ``snapshot``: the store it has open."""

    def __init__(self, number: int) -> None:
        ours, theirs = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(target=serve, args=(theirs,), name=f"query-worker-{number}", daemon=True)
        self.process.start()
        theirs.close()  # the worker holds the only other end: it sees the end of input when this process dies
        self.connection = ours
        self.snapshot = ""
        self.client: str | None = None  # whose query it runs (None: idle)

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def kill(self) -> None:
        """SIGKILL: pyoxigraph cannot be interrupted, a killed process releases its CPU and memory at once."""
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()
        self.process.join(5)
        self.connection.close()


def kill_all(workers: list[WorkerProcess]) -> None:
    """Kill ``workers`` and empty the list."""
    for worker in workers:
        worker.kill()
    workers.clear()
