"""One stream: its elements in an on-disk pyoxigraph store, its element log, and group commit.

Layout under ``<data>/streams/<name>/``::

    config.json      the stream's configuration (timestamp predicate, lateness, retention, aliases)
    store/           pyoxigraph: element graphs as named graphs; each element's timestamp triple
                     in a graph of its own (``urn:x-concentrator:timestamp:<ordinal>``), so that a
                     window's default graph can be exactly its elements' timestamp triples
    log.jsonl        one line per committed element or punctuation: the commit record, the
                     timestamp index, and what the Spark pipeline reads
    pending.json     graph names a batch is writing before its log lines are durable

Each element is one transaction (one revision, ordinal = element number). Elements are committed
in groups: a committer thread takes every element waiting, writes them to the store, then appends
and fsyncs their log lines; an element is visible once its line is durable. A crash in between
leaves graphs that ``pending.json`` names and the log does not: they are removed at start-up.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import shutil
import threading
import time as clock
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Store, serialize

from sparql_ext.windowing import Element, WindowSpec
from store.elements import PROV_GENERATED_AT_TIME, ElementName, ParsedElement
from store.errors import ElementOutOfOrder, ElementRejected, StorageFailure
from store.history import fsync_file
from store.terms import graph_from_text

if TYPE_CHECKING:
    from store.windows import Sequence

TIMESTAMP_GRAPH_PREFIX = "urn:x-concentrator:timestamp:"
RESERVED_PREFIX = "urn:x-concentrator:"
_XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
_BULK_THRESHOLD = 2_000  # quads: below it a transactional extend is as fast as a bulk load
_MAX_BATCH = 5_000  # elements per commit: bounds the latency of a batch during a flood
WINDOW_STORES_KEPT = 8  # in-memory window copies per stream (window_store)
RECENT_QUADS_KEPT = 20_000  # quads of the latest elements kept as objects per stream: windows are built from them
# RocksDB (under pyoxigraph's on-disk Store) keeps every write in memtables and, with pyoxigraph's settings, did not
# flush them on its own: a stream's store grew by ≈ 1.4 KB of resident memory per quad written, without bound
# (bench/load's soak: +650 MB in 10 minutes, 20 streams at 10 elements/s). Flushing after this many quads written
# by a transactional extend (bulk loads write table files directly) bounds it (≈ 3 MB of memtables per stream) at
# one flush of ≈ 30 ms per 500 elements of 4 quads.
MEMTABLE_FLUSH_QUADS = 2_000


@dataclass
class StreamConfig:
    """What ``PUT /streams/{name}`` sets."""

    name: str
    timestamp_predicate: str = PROV_GENERATED_AT_TIME
    lateness: int = 0  # µs of allowed lateness; 0 = distinct time series (strictly increasing)
    retention: int | None = None  # µs of stream time to keep; None = keep everything
    aliases: list[str] = field(default_factory=list)  # other IRIs (e.g. urn:uuid:…) naming this stream
    uuid_prefix: int = 0  # high 64 bits of this stream's revision UUIDs (random at creation)
    write_token_sha256: str | None = None  # a token that may write to this stream (protocol/access.py)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> StreamConfig:
        return cls(**data)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ElementRecord:
    """A committed element: its revision record."""

    ordinal: int
    time: int  # element timestamp, µs since the epoch
    graph: str  # N-Triples form: <iri> or _:label
    commit: int  # commit time, µs since the epoch


@dataclass(frozen=True)
class AppendReceipt:
    """How far an upload got: the client resumes after ``last_ordinal`` without duplicates."""

    committed: int
    punctuations: int
    first_ordinal: int | None
    last_ordinal: int | None
    last_time: int | None


def timestamp_graph(ordinal: int) -> NamedNode:
    return NamedNode(f"{TIMESTAMP_GRAPH_PREFIX}{ordinal}")


def now_micros() -> int:
    return clock.time_ns() // 1_000


class Stream:
    """A stream's elements and their index. Thread-safe: many uploaders, many readers."""

    def __init__(self, directory: Path, config: StreamConfig, *, in_memory: bool = False) -> None:
        self.directory = directory
        self.config = config
        directory.mkdir(parents=True, exist_ok=True)
        self._store = Store() if in_memory else Store(str(directory / "store"))
        self._on_disk = not in_memory
        # quads extended into the on-disk store since its last flush; a random start puts streams that ingest at
        # the same rate out of phase, so that their flushes do not all come at once
        self._memtable_quads = random.randrange(MEMTABLE_FLUSH_QUADS)
        self._log_path = directory / "log.jsonl"
        self._pending_path = directory / "pending.json"
        # The index: parallel arrays by ordinal - first_ordinal (expired elements are cut off).
        self.first_ordinal = 1
        self._times: list[int] = []
        self._graphs: list[str] = []
        self._origins: set[str] = set()  # origins of committed elements a rule made (ParsedElement.origin)
        self._window_lock = threading.Lock()
        self._window_stores: OrderedDict[tuple[int, ...], Store] = OrderedDict()  # see window_store
        # the latest elements' quads (timestamp triple in the default graph), newest last: copying a live window
        # from them costs 3 ms per 2,000 quads, from the on-disk store 15 ms (quads_for_pattern per graph)
        self._recent: OrderedDict[int, list[Quad]] = OrderedDict()
        self._recent_quads = 0
        self._commits: list[int] = []
        self._graph_ordinals: dict[str, int] = {}
        self._by_time: list[tuple[int, int]] = []  # (time, ordinal), sorted; only kept if lateness > 0
        self.stream_time: int | None = None  # max timestamp or punctuation committed
        self.punctuations = 0
        self._changed = threading.Condition()
        # Accepting (validation + ordinal assignment) is serialized; committing is the committer's.
        self._accept_lock = threading.Lock()
        self._accepted_head = 0
        self._accepted_time: int | None = None
        self._accepted_graphs: set[str] = set()
        self._commit_lock = threading.Lock()
        self._work = threading.Condition()  # the committer waits on it for accepted elements
        self._incoming: list[tuple[int, ParsedElement | str]] = []  # ordinal 0: punctuation; -1: marker
        self._unflushed = 0
        self._failure: StorageFailure | None = None
        self._closed = False
        self._recover()
        from store.windows import WindowLog  # windows.py builds on this module's helpers

        self.windows = WindowLog(directory / "windows")
        self._committer = threading.Thread(target=self._commit_loop, name=f"commit-{config.name}", daemon=True)
        self._committer.start()

    # -- creation ----------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, config: StreamConfig, *, in_memory: bool = False) -> Stream:
        if not config.uuid_prefix:
            config.uuid_prefix = (random.getrandbits(64) & ~0xF000) | 0x8000  # UUID version 8
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / "config.json", config.to_json())
        return cls(directory, config, in_memory=in_memory)

    @classmethod
    def open(cls, directory: Path, *, in_memory: bool = False) -> Stream:
        config = StreamConfig.from_json(json.loads((directory / "config.json").read_text()))
        return cls(directory, config, in_memory=in_memory)

    def reconfigure(self, config: StreamConfig) -> None:
        config.uuid_prefix = self.config.uuid_prefix
        write_json(self.directory / "config.json", config.to_json())
        self.config = config

    # -- index (sparql_ext.windowing.ElementIndex) --------------------------------------------

    def head(self) -> int:
        return self.first_ordinal + len(self._times) - 1

    def __len__(self) -> int:
        return len(self._times)

    def time_of(self, ordinal: int) -> int | None:
        i = ordinal - self.first_ordinal
        return self._times[i] if 0 <= i < len(self._times) else None

    def record(self, ordinal: int) -> ElementRecord | None:
        i = ordinal - self.first_ordinal
        if not 0 <= i < len(self._times):
            return None
        return ElementRecord(ordinal, self._times[i], self._graphs[i], self._commits[i])

    def ordinal_of(self, revision_uuid: uuid.UUID) -> int | None:
        value = revision_uuid.int
        if value >> 64 != self.config.uuid_prefix:
            return None
        ordinal = value & ((1 << 62) - 1)
        return ordinal if self.time_of(ordinal) is not None else None

    def uuid_of(self, ordinal: int) -> uuid.UUID:
        return uuid.UUID(int=(self.config.uuid_prefix << 64) | (1 << 63) | ordinal)

    def ordinal_of_graph(self, graph: str) -> int | None:
        return self._graph_ordinals.get(graph)

    def last_at_or_before(self, time: int) -> int | None:
        if self._by_time:
            i = bisect.bisect_right(self._by_time, (time, 1 << 62))
            return self._by_time[i - 1][1] if i else None
        i = bisect.bisect_right(self._times, time)
        return self.first_ordinal + i - 1 if i else None

    def elements(self, first: int, last: int) -> list[Element]:
        """Retained elements with ordinals first..last."""
        lo = max(first, self.first_ordinal) - self.first_ordinal
        hi = min(last, self.head()) - self.first_ordinal
        return [Element(self.first_ordinal + i, self._times[i]) for i in range(lo, hi + 1)]

    def between(self, start: int, end: int, *, backward: bool) -> list[Element]:
        """Elements with time in [start, end), or (start, end] if backward."""
        if self._by_time:
            pairs = self._by_time
            lo = bisect.bisect_right(pairs, (start, 1 << 62)) if backward else bisect.bisect_left(pairs, (start, 0))
            hi = bisect.bisect_right(pairs, (end, 1 << 62)) if backward else bisect.bisect_left(pairs, (end, 0))
            return sorted((Element(o, t) for t, o in pairs[lo:hi]), key=lambda e: e.ordinal)
        times = self._times
        lo = bisect.bisect_right(times, start) if backward else bisect.bisect_left(times, start)
        hi = bisect.bisect_right(times, end) if backward else bisect.bisect_left(times, end)
        return [Element(self.first_ordinal + i, times[i]) for i in range(lo, hi)]

    def rate(self, period: int) -> float:
        """Elements committed per second over the last ``period`` µs."""
        since = now_micros() - period
        recent = len(self._commits) - bisect.bisect_left(self._commits, since)
        return round(recent / (period / 1_000_000), 3)

    def wait_for(self, predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
        """Block until ``predicate()`` holds after a commit, or ``timeout`` seconds pass."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    # -- reading ------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The element store. Read it only through graph lists of committed elements."""
        return self._store

    def dataset_graphs(self, ordinals: Iterable[int]) -> tuple[list[NamedNode], list[ElementName]]:
        """The window dataset of these elements as a view for ``Store.query(default_graph=, named_graphs=)``:
        its default graph is their timestamp graphs, its named graphs the elements. Queries use
        ``window_store`` instead (this view costs O(N²) in pyoxigraph); bench/rules measures both."""
        defaults: list[NamedNode] = []
        named: list[ElementName] = []
        for ordinal in ordinals:
            i = ordinal - self.first_ordinal
            if 0 <= i < len(self._graphs):
                defaults.append(timestamp_graph(ordinal))
                named.append(graph_from_text(self._graphs[i]))  # type: ignore[arg-type]
        return defaults, named

    def has_origin(self, origin: str) -> bool:
        """Whether an element made by ``origin`` (a rule firing's output) is committed: a firing repeated after a
        crash skips what its first run already committed."""
        with self._changed:
            return origin in self._origins

    def window_store(self, ordinals: Iterable[int]) -> Store:
        """The window dataset of these elements as an in-memory store: their timestamp triples in its default
        graph, the elements as its named graphs.

        A copy, not the ``dataset_graphs`` view: pyoxigraph evaluates ``default_graph=`` with N graphs in
        O(N²) (measured by bench/rules: 300 graphs 123 ms, against 6 ms to copy and 0.5 ms to query the copy).
        Elements never change, so the latest copies are kept (a rule firing reads a window from several
        parts; successive queries of one window share it); retention expiry drops them."""
        key = tuple(ordinals)
        with self._window_lock:
            cached = self._window_stores.get(key)
            if cached is not None:
                self._window_stores.move_to_end(key)
                return cached
            recent = [self._recent.get(ordinal) for ordinal in key]
        store = Store()
        if all(quads is not None for quads in recent):
            store.extend(quad for quads in recent for quad in quads)  # type: ignore[union-attr]
        else:
            store.extend(self.dataset_quads(key))
        with self._window_lock:
            self._window_stores[key] = store
            while len(self._window_stores) > WINDOW_STORES_KEPT:
                self._window_stores.popitem(last=False)
        return store

    def dataset_quads(self, ordinals: Iterable[int]) -> Iterator[Quad]:
        """The window dataset as quads: timestamp triples in the default graph, then elements."""
        ordinals = list(ordinals)
        for ordinal in ordinals:
            for quad in self._store.quads_for_pattern(None, None, None, timestamp_graph(ordinal)):
                yield Quad(quad.subject, quad.predicate, quad.object, DefaultGraph())
        for ordinal in ordinals:
            i = ordinal - self.first_ordinal
            if 0 <= i < len(self._graphs):
                yield from self._store.quads_for_pattern(None, None, None, graph_from_text(self._graphs[i]))

    # -- appending ----------------------------------------------------------------------------

    def accept(self, element: ParsedElement, received: int) -> int | None:
        """Validate ``element`` against the stream and queue it for commit.

        Returns its ordinal (None for punctuation). Raises before anything of it is queued."""
        self._raise_failure()
        graph = str(element.graph)
        with self._accept_lock:
            label = _ElementLabel(self._accepted_head + 1, graph)
            if graph.startswith("<" + RESERVED_PREFIX):
                raise ElementRejected(f"{label}: graph names under {RESERVED_PREFIX} are reserved")
            time = element.time
            last = self._accepted_time
            if time is None:
                time = received if last is None else max(received, last + 1)
            elif last is not None and time <= last - self.config.lateness:
                allowed = "after" if self.config.lateness == 0 else f"later than {self.config.lateness} µs before"
                raise ElementOutOfOrder(
                    f"{label}: timestamp {format_micros(time)} is not {allowed} the stream time "
                    f"{format_micros(last)} (the stream is a distinct time series: timestamps strictly increase"
                    + ("" if self.config.lateness == 0 else ", up to the configured lateness") + ")"
                )
            if element.is_punctuation:
                self._accepted_time = time if last is None else max(time, last)
                self._enqueue(0, ParsedElement(element.graph, [], time))
                return None
            if graph in self._accepted_graphs or graph in self._graph_ordinals:
                raise ElementOutOfOrder(f"{label}: graph name {graph} is already an element of this stream")
            element.time = time
            self._accepted_head += 1
            self._accepted_time = time if last is None else max(time, last)
            self._accepted_graphs.add(graph)
            self._enqueue(self._accepted_head, element)
            return self._accepted_head

    @property
    def accepted_time(self) -> int | None:
        """The stream time of everything accepted so far (committed or not), µs."""
        with self._accept_lock:
            return self._accepted_time

    def punctuate(self, time: int) -> None:
        """Stream time is now ``time``: windows ending at or before it can complete."""
        with self._accept_lock:
            last = self._accepted_time
            if last is not None and time <= last - self.config.lateness:
                raise ElementOutOfOrder(
                    f"punctuation {format_micros(time)} is not after the stream time {format_micros(last)}"
                )
            self._accepted_time = time if last is None else max(time, last)
            self._enqueue(0, ParsedElement(NamedNode(f"{RESERVED_PREFIX}punctuation"), [], time))

    def register(self, ref: str, spec: WindowSpec) -> Sequence:
        """Register a window sequence (once per distinct ref). Its registration goes into the log in
        order with the elements: the pipeline treats elements before it as history, after it live."""
        sequence, new = self.windows.register(ref, spec)
        if new:
            with self._accept_lock:
                self._enqueue(-1, sequence.id)
        return sequence

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything accepted so far is committed (or the commit failed)."""
        with self._changed:
            self._changed.wait_for(lambda: self._unflushed == 0 or self._failure is not None, timeout)
        self._raise_failure()

    def _enqueue(self, ordinal: int, element: ParsedElement | str) -> None:
        with self._work:
            self._incoming.append((ordinal, element))
            self._unflushed += 1
            if len(self._incoming) == 1:
                self._work.notify()

    def _commit_waiting(self) -> bool:
        """Commit everything accepted so far, in order; False if there was nothing."""
        with self._commit_lock:
            with self._work:
                batch, self._incoming = self._incoming[:_MAX_BATCH], self._incoming[_MAX_BATCH:]
            if not batch:
                return False
            try:
                if self._failure is None:
                    self._commit(batch)
            except Exception as error:  # noqa: BLE001 - a failed commit stops the stream, visibly
                self._failure = StorageFailure(f"stream {self.config.name}: commit failed: {error}")
            with self._work:
                self._unflushed -= len(batch)
            with self._changed:
                self._changed.notify_all()
            return True

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    # -- committing ---------------------------------------------------------------------------

    def _commit_loop(self) -> None:
        # Group commit: whatever was accepted while the previous batch was being written is the
        # next batch, so a trickle commits element by element and a flood in large batches.
        while True:
            with self._work:
                self._work.wait_for(lambda: self._incoming or self._closed)
                if not self._incoming and self._closed:
                    return
            self._commit_waiting()

    def _commit(self, batch: list[tuple[int, ParsedElement | str]]) -> None:
        commit_time = now_micros()
        quads: list[Quad] = []
        recent: list[tuple[int, list[Quad]]] = []
        lines: list[str] = []
        graphs: list[str] = []
        predicate = NamedNode(self.config.timestamp_predicate)
        head = self.head()
        for ordinal, element in batch:
            if isinstance(element, str):
                lines.append(json.dumps({"r": element, "h": head, "c": commit_time}))  # h: last element before it
                continue
            if ordinal == 0:
                lines.append(json.dumps({"p": element.time, "c": commit_time}))
                continue
            head = ordinal
            quads.extend(element.quads)
            # the timestamp literal as it came (its offset, its digits); written in UTC only when the stream stamped
            # the element itself (receipt time)
            stamp = element.stamp or Literal(format_micros(element.time), datatype=_XSD_DATETIME)  # type: ignore[arg-type]
            quads.append(Quad(element.graph, predicate, stamp, timestamp_graph(ordinal)))
            recent.append((ordinal, [*element.quads, Quad(element.graph, predicate, stamp, DefaultGraph())]))
            graph = str(element.graph)
            graphs.append(graph)
            record = {"o": ordinal, "t": element.time, "g": graph, "c": commit_time}
            if element.origin is not None:
                record["f"] = element.origin
            lines.append(json.dumps(record))
        if quads:
            write_json(self._pending_path, {"graphs": graphs, "from": batch[0][0]})
            if len(quads) >= _BULK_THRESHOLD:
                # Serialized first so that the bulk load runs without the GIL, in parallel with parsing.
                self._store.bulk_load(serialize(quads, format=RdfFormat.N_QUADS), RdfFormat.N_QUADS)
            else:
                self._store.extend(quads)
                self._memtable_quads += len(quads)
                if self._on_disk and self._memtable_quads >= MEMTABLE_FLUSH_QUADS:
                    self._store.flush()  # writes the memtables to table files, freeing them (MEMTABLE_FLUSH_QUADS)
                    self._memtable_quads = 0
        with self._log_path.open("a", encoding="utf-8") as log:
            log.write("\n".join(lines) + "\n")
            log.flush()
            os.fsync(log.fileno())
        self._pending_path.unlink(missing_ok=True)
        elements = [(ordinal, element) for ordinal, element in batch if isinstance(element, ParsedElement)]
        with self._window_lock:
            for ordinal, element_quads in recent:
                self._recent[ordinal] = element_quads
                self._recent_quads += len(element_quads)
            while self._recent_quads > RECENT_QUADS_KEPT and len(self._recent) > 1:
                self._recent_quads -= len(self._recent.popitem(last=False)[1])
        with self._changed:
            for ordinal, element in elements:
                self._index(ordinal, element.time, str(element.graph), commit_time)  # type: ignore[arg-type]
                if element.origin is not None:
                    self._origins.add(element.origin)
            self._changed.notify_all()
        with self._accept_lock:
            for ordinal, element in elements:
                if ordinal:
                    self._accepted_graphs.discard(str(element.graph))

    def _index(self, ordinal: int, time: int, graph: str, commit: int) -> None:
        if ordinal == 0:
            self.punctuations += 1
        else:
            if not self._times:
                self.first_ordinal = ordinal
            self._times.append(time)
            self._graphs.append(graph)
            self._commits.append(commit)
            self._graph_ordinals[graph] = ordinal
            if self.config.lateness:
                bisect.insort(self._by_time, (time, ordinal))
        self.stream_time = time if self.stream_time is None else max(self.stream_time, time)

    def _recover(self) -> None:
        """Rebuild the index from the log; undo a batch whose log lines never became durable."""
        if self._log_path.exists():
            with self._log_path.open("rb") as log:
                data = log.read()
            end = data.rfind(b"\n") + 1
            if end < len(data):  # a torn last line: the process died while appending it
                with self._log_path.open("r+b") as log:
                    log.truncate(end)
            expired = self.directory / "expired.json"  # the retention cut (expire_before)
            before = json.loads(expired.read_text())["before"] if expired.exists() else 1
            self.first_ordinal = before
            for line in data[:end].splitlines():
                entry = json.loads(line)
                if "o" in entry and entry["o"] < before:  # expired: its graphs are gone from the store
                    self.stream_time = entry["t"] if self.stream_time is None else max(self.stream_time, entry["t"])
                elif "o" in entry:
                    self._index(entry["o"], entry["t"], entry["g"], entry["c"])
                    if "f" in entry:
                        self._origins.add(entry["f"])
                elif "p" in entry:
                    self._index(0, entry["p"], "", entry["c"])
        if self._pending_path.exists():
            pending = json.loads(self._pending_path.read_text())
            first = pending["from"]
            for graph in pending["graphs"]:
                if graph not in self._graph_ordinals:
                    self._store.remove_graph(graph_from_text(graph))  # type: ignore[arg-type]
            for ordinal in range(first, first + len(pending["graphs"]) + 1):
                if ordinal > self.head():
                    self._store.remove_graph(timestamp_graph(ordinal))
            self._pending_path.unlink()
        self._accepted_head = self.head()
        self._accepted_time = self.stream_time

    # -- expiry -------------------------------------------------------------------------------

    def expire_before(self, ordinal: int) -> int:
        """Drop elements with ordinals below ``ordinal`` (retention); returns how many.

        The cut is made durable first (``expired.json``, honoured by ``_recover``), then the graphs go."""
        with self._changed:
            count = max(0, min(ordinal, self.head() + 1) - self.first_ordinal)
            if count == 0:
                return 0
            write_json(self.directory / "expired.json", {"before": self.first_ordinal + count})
            dropped = self._graphs[:count]
            first = self.first_ordinal
            del self._times[:count], self._graphs[:count], self._commits[:count]
            for graph in dropped:
                self._graph_ordinals.pop(graph, None)
            if self._by_time:
                self._by_time = [pair for pair in self._by_time if pair[1] >= first + count]
            self.first_ordinal = first + count
        with self._window_lock:
            self._window_stores.clear()
            while self._recent and next(iter(self._recent)) < first + count:
                self._recent_quads -= len(self._recent.popitem(last=False)[1])
        for offset, graph in enumerate(dropped):
            self._store.remove_graph(graph_from_text(graph))  # type: ignore[arg-type]
            self._store.remove_graph(timestamp_graph(first + offset))
        return count

    def close(self) -> None:
        """Commit what was accepted, stop the committer, and release the store (RocksDB's lock)."""
        if self._closed:
            return
        with self._work:
            self._closed = True
            self._work.notify()
        self._committer.join(timeout=60)
        self._store = None  # type: ignore[assignment] - the last reference: pyoxigraph closes the store

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class _ElementLabel:
    """"element N (graph G)" for refusals, formatted only when one is raised (accept is per element)."""

    ordinal: int
    graph: str

    def __str__(self) -> str:
        return f"element {self.ordinal} (graph {self.graph})"


def format_micros(value: int) -> str:
    """µs since the epoch as an xsd:dateTime in UTC, in XSD's canonical form (no trailing zeros in the
    fraction, as pyoxigraph writes dateTimes back), so lexical forms compare equal.

    >>> format_micros(1_466_416_815_526_860), format_micros(1_466_416_800_000_000)
    ('2016-06-20T10:00:15.52686Z', '2016-06-20T10:00:00Z')
    """
    seconds, micros_part = divmod(value, 1_000_000)
    text = clock.strftime("%Y-%m-%dT%H:%M:%S", clock.gmtime(seconds))
    return f"{text}.{micros_part:06d}".rstrip("0") + "Z" if micros_part else f"{text}Z"


def write_json(path: Path, data: object) -> None:
    """Replace ``path`` atomically and durably."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
    fsync_file(temporary)
    os.replace(temporary, path)
