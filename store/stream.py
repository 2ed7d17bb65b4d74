"""One stream: its element log (the elements and their content), its index, and group commit (docs/streams.md,
"How it is stored").

Layout under ``<data>/streams/<name>/``::

    config.json      the stream's configuration (timestamp predicate, lateness, retention, aliases)
    log/             the element log (``store.element_log``): segments of records and element contents (each
                     element's timestamp triple and graph block, canonical TriG); the source of truth, read by
                     the index at start-up, by window datasets, and by the Spark pipeline
    expired.json     the retention cut: elements below it are gone
    windows/         registered window sequences, window revisions, the pipeline's state (``store.windows``)

Each element is one transaction (one revision, ordinal = element number). Elements are committed in groups: a
committer thread takes every element accepted meanwhile and appends their records and contents to the log in one
write and fsync (``ElementLog.append``); an element is visible once its record is durable, and never before. A
window's dataset is loaded from its elements' contents (one pyoxigraph load of their canonical TriG).
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyoxigraph import NamedNode, Quad, RdfFormat, Store, parse, serialize

from sparql_ext.windowing import WindowSpec, format_micros
from store.durable import now_micros, write_json
from store.element_log import LOG_DIRECTORY, ElementLog, Location, runs
from store.elements import ParsedElement
from store.errors import DuplicateElement, ElementOutOfOrder, ElementRejected, StorageFailure
from store.framing import oversize, statements_in_block
from store.log_contents import ContentRun
from store.log_records import ElementRecord, LogRecord, PunctuationRecord, RegistrationRecord
from store.stream_config import StreamConfig
from store.stream_index import StreamIndex

if TYPE_CHECKING:
    from store.windows import Sequence

RESERVED_PREFIX = "urn:x-concentrator:"
_RESERVED_GRAPH = f"<{RESERVED_PREFIX}"  # as an element's graph name reads in N-Triples form
_XSD_DATETIME = "http://www.w3.org/2001/XMLSchema#dateTime"
_MAX_BATCH = 5_000  # elements per commit: bounds the latency of a batch during a flood
WINDOW_STORES_KEPT = 8  # in-memory window datasets per stream (window_store)
_REFUSALS = threading.Lock()  # IngestStats.refused


@dataclass
class IngestStats:
    """Where a stream's ingestion time goes: framing (the upload threads: ``store.framing``), committing (the
    committer thread: records, index), of which fsync (waiting for the disk). Seconds since start-up; with what
    was ingested since start-up (elements, statements: each element's graph statements and its timestamp triple)
    and the uploads refused, by HTTP status (``/metrics`` reports these as counters)."""

    framing_seconds: float = 0.0
    commit_seconds: float = 0.0
    fsync_seconds: float = 0.0
    commits: int = 0
    elements: int = 0
    statements: int = 0
    bytes_written: int = 0
    upload_errors: dict[str, int] = field(default_factory=dict)  # "400" -> uploads refused with that status

    def refused(self, status: int) -> None:
        """Count an upload refused with ``status`` (the uploader says so: the store does not know HTTP)."""
        with _REFUSALS:  # request threads refuse concurrently; the other counters are the committer's alone
            self.upload_errors[str(status)] = self.upload_errors.get(str(status), 0) + 1

    def to_json(self) -> dict[str, object]:
        return {key: round(value, 4) if isinstance(value, float) else value for key, value in asdict(self).items()}


class Stream(StreamIndex):
    """A stream's elements and their index. Thread-safe: many uploaders, many readers."""

    def __init__(self, directory: Path, config: StreamConfig, *, in_memory: bool = False) -> None:
        """``in_memory`` is accepted for the catalog's sake and changes nothing: the log is the stream."""
        self.directory = directory
        self.config = config
        directory.mkdir(parents=True, exist_ok=True)
        self._log = ElementLog(directory / LOG_DIRECTORY)
        super().__init__(config.uuid_prefix, time_ordered=config.lateness > 0)
        self._window_lock = threading.Lock()
        self._window_stores: OrderedDict[tuple[int, ...], Store] = OrderedDict()  # see window_store
        self.ingest = IngestStats()  # where ingestion's time goes (GET /status: streams.NAME.ingest)
        # called by the committer after each group is visible; listeners must not block (event rules wake a worker)
        self.on_commit: list[Callable[[], None]] = []
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
        # the latest timestamp retention expired (µs), None if nothing expired: what the stream can no longer show
        self.expired_time: int | None = None
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

    def ingest_status(self) -> dict[str, object]:
        """``IngestStats`` with the log's own counters (fsync time, bytes written)."""
        self.ingest.fsync_seconds = self._log.fsync_seconds
        self.ingest.bytes_written = self._log.bytes_written
        return self.ingest.to_json()

    def contents(self, ordinals: Iterable[int]) -> bytes:
        """The canonical TriG of these retained elements: each one's timestamp triple, then its graph block. As a
        document it is their window dataset, every literal and blank node label as it was uploaded."""
        return self._log.read(self._locations(ordinals))

    def content_runs(self, ordinals: Iterable[int]) -> list[ContentRun]:
        """Where ``contents(ordinals)`` is on disk: (``.dat`` file, offset, length) runs, in order. Another process on
        this machine (or one that mounts the data directory at the same path) reads the window from them
        (``store.log_contents.read_runs``)."""
        return [ContentRun(str(self._log.content_file(run.segment)), run.offset, run.length)
                for run in runs(self._locations(ordinals))]

    def _locations(self, ordinals: Iterable[int]) -> list[Location]:
        """Where the contents of the retained elements among ``ordinals`` are in the log."""
        return [location for o in ordinals if (location := self.location(o)) is not None]

    def window_store(self, ordinals: Iterable[int]) -> Store:
        """The window dataset of these elements as an in-memory store: their timestamp triples in its default
        graph, the elements as its named graphs; loaded from their contents in the log (one pyoxigraph load).
        Elements never change, so the latest datasets are kept (a rule firing reads a window from several
        parts; successive queries of one window share it); retention expiry drops them."""
        key = tuple(ordinals)
        with self._window_lock:
            cached = self._window_stores.get(key)
            if cached is not None:
                self._window_stores.move_to_end(key)
                return cached
        store = Store()
        store.load(self.contents(key), RdfFormat.TRIG, lenient=True)  # the log's content is pyoxigraph's own output
        with self._window_lock:
            self._window_stores[key] = store
            while len(self._window_stores) > WINDOW_STORES_KEPT:
                self._window_stores.popitem(last=False)
        return store

    def dataset_quads(self, ordinals: Iterable[int]) -> Iterator[Quad]:
        """The window dataset as quads, blank node labels kept: timestamp triples in the default graph, elements as
        named graphs."""
        return iter(parse(self.contents(ordinals), RdfFormat.TRIG, rename_blank_nodes=False))

    # -- appending ----------------------------------------------------------------------------

    def accept(self, element: ParsedElement, received: int) -> int | None:
        """Validate ``element`` against the stream and queue it for commit.

        Returns its ordinal (None for punctuation). Raises before anything of it is queued."""
        accepted: list[int | None] = []
        self.accept_many((element,), received, accepted)
        return accepted[0]

    def accept_many(self, elements: Iterable[ParsedElement], received: int, accepted: list[int | None]) -> None:
        """``accept`` each of ``elements`` in turn, appending its ordinal (None for punctuation) to ``accepted``. The
        elements before one that is refused are queued and in ``accepted``, then the refusal is raised; nothing of
        the refused element is queued. (One lock and one wake-up of the committer for the lot: an upload accepts
        the elements of each framed segment together.)"""
        self._raise_failure()
        elements, too_large = list(elements), None
        for index, element in enumerate(elements):  # sizes checked outside the lock (a block may be written here)
            if (too_large := oversize(element)) is not None:
                elements = elements[:index + 1]
                break
        queued: list[tuple[int, ParsedElement | str]] = []
        with self._accept_lock:  # queued under the lock too: two uploads' elements reach the committer in order
            try:
                for element in elements[:-1] if too_large is not None else elements:
                    queued.append(self._admit(element, received))
                    accepted.append(queued[-1][0] or None)
                if too_large is not None:
                    raise type(too_large)(f"{self._label(str(elements[-1].graph))}: {too_large.message}")
            finally:
                if queued:
                    self._enqueue_many(queued)

    def _admit(self, element: ParsedElement, received: int) -> tuple[int, ParsedElement]:
        """Validate one element and give it its ordinal (0: a punctuation), under the accept lock."""
        graph = str(element.graph)
        if graph.startswith(_RESERVED_GRAPH):
            raise ElementRejected(f"{self._label(graph)}: graph names under {RESERVED_PREFIX} are reserved")
        punctuation = element.is_punctuation
        # a graph name seen before is checked first: a redelivered element is a duplicate, whatever its time
        if not punctuation and (graph in self._accepted_graphs or graph in self._graph_ordinals):
            raise DuplicateElement(f"{self._label(graph)}: graph name {graph} is already an element of this stream")
        time = element.time
        last = self._accepted_time
        if time is None:
            time = received if last is None else max(received, last + 1)
        elif last is not None and time <= last - self.config.lateness:
            allowed = "after" if self.config.lateness == 0 else f"later than {self.config.lateness} µs before"
            raise ElementOutOfOrder(
                f"{self._label(graph)}: timestamp {format_micros(time)} is not {allowed} the stream time "
                f"{format_micros(last)} (the stream is a distinct time series: timestamps strictly increase"
                + ("" if self.config.lateness == 0 else ", up to the configured lateness") + ")"
            )
        self._accepted_time = time if last is None or time > last else last
        if punctuation:
            return 0, ParsedElement(element.graph, [], time)
        element.time = time
        self._accepted_head += 1
        self._accepted_graphs.add(graph)
        return self._accepted_head, element

    def _label(self, graph: str) -> str:
        """"element N (graph G)": the element being admitted, for its refusal."""
        return f"element {self._accepted_head + 1} (graph {graph})"

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
        return self.register_many([(ref, spec)])[0]

    def register_many(self, refs: list[tuple[str, WindowSpec]]) -> list[Sequence]:
        """``register`` each ``(ref, spec)``, with one write of the sequences file."""
        registered = self.windows.register_many(refs)
        with self._accept_lock:
            for sequence, new in registered:
                if new:
                    self._enqueue(-1, sequence.id)
        return [sequence for sequence, _ in registered]

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything accepted so far is committed (or the commit failed)."""
        with self._changed:
            self._changed.wait_for(lambda: self._unflushed == 0 or self._failure is not None, timeout)
        self._raise_failure()

    def _enqueue(self, ordinal: int, element: ParsedElement | str) -> None:
        self._enqueue_many([(ordinal, element)])

    def _enqueue_many(self, entries: list[tuple[int, ParsedElement | str]]) -> None:
        with self._work:
            waiting = bool(self._incoming)
            self._incoming.extend(entries)
            self._unflushed += len(entries)
            if not waiting:
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
        """Append a group's records and contents to the log durably, then make them visible in the index."""
        started = time.perf_counter()
        commit_time = now_micros()
        entries: list[tuple[LogRecord, bytes | None]] = []
        head = self.head()
        elements: list[tuple[int, ParsedElement, str]] = []  # (ordinal, element, graph), punctuations: ordinal 0
        for ordinal, element in batch:
            if isinstance(element, str):  # h: the last element before the registration
                entries.append((RegistrationRecord(element, head, commit_time), None))
                continue
            assert element.time is not None
            if ordinal == 0:
                entries.append((PunctuationRecord(element.time, commit_time), None))
                elements.append((0, element, ""))
                continue
            head = ordinal
            graph = str(element.graph)
            entries.append((ElementRecord(ordinal, element.time, graph, commit_time, element.origin),
                            self._content(element, graph)))
            elements.append((ordinal, element, graph))
        locations = iter([location for location in self._log.append(entries) if location is not None])
        with self._changed:
            for ordinal, element, graph in elements:
                self._index(ordinal, element.time, graph, commit_time, element.origin,  # type: ignore[arg-type]
                            next(locations) if ordinal else None)
            self._changed.notify_all()
        for listener in list(self.on_commit):
            listener()
        committed = [(element, graph) for ordinal, element, graph in elements if ordinal]  # punctuations: no elements
        with self._accept_lock:
            self._accepted_graphs.difference_update(graph for _, graph in committed)
        self.ingest.commits += 1
        self.ingest.elements += len(committed)
        blocks = [element.block for element, _ in committed if element.block is not None]
        self.ingest.statements += len(committed) + statements_in_block(b"".join(blocks)) + sum(
            len(element.quads) for element, _ in committed if element.block is None)
        self.ingest.commit_seconds += time.perf_counter() - started

    def _content(self, element: ParsedElement, graph: str) -> bytes:
        """An element's content in the log: its timestamp triple as it came (written from its time when the stream
        stamped it), then its graph block (as framed, or written from the quads a rule made). ``graph``: its graph
        name in N-Triples form."""
        stamp = element.stamp_line
        if stamp is None:
            literal = str(element.stamp) if element.stamp is not None else \
                f'"{format_micros(element.time)}"^^<{_XSD_DATETIME}>'  # type: ignore[arg-type]
            stamp = f"{graph} <{self.config.timestamp_predicate}> {literal} .\n".encode()
        block = element.block
        if block is None:
            block = serialize(element.quads, format=RdfFormat.TRIG) or b""
        return stamp + block

    def _recover(self) -> None:
        """Rebuild the index from the log (its torn tail cut); elements below the retention cut stay out."""
        expired = self.directory / "expired.json"
        cut = json.loads(expired.read_text()) if expired.exists() else {"before": 1}
        before = cut["before"]
        self.first_ordinal = before
        self.expired_time = cut.get("expired_time")  # absent from cuts made before it was kept
        if cut.get("stream_time") is not None:
            self.stream_time = cut["stream_time"]
        for _, record, location in self._log.recover():
            if isinstance(record, ElementRecord) and record.ordinal < before:
                self.stream_time = record.time if self.stream_time is None else max(self.stream_time, record.time)
            elif isinstance(record, ElementRecord) and location is not None:
                self._index(record.ordinal, record.time, record.graph, record.commit, record.origin, location)
            elif isinstance(record, PunctuationRecord):
                self._index(0, record.time, "", record.commit)
        self._accepted_head = self.head()
        self._accepted_time = self.stream_time

    # -- expiry -------------------------------------------------------------------------------

    def expire_before(self, ordinal: int) -> int:
        """Drop elements with ordinals below ``ordinal`` (retention); returns how many. The cut is made durable
        first (``expired.json``, honoured at start-up), then the index forgets them and the log deletes the
        segments that hold nothing newer."""
        with self._changed:
            count = max(0, min(ordinal, self.head() + 1) - self.first_ordinal)
            if count == 0:
                return 0
            cut = self.first_ordinal + count
            latest = max(self._times[:count])  # with a lateness, not the last one's
            self.expired_time = latest if self.expired_time is None else max(self.expired_time, latest)
            write_json(self.directory / "expired.json", {"before": cut, "stream_time": self.stream_time,
                                                         "expired_time": self.expired_time})
            self._cut(cut)
        with self._window_lock:
            self._window_stores.clear()
        self._log.drop_before(cut)
        return count

    def close(self) -> None:
        """Commit what was accepted, stop the committer, and close the log."""
        if self._closed:
            return
        with self._work:
            self._closed = True
            self._work.notify()
        self._committer.join(timeout=60)
        self._log.close()

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
