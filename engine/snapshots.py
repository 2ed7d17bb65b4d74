"""Snapshots: a consistent, read-only copy of the revision a query process reads (a RocksDB checkpoint of HEAD, or a
past revision rebuilt in one), shared by the queries of that revision and deleted once unused."""

from __future__ import annotations

import contextlib
import itertools
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --- snapshots ------------------------------------------------------------------------------------------------


@dataclass
class Snapshot:
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
        self._entries: dict[int, Snapshot] = {}
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

    def _acquire(self, ordinal: int) -> Snapshot:
        with self._lock:
            entry = self._entries.get(ordinal)
            maker = entry is None
            if entry is None:
                entry = self._entries[ordinal] = Snapshot(self.directory / f"r{ordinal}-{next(self._names)}")
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

    def _release(self, entry: Snapshot) -> None:
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


