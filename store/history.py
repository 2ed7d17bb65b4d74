"""The dataset's history on disk: revision records, per-revision deltas, and the undo journal.

Layout under ``<data>/history/``::

    revisions.jsonl          one JSON record per committed revision (appended, fsync'd)
    deltas/<n>.ins.nq        quads revision n inserted (absent before it)
    deltas/<n>.del.nq        quads revision n deleted (present before it)
    pending.json             the undo steps of the transaction being applied, if any
    pending/                 files the undo steps refer to

A transaction writes its undo steps before it touches the store and appends its record after;
``pending.json`` present at start-up means the process died in between, and the steps are
applied to return the store to the last committed revision (``undo``). Each step sets the graphs it
names back to what they were, so applying the steps again after an interrupted attempt gives the same
state: an undo that failed half-way is completed by trying again, now or at the next start.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyoxigraph import DefaultGraph, RdfFormat, Store, parse

from store.revlog import Revision
from store.terms import GraphName, graph_from_text, graph_to_text


@dataclass(frozen=True)
class UndoStep:
    """Returns the store to its state before one step: clear, remove, add, create, then drop graphs. Clearing the
    graphs a write filled makes re-reading what it loaded unnecessary (``remove`` only for quads added to graphs
    that held others before)."""

    clear: tuple[str, ...] = ()  # graphs (terms.graph_to_text) to empty first
    remove: str | None = None  # N-Quads file of quads to remove
    add: str | None = None  # N-Quads file of quads to put back
    drop: tuple[str, ...] = ()  # named graphs that did not exist before: removed last
    clear_all: bool = False  # empty the whole store first (a whole-dataset replace)
    create: tuple[str, ...] = ()  # named graphs to create again (empty ones the step removed hold no quads to add)

    def to_json(self) -> dict[str, object]:
        return {"clear": list(self.clear), "remove": self.remove, "add": self.add,
                "drop": list(self.drop), "clear_all": self.clear_all, "create": list(self.create)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> UndoStep:
        return cls(tuple(data["clear"]), data["remove"], data["add"],  # type: ignore[arg-type]
                   tuple(data["drop"]), bool(data.get("clear_all", False)),  # type: ignore[arg-type]
                   tuple(data.get("create", ())))  # type: ignore[arg-type]


def journal_graphs(graphs: Iterable[GraphName], *, named_only: bool = False) -> tuple[str, ...]:
    """Graph names as the journal writes them; ``named_only``: without the default graph."""
    return tuple(graph_to_text(g) for g in graphs if not (named_only and isinstance(g, DefaultGraph)))


def undo(store: Store, steps: list[UndoStep]) -> None:
    """Apply undo steps in order (the journal stores them newest first); the files are read by pyoxigraph alone."""
    for step in steps:
        if step.clear_all:
            store.clear()
        for text in step.clear:
            graph = graph_from_text(text)
            if isinstance(graph, DefaultGraph) or store.contains_named_graph(graph):
                store.clear_graph(graph)
        if step.remove and Path(step.remove).exists():
            for quad in parse(path=step.remove, format=RdfFormat.N_QUADS):
                store.remove(quad)
        if step.add and Path(step.add).exists() and Path(step.add).stat().st_size:
            store.bulk_load(path=step.add, format=RdfFormat.N_QUADS)
        for text in step.create:
            graph = graph_from_text(text)
            if not isinstance(graph, DefaultGraph):
                store.add_graph(graph)
        for text in step.drop:
            store.remove_graph(graph_from_text(text))
    store.flush()


@dataclass
class History:
    root: Path
    _log_file: Path = field(init=False)

    def __post_init__(self) -> None:
        (self.root / "deltas").mkdir(parents=True, exist_ok=True)
        (self.root / "pending").mkdir(parents=True, exist_ok=True)
        self._log_file = self.root / "revisions.jsonl"

    # --- revision records -------------------------------------------------------------------
    def read_revisions(self) -> list[Revision]:
        """Committed records; a torn last line (crash while appending) is not a commit."""
        if not self._log_file.exists():
            return []
        revisions = []
        with self._log_file.open("rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        complete = lines[:-1]  # after the last "\n": torn or empty
        for line in complete:
            if line.strip():
                revisions.append(Revision.from_json(json.loads(line)))
        if lines[-1].strip():
            with self._log_file.open("r+b") as f:  # drop the torn tail so appends stay aligned
                f.truncate(len(data) - len(lines[-1]))
        return revisions

    def append_revision(self, revision: Revision) -> None:
        line = json.dumps(revision.to_json(), separators=(",", ":")) + "\n"
        with self._log_file.open("ab") as f:
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())

    # --- deltas ---------------------------------------------------------------------------
    def delta_paths(self, ordinal: int) -> tuple[Path, Path]:
        base = self.root / "deltas" / f"{ordinal:012d}"
        return base.with_suffix(".ins.nq"), base.with_suffix(".del.nq")

    def has_deltas(self, ordinal: int) -> bool:
        ins, dele = self.delta_paths(ordinal)
        return ins.exists() and dele.exists()

    def drop_deltas(self, ordinal: int) -> None:
        for path in self.delta_paths(ordinal):
            path.unlink(missing_ok=True)

    # --- the undo journal -------------------------------------------------------------------
    def scratch_path(self, name: str) -> Path:
        return self.root / "pending" / name

    def begin(self, ordinal: int, steps: list[UndoStep]) -> None:
        """Record (durably) how to undo what is about to be applied for revision ``ordinal``."""
        tmp = self.root / "pending.json.tmp"
        with tmp.open("w") as f:
            json.dump({"ordinal": ordinal, "steps": [s.to_json() for s in steps]}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / "pending.json")

    def pending(self) -> tuple[int, list[UndoStep]] | None:
        path = self.root / "pending.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return int(data["ordinal"]), [UndoStep.from_json(s) for s in data["steps"]]

    def end(self) -> None:
        """Forget the undo journal: the transaction committed or was undone."""
        (self.root / "pending.json").unlink(missing_ok=True)
        shutil.rmtree(self.root / "pending", ignore_errors=True)
        (self.root / "pending").mkdir(exist_ok=True)

    def retained_files(self) -> Iterator[Path]:
        yield from sorted((self.root / "deltas").iterdir())


