"""Rule firings evaluated in Spark executors (pyoxigraph per task) instead of the driver.

A firing whose inputs are all *window data* can be evaluated anywhere. For each window the rule reads
(``SERVICE <…/streams/NAME?WINDOWS=…>``) the driver puts in its ``RuleTask`` where the window's elements are in the
stream's element log (``.dat`` files and byte ranges: the executor reads them, and the driver moves no window
content) when the executors can read the data directory (``ExecutorPool.reads_log``: a master on this machine, or
shared storage mounted at the same path), else the elements' content itself. The dataset at HEAD travels once per
dataset revision as a Spark broadcast (the rule's *static data*); an executor rebuilds both as in-memory pyoxigraph
stores and runs the same ``ExtendedEvaluator`` over them. What the executor returns (the
constructed quads or triples, as N-Quads) is appended by the driver exactly as a driver firing's output
(report policy, stream operator, idempotent origins: rules/firing.py).

**Eligible** (``ineligible_reason`` returns None): every extension part is a ``SERVICE`` without nested parts, to
a constant IRI of one of this server's streams (windowed or whole) or to a variable (``SERVICE ?var``), and the
dataset is at most ``STATIC_QUADS_LIMIT`` quads. A ``SERVICE ?var``'s targets are resolved by the driver at each
firing, as its own evaluation would resolve them (the patterns before the part over the dataset, cached per revision
of it; only the firing window when it is among them): the task carries the IRIs and where their windows are. A firing
whose targets include something else than a window of this server's streams (another endpoint, a value that is not
an IRI) is evaluated in the driver (``StaysInDriver``). ``REVISION`` / ``WINDOWS`` clauses and ``SERVICE`` to other
endpoints stay in the driver.

**Placement** (``serve --rules-on``): ``auto`` (the default) sends eligible rules to executors when the Spark
master is a cluster and keeps everything in the driver in local mode, where a Spark job per batch (≈ 50–100 ms)
costs more than evaluating small windows in place; ``executors`` sends eligible rules to executors in any mode
(several cores evaluate one batch's firings in parallel); ``driver`` never does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pyoxigraph import NamedNode, RdfFormat, Store, parse, serialize

from engine.cache import StaticResults
from engine.context import EvaluationContext, QueryTarget
from engine.errors import WindowNotComplete
from engine.evaluation import ExtendedEvaluator
from engine.results import ConstructedQuads, ConstructedTriples, Solutions
from engine.selection import elements_key
from engine.syntax import checked_query
from rules.errors import ExecutorRuleFailed
from sparql_ext import ExtendedQuery
from sparql_ext.windowing import WindowNotResolvable
from store.log_contents import ContentRun, read_runs

Placement = Literal["auto", "driver", "executors"]
PLACEMENTS: tuple[str, ...] = ("auto", "driver", "executors")
#: Larger datasets are not broadcast: rules reading them are evaluated in the driver.
STATIC_QUADS_LIMIT = 500_000


@dataclass(frozen=True)
class WindowData:
    """One dataset a rule's SERVICE names, for an executor: its elements' canonical TriG (``Stream.contents``), given
    as ``content`` or, read by the executor, as ``runs`` of the element log (``Stream.content_runs``)."""

    content: bytes
    then_time: int | None  # µs: THEN() inside the part (the window revision's commit time)
    runs: tuple[ContentRun, ...] = ()
    #: the driver's name for exactly these elements (``engine.selection.elements_key``): the executor caches the
    #: static parts over the window under it, as the driver does, so the rules reading one window share them
    key: str | None = None

    def read(self) -> bytes:
        """The window's TriG (in an executor: from the log's files when given as runs; ``OSError`` when they are
        gone)."""
        return read_runs(self.runs) if self.runs else self.content


@dataclass(frozen=True)
class StaticData:
    """The dataset at one revision, as the executors see it (broadcast once per revision)."""

    revision: int
    committed_at: int  # µs: THEN() at the rule's top level
    nquads: bytes


@dataclass(frozen=True)
class RuleTask:
    """One firing to evaluate in an executor."""

    position: int  # in the batch's firing order (the driver commits outputs in that order)
    text: str
    base: str
    windows: dict[str, WindowData]  # SERVICE IRI (as written, or a SERVICE ?var's value) → its dataset
    targets: dict[int, tuple[str, ...]] = field(default_factory=dict)  # a SERVICE ?var part's ident → its IRIs


#: A TaskResult's kind when the executor could not read a window from the element log: not the rule's failure.
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class TaskResult:
    position: int
    kind: str  # "quads" | "triples" | "error" | UNREADABLE
    payload: bytes  # N-Quads (quads, triples in the default graph) or the error message

    def construction(self) -> ConstructedQuads | ConstructedTriples:
        """What the rule constructed, as a driver evaluation returns it; an executor's error is raised again."""
        if self.kind == "error":
            raise ExecutorRuleFailed(self.payload.decode("utf-8"))
        quads = list(parse(self.payload, format=RdfFormat.N_QUADS))
        if self.kind == "quads":
            return ConstructedQuads(quads)
        return ConstructedTriples(quad.triple for quad in quads)


def ineligible_reason(text: str, base: str, evaluator: ExtendedEvaluator) -> str | None:
    """Why a rule must be evaluated in the driver, or None when its windows and static data can travel."""
    for part in checked_query(text, base).parts:
        if part.kind != "service":
            return f"{part.kind.upper()} clause (reads a stream's or the dataset's history)"
        if isinstance(part.inner, ExtendedQuery):
            shown = part.target if part.target_is_variable else f"<{part.target}>"
            return f"SERVICE {shown} has extension clauses inside"
        if not part.target_is_variable and evaluator.local_stream(part.target)[0] is None:
            return f"SERVICE <{part.target}> is not one of this server's streams"
    return None


def placement_of(mode: Placement, spark_master: str, reason: str | None) -> str:
    """Where a rule is evaluated: "executors" or "driver: why"."""
    if reason is not None:
        return f"driver: {reason}"
    if mode == "driver":
        return "driver: --rules-on driver"
    if mode == "auto" and spark_master.startswith("local"):
        return "driver: local Spark (--rules-on executors to use its workers)"
    return "executors"


# -- the driver side ---------------------------------------------------------------------------------------------

class StaysInDriver(Exception):
    """A firing of an eligible rule that cannot travel: a SERVICE ?var value is not a window of this server's
    streams. The driver evaluates it, as it evaluates ineligible rules."""


def firing_task(position: int, text: str, base: str, evaluator: ExtendedEvaluator, reads_log: bool = False
                ) -> RuleTask:
    """The task of one firing (``evaluator`` pinned to the firing window): the windows it reads, where they are in the
    element log (``reads_log``) or their content, and the IRIs each ``SERVICE ?var`` reads. Raises what the
    driver's evaluation would (e.g. ``WindowNotComplete`` for an input with no complete window yet), or
    ``StaysInDriver``."""
    windows: dict[str, WindowData] = {}
    targets: dict[int, tuple[str, ...]] = {}
    parts = checked_query(text, base).parts
    for part in parts:
        if not part.target_is_variable:
            if part.target not in windows:
                windows[part.target] = _window(part.target, evaluator, reads_log)
            continue
        read: list[str] = []
        for value in evaluator.target_values(part, QueryTarget(base_iri=base), parts):
            if not isinstance(value, NamedNode):
                raise StaysInDriver(f"SERVICE {part.target} is bound to {value}, which is not an IRI")
            try:
                data = windows.get(value.value) or _window(value.value, evaluator, reads_log)
            except (WindowNotComplete, WindowNotResolvable) as error:
                if part.silent:  # SILENT gives the join identity for it: the driver's evaluation does that
                    raise StaysInDriver(str(error)) from None
                continue  # as in the driver's evaluation of a firing: a stream with no such window joins nothing
            windows[value.value] = data
            read.append(value.value)
        targets[part.ident] = tuple(read)
    return RuleTask(position, text, base, windows, targets)


def _window(iri: str, evaluator: ExtendedEvaluator, reads_log: bool) -> WindowData:
    window = evaluator.local_window(iri)
    if window is None:  # (a constant SERVICE IRI of an eligible rule is one of our streams)
        raise StaysInDriver(f"SERVICE <{iri}> is not a stream of this server")
    stream, selected = window
    key = elements_key(stream, selected)
    if reads_log:
        return WindowData(b"", selected.commit, tuple(stream.content_runs(selected.ordinals)), key)
    return WindowData(stream.contents(selected.ordinals), selected.commit, key=key)


def static_data(evaluator: ExtendedEvaluator) -> StaticData | None:
    """The dataset at HEAD, or None when it is too large to broadcast."""
    dataset = evaluator.dataset
    head = dataset.head
    revision = dataset.revision(head)
    committed = 0 if revision is None else int(revision.committed_at.timestamp() * 1_000_000)
    with dataset.reading(head) as store:
        if len(store) > STATIC_QUADS_LIMIT:
            return None
        return StaticData(head, committed, store.dump(format=RdfFormat.N_QUADS) or b"")


class ExecutorPool:
    """Runs one batch's rule tasks as one Spark job; the static data is broadcast once per dataset revision."""

    def __init__(self, spark: Callable[[], Any], *, reads_log: bool = False) -> None:
        self._spark = spark  # the pipeline's SparkSession once it runs (None before)
        self._broadcast: tuple[int, Any] | None = None  # (dataset revision, Broadcast[StaticData] or None)
        #: whether executors read windows from the element log's files (they see the data directory at its path)
        self.reads_log = reads_log
        self.windows_sent = 0  # windows given to executors, and the bytes of their content the driver moved
        self.content_bytes_sent = 0
        self.warmed_seconds: float | None = None  # how long ``warm_up`` took (None: not warmed)

    def status(self) -> dict[str, object]:
        """``/status`` → ``executors``: how windows reach the executors, and what the driver moved of them."""
        return {"reads_log": self.reads_log, "windows": self.windows_sent,
                "content_bytes": self.content_bytes_sent, "warmed_seconds": self.warmed_seconds}

    @property
    def ready(self) -> bool:
        return self._spark() is not None

    def static(self, evaluator: ExtendedEvaluator) -> Any | None:
        """The broadcast of the dataset at HEAD (made when HEAD moved), or None when it is too large."""
        head = evaluator.dataset.head
        if self._broadcast is None or self._broadcast[0] != head:
            if self._broadcast is not None and self._broadcast[1] is not None:
                self._broadcast[1].unpersist()
            data = static_data(evaluator)
            shared = None if data is None else self._spark().sparkContext.broadcast(data)
            self._broadcast = (head, shared)
        return self._broadcast[1]

    def warm_up(self) -> None:
        """A job that only loads, in each Python worker, what evaluations use (this module, the engine, pyoxigraph)."""
        started = time.monotonic()
        context = self._spark().sparkContext
        slices = context.defaultParallelism
        context.parallelize(range(slices), slices).map(_warm).collect()
        self.warmed_seconds = round(time.monotonic() - started, 3)

    def run(self, tasks: list[RuleTask], static: Any) -> list[TaskResult]:
        """Evaluate ``tasks`` in executors (one Spark job, as many slices as the cluster has cores)."""
        context = self._spark().sparkContext
        self.windows_sent += sum(len(task.windows) for task in tasks)
        self.content_bytes_sent += sum(len(data.content) for task in tasks for data in task.windows.values())
        chunks = window_chunks(tasks, context.defaultParallelism)
        results: list[TaskResult] = context.parallelize(chunks, len(chunks)).flatMap(
            lambda chunk: evaluate_all(chunk, static.value)).collect()
        return results


def window_chunks(tasks: list[RuleTask], parallelism: int) -> list[list[RuleTask]]:
    """``tasks`` in at most ``parallelism`` chunks (one Spark task each, one per core), the firings that read the same
    windows side by side, so that a chunk builds each window's store once for all the rules reading it.

    >>> def task(n: int, window: bytes) -> RuleTask:
    ...     return RuleTask(n, "", "", {"w": WindowData(window, None)})
    >>> [[t.position for t in chunk] for chunk in window_chunks([task(0, b"a"), task(1, b"b"), task(2, b"a")], 2)]
    [[0, 2], [1]]
    """
    ordered = sorted(tasks, key=lambda task: (_windows_key(task), task.position))
    size = -(-len(ordered) // max(1, min(parallelism, len(ordered))))  # ceiling division
    return [ordered[start:start + size] for start in range(0, len(ordered), size)]


def _windows_key(task: RuleTask) -> tuple[tuple[str, int], ...]:
    """Equal for tasks reading the same windows (hashed: a window given as content may be megabytes)."""
    return tuple(sorted((iri, hash(data)) for iri, data in task.windows.items()))


# -- the executor side -------------------------------------------------------------------------------------------

class SnapshotDataset:
    """The parts of ``RevisionedDataset`` an evaluation reads, over one revision copied in."""

    def __init__(self, static: StaticData) -> None:
        self.head = static.revision
        self.key = (static.revision, static.committed_at)  # a revision of one dataset (a worker may serve several)
        self._store = Store()
        self._store.load(static.nquads, format=RdfFormat.N_QUADS)
        self._committed = _Committed(datetime.fromtimestamp(static.committed_at / 1_000_000, UTC))

    def revision(self, ordinal: int) -> _Committed | None:
        return self._committed if ordinal == self.head else None

    @contextmanager
    def reading(self, ordinal: int | None = None) -> Any:
        yield self._store


@dataclass(frozen=True)
class _Committed:
    committed_at: datetime


_snapshot: SnapshotDataset | None = None  # per Python worker (reused across tasks): rebuilt when the revision moves


def _dataset(static: StaticData) -> SnapshotDataset:
    global _snapshot
    if _snapshot is None or _snapshot.key != (static.revision, static.committed_at):
        _snapshot = SnapshotDataset(static)
    return _snapshot


def _warm(_: object) -> int:
    """(In an executor, by ``ExecutorPool.warm_up``) nothing but the imports and a store: its unpickling imported this
    module and the engine."""
    Store()
    return 1


def evaluate_all(tasks: list[RuleTask], static: StaticData) -> list[TaskResult]:
    """Evaluate a chunk of firings (runs in an executor): each window is read and loaded once for all the rules of
    the chunk that read it (rules only read the window's store), and their static parts are evaluated once, as in
    the driver: over a window under the driver's key for its elements, over the dataset per revision."""
    stores: dict[WindowData, Store] = {}
    results: StaticResults[Solutions] = StaticResults(1024)
    return [evaluate(task, static, stores, results) for task in tasks]


def evaluate(task: RuleTask, static: StaticData, stores: dict[WindowData, Store] | None = None,
             results: StaticResults[Solutions] | None = None) -> TaskResult:
    """Evaluate one firing over its windows and the static data (runs in an executor); ``stores`` and ``results``:
    windows loaded and static parts evaluated by earlier firings of the same chunk."""
    stores = {} if stores is None else stores
    try:
        windows = {}
        for iri, data in task.windows.items():
            store = stores.get(data)
            if store is None:
                try:
                    content = data.read()
                except OSError as error:  # e.g. its segment expired meanwhile: the driver evaluates this firing
                    return TaskResult(task.position, UNREADABLE, f"{type(error).__name__}: {error}".encode())
                store = stores[data] = Store()
                store.load(content, format=RdfFormat.TRIG, lenient=True)  # the log's content: pyoxigraph's output
            windows[iri] = QueryTarget(store, None, None, data.then_time, iri, elements_key=data.key)
        context = EvaluationContext.for_executor(_dataset(static), task.base, windows,  # type: ignore[arg-type]
                                                 task.targets, results)
        evaluator = ExtendedEvaluator(context)
        result = evaluator.query(task.text, QueryTarget(base_iri=task.base))
        if isinstance(result, ConstructedQuads):
            return TaskResult(task.position, "quads", _nquads(result))
        if isinstance(result, ConstructedTriples):
            return TaskResult(task.position, "triples", _nquads(result))
        return TaskResult(task.position, "error", b"a rule must be a CONSTRUCT query")
    except Exception as error:  # noqa: BLE001 - reported to the driver, which records it in the rule's status
        return TaskResult(task.position, "error", f"{type(error).__name__}: {error}".encode())


def _nquads(items: list[Any]) -> bytes:
    """Quads as N-Quads, triples as N-Triples (which is N-Quads in the default graph)."""
    quads = isinstance(items, ConstructedQuads)
    return serialize(items, format=RdfFormat.N_QUADS if quads else RdfFormat.N_TRIPLES) or b""
