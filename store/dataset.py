"""A revisioned RDF dataset: pyoxigraph holds HEAD, the history holds reverse deltas.

Cost model (see docs/revisions.md):

* a read of HEAD is a plain pyoxigraph read of the on-disk store;
* a read of revision r copies HEAD into memory and undoes the deltas of revisions r+1..HEAD:
  O(|HEAD| + sum of those deltas); the last few such states are cached (they never change);
* a Graph Store read of one graph at revision r costs O(|graph at HEAD| + deltas after r);
* a write costs the store write, plus writing its delta (the inserted quads once more in a file,
  and the deleted ones), plus for SPARQL Update a snapshot of the graphs each operation can change.

A write that fails changes nothing, whatever the exception: its journal's undo steps are applied (tried again if
they fail), and if they still cannot be, the dataset refuses reads and writes (``DatasetUnavailable``) until a
restart completes them: no reader ever sees a half-applied or half-undone transaction.
"""

from __future__ import annotations

import gc
import logging
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from pyoxigraph import DefaultGraph, Quad, RdfFormat, Store, parse, serialize

from sparql_ext import UnsupportedOperation, parse_revision, split_update
from sparql_ext.errors import ConcentratorError
from store.durable import fsync_file
from store.errors import DatasetUnavailable, GraphNotFound, RevisionNotRetained, StorageFailure
from store.history import History, UndoStep, journal_graphs, undo
from store.past import PastStates, copy_quads, graph_at, graph_changes, undo_deltas, write_checkpoint, write_copy
from store.revlog import Revision, RevisionLog
from store.rwlock import ReadWriteLock
from store.staging import StagedQuads, concatenate, stage_rdf
from store.terms import GraphName, graph_to_text
from store.updates import apply_operations, check_syntax

log = logging.getLogger(__name__)

NQ = RdfFormat.N_QUADS
BULK_THRESHOLD = 100_000  # quads; above, bulk_load (fast, writes new files) beats a transaction
UNDO_ATTEMPTS = 3  # a failed undo is tried again (a MemoryError may pass once garbage is collected)


@dataclass(frozen=True)
class Commit:
    """What a write produced: its revision, and whether it created the target graph."""

    revision: Revision
    created: bool = False


class RevisionedDataset:
    """One dataset: HEAD in pyoxigraph, its history beside it. Safe to share between threads."""

    def __init__(
        self,
        directory: Path,
        *,
        in_memory: bool = False,
        retention: int | None = None,
        revision_cache: int = 2,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._in_memory = in_memory
        self._store = Store() if in_memory else Store(str(self.directory / "store"))
        self._closed = False
        self._history = History(self.directory / "history")
        self._staging_dir = self.directory / "staging"
        shutil.rmtree(self._staging_dir, ignore_errors=True)  # left by a crash: never applied
        self._staging_dir.mkdir()
        self._lock = ReadWriteLock()
        self._writer = threading.Lock()  # one transaction at a time, even before it locks readers
        self._retention = retention
        self._past = PastStates(revision_cache)
        self._unavailable: str | None = None  # why reads and writes are refused (an undo that could not complete)
        self._recover()
        self._log = RevisionLog(self._history.read_revisions())
        self._oldest_readable = self._find_oldest_readable()
        # called with the new HEAD after each committed transaction, outside the locks (rules re-discover inputs)
        self.on_commit: list[Callable[[int], None]] = []

    # --- revisions --------------------------------------------------------------------------
    @property
    def head(self) -> int:
        return self._log.head

    @property
    def oldest_readable(self) -> int:
        """The oldest revision whose state can still be read (older history was dropped)."""
        return self._oldest_readable

    def revision(self, ordinal: int) -> Revision | None:
        return self._log.get(ordinal)

    def revisions_since(self, ordinal: int) -> list[Revision]:
        self._check_available()
        return self._log.since(ordinal)

    @property
    def unavailable(self) -> str | None:
        """Why the dataset refuses reads and writes (a failed write it could not undo), or None."""
        return self._unavailable

    def resolve(self, designator: str | None) -> int | None:
        """Ordinal named by a revision designator; ``None`` (no designator) means HEAD."""
        if designator is None:
            return None
        ordinal = self._log.resolve(parse_revision(designator), designator)
        if ordinal < self._oldest_readable:
            raise RevisionNotRetained(
                f"revision {designator!r} (ordinal {ordinal}) is older than the retained "
                f"history; the oldest readable revision is {self._oldest_readable}"
            )
        return ordinal

    # --- reads ------------------------------------------------------------------------------
    @contextmanager
    def reading(self, ordinal: int | None = None) -> Iterator[Store]:
        """A store holding the state after revision ``ordinal`` (HEAD if None), for the
        duration of the block. Results must be consumed inside the block."""
        with self._lock.read():
            self._check_available()
            if ordinal is None or ordinal == self._log.head:
                yield self._store
                return
            state = self._state_at(ordinal)
        yield state

    def snapshot(self, ordinal: int, path: Path) -> None:
        """Write the state after revision ``ordinal`` into ``path`` (a directory that must not exist) as a store that
        other processes open with ``Store.read_only`` (the query workers, ``engine.workers``).

        HEAD of the on-disk store is a RocksDB checkpoint (``Store.backup``: hard links to its immutable files, a few
        milliseconds whatever its size; docs/deployment.md); an older revision is that checkpoint with the deltas
        after ``ordinal`` undone in it, O(those deltas). An in-memory dataset (tests) has no files to link: its state
        is dumped and bulk-loaded, O(|state|). Everything happens under the read lock, so no write lands in between
        (and retention drops no delta being read)."""
        with self._lock.read():
            self._check_available()
            if self._in_memory:
                write_copy(self._store if ordinal == self._log.head else self._state_at(ordinal), path,
                           self._staging_dir)
            else:
                write_checkpoint(self._store, path, self._history, self._log.since(ordinal))

    def graph_quads(self, graph: GraphName, ordinal: int | None = None) -> list[Quad] | None:
        """The quads of one graph at a revision; None if the graph does not exist there."""
        with self._lock.read():
            self._check_available()
            current = list(self._store.quads_for_pattern(None, None, None, graph))
            if ordinal is None or ordinal == self._log.head:
                if current or isinstance(graph, DefaultGraph):
                    return current
                return current if self._store.contains_named_graph(graph) else None
            quads = graph_at(current, graph, self._history, self._log.since(ordinal))
        if not quads and not isinstance(graph, DefaultGraph):
            return None  # at past revisions a graph exists when it has quads
        return list(quads)

    def graph_revisions(self, graph: GraphName) -> list[Revision]:
        """The readable revisions of one graph, oldest first: those whose delta changed it and after which it exists,
        and the oldest readable revision if the graph exists there (what wrote it before is no longer known). These
        are the graph's mementos (RFC 7089). Cost: every retained delta is read once, newest first, undoing them
        from HEAD over the graph's quads."""
        with self._lock.read():
            self._check_available()
            oldest = self._oldest_readable  # the revisions after it have their deltas
            quads = list(self._store.quads_for_pattern(None, None, None, graph))
            exists = bool(quads) or isinstance(graph, DefaultGraph) or self._store.contains_named_graph(graph)
            found, exists = graph_changes(quads, exists, graph, self._history, self._log.since(oldest))
            first = self._log.get(oldest)  # None for 0, the empty state
            if first is not None and exists:
                found.append(first)
        return found[::-1]

    def contains_graph(self, graph: GraphName) -> bool:
        with self._lock.read():
            self._check_available()
            return isinstance(graph, DefaultGraph) or self._store.contains_named_graph(graph)

    def _state_at(self, ordinal: int) -> Store:
        """HEAD with the deltas after ``ordinal`` undone, in memory (caller holds a read lock)."""

        def rewound() -> Store:
            state = Store()
            copy_quads(self._store, state, self._staging_dir)
            undo_deltas(state, self._history, self._log.since(ordinal))
            return state

        return self._past.get(ordinal, rewound)

    # --- writes -----------------------------------------------------------------------------
    def stage(self, source, rdf_format: RdfFormat, **options) -> StagedQuads:  # type: ignore[no-untyped-def]
        """Parse a body into a staging file, holding no lock (see ``store.staging``)."""
        return stage_rdf(source, rdf_format, self._staging_dir, **options)

    def concatenate(self, parts: list[StagedQuads]) -> StagedQuads:
        return concatenate(parts, self._staging_dir)

    def add(self, staged: StagedQuads, operation: str = "add") -> Commit:
        """Add the staged quads (Graph Store POST, a replayed dataset): one revision."""
        try:
            with self._transaction() as ordinal:
                ins, dele = self._history.delta_paths(ordinal)
                existing = {g for g in staged.graphs if self._exists(g)}
                created = [g for g in staged.graphs if g not in existing]
                if existing:  # keep only quads absent before, so the delta undoes exactly
                    with ins.open("wb") as out:
                        serialize(
                            (q for q in parse(path=staged.path, format=NQ)
                             if q.graph_name not in existing or q not in self._store),
                            out, NQ,
                        )
                    inserted = _count_lines(ins)
                else:
                    shutil.move(staged.path, ins)
                    inserted = staged.count
                dele.touch()
                fsync_file(ins)
                # graphs the add creates are cleared: only quads added to graphs that existed are read back
                self._history.begin(ordinal, [UndoStep(
                    clear=journal_graphs(created), remove=str(ins) if existing else None,
                    drop=journal_graphs(created, named_only=True))])
                self._load(ins, inserted)
                for graph in created:
                    if not isinstance(graph, DefaultGraph):
                        self._store.add_graph(graph)
                revision = self._commit(operation, inserted, 0)
            return Commit(revision, created=bool(created) and not existing)
        finally:
            staged.discard()

    def replace(self, graph: GraphName | None, staged: StagedQuads, operation: str = "put") -> Commit:
        """Replace one graph (``graph``) or the whole dataset (None) by the staged quads."""
        try:
            with self._transaction() as ordinal:
                ins, dele = self._history.delta_paths(ordinal)
                existed = graph is None or self._exists(graph)
                with dele.open("wb") as out:
                    if graph is None:
                        self._store.dump(out, NQ)
                    elif existed:
                        self._dump_graph(graph, out)
                shutil.move(staged.path, ins)
                fsync_file(ins)
                fsync_file(dele)
                # clearing what is replaced undoes the load without reading it again; its old quads are put back
                if graph is None:
                    step = UndoStep(clear_all=True, add=str(dele), create=journal_graphs(self._store.named_graphs()))
                else:
                    step = UndoStep(clear=(graph_to_text(graph),), add=str(dele),
                                    drop=() if existed else (graph_to_text(graph),))
                self._history.begin(ordinal, [step])
                deleted = _count_lines(dele)
                if graph is None:
                    self._store.clear()
                elif existed:
                    self._store.clear_graph(graph)
                self._load(ins, staged.count)
                if graph is not None and not isinstance(graph, DefaultGraph):
                    self._store.add_graph(graph)
                revision = self._commit(operation, staged.count, deleted)
            return Commit(revision, created=not existed)
        finally:
            staged.discard()

    def delete_graph(self, graph: GraphName, operation: str = "delete") -> Commit:
        """Remove a named graph (or empty the default graph): Graph Store DELETE."""
        with self._transaction() as ordinal:
            if not self._exists(graph):
                raise GraphNotFound(f"graph {graph_to_text(graph)} does not exist")
            ins, dele = self._history.delta_paths(ordinal)
            ins.touch()
            with dele.open("wb") as out:
                self._dump_graph(graph, out)
            fsync_file(dele)
            self._history.begin(ordinal, [UndoStep(add=str(dele), create=journal_graphs([graph], named_only=True))])
            if isinstance(graph, DefaultGraph):
                self._store.clear_graph(graph)
            else:
                self._store.remove_graph(graph)
            return Commit(self._commit(operation, 0, _count_lines(dele)))

    def update(
        self,
        text: str,
        *,
        base_iri: str | None = None,
        using: Iterable[str] = (),
        using_named: Iterable[str] = (),
    ) -> Commit:
        """Run a SPARQL 1.1 Update request as one revision (all its operations or none)."""
        operations = split_update(text, base_iri, tuple(using), tuple(using_named))
        for op in operations:
            if op.kind == "LOAD":
                raise UnsupportedOperation(
                    "LOAD is not supported: this server fetches nothing from the network; "
                    "send the data with the Graph Store Protocol (PUT/POST /store) instead"
                )
        check_syntax(text, base_iri)
        if using or using_named:  # the rewritten operations, one by one (each has its prologue)
            for op in operations:
                check_syntax(op.text, base_iri)
        with self._transaction() as ordinal:
            inserted, deleted = apply_operations(self._store, self._history, ordinal, operations, base_iri)
            ins, dele = self._history.delta_paths(ordinal)
            for path, quads in ((ins, inserted), (dele, deleted)):
                with path.open("wb") as out:
                    serialize(iter(quads), out, NQ)
                fsync_file(path)
            return Commit(self._commit("update", len(inserted), len(deleted)))

    # --- transaction machinery ----------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[int]:
        """Hold the writer and exclude readers; on failure undo the journal's steps (``_roll_back``). An error of the
        store's own family passes as it is; another (a ``MemoryError``, the storage engine's) becomes a
        ``StorageFailure`` saying that nothing changed."""
        with self._writer, self._lock.write():
            self._check_available()
            ordinal = self._log.head + 1
            try:
                yield ordinal
            except BaseException as error:
                if self._log.head == ordinal:
                    raise  # committed: what fails after the commit point does not undo it
                self._roll_back(ordinal, error)
                if isinstance(error, Exception) and not isinstance(error, ConcentratorError):
                    raise StorageFailure(f"the write failed and was rolled back (nothing changed): "
                                         f"{type(error).__name__}: {error}") from error
                raise
        if self._log.head == ordinal:
            for listener in self.on_commit:
                try:
                    listener(ordinal)
                except Exception:  # noqa: BLE001 - a listener's failure is its own; the commit stands
                    log.exception("on_commit listener failed after revision %d", ordinal)

    def _commit(self, operation: str, inserted: int, deleted: int) -> Revision:
        revision = self._log.next_revision(operation, inserted, deleted, datetime.now(UTC))
        self._history.append_revision(revision)
        self._log.append(revision)
        self._history.end()
        self._apply_retention()
        return revision

    def _load(self, path: Path, count: int) -> None:
        """Load a staged file (checked as it was staged: pyoxigraph reads every line); a failure is rolled back."""
        if count >= BULK_THRESHOLD:
            self._store.bulk_load(path=str(path), format=NQ)
        elif count:
            self._store.load(path=str(path), format=NQ)

    def _dump_graph(self, graph: GraphName, out: IO[bytes]) -> None:
        # Store.dump(from_graph=) writes triples without their graph: keep the graph name.
        serialize(self._store.quads_for_pattern(None, None, None, graph), out, NQ)

    def _exists(self, graph: GraphName) -> bool:
        return isinstance(graph, DefaultGraph) or self._store.contains_named_graph(graph)

    def _roll_back(self, ordinal: int, error: BaseException) -> None:
        """Undo the uncommitted transaction ``ordinal`` and forget it; if its undo cannot be completed, keep its
        journal for the next start and refuse reads and writes until then (``DatasetUnavailable``)."""
        pending = self._history.pending()
        if pending is not None and pending[0] == ordinal and not self._undo(pending[1]):
            self._unavailable = (
                f"a failed write (revision {ordinal}: {type(error).__name__}: {error}) could not be undone; the "
                "dataset refuses reads and writes until the server restarts, which completes the undo")
            log.error("%s", self._unavailable)
            raise DatasetUnavailable(self._unavailable) from error
        self._history.drop_deltas(ordinal)
        self._history.end()

    def _undo(self, steps: list[UndoStep]) -> bool:
        """Apply undo steps, up to ``UNDO_ATTEMPTS`` times (applying them again is harmless); False if none
        completed."""
        for attempt in range(1, UNDO_ATTEMPTS + 1):
            try:
                undo(self._store, steps)
                return True
            except Exception as error:  # noqa: BLE001 - whatever failed, the steps are tried again or the dataset closes
                # the message only: a logged traceback would keep the store open through its frames
                log.error("undo attempt %d of %d failed: %s: %s", attempt, UNDO_ATTEMPTS, type(error).__name__,
                          str(error))
                gc.collect()
        return False

    def _check_available(self) -> None:
        if self._unavailable is not None:
            raise DatasetUnavailable(self._unavailable)

    def _recover(self) -> None:
        """Undo a transaction that was being applied when the process died (or whose undo failed)."""
        pending = self._history.pending()
        if pending is None:
            return
        ordinal, steps = pending
        committed = [r.ordinal for r in self._history.read_revisions()]
        if ordinal not in committed:
            if not self._undo(steps):
                self._unavailable = (f"the undo of an interrupted write (revision {ordinal}) failed at start-up; the "
                                     "dataset refuses reads and writes until a restart completes it")
                log.error("%s", self._unavailable)
                return
            self._history.drop_deltas(ordinal)
        self._history.end()

    def _find_oldest_readable(self) -> int:
        ordinal = self._log.head
        while ordinal > 0 and self._history.has_deltas(ordinal):
            ordinal -= 1
        return ordinal

    def _apply_retention(self) -> None:
        if self._retention is None:
            return
        horizon = self._log.head - self._retention
        while self._oldest_readable < horizon:
            self._oldest_readable += 1
            self._history.drop_deltas(self._oldest_readable)
            self._past.forget(self._oldest_readable - 1)

    def close(self) -> None:
        """Flush and release the store (RocksDB's lock and files): its directory may be removed or reopened
        once this returns. The dataset is unusable afterwards."""
        with self._writer, self._lock.write():
            if self._closed:
                return
            self._closed = True
            self._store.flush()
            self._past.clear()
            self._store = None  # type: ignore[assignment]  # the last reference: pyoxigraph closes the store


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
