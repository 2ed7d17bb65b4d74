"""Reading the past: the state after revision r is HEAD with the deltas of the revisions after r undone, newest
first (docs/revisions.md: O(|HEAD| + those deltas) for a whole state, O(|graph at HEAD| + those deltas) for one
graph). The dataset calls these under its read lock, so no write lands in between and retention drops no delta
being read."""

from __future__ import annotations

import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pyoxigraph import DefaultGraph, Quad, RdfFormat, Store, parse

from store.history import History
from store.revlog import Revision
from store.terms import GraphName

NQ = RdfFormat.N_QUADS


def undo_deltas(state: Store, history: History, after: Sequence[Revision]) -> None:
    """Undo in ``state`` the deltas of ``after`` (the revisions after the one wanted, oldest first), newest first."""
    for revision in reversed(after):
        ins, dele = history.delta_paths(revision.ordinal)
        for quad in parse(path=ins, format=NQ):
            state.remove(quad)
        state.bulk_extend(parse(path=dele, format=NQ))


def copy_quads(source: Store, target: Store, staging: Path) -> None:
    """Every quad of ``source`` into ``target`` (empty), through a file of ``staging``: one dump, one bulk load."""
    with tempfile.TemporaryFile(dir=staging) as dump:
        source.dump(dump, NQ)
        dump.seek(0)
        target.bulk_load(dump, NQ)


def write_checkpoint(head: Store, path: Path, history: History, after: Sequence[Revision]) -> None:
    """The state before the revisions ``after`` into ``path``, a store of its own: a RocksDB checkpoint of ``head``
    (on disk; ``Store.backup``: hard links to its immutable files) with their deltas undone in it."""
    head.backup(str(path))
    if not after:
        return
    past = Store(str(path))  # the checkpoint is a database of its own: changing it leaves HEAD alone
    undo_deltas(past, history, after)
    past.flush()
    del past  # the last reference: pyoxigraph closes the store (readers open it afterwards)


def write_copy(state: Store, path: Path, staging: Path) -> None:
    """An in-memory ``state`` into ``path``, a store of its own (no files to link: O(|state|))."""
    copy = Store(str(path))
    copy_quads(state, copy, staging)
    copy.flush()
    del copy  # the last reference: pyoxigraph closes the store (readers open it afterwards)


def graph_at(current: Iterable[Quad], graph: GraphName, history: History, after: Sequence[Revision]) -> set[Quad]:
    """The quads of ``graph`` before the revisions ``after``, from ``current``, its quads at HEAD."""
    quads = set(current)
    for revision in reversed(after):
        ins, dele = history.delta_paths(revision.ordinal)
        quads.difference_update(q for q in parse(path=ins, format=NQ) if q.graph_name == graph)
        quads.update(q for q in parse(path=dele, format=NQ) if q.graph_name == graph)
    return quads


def graph_changes(current: Iterable[Quad], exists: bool, graph: GraphName, history: History,
                  after: Sequence[Revision]) -> tuple[list[Revision], bool]:
    """The revisions of ``after`` whose delta changed ``graph`` and after which it exists, newest first, and whether
    it exists before them all; from ``current``, its quads at HEAD, and whether it exists there. Every delta is read
    once."""
    quads = set(current)
    found: list[Revision] = []
    for revision in reversed(after):
        ins, dele = history.delta_paths(revision.ordinal)
        inserted = [q for q in parse(path=ins, format=NQ) if q.graph_name == graph]
        deleted = [q for q in parse(path=dele, format=NQ) if q.graph_name == graph]
        if (inserted or deleted) and exists:
            found.append(revision)
        quads.difference_update(inserted)
        quads.update(deleted)
        exists = bool(quads) or isinstance(graph, DefaultGraph)  # in the past a graph exists when it has quads
    return found, exists


class PastStates:
    """The last ``size`` past states read, in memory, by revision (a state never changes once its revision is past)."""

    def __init__(self, size: int) -> None:
        self._states: OrderedDict[int, Store] = OrderedDict()
        self._size = size

    def get(self, ordinal: int, make: Callable[[], Store]) -> Store:
        """The state after ``ordinal``, made by ``make`` unless kept (the caller holds the dataset's read lock)."""
        if ordinal in self._states:
            self._states.move_to_end(ordinal)
            return self._states[ordinal]
        state = self._states[ordinal] = make()
        while len(self._states) > self._size:
            self._states.popitem(last=False)
        return state

    def forget(self, ordinal: int) -> None:
        self._states.pop(ordinal, None)

    def clear(self) -> None:
        self._states.clear()
