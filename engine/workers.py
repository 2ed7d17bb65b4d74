"""Every query has a budget: plain queries evaluated in worker processes that can be killed.

pyoxigraph cannot cancel a query. It evaluates with the GIL released and hands control back only when it writes a
result (``engine.plain.Watched`` stops it there), and a query that computes everything before its first solution (an
aggregate over a large join) writes nothing for minutes. So the plain queries of ``/sparql`` are evaluated in
worker processes, and a query past its budget is stopped by killing its process:

- ``QueryPool`` keeps up to ``processes`` workers (``--query-processes``, by default twice the CPUs), started when a
  query first needs one and kept warm. They come from a ``forkserver`` context, never ``fork``: the server process
  runs Spark's JVM and dozens of threads, which a fork would copy in whatever state they are in; the fork server is
  a fresh interpreter that has imported this module (and pyoxigraph) and nothing else, so a worker starts in a few
  milliseconds. A worker runs at ``nice`` 10 (``serve``).
- **Budget**: ``--query-timeout`` seconds (default 60), or less with the request's ``timeout=``, counted from the
  request's start (waiting for a free worker included). Past it the worker is killed (SIGKILL: its CPU is released
  at once), a fresh one is started in its place, and the client gets ``QueryBudgetExceeded`` (503, ``Retry-After``).
  A client that goes away while its query waits or runs has its worker killed too (``EvaluationStopped``).
- **Admission** (``QueryPool.admit``, every query of ``/sparql``, those evaluated in-process included): a client
  (``protocol.access.client_name``) with ``per_client`` queries running or waiting gets ``ClientQueryLimit`` (429).
  A client's queries run in at most half the workers at once (``share``: by default as many as there are CPUs, so
  one client can still keep every core busy): another client's query finds a free worker at once, and a client
  flooding the server waits behind its own queries. When no worker is free for it a query waits in line (first come
  first served among the clients under their share) for at most its budget; past ``queue`` waiting ones it gets
  ``QueryQueueFull`` (503). Each query running or waiting holds one of the server's request threads, so at most
  ``in_flight`` of them are admitted at once (``--threads`` less a reserve, ``in_flight_bound``): the threads left
  answer the other requests while queries pile up.
- **Snapshots**: a worker reads a consistent, read-only copy of the revision its query reads (``Snapshots``): for
  HEAD, a RocksDB checkpoint (``RevisionedDataset.snapshot``: ``Store.backup`` under the dataset's read lock, hard
  links to the store's immutable files), one per HEAD revision, made when a query first needs it and opened in the
  worker with ``Store.read_only`` (a worker keeps the last store it opened while its snapshot is current). A
  snapshot is deleted once no query uses it and it is not of HEAD. A past revision (``revision-id=``) is a
  checkpoint too, with the deltas after it undone in it (O(those deltas), as a past read in-process costs); an
  in-memory dataset (tests only) is dumped into one (O(|dataset|)). So every plain query, whatever revision it reads,
  runs in a worker that can be killed: a ``revision-id=`` would otherwise be a way around the budget.
- The worker writes the serialized result (the format the protocol chose from ``Accept``: ``QueryTask.formats``)
  into a file of the spool directory and answers with its media type, or with the error the same query gives
  in-process (``QueryFailed``: 400, ``ResultNotAcceptable``: 406). The parent streams the file back.

Measured on this machine (2 cores, local disk; ``bench/queries.py``, docs/deployment.md): a checkpoint of HEAD costs
≈ 6 ms for a 1,500-quad store and ≈ 6 ms for a 1,000,000-quad store (hard links: the size does not matter; at most
8–20 ms), one of HEAD~1 ≈ 20 ms, opening one read-only ≈ 8 ms; the fork server starts in ≈ 140 ms (once), then a
worker in ≈ 15 ms; a worker holds ≈ 7 MB of its own idle and ≈ 40 MB after counting 1,000,000 quads (RocksDB's caches
of its snapshot); a query past its budget is answered, its worker gone, ≈ 5 ms after its deadline (at most 7 ms).

Extended queries (``REVISION``, ``WINDOWS``, ``SERVICE``, ``THEN()``, events) and queries over streams and windows
are evaluated in the server process (their evaluator reads streams and windows the workers do not have):
``Budget.stop_when``, through ``engine.plain.stopping``, stops them at the deadline while their solutions are
written. Rule firings never come here and have no budget.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

from engine.budget import POLL_SECONDS, Budget, QueryLimits
from engine.errors import (
    ClientQueryLimit,
    EvaluationStopped,
    QueryBudgetExceeded,
    QueryProcessFailed,
    QueryQueueFull,
    ResultNotAcceptable,
)
from engine.query_process import Crashed, QueryOutput, QueryTask, Refused, Release, Written
from engine.snapshots import Snapshots
from engine.worker_process import WorkerProcess, kill_all, preload_fork_server
from store.errors import QueryFailed


@dataclass(eq=False)
class _Ticket:
    """A query waiting in line for a worker."""

    client: str


class QueryPool:
    """Admission, budgets and the worker processes of plain queries (see the module's docstring). Without
    ``snapshots`` and ``spool`` (or with ``limits.processes`` 0) it only admits: queries are evaluated by the
    caller."""

    def __init__(self, limits: QueryLimits | None = None, snapshots: Snapshots | None = None,
                 spool: Path | None = None) -> None:
        self.limits = limits or QueryLimits()
        self._snapshots = snapshots
        self._spool = spool
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)  # results a crash left
            spool.mkdir(parents=True)
        if self.limits.processes and (snapshots is None or spool is None):
            raise ValueError("query processes need a snapshot directory and a spool directory")
        if self.limits.processes:
            preload_fork_server()
        if snapshots is not None:
            snapshots.on_delete.append(self._release_snapshot)
        self._cond = threading.Condition()
        self._idle: list[WorkerProcess] = []
        self._busy: list[WorkerProcess] = []
        self._starting = 0
        self._line: list[_Ticket] = []  # the queries waiting for a worker, first come first served
        self._running_of: dict[str, int] = {}  # client -> its queries running in a worker now
        # a client's queries run in at most half the workers (as many as there are CPUs by default: one client can
        # keep every core busy), so another client's query finds a worker at once; its others wait in line
        self.share = max(1, self.limits.processes // 2)
        self._clients: dict[str, list[float]] = {}  # client -> deadlines of its queries admitted now
        self._admitted = 0
        self._numbers = itertools.count(1)
        self._closed = False
        self.refused = {"client_limit": 0, "queue_full": 0}
        self.started = 0  # worker processes started since start-up
        self.killed = 0  # worker processes killed (budget, client gone) or found dead
        self._all: list[WorkerProcess] = []  # every live worker, idle, busy or just started
        # workers are killed when the pool is dropped without close() (an app in a test), and at exit
        self._finalizer = weakref.finalize(self, kill_all, self._all)

    @property
    def in_workers(self) -> bool:
        """Whether plain queries go to worker processes."""
        return bool(self.limits.processes)

    def budget(self, requested: float | None = None, given: str | None = None) -> Budget:
        """A budget starting now: the server's, or ``requested`` seconds (``timeout=``, as ``given``) when lower."""
        return Budget.start(self.limits.timeout, requested, given)

    @contextlib.contextmanager
    def admit(self, client: str, budget: Budget) -> Iterator[None]:
        """Count a query of ``client`` while the block runs, or refuse it: ``ClientQueryLimit`` when the client has
        ``per_client`` queries running or waiting, ``QueryQueueFull`` when ``in_flight`` queries are."""
        limits = self.limits
        with self._cond:
            held = self._clients.get(client, [])
            if len(held) >= limits.per_client:
                self.refused["client_limit"] += 1
                raise ClientQueryLimit(
                    f"{client or 'this client'} already has {len(held)} queries running or waiting (the limit is "
                    f"{limits.per_client}, server option --queries-per-client): send the next one when one of them "
                    "has been answered", headers={"Retry-After": _retry_after(held)})
            if limits.in_flight is not None and self._admitted >= limits.in_flight:
                self.refused["queue_full"] += 1
                raise QueryQueueFull(
                    f"the server has {self._admitted} queries running or waiting, as many as its request threads "
                    "allow beside its other requests (raise --threads): retry later",
                    headers={"Retry-After": _retry_after([d for ds in self._clients.values() for d in ds])})
            self._clients.setdefault(client, []).append(budget.deadline)
            self._admitted += 1
        try:
            yield
        finally:
            with self._cond:
                held = self._clients[client]
                held.remove(budget.deadline)
                if not held:
                    del self._clients[client]
                self._admitted -= 1

    def evaluate(self, task: QueryTask, ordinal: int, budget: Budget, gone: Callable[[], bool],
                 client: str = "") -> QueryOutput:
        """Evaluate ``task`` (a query of ``client``) over revision ``ordinal`` in a worker within ``budget``: the
        result written by the worker, or the query's error (``QueryFailed``, ``ResultNotAcceptable``), or
        ``QueryBudgetExceeded`` / ``EvaluationStopped`` (``gone()`` said the client left) with the worker killed, or
        ``QueryQueueFull``."""
        assert self._snapshots is not None and self._spool is not None
        with self._cond:
            self._check_line()  # before a snapshot is made for nothing
        with self._snapshots.use(ordinal) as snapshot:
            worker = self._take(str(snapshot), budget, gone, client)
            output = self._spool / f"{uuid.uuid4().hex}.result"
            try:
                answer = self._run(worker, replace(task, snapshot=str(snapshot), output=str(output),
                                                   seconds=max(0.0, budget.remaining())), budget, gone)
                if isinstance(answer, Written):
                    written = output.open("rb")
                    written.seek(0, os.SEEK_END)
                    return QueryOutput(written, answer.media_type)
            finally:
                output.unlink(missing_ok=True)  # an open file stays readable
        if isinstance(answer, Refused):
            raise ResultNotAcceptable(answer.message) if answer.not_acceptable else QueryFailed(answer.message)
        raise QueryProcessFailed(f"the query's worker process failed: {answer.message}")

    def _check_line(self) -> None:
        """Refuse a query that would wait in a line already ``queue`` long (caller holds the lock)."""
        free = bool(self._idle) or self._alive() < self.limits.processes
        if not free and len(self._line) >= self.limits.queue:
            self.refused["queue_full"] += 1
            raise QueryQueueFull(
                f"all {self.limits.processes} query processes are busy and {len(self._line)} queries are waiting "
                f"(the limit, server option --query-queue): retry later",
                headers={"Retry-After": _retry_after([d for ds in self._clients.values() for d in ds])})

    def _alive(self) -> int:
        return len(self._idle) + len(self._busy) + self._starting

    def _take(self, snapshot: str, budget: Budget, gone: Callable[[], bool], client: str) -> WorkerProcess:
        """A worker for a query of ``client``: an idle one (one with ``snapshot`` open first), a new one while fewer
        than ``processes`` are alive, else the next one freed, in line, for at most the query's budget. The line is
        first come first served among the queries whose client has fewer than ``share`` running."""
        ticket = _Ticket(client)
        with self._cond:
            if self._closed:
                raise QueryProcessFailed("the server is stopping")
            self._check_line()
            self._line.append(ticket)
            try:
                while True:
                    if self._next_up() is ticket:
                        worker = self._idle_worker(snapshot)
                        if worker is not None:
                            self._assign(worker, client)
                            return worker
                        if self._alive() < self.limits.processes:
                            self._starting += 1
                            self._running_of[client] = self._running_of.get(client, 0) + 1
                            break
                    if budget.expired():
                        raise self._waited_too_long(budget, client)
                    if gone():
                        raise EvaluationStopped("the client closed its connection: its query was stopped while it "
                                                "waited for a query process")
                    self._cond.wait(max(0.001, min(POLL_SECONDS, budget.remaining())))
            finally:
                self._line.remove(ticket)
                self._cond.notify_all()  # the next in line may go
        return self._start(client)

    def _next_up(self) -> _Ticket | None:
        """The first in line whose client may run one more query (caller holds the lock)."""
        return next((t for t in self._line if self._running_of.get(t.client, 0) < self.share), None)

    def _waited_too_long(self, budget: Budget, client: str) -> QueryBudgetExceeded:
        exceeded = budget.exceeded(waiting=True)
        running = self._running_of.get(client, 0)
        if running < self.share:
            return exceeded
        return QueryBudgetExceeded(
            f"{exceeded.message}: {client or 'its client'} had {running} other queries running, as many query "
            f"processes as one client may use at once (half of the server's {self.limits.processes})",
            headers=exceeded.headers)

    def _assign(self, worker: WorkerProcess, client: str) -> None:
        """(caller holds the lock)"""
        self._busy.append(worker)
        worker.client = client
        self._running_of[client] = self._running_of.get(client, 0) + 1

    def _unassign(self, worker: WorkerProcess) -> None:
        """(caller holds the lock)"""
        if worker in self._busy:
            self._busy.remove(worker)
        if worker.client is not None:
            left = self._running_of.get(worker.client, 1) - 1
            if left > 0:
                self._running_of[worker.client] = left
            else:
                self._running_of.pop(worker.client, None)
            worker.client = None

    def _idle_worker(self, snapshot: str) -> WorkerProcess | None:
        """An idle worker, one that has ``snapshot`` open if any (caller holds the lock); dead ones are dropped."""
        while self._idle:
            index = next((i for i, w in enumerate(self._idle) if w.snapshot == snapshot), len(self._idle) - 1)
            worker = self._idle.pop(index)
            if worker.process.is_alive():
                return worker
            self._forget(worker)
        return None

    def _start(self, client: str | None) -> WorkerProcess:
        """Start a worker (its slot counted in ``_starting``, and ``client``'s running query, by the caller): busy
        for ``client``'s query, or idle (None)."""
        try:
            worker = WorkerProcess(next(self._numbers))
        except BaseException as error:
            with self._cond:
                self._starting -= 1
                if client is not None:
                    self._running_of[client] -= 1
                    if not self._running_of[client]:
                        del self._running_of[client]
                self._cond.notify_all()
            raise QueryProcessFailed(f"a query process could not be started: {error}") from error
        with self._cond:
            self._starting -= 1
            self.started += 1
            self._all.append(worker)
            if client is not None:
                self._busy.append(worker)
                worker.client = client
            if self._closed:
                self._unassign(worker)
                self._forget(worker)
                worker.kill()
                raise QueryProcessFailed("the server is stopping")
            if client is None:
                self._idle.append(worker)
            self._cond.notify_all()
        return worker

    def _run(self, worker: WorkerProcess, task: QueryTask, budget: Budget, gone: Callable[[], bool]
             ) -> Written | Refused | Crashed:
        """Send ``task`` to ``worker`` and wait for its answer; kill the worker past the budget or when the client
        is gone. The worker goes back to the idle ones after an answer."""
        try:
            worker.connection.send(task)
            worker.snapshot = task.snapshot
            while True:
                ready = wait_for([worker.connection, worker.process.sentinel],
                                 timeout=max(0.0, min(POLL_SECONDS, budget.remaining())))
                if worker.connection in ready:
                    answer = worker.connection.recv()
                    assert isinstance(answer, Written | Refused | Crashed)
                    break
                if ready:  # the process ended without an answer
                    raise EOFError
                if budget.expired():
                    self._discard(worker)
                    raise budget.exceeded()
                if gone():
                    self._discard(worker)
                    raise EvaluationStopped("the client closed its connection: the query was stopped")
        except (EOFError, OSError):
            code = worker.process.exitcode
            self._discard(worker)
            raise QueryProcessFailed(f"the query's worker process ended without an answer (exit code {code}); "
                                     "a new one was started") from None
        except BaseException:
            if worker in self._busy:  # anything else (an interrupted thread): the worker's state is unknown
                self._discard(worker)
            raise
        with self._cond:
            self._unassign(worker)
            if self._closed:
                self._forget(worker)
                worker.kill()
            else:
                self._idle.append(worker)
            self._cond.notify_all()
        return answer

    def _discard(self, worker: WorkerProcess) -> None:
        """Kill a busy worker and start a fresh one in its place, warm for the next query."""
        with self._cond:
            self._unassign(worker)
            self._forget(worker)
            self.killed += 1
            replace_it = not self._closed and self._alive() < self.limits.processes
            if replace_it:
                self._starting += 1
        worker.kill()
        if replace_it:
            threading.Thread(target=self._replace, name="query-worker-start", daemon=True).start()
        with self._cond:
            self._cond.notify_all()

    def _replace(self) -> None:
        with contextlib.suppress(QueryProcessFailed):
            self._start(None)

    def _forget(self, worker: WorkerProcess) -> None:
        """(caller holds the lock)"""
        if worker in self._all:
            self._all.remove(worker)

    def _release_snapshot(self, path: Path) -> None:
        """A snapshot is being deleted: idle workers that have it open close it (its files would stay on disk while a
        store holds them open)."""
        with self._cond:
            for worker in self._idle:
                if worker.snapshot == str(path):
                    with contextlib.suppress(OSError):
                        worker.connection.send(Release(str(path)))
                    worker.snapshot = ""

    def status(self) -> dict[str, Any]:
        """For ``/status``'s ``queries``: waiting, refused (by reason), the worker processes and the limits."""
        with self._cond:
            found: dict[str, Any] = {
                "queued": len(self._line), "refused": dict(self.refused),
                "processes": len(self._idle) + len(self._busy), "busy": len(self._busy),
                "process_ids": sorted(w.pid for w in self._all),
                "clients_running": len(self._running_of),
                "processes_started": self.started, "processes_killed": self.killed,
                "limits": {"timeout_seconds": self.limits.timeout, "processes": self.limits.processes,
                           "per_client": self.limits.per_client, "per_client_running": self.share,
                           "queue": self.limits.queue,
                           "in_flight": self.limits.in_flight}}
        if self._snapshots is not None:
            found.update(self._snapshots.status())
        return found

    def close(self) -> None:
        """Kill the workers (a query still running gets ``QueryProcessFailed``) and delete the snapshots."""
        with self._cond:
            self._closed = True
            self._idle.clear()
            workers = list(self._all)
            self._all.clear()
            self._cond.notify_all()
        self._finalizer.detach()
        kill_all(workers)
        if self._snapshots is not None:
            self._snapshots.close()
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)


def _retry_after(deadlines: list[float]) -> str:
    """Seconds until the soonest of ``deadlines`` (when a query slot is sure to be free), at least 1."""
    if not deadlines:
        return "1"
    return str(max(1, math.ceil(min(deadlines) - time.monotonic())))

