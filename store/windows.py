"""Window sequences registered on a stream, and the window revisions materialized for them.

Layout under ``<data>/streams/<name>/windows/``::

    sequences.json   registered sequences: WindowRef text -> resolved WindowSpec
    revisions.jsonl  one line per materialized window (a window revision), appended
    state.json       the pipeline's progress: last Spark batch applied, open windows

A window revision is a view: it names its elements (ordinal runs); the element graphs are not
copied. Revisions and state are written by ``commit``, which is idempotent per Spark batch id so a
batch replayed after a crash materializes nothing twice.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from pathlib import Path

from sparql_ext.window_data import Runs
from sparql_ext.window_state import PipelineState
from sparql_ext.windowing import WindowSpec
from store.durable import fsync_file, now_micros, write_json


@dataclass(frozen=True)
class Sequence:
    """A repeating (or prospective) WindowRef registered on a stream; ``client``: the client whose read registered
    it (None: a rule, or a request with the server's write token)."""

    id: str
    ref: str
    spec: WindowSpec
    registered: int  # µs
    client: str | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"id": self.id, "ref": self.ref, "spec": asdict(self.spec),
                                   "registered": self.registered}
        if self.client is not None:
            data["client"] = self.client
        return data

    @classmethod
    def from_json(cls, data: dict) -> Sequence:  # type: ignore[type-arg]
        return cls(data["id"], data["ref"], WindowSpec(**data["spec"]), data["registered"], data.get("client"))


@dataclass(frozen=True)
class Registrar:
    """Who registers new sequences in this context (a read by ``client``), and ``admit``, which raises when that
    client may not create one more (protocol/access.py bounds them per client)."""

    client: str
    admit: Callable[[str], None]


#: Set by the HTTP layer for the requests whose new sequences count against their client; unset elsewhere (rules).
registrar: ContextVar[Registrar | None] = ContextVar("sequence_registrar", default=None)


@dataclass(frozen=True)
class WindowRevision:
    """A complete window, materialized: bounds, elements, commit time, UUID."""

    sequence: str
    index: int
    start: int  # µs (time windows) or ordinal (count windows)
    end: int
    runs: Runs
    commit: int
    uuid: str

    @property
    def count(self) -> int:
        return sum(last - first + 1 for first, last in self.runs)

    def ordinals(self) -> Iterator[int]:
        for first, last in self.runs:
            yield from range(first, last + 1)

    def to_json(self) -> dict[str, object]:
        return {"s": self.sequence, "k": self.index, "start": self.start, "end": self.end,
                "runs": [list(run) for run in self.runs], "c": self.commit, "u": self.uuid}

    @classmethod
    def from_json(cls, data: dict) -> WindowRevision:  # type: ignore[type-arg]
        runs = tuple((first, last) for first, last in data["runs"])
        return cls(data["s"], data["k"], data["start"], data["end"], runs, data["c"], data["u"])


RECENT_WINDOWS_KEPT = 256  # window revisions per sequence kept in memory for continuous readers
#: A sequence nobody holds (no rule reads it, no continuous response runs on it) and nobody used for this long is
#: retired: the pipeline stops computing its windows. A client resumes a continuous response within it.
RETIRE_AFTER_SECONDS = 15 * 60.0


def anchor_key(spec: WindowSpec) -> str:
    """What a ref resolved to at registration: its anchor element (``HEAD`` resolves to the HEAD of that moment),
    else its origin (a dateTime t0, or the first ordinal of a count window).

    >>> anchor_key(WindowSpec("R/HEAD/PT1M", "time", False, None, 60_000_000, 60_000_000, "time", 0, None, 7))
    'element 7'
    """
    return f"element {spec.anchor}" if spec.anchor is not None else f"origin {spec.origin}"


def sequence_id(ref: str, spec: WindowSpec, generation: int = 0) -> str:
    """A stable id for a ref resolved as ``spec``: two registrations that resolve to the same windows share a
    sequence; ``R3/HEAD/PT1M`` registered at another HEAD is another sequence (its own t0, its own windows).
    ``generation`` makes a new id for a key whose sequence was retired."""
    key = f"{ref} @ {anchor_key(spec)}" + (f" #{generation}" if generation else "")
    return uuid.uuid5(uuid.NAMESPACE_URL, key).hex[:16]


class WindowLog:
    """The registered sequences and window revisions of one stream."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._sequences_path = directory / "sequences.json"
        self._revisions_path = directory / "revisions.jsonl"
        self._state_path = directory / "state.json"
        self._changed = threading.Condition()
        self._sequences: dict[str, Sequence] = {}
        self._latest: dict[str, WindowRevision] = {}
        self._by_uuid: dict[str, WindowRevision] = {}
        self._emitted: dict[str, int] = {}
        self._recent: dict[str, deque[WindowRevision]] = {}  # the latest windows per sequence (continuous reads)
        self._holders: dict[str, int] = {}  # sequence -> rules and continuous responses holding it now
        self._used: dict[str, float] = {}  # sequence -> monotonic time it was last released or used
        self._retired: set[str] = set()  # ids never given again (a re-registration gets a new generation)
        self.state = PipelineState()
        # called after windows are committed, outside the lock (the fan-out advances its feeds)
        self.on_windows: list[Callable[[], object]] = []
        if self._sequences_path.exists():
            saved = json.loads(self._sequences_path.read_text())
            if isinstance(saved, list):  # the layout before retirement: a list of sequences
                saved = {"sequences": saved, "retired": []}
            for entry in saved["sequences"]:
                sequence = Sequence.from_json(entry)
                self._sequences[sequence.id] = sequence
                self._used[sequence.id] = time.monotonic()  # a restart gives every sequence a full grace period
            self._retired = set(saved["retired"])
        if self._state_path.exists():
            self.state = PipelineState.from_json(json.loads(self._state_path.read_text()))
        self._load_revisions()

    def _load_revisions(self) -> None:
        if not self._revisions_path.exists():
            return
        data = self._revisions_path.read_bytes()
        lines = data[: data.rfind(b"\n") + 1].splitlines()
        kept = []
        for line in lines:
            revision = WindowRevision.from_json(json.loads(line))
            # Lines past the state's next_index come from a batch whose state never became durable:
            # that batch is replayed, so they are dropped here and written again.
            if revision.index < self.state.next_index.get(revision.sequence, 0):
                kept.append(line)
                self._remember(revision)
        if len(kept) != len(lines) or len(data) != sum(len(line) + 1 for line in lines):
            temporary = self._revisions_path.with_suffix(".tmp")
            temporary.write_bytes(b"".join(line + b"\n" for line in kept))
            fsync_file(temporary)
            os.replace(temporary, self._revisions_path)

    def _remember(self, revision: WindowRevision) -> None:
        recent = self._recent.setdefault(revision.sequence, deque(maxlen=RECENT_WINDOWS_KEPT))
        recent.append(revision)
        self._latest[revision.sequence] = revision
        self._by_uuid[revision.uuid] = revision
        self._emitted[revision.sequence] = self._emitted.get(revision.sequence, 0) + 1

    # -- sequences ----------------------------------------------------------------------------

    def sequences(self) -> list[Sequence]:
        return list(self._sequences.values())

    def find(self, ref: str, spec: WindowSpec) -> Sequence | None:
        """The live sequence of ``ref`` resolved as ``spec``, if one is registered."""
        with self._changed:
            ident = self._free_id(ref, spec)
            return self._sequences.get(ident)

    def with_ref(self, ref: str) -> list[Sequence]:
        """The live sequences of a ref's text (several for a ``HEAD`` ref registered at different HEADs), oldest
        first."""
        with self._changed:
            return sorted((s for s in self._sequences.values() if s.ref == ref), key=lambda s: s.registered)

    def sequence(self, ident: str) -> Sequence | None:
        return self._sequences.get(ident)

    def register(self, ref: str, spec: WindowSpec) -> tuple[Sequence, bool]:
        """Register ``ref`` (resolved as ``spec``); returns the sequence and whether it is new."""
        return self.register_many([(ref, spec)])[0]

    def register_many(self, refs: list[tuple[str, WindowSpec]]) -> list[tuple[Sequence, bool]]:
        """Register each ``(ref, spec)``; returns each one's sequence and whether it is new. The sequences file is
        written once for all of them (bulk rule registration registers many at once). In a ``registrar`` context a
        new sequence is admitted first (``Registrar.admit`` may refuse it) and records its client."""
        registered: list[tuple[Sequence, bool]] = []
        who = registrar.get()
        with self._changed:
            try:
                for ref, spec in refs:
                    ident = self._free_id(ref, spec)
                    existing = self._sequences.get(ident)
                    if existing is not None:
                        self._used[ident] = time.monotonic()
                        registered.append((existing, False))
                        continue
                    if who is not None:
                        who.admit(ref)
                    self._used[ident] = time.monotonic()
                    sequence = Sequence(ident, ref, spec, now_micros(), None if who is None else who.client)
                    self._sequences[ident] = sequence
                    registered.append((sequence, True))
            finally:
                if any(new for _, new in registered):
                    self._save_sequences()
        return registered

    def held_by(self, client: str) -> int:
        """How many live sequences ``client``'s reads registered. Takes no lock: ``Registrar.admit`` counts over
        every stream while one stream's lock is held (a snapshot of the values is enough for a bound)."""
        return sum(1 for sequence in list(self._sequences.values()) if sequence.client == client)

    def _free_id(self, ref: str, spec: WindowSpec) -> str:
        generation = 0
        while (ident := sequence_id(ref, spec, generation)) in self._retired:
            generation += 1
        return ident

    def _save_sequences(self) -> None:
        write_json(self._sequences_path, {"sequences": [s.to_json() for s in self._sequences.values()],
                                          "retired": sorted(self._retired)})

    # -- holding and retiring sequences ---------------------------------------------------------

    def hold(self, ident: str) -> None:
        """A rule or a continuous response reads this sequence: it is not retired while held."""
        with self._changed:
            self._holders[ident] = self._holders.get(ident, 0) + 1

    def release(self, ident: str) -> None:
        with self._changed:
            held = self._holders.get(ident, 0) - 1
            if held > 0:
                self._holders[ident] = held
            else:
                self._holders.pop(ident, None)
            self._used[ident] = time.monotonic()

    def touch(self, ident: str) -> None:
        """A one-shot request read the sequence's latest window: it stays for another grace period."""
        with self._changed:
            self._used[ident] = time.monotonic()

    def retire_idle(self, grace: float = RETIRE_AFTER_SECONDS) -> list[str]:
        """Retire the sequences nobody holds and nobody used for ``grace`` seconds (their window revisions stay
        readable by id); returns their ids. The pipeline calls it between batches and forgets their state."""
        now = time.monotonic()
        with self._changed:
            idle = [ident for ident in self._sequences
                    if ident not in self._holders and now - self._used.get(ident, now) >= grace]
            if not idle:
                return []
            for ident in idle:
                del self._sequences[ident]
                self._retired.add(ident)
                self._used.pop(ident, None)
            self._save_sequences()
            return idle

    def retired(self, ident: str) -> bool:
        return ident in self._retired

    # -- revisions ----------------------------------------------------------------------------

    def latest(self, sequence: str) -> WindowRevision | None:
        return self._latest.get(sequence)

    def emitted(self, sequence: str) -> int:
        return self._emitted.get(sequence, 0)

    def emitted_total(self) -> int:
        """Windows materialized for every sequence of the stream, retired ones included (it never decreases)."""
        return sum(self._emitted.values())

    def by_uuid(self, revision_uuid: str) -> WindowRevision | None:
        return self._by_uuid.get(revision_uuid)

    def revisions(self, sequence: str | None = None) -> list[WindowRevision]:
        """Every materialized window (of one sequence), in order. Reads the file: for tests/tools."""
        if not self._revisions_path.exists():
            return []
        result = []
        for line in self._revisions_path.read_text().splitlines():
            revision = WindowRevision.from_json(json.loads(line))
            if revision.index < self.state.next_index.get(revision.sequence, 0) and (
                sequence is None or revision.sequence == sequence
            ):
                result.append(revision)
        return result

    def wait_for_window(self, sequence: str, after: int, timeout: float) -> WindowRevision | None:
        """The latest window of ``sequence`` with index ≥ ``after``, waiting up to ``timeout`` s."""
        def ready() -> bool:
            latest = self._latest.get(sequence)
            return latest is not None and latest.index >= after
        with self._changed:
            self._changed.wait_for(ready, timeout)
            latest = self._latest.get(sequence)
            return latest if latest is not None and latest.index >= after else None

    def windows_from(self, sequence: str, index: int, timeout: float) -> list[WindowRevision]:
        """The windows of ``sequence`` with index ≥ ``index``, in order, waiting up to ``timeout`` s for the first.

        From memory when they are among the latest ``RECENT_WINDOWS_KEPT``, else from the revisions file (a
        reader far behind); indexes may skip (a long empty stretch the pipeline did not emit)."""
        def ready() -> bool:
            latest = self._latest.get(sequence)
            return latest is not None and latest.index >= index

        with self._changed:
            if not self._changed.wait_for(ready, timeout):
                return []
            recent = list(self._recent.get(sequence, ()))
        if recent and recent[0].index <= index:
            return [r for r in recent if r.index >= index]
        return [r for r in self.revisions(sequence) if r.index >= index]

    def last_before(self, sequence: str, index: int,
                    keep: Callable[[WindowRevision], bool] = lambda _: True) -> WindowRevision | None:
        """The latest window of ``sequence`` with index < ``index`` for which ``keep`` holds (a resumed continuous
        response's previous window). From memory when the latest windows hold it or hold the whole sequence, else
        from the revisions file."""
        with self._changed:
            recent = list(self._recent.get(sequence, ()))
            whole = self._emitted.get(sequence, 0) <= len(recent)
        found = next((r for r in reversed(recent) if r.index < index and keep(r)), None)
        if found is not None or whole:
            return found
        return next((r for r in reversed(self.revisions(sequence)) if r.index < index and keep(r)), None)

    def restart_batches(self) -> None:
        """The pipeline starts from a new checkpoint (batch ids from 0 again): forget the last batch id applied.
        Replaying the log then changes nothing: windows are materialized from ``next_index`` on."""
        with self._changed:
            self.state.batch = -1
            write_json(self._state_path, self.state.to_json())

    def commit(self, batch: int, revisions: list[WindowRevision], state: PipelineState) -> bool:
        """Materialize ``revisions`` and record ``state`` as of Spark batch ``batch``.

        Idempotent: a batch at or before the recorded one is ignored (replay after a crash).
        Revisions are appended first, then the state that counts them; a crash in between leaves
        lines that the next start ignores and the replayed batch writes again."""
        with self._changed:
            if batch <= self.state.batch:
                return False
            if revisions:
                with self._revisions_path.open("a", encoding="utf-8") as out:
                    out.write("".join(json.dumps(r.to_json()) + "\n" for r in revisions))
                    out.flush()
                    os.fsync(out.fileno())
            state.batch = batch
            write_json(self._state_path, state.to_json())
            self.state = state
            for revision in revisions:
                self._remember(revision)
            self._changed.notify_all()
        if revisions:
            for listener in list(self.on_windows):
                listener()
        return True


def new_revision(sequence: str, index: int, start: int, end: int, runs: Runs) -> WindowRevision:
    return WindowRevision(sequence, index, start, end, runs, now_micros(), str(uuid.uuid4()))

