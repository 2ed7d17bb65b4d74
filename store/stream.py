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

import json
import os
import random
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Store, serialize

from sparql_ext.windowing import WindowSpec, format_micros
from store.durable import now_micros, write_json
from store.elements import ElementName, ParsedElement
from store.errors import ElementOutOfOrder, ElementRejected, StorageFailure
from store.log_records import ElementRecord, PunctuationRecord, RegistrationRecord, decode, encode
from store.stream_config import StreamConfig
from store.stream_index import StreamIndex
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


def timestamp_graph(ordinal: int) -> NamedNode:
    return NamedNode(f"{TIMESTAMP_GRAPH_PREFIX}{ordinal}")


class Stream(StreamIndex):
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
        super().__init__(config.uuid_prefix, time_ordered=config.lateness > 0)
        self._window_lock = threading.Lock()
        self._window_stores: OrderedDict[tuple[int, ...], Store] = OrderedDict()  # see window_store
        # the latest elements' quads (timestamp triple in the default graph), newest last: copying a live window
        # from them costs 3 ms per 2,000 quads, from the on-disk store 15 ms (quads_for_pattern per graph)
        self._recent: OrderedDict[int, list[Quad]] = OrderedDict()
        self._recent_quads = 0
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
        if config.lateness:
            self._keep_time_order()

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
                lines.append(encode(RegistrationRecord(element, head, commit_time)))
                continue
            if ordinal == 0:
                lines.append(encode(PunctuationRecord(element.time, commit_time)))  # type: ignore[arg-type]
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
            lines.append(encode(ElementRecord(ordinal, element.time, graph, commit_time, element.origin)))  # type: ignore
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
                self._index(ordinal, element.time, str(element.graph), commit_time, element.origin)  # type: ignore
            self._changed.notify_all()
        with self._accept_lock:
            for ordinal, element in elements:
                if ordinal:
                    self._accepted_graphs.discard(str(element.graph))

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
                entry = decode(line)
                if isinstance(entry, ElementRecord) and entry.ordinal < before:  # expired: its graphs are gone
                    self.stream_time = entry.time if self.stream_time is None else max(self.stream_time, entry.time)
                elif isinstance(entry, ElementRecord):
                    self._index(entry.ordinal, entry.time, entry.graph, entry.commit, entry.origin)
                elif isinstance(entry, PunctuationRecord):
                    self._index(0, entry.time, "", entry.commit)
        if self._pending_path.exists():
            pending = json.loads(self._pending_path.read_text())
            first = pending["from"]
            for graph in pending["graphs"]:
                if graph not in self._graph_ordinals:
                    self._store.remove_graph(graph_from_text(graph))
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
            first = self.first_ordinal
            dropped = self._cut(first + count)
        with self._window_lock:
            self._window_stores.clear()
            while self._recent and next(iter(self._recent)) < first + count:
                self._recent_quads -= len(self._recent.popitem(last=False)[1])
        for offset, graph in enumerate(dropped):
            self._store.remove_graph(graph_from_text(graph))
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
        self._store = None  # type: ignore[assignment]  # the last reference: pyoxigraph closes the store

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
