"""A revisioned RDF dataset: pyoxigraph holds HEAD, the history holds reverse deltas.

Cost model (see docs/revisions.md):

* a read of HEAD is a plain pyoxigraph read of the on-disk store;
* a read of revision r copies HEAD into memory and undoes the deltas of revisions r+1..HEAD:
  O(|HEAD| + sum of those deltas); the last few such states are cached (they never change);
* a Graph Store read of one graph at revision r costs O(|graph at HEAD| + deltas after r);
* a write costs the store write, plus writing its delta (the inserted quads once more in a file,
  and the deleted ones), plus for SPARQL Update a snapshot of the graphs each operation can change.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from pyoxigraph import BlankNode, DefaultGraph, NamedNode, Quad, QuerySolutions, RdfFormat, Store, parse, serialize

from sparql_ext import Operation, UnsupportedOperation, parse_revision, split_update
from store.durable import fsync_file
from store.errors import GraphNotFound, QueryFailed, RevisionNotRetained, StorageFailure
from store.history import History, UndoStep
from store.revlog import Revision, RevisionLog
from store.rwlock import ReadWriteLock
from store.staging import StagedQuads, concatenate, stage_rdf
from store.terms import GraphName, graph_from_iri, graph_from_text, graph_to_text

log = logging.getLogger(__name__)

NQ = RdfFormat.N_QUADS
BULK_THRESHOLD = 100_000  # quads; above, bulk_load (fast, writes new files) beats a transaction


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
        self._store = Store() if in_memory else Store(str(self.directory / "store"))
        self._closed = False
        self._history = History(self.directory / "history")
        self._staging_dir = self.directory / "staging"
        shutil.rmtree(self._staging_dir, ignore_errors=True)  # left by a crash: never applied
        self._staging_dir.mkdir()
        self._lock = ReadWriteLock()
        self._writer = threading.Lock()  # one transaction at a time, even before it locks readers
        self._retention = retention
        self._cache: OrderedDict[int, Store] = OrderedDict()
        self._cache_size = revision_cache
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
        return self._log.since(ordinal)

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
            if ordinal is None or ordinal == self._log.head:
                yield self._store
                return
            state = self._state_at(ordinal)
        yield state

    def graph_quads(self, graph: GraphName, ordinal: int | None = None) -> list[Quad] | None:
        """The quads of one graph at a revision; None if the graph does not exist there."""
        with self._lock.read():
            current = list(self._store.quads_for_pattern(None, None, None, graph))
            if ordinal is None or ordinal == self._log.head:
                if current or isinstance(graph, DefaultGraph):
                    return current
                return current if self._store.contains_named_graph(graph) else None
            quads = set(current)
            for revision in reversed(self._log.since(ordinal)):
                ins, dele = self._history.delta_paths(revision.ordinal)
                quads.difference_update(q for q in parse(path=ins, format=NQ) if q.graph_name == graph)
                quads.update(q for q in parse(path=dele, format=NQ) if q.graph_name == graph)
        if not quads and not isinstance(graph, DefaultGraph):
            return None  # at past revisions a graph exists when it has quads
        return list(quads)

    def graph_revisions(self, graph: GraphName) -> list[Revision]:
        """The readable revisions of one graph, oldest first: those whose delta changed it and after which it exists,
        and the oldest readable revision if the graph exists there (what wrote it before is no longer known). These
        are the graph's mementos (RFC 7089). Cost: every retained delta is read once, newest first, undoing them
        from HEAD over the graph's quads."""
        with self._lock.read():
            oldest = self._oldest_readable  # the revisions after it have their deltas
            quads = set(self._store.quads_for_pattern(None, None, None, graph))
            exists = bool(quads) or isinstance(graph, DefaultGraph) or self._store.contains_named_graph(graph)
            found: list[Revision] = []
            for revision in reversed(self._log.since(oldest)):  # HEAD down to oldest + 1
                ins, dele = self._history.delta_paths(revision.ordinal)
                inserted = [q for q in parse(path=ins, format=NQ) if q.graph_name == graph]
                deleted = [q for q in parse(path=dele, format=NQ) if q.graph_name == graph]
                if (inserted or deleted) and exists:
                    found.append(revision)
                quads.difference_update(inserted)
                quads.update(deleted)
                exists = bool(quads) or isinstance(graph, DefaultGraph)  # in the past a graph exists with quads
            first = self._log.get(oldest)  # None for 0, the empty state
            if first is not None and exists:
                found.append(first)
        return found[::-1]

    def contains_graph(self, graph: GraphName) -> bool:
        with self._lock.read():
            return isinstance(graph, DefaultGraph) or self._store.contains_named_graph(graph)

    def _state_at(self, ordinal: int) -> Store:
        """HEAD with the deltas after ``ordinal`` undone, in memory (caller holds a read lock)."""
        if ordinal in self._cache:
            self._cache.move_to_end(ordinal)
            return self._cache[ordinal]
        state = Store()
        with tempfile.TemporaryFile(dir=self._staging_dir) as dump:
            self._store.dump(dump, NQ)
            dump.seek(0)
            state.bulk_load(dump, NQ)
        for revision in reversed(self._log.since(ordinal)):
            ins, dele = self._history.delta_paths(revision.ordinal)
            for quad in parse(path=ins, format=NQ):
                state.remove(quad)
            state.bulk_extend(parse(path=dele, format=NQ))
        self._cache[ordinal] = state
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return state

    # --- writes -----------------------------------------------------------------------------
    def stage(self, source, rdf_format: RdfFormat, **options) -> StagedQuads:  # type: ignore[no-untyped-def]
        """Parse a body into a staging file, holding no lock (see ``store.staging``)."""
        return stage_rdf(source, rdf_format, self._staging_dir, **options)

    def concatenate(self, parts: list[StagedQuads]) -> StagedQuads:
        return concatenate(parts, self._staging_dir)

    def add(self, staged: StagedQuads, operation: str = "add") -> Commit:
        """Add the staged quads (Graph Store POST, stream append): one revision."""
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
                self._history.begin(ordinal, [UndoStep(
                    remove=str(ins), add=str(dele), drop=_texts(created, named_only=True))])
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
                clear = () if graph is None else (graph_to_text(graph),)
                self._history.begin(ordinal, [UndoStep(
                    clear=clear, remove=str(ins), add=str(dele),
                    drop=() if existed or graph is None else (graph_to_text(graph),))])
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
            self._history.begin(ordinal, [UndoStep(add=str(dele))])
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
        _check_syntax(text, base_iri)
        if using or using_named:  # the rewritten operations, one by one (each has its prologue)
            for op in operations:
                _check_syntax(op.text, base_iri)
        with self._transaction() as ordinal:
            inserted: set[Quad] = set()
            deleted: set[Quad] = set()
            steps: list[UndoStep] = []
            for index, op in enumerate(operations):
                graphs = self._affected_graphs(op)
                before = self._snapshot(graphs)
                image = self._history.scratch_path(f"{ordinal}.{index}.before.nq")
                with image.open("wb") as out:
                    serialize(before, out, NQ)
                fsync_file(image)
                absent = [g for g in graphs if not self._exists(g)]
                steps.append(UndoStep(clear=_texts(graphs), add=str(image),
                                      drop=_texts(absent, named_only=True)))
                self._history.begin(ordinal, list(reversed(steps)))
                try:
                    self._store.update(op.text, base_iri=base_iri)
                except (SyntaxError, ValueError, RuntimeError) as error:
                    raise QueryFailed(f"update operation {index + 1} ({op.kind}) failed: {error}") from None
                after = self._snapshot(graphs)
                for quad in before - after:  # compose: net change since the request began
                    if quad in inserted:
                        inserted.discard(quad)
                    else:
                        deleted.add(quad)
                for quad in after - before:
                    if quad in deleted:
                        deleted.discard(quad)
                    else:
                        inserted.add(quad)
            ins, dele = self._history.delta_paths(ordinal)
            for path, quads in ((ins, inserted), (dele, deleted)):
                with path.open("wb") as out:
                    serialize(iter(quads), out, NQ)
                fsync_file(path)
            return Commit(self._commit("update", len(inserted), len(deleted)))

    # --- transaction machinery ----------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[int]:
        """Hold the writer and exclude readers; on failure undo the journal's steps."""
        with self._writer, self._lock.write():
            ordinal = self._log.head + 1
            try:
                yield ordinal
            except BaseException:
                pending = self._history.pending()
                if pending is not None and pending[0] == ordinal:
                    self._undo(pending[1])
                self._history.drop_deltas(ordinal)
                self._history.end()
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
        try:
            if count >= BULK_THRESHOLD:
                self._store.bulk_load(path=str(path), format=NQ)
            elif count:
                self._store.load(path=str(path), format=NQ)
        except (OSError, SyntaxError, ValueError) as error:
            raise StorageFailure(f"the store could not apply the transaction: {error}") from None

    def _dump_graph(self, graph: GraphName, out: IO[bytes]) -> None:
        # Store.dump(from_graph=) writes triples without their graph: keep the graph name.
        serialize(self._store.quads_for_pattern(None, None, None, graph), out, NQ)

    def _exists(self, graph: GraphName) -> bool:
        return isinstance(graph, DefaultGraph) or self._store.contains_named_graph(graph)

    def _affected_graphs(self, op: Operation) -> list[GraphName]:
        graphs: set[GraphName] = {graph_from_iri(g) for g in op.graphs}
        if op.all_named:
            graphs.update(self._store.named_graphs())
        if op.where is not None:
            try:
                solutions = self._store.query(
                    op.where,
                    default_graph=[NamedNode(g) for g in op.using] or None,
                    named_graphs=[NamedNode(g) for g in op.using_named] or None,
                )
            except (SyntaxError, ValueError) as error:
                raise QueryFailed(f"update operation ({op.kind}) failed: {error}") from None
            assert isinstance(solutions, QuerySolutions)  # op.where is a SELECT
            for solution in solutions:
                for variable in op.graph_vars:
                    term = solution[variable]
                    if isinstance(term, NamedNode | BlankNode):
                        graphs.add(term)
        return sorted(graphs, key=graph_to_text)

    def _snapshot(self, graphs: list[GraphName]) -> set[Quad]:
        quads: set[Quad] = set()
        for graph in graphs:
            quads.update(self._store.quads_for_pattern(None, None, None, graph))
        return quads

    def _undo(self, steps: list[UndoStep]) -> None:
        """Apply undo steps in order (the journal stores them newest first)."""
        for step in steps:
            for text in step.clear:
                graph = graph_from_text(text)
                if self._exists(graph):
                    self._store.clear_graph(graph)
            if step.remove and Path(step.remove).exists():
                for quad in parse(path=step.remove, format=NQ):
                    self._store.remove(quad)
            if step.add and Path(step.add).exists():
                self._store.bulk_extend(parse(path=step.add, format=NQ))
            for text in step.drop:
                self._store.remove_graph(graph_from_text(text))
        self._store.flush()

    def _recover(self) -> None:
        """Undo a transaction that was being applied when the process died."""
        pending = self._history.pending()
        if pending is None:
            return
        ordinal, steps = pending
        committed = [r.ordinal for r in self._history.read_revisions()]
        if ordinal not in committed:
            self._undo(steps)
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
            self._cache.pop(self._oldest_readable - 1, None)

    def close(self) -> None:
        """Flush and release the store (RocksDB's lock and files): its directory may be removed or reopened
        once this returns. The dataset is unusable afterwards."""
        with self._writer, self._lock.write():
            if self._closed:
                return
            self._closed = True
            self._store.flush()
            self._cache.clear()
            self._store = None  # type: ignore[assignment]  # the last reference: pyoxigraph closes the store


def _texts(graphs: Iterable[GraphName], *, named_only: bool = False) -> tuple[str, ...]:
    return tuple(graph_to_text(g) for g in graphs
                 if not (named_only and isinstance(g, DefaultGraph)))


def _count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def _check_syntax(text: str, base_iri: str | None) -> None:
    """Let pyoxigraph judge the syntax, on an empty store, before anything is touched."""
    try:
        Store().update(text, base_iri=base_iri)
    except SyntaxError as error:
        raise QueryFailed.from_pyoxigraph("update is not valid SPARQL 1.1", error) from None
    except (ValueError, RuntimeError, OSError):
        pass  # an evaluation error on the empty store says nothing about syntax
