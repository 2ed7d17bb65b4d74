"""Every query has a budget: plain queries evaluated in worker processes that can be killed.

pyoxigraph cannot cancel a query. It evaluates with the GIL released and hands control back only when it writes a
result (``engine.plain.Watched`` stops it there), and a query that computes everything before its first solution (an
aggregate over a large join) writes nothing for minutes. So the plain queries of ``/sparql`` are evaluated in
worker processes, and a query past its budget is stopped by killing its process:

- ``QueryPool`` keeps up to ``processes`` workers (``--query-processes``, by default twice the CPUs), started when a
  query first needs one and kept warm. They come from a ``forkserver`` context, never ``fork``: the server process
  runs Spark's JVM and dozens of threads, which a fork would copy in whatever state they are in; the fork server is
  a fresh interpreter that has imported this module (and pyoxigraph) and nothing else, so a worker starts in a few
  milliseconds. A worker runs at ``nice`` 10 (``_serve``).
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
import multiprocessing
import os
import shutil
import signal
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import IO, Any

from pyoxigraph import NamedNode, QueryResultsFormat, QueryTriples, RdfFormat, Store

from engine import plain
from engine.errors import (
    ClientQueryLimit,
    EvaluationStopped,
    QueryBudgetExceeded,
    QueryProcessFailed,
    QueryQueueFull,
    ResultNotAcceptable,
)
from store.errors import QueryFailed

DEFAULT_TIMEOUT = 60.0  # seconds: --query-timeout
DEFAULT_PROCESSES = max(2, 2 * (os.cpu_count() or 1))  # --query-processes
DEFAULT_PER_CLIENT = 4  # --queries-per-client
DEFAULT_QUEUE = 64  # --query-queue
POLL_SECONDS = 0.05  # how often a waiting request looks at its deadline and its client's connection
WORKER_GRACE = 5.0  # a worker whose parent failed to kill it ends itself this long after its deadline
NICE = 10
_CONTEXT = multiprocessing.get_context("forkserver")


def in_flight_bound(threads: int) -> int:
    """Queries admitted at once (running or waiting) for a server of ``threads`` request threads: each holds a thread
    while it lasts, so a quarter of them (at least 2) is kept for everything else (``/status``, uploads, writes).

    >>> in_flight_bound(16), in_flight_bound(4), in_flight_bound(40)
    (12, 2, 30)
    """
    return max(1, threads - max(2, threads // 4))


# --- budgets ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """The time a query may take, from its request's start: the server's ``--query-timeout``, or the request's
    ``timeout=`` (``given``, as sent) when lower."""

    seconds: float
    server_seconds: float
    deadline: float  # time.monotonic()
    given: str | None = None

    @classmethod
    def start(cls, server_seconds: float, requested: float | None = None, given: str | None = None) -> Budget:
        seconds = server_seconds if requested is None else min(requested, server_seconds)
        return cls(seconds, server_seconds, time.monotonic() + seconds, given)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def exceeded(self, *, waiting: bool = False) -> QueryBudgetExceeded:
        """The error of a query stopped at its deadline (``waiting``: before a worker was free to run it)."""
        if self.given is None:
            source = "the server's --query-timeout"
        elif self.seconds < self.server_seconds:
            source = f"timeout={self.given}; the server's --query-timeout is {self.server_seconds:g} s"
        else:
            source = f"timeout={self.given}, capped to the server's --query-timeout"
        what = ("waited for a free query process past its budget" if waiting else "ran past its budget")
        return QueryBudgetExceeded(
            f"the query {what} of {self.seconds:g} s ({source}) and was stopped",
            headers={"Retry-After": str(max(1, math.ceil(self.seconds)))})

    def stop_when(self, gone: Callable[[], bool]) -> Callable[[], bool]:
        """A ``stop`` for ``engine.plain.write`` (asked while a result is written in this process): raises
        ``exceeded()`` past the deadline, else says whether the client is ``gone``."""
        def stop() -> bool:
            if self.expired():
                raise self.exceeded()
            return gone()

        return stop


# --- what a worker is asked and answers -----------------------------------------------------------------------


@dataclass(frozen=True)
class QueryTask:
    """One plain query for a worker. ``formats``: for each result form (``solutions``: SELECT and ASK; ``graph``:
    CONSTRUCT and DESCRIBE), the media type to answer and the canonical media type of pyoxigraph's format for it,
    or the 406 message when ``Accept`` offers none (chosen by the protocol, which knows the request)."""

    text: str
    base_iri: str | None
    default_graph: tuple[str, ...] | None
    named_graphs: tuple[str, ...] | None
    formats: Mapping[str, tuple[str, str] | str]
    snapshot: str = ""  # the store to read (a snapshot directory)
    output: str = ""  # the file to write the result into
    seconds: float = 0.0  # how long the worker may take before it ends itself (its parent kills it earlier)


@dataclass(frozen=True)
class _Written:
    media_type: str


@dataclass(frozen=True)
class _Refused:
    """The query's own error: ``not_acceptable`` (406) or pyoxigraph's refusal (``QueryFailed``, 400)."""

    message: str
    not_acceptable: bool = False


@dataclass(frozen=True)
class _Crashed:
    message: str


@dataclass(frozen=True)
class _Release:
    """Close the store of ``snapshot`` if it is the one open: its directory is being deleted."""

    snapshot: str


@dataclass
class QueryOutput:
    """A result written by a worker: the open file (positioned at its end, as ``spooled_response`` wants it; its
    name is already unlinked) and its media type."""

    file: IO[bytes]
    media_type: str


# --- the worker process ---------------------------------------------------------------------------------------


def _serve(connection: Connection) -> None:
    """A worker: evaluate each ``QueryTask`` received, answer, until the server's end of ``connection`` closes."""
    # A query is the one thing here that may burn CPU for its whole budget: at nice 10 the kernel gives the server's
    # own threads (uploads and their commits, /status, Spark) about ten times a worker's share when they compete, so
    # heavy queries take the CPU that is left over
    os.nice(NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the server stops us
    deadline: list[float | None] = [None]
    threading.Thread(target=_watch, args=(deadline,), name="watch", daemon=True).start()
    store: Store | None = None
    opened = ""
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, _Release):
            if message.snapshot == opened:
                store, opened = None, ""  # the last reference: pyoxigraph closes it
            continue
        assert isinstance(message, QueryTask)
        deadline[0] = time.monotonic() + message.seconds
        try:
            if message.snapshot != opened:
                store, opened = None, ""  # closed before the next is opened: one store's memory at a time
                store, opened = Store.read_only(message.snapshot), message.snapshot
            assert store is not None
            answer: _Written | _Refused | _Crashed = _evaluate(store, message)
        except Exception as error:  # noqa: BLE001 - whatever it is, the parent answers it (500)
            answer = _Crashed(f"{type(error).__name__}: {error}")
        deadline[0] = None
        try:
            connection.send(answer)
        except OSError:
            return


def _watch(deadline: list[float | None]) -> None:
    """End this worker when the server process is gone (nobody will read its answer) or when its query is well past
    its deadline (the server failed to kill it)."""
    parent = multiprocessing.parent_process()
    while True:
        if parent is not None and wait_for([parent.sentinel], timeout=1.0):
            os._exit(1)
        if parent is None:
            time.sleep(1.0)
        limit = deadline[0]
        if limit is not None and time.monotonic() > limit + WORKER_GRACE:
            os._exit(1)


def _evaluate(store: Store, task: QueryTask) -> _Written | _Refused:
    default_graph = None if task.default_graph is None else [NamedNode(iri) for iri in task.default_graph]
    named_graphs = None if task.named_graphs is None else [NamedNode(iri) for iri in task.named_graphs]
    try:
        result = plain.run(store, task.text, base_iri=task.base_iri, default_graph=default_graph,
                           named_graphs=named_graphs)
        kind = "graph" if isinstance(result, QueryTriples) else "solutions"
        chosen = task.formats[kind]
        if isinstance(chosen, str):
            return _Refused(chosen, not_acceptable=True)
        media_type, format_type = chosen
        rdf_format = (RdfFormat.from_media_type(format_type) if kind == "graph"
                      else QueryResultsFormat.from_media_type(format_type))
        with open(task.output, "wb") as output:
            plain.write(result, output, rdf_format)
    except QueryFailed as error:
        return _Refused(error.message)
    return _Written(media_type)


# --- snapshots ------------------------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    path: Path
    users: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class Snapshots:
    """The read-only copies of the dataset's revisions that workers read, in ``directory`` (emptied at start: what a
    crash left). ``make(ordinal, path)`` writes one (``RevisionedDataset.snapshot``); ``head()`` is the dataset's
    HEAD. A snapshot is made when a query first needs its revision, shared by the queries of that revision, and
    deleted once none uses it and it is not of HEAD (``on_delete`` is told first)."""

    def __init__(self, directory: Path, make: Callable[[int, Path], None], head: Callable[[], int]) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        self._make = make
        self._head = head
        self._entries: dict[int, _Snapshot] = {}
        self._lock = threading.Lock()
        self._names = itertools.count(1)  # a new directory each time: a worker never mistakes one for another
        self.on_delete: list[Callable[[Path], None]] = []
        self.made = 0
        self.make_seconds = 0.0

    @contextlib.contextmanager
    def use(self, ordinal: int) -> Iterator[Path]:
        """The snapshot of revision ``ordinal`` (made now if there is none), kept while the block runs."""
        entry = self._acquire(ordinal)
        try:
            yield entry.path
        finally:
            self._release(entry)

    def _acquire(self, ordinal: int) -> _Snapshot:
        with self._lock:
            entry = self._entries.get(ordinal)
            maker = entry is None
            if entry is None:
                entry = self._entries[ordinal] = _Snapshot(self.directory / f"r{ordinal}-{next(self._names)}")
            entry.users += 1
        if maker:
            started = time.perf_counter()
            try:
                self._make(ordinal, entry.path)
            except BaseException as error:
                entry.error = error
                with self._lock:
                    if self._entries.get(ordinal) is entry:
                        del self._entries[ordinal]  # the next query tries again
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with self._lock:
                    self.made += 1
                    self.make_seconds += time.perf_counter() - started
            entry.ready.set()
        else:
            entry.ready.wait()
        if entry.error is not None:
            with self._lock:
                entry.users -= 1
            raise entry.error
        return entry

    def _release(self, entry: _Snapshot) -> None:
        head = self._head()
        with self._lock:
            entry.users -= 1
            stale = [(ordinal, found) for ordinal, found in self._entries.items()
                     if found.users == 0 and found.ready.is_set() and ordinal != head]
            for ordinal, _ in stale:
                del self._entries[ordinal]
        for _, found in stale:
            for listener in self.on_delete:
                listener(found.path)
            shutil.rmtree(found.path, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"snapshots": len(self._entries), "snapshots_made": self.made,
                    "snapshot_seconds": round(self.make_seconds, 3)}

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


# --- the pool -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryLimits:
    """``concentrator serve``'s query flags. ``processes`` 0: no workers, every query is evaluated in the request's
    thread (then only the writing of its result can be stopped); ``in_flight``: queries admitted at once (running or
    waiting), None: no bound but the others."""

    timeout: float = DEFAULT_TIMEOUT
    processes: int = 0
    per_client: int = DEFAULT_PER_CLIENT
    queue: int = DEFAULT_QUEUE
    in_flight: int | None = None


@dataclass(eq=False)
class _Ticket:
    """A query waiting in line for a worker."""

    client: str


class _Worker:
    """One worker process and the parent's end of its connection; ``snapshot``: the store it has open."""

    def __init__(self, number: int) -> None:
        ours, theirs = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(target=_serve, args=(theirs,), name=f"query-worker-{number}", daemon=True)
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


def _kill_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.kill()
    workers.clear()


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
            # the fork server imports this module (pyoxigraph with it) once; each worker is a fork of it
            _CONTEXT.set_forkserver_preload(["engine.workers"])
        if snapshots is not None:
            snapshots.on_delete.append(self._release_snapshot)
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy: list[_Worker] = []
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
        self._all: list[_Worker] = []  # every live worker, idle, busy or just started
        # workers are killed when the pool is dropped without close() (an app in a test), and at exit
        self._finalizer = weakref.finalize(self, _kill_all, self._all)

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
                if isinstance(answer, _Written):
                    written = output.open("rb")
                    written.seek(0, os.SEEK_END)
                    return QueryOutput(written, answer.media_type)
            finally:
                output.unlink(missing_ok=True)  # an open file stays readable
        if isinstance(answer, _Refused):
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

    def _take(self, snapshot: str, budget: Budget, gone: Callable[[], bool], client: str) -> _Worker:
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

    def _assign(self, worker: _Worker, client: str) -> None:
        """(caller holds the lock)"""
        self._busy.append(worker)
        worker.client = client
        self._running_of[client] = self._running_of.get(client, 0) + 1

    def _unassign(self, worker: _Worker) -> None:
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

    def _idle_worker(self, snapshot: str) -> _Worker | None:
        """An idle worker, one that has ``snapshot`` open if any (caller holds the lock); dead ones are dropped."""
        while self._idle:
            index = next((i for i, w in enumerate(self._idle) if w.snapshot == snapshot), len(self._idle) - 1)
            worker = self._idle.pop(index)
            if worker.process.is_alive():
                return worker
            self._forget(worker)
        return None

    def _start(self, client: str | None) -> _Worker:
        """Start a worker (its slot counted in ``_starting``, and ``client``'s running query, by the caller): busy
        for ``client``'s query, or idle (None)."""
        try:
            worker = _Worker(next(self._numbers))
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

    def _run(self, worker: _Worker, task: QueryTask, budget: Budget, gone: Callable[[], bool]
             ) -> _Written | _Refused | _Crashed:
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
                    assert isinstance(answer, _Written | _Refused | _Crashed)
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

    def _discard(self, worker: _Worker) -> None:
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

    def _forget(self, worker: _Worker) -> None:
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
                        worker.connection.send(_Release(str(path)))
                    worker.snapshot = ""

    def status(self) -> dict[str, Any]:
        """For ``/status``'s ``queries``: waiting, refused (by reason), the worker processes and the limits."""
        with self._cond:
            found: dict[str, Any] = {
                "queued": len(self._line), "refused": dict(self.refused),
                "processes": len(self._idle) + len(self._busy), "process_ids": sorted(w.pid for w in self._all),
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
        _kill_all(workers)
        if self._snapshots is not None:
            self._snapshots.close()
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)


def _retry_after(deadlines: list[float]) -> str:
    """Seconds until the soonest of ``deadlines`` (when a query slot is sure to be free), at least 1."""
    if not deadlines:
        return "1"
    return str(max(1, math.ceil(min(deadlines) - time.monotonic())))
