"""``element_log``: a PySpark streaming data source over the server's per-stream element logs.

The store appends one record per line to each stream's element log and fsyncs it; a line counts only once its
``\\n`` is on disk. Spark's offset for this source is ``{stream: log position just past the last complete line}`` (a
position is a segment's base plus an offset in it: positions only grow), so a micro-batch is a set of position
ranges, which makes replay after a restart exact: Spark checkpoints the offsets of a batch before running it and
re-runs the same ranges if it did not commit. Why a file and not a socket: the reader runs in separate Python
processes (the process that plans the query's batches, which also reads them; an executor's worker when Spark replays
a batch), so it cannot share memory with the server anyway, and the log is already the durable source of truth.

Reading the logs' records as Arrow batches (which streams, where complete lines end, the rows of a range) is the
store's (``store.log_reading``); ``SCHEMA`` is Spark's view of its ``RECORD_SCHEMA``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from store.log_reading import RECORD_SCHEMA, list_logs, log_directory, log_end, range_completes, read_records

log = logging.getLogger(__name__)

__all__ = ["SCHEMA", "SOURCE_NAME", "ElementLogReader", "ElementLogSource", "DueHints", "LogSlice", "element_stream",
           "register", "start_element_pipeline", "stop_element_pipeline", "write_due_hints"]

SOURCE_NAME = "element_log"
#: The source's rows: the store's records (``store.log_reading.RECORD_SCHEMA``), which Spark checks returned record
#: batches against, field for field (types, time zone, nullability).
SCHEMA: StructType = from_arrow_schema(RECORD_SCHEMA)

Offsets = dict[str, int]
#: Per stream, what its next window waits for: ``[time µs or null, ordinal or null]``, or null for "cannot tell"
#: (``sparql_ext.window_state.next_due``, written by the batch handler after each batch; see ``DUE_FILE``).
DueHints = dict[str, list[int | None] | None]


# ----------------------------------------------------------------------------------------------- the source


@dataclass(frozen=True)
class LogSlice:
    """One stream's new bytes in a micro-batch."""

    stream: str
    path: str
    start: int
    end: int


class ElementLogReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are byte positions of complete lines.

    A *simple* stream reader (Spark's name): the records of a batch are read where its end offset is decided, in the
    Python process that plans the query's batches, and handed to Spark with the plan (Arrow batches, kept in the
    block manager). The other kind of reader decides offsets there and reads in a Python worker per task: measured
    here, that round trip cost ≈ 60–90 ms of every batch whatever it held, against ≈ 20 ms to take prefetched rows
    (``bench/README.md``, "a batch when a window completes"). The rows are the records' metadata (≈ 100 bytes each;
    element content stays in the log). A batch that Spark runs again after a restart is read by
    ``readBetweenOffsets``, from the same byte ranges.

    A stream missing from the start offset starts at 0 (it appeared after the query started). A stream
    whose directory is gone is dropped from the next offset. A log shorter than its checkpointed offset
    was deleted and re-created under the same name and is read again from 0 — reliable only if the new
    log is still shorter than the old offset when the source next looks; the store should not reuse a
    stream's directory name.
    """

    def __init__(self, root: Path, starting: str = "earliest", pause_file: Path | None = None,
                 min_batch_interval: float = 0.0, flood_batch_interval: float = 0.0, due_file: Path | None = None,
                 idle_batch_interval: float = 0.0) -> None:
        self.root = root
        self.starting = starting
        self.pause_file = pause_file
        self.min_batch_interval = min_batch_interval
        self.flood_batch_interval = flood_batch_interval
        self.due_file = due_file
        self.idle_batch_interval = idle_batch_interval
        self._cap: Offsets | None = None
        self._last_advance = float("-inf")  # monotonic time of the last offset that had new data
        self._hints: tuple[int, DueHints] | None = None  # (the due file's mtime, its hints)
        self._scanned: dict[str, tuple[int, int, bool]] = {}  # stream -> (range start, scanned up to, completes)

    def _paused(self) -> bool:
        """True while the pause marker exists; acknowledged once by an ``.ack`` file next to it."""
        if self.pause_file is None or not self.pause_file.exists():
            return False
        ack = self.pause_file.with_name(self.pause_file.name + ".ack")
        if not ack.exists():
            ack.touch()
        return True

    def _current(self, start: Offsets) -> Offsets:
        return {name: log_end(directory, start.get(name, 0)) for name, directory in list_logs(self.root).items()}

    def initialOffset(self) -> Offsets:  # noqa: N802 (Spark's name)
        """All zeros (replay every log), or the current ends with ``startingOffsets=latest``."""
        if self.starting == "latest":
            return self._current({})
        return {name: 0 for name in list_logs(self.root)}

    def read(self, start: Offsets) -> tuple[Iterator[pa.RecordBatch], Offsets]:
        """The next batch: its records and end offset (``start`` and no record while no batch is due). A list's
        iterator: Spark's cache of prefetched batches copies it."""
        end = self.next_end(start)
        if end == start:
            return iter(()), start
        return iter(self.records(start, end)), end

    def readBetweenOffsets(self, start: Offsets, end: Offsets) -> Iterator[pa.RecordBatch]:  # noqa: N802
        """A batch again (Spark replays the one it had not committed before a stop or a crash)."""
        return iter(self.records(start, end))

    def records(self, start: Offsets, end: Offsets) -> list[pa.RecordBatch]:
        return [batch for part in self.slices(start, end) for batch in self.read_slice(part)]

    def next_end(self, start: Offsets) -> Offsets:
        """Current complete-line ends, when a batch is due (else ``start``).

        New data is reported when ``batch_due`` says so: records that complete a window start a batch at once
        (``_completes``), other records of a steady flow get a batch every ``min_batch_interval`` seconds (every
        ``idle_batch_interval`` when the due file says they complete nothing), a flood one every
        ``flood_batch_interval``.
        """
        if self._paused():
            return start
        elapsed = time.monotonic() - self._last_advance
        ends = self._current(start)
        if self._cap is not None:  # Trigger.AvailableNow: nothing past what existed when it began
            ends = {k: min(v, self._cap[k]) if k in self._cap else start.get(k, 0) for k, v in ends.items()}
        changed = {name: (start.get(name, 0), offset) for name, offset in ends.items()
                   if offset != start.get(name, 0)}
        if changed:
            new_bytes = sum(max(0, end - begin) for begin, end in changed.values())
            if self._cap is None and not batch_due(
                    elapsed, new_bytes, self.min_batch_interval, self.flood_batch_interval,
                    completes=lambda: self._completes(changed), idle_interval=self.idle_batch_interval):
                return start
            self._last_advance = time.monotonic()
            self._scanned.clear()
        return dict(sorted(ends.items()))  # Spark compares offsets as JSON text: keep key order stable

    def _completes(self, changed: dict[str, tuple[int, int]]) -> bool | None:
        """Whether the new records complete a window of some stream (True), complete none (False), or cannot tell
        (None: no due file yet, or a stream it does not cover). Each stream's new bytes are read once per range
        (``_scanned``), not again at every poll."""
        hints = self._due_hints()
        if hints is None:
            return None
        unknown = False
        for name, (begin, end) in changed.items():
            hint = hints.get(name)
            if hint is None or end < begin:  # no hint, or a re-created log
                unknown = True
                continue
            first, scanned, completes = self._scanned.get(name, (begin, begin, False))
            if first != begin:
                scanned, completes = begin, False
            if not completes and end > scanned:
                completes = range_completes(log_directory(self.root, name), scanned, end, hint[0], hint[1])
            self._scanned[name] = (begin, end, completes)
            if completes:
                return True
        return None if unknown else False

    def _due_hints(self) -> DueHints | None:
        """The due file's hints (read again when it changed); None without one."""
        if self.due_file is None:
            return None
        try:
            changed = self.due_file.stat().st_mtime_ns
            if self._hints is None or self._hints[0] != changed:
                self._hints = (changed, json.loads(self.due_file.read_bytes()))
                self._scanned.clear()
        except (OSError, ValueError):
            self._hints = None
            return None
        return self._hints[1]

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._cap = self._current({})

    def slices(self, start: Offsets, end: Offsets) -> list[LogSlice]:
        slices = []
        for name, stop in end.items():
            begin = start.get(name, 0)
            if stop < begin:  # re-created log (see class doc)
                begin = 0
            if stop > begin:
                slices.append(LogSlice(name, str(log_directory(self.root, name)), begin, stop))
        return slices

    def read_slice(self, part: LogSlice) -> Iterator[pa.RecordBatch]:
        return read_records(part.stream, Path(part.path), part.start, part.end)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the logs belong to the store, which owns their retention."""


#: Log records arriving faster than this (bytes per second; a record is ≈ 100 bytes) are a flood.
FLOOD_BYTES_PER_SECOND = 1 << 20


def batch_due(elapsed: float, new_bytes: int, min_interval: float, flood_interval: float,
              flood_rate: float = FLOOD_BYTES_PER_SECOND, *, completes: Callable[[], bool | None] = lambda: None,
              idle_interval: float = 0.0) -> bool:
    """Whether a micro-batch starts now, ``elapsed`` seconds after the previous batch with data began, with
    ``new_bytes`` of log records arrived since.

    - While records arrive faster than ``flood_rate`` (≈ 10,000 elements/s): not before ``flood_interval``. Every
      Spark batch costs the same planning and checkpoint work, and under a flood back-to-back batches took ≈ 40 %
      of the machine's two cores away from ingestion (``bench.ingest``): fewer, larger batches then, at the cost
      of up to ``flood_interval`` of window latency.
    - Otherwise, when the new records complete a window (``completes()``, asked only then): at once. A batch is the
      window's latency: waiting for a clock added ≈ half an interval to every window (``bench.ingest``'s steady run).
    - When they complete none (``completes()`` is False): not before ``idle_interval`` (the batch only moves the
      pipeline's read position); when that cannot be told (None): not before ``min_interval``.

    >>> batch_due(0.3, 30_000, 0.25, 1.0)     # 100 KB/s: a steady stream
    True
    >>> batch_due(0.3, 3_000_000, 0.25, 1.0)  # 10 MB/s: a flood, wait
    False
    >>> batch_due(1.0, 3_000_000, 0.25, 1.0)
    True
    >>> batch_due(0.05, 5_000, 0.25, 1.0, completes=lambda: True)  # the element that ends a window
    True
    >>> batch_due(0.5, 50_000, 0.25, 1.0, completes=lambda: False, idle_interval=2.0)
    False
    """
    if new_bytes >= flood_rate * max(elapsed, min_interval):
        return elapsed >= max(min_interval, flood_interval)
    if elapsed >= max(min_interval, idle_interval):
        return True
    known = completes()
    if known is None:
        return elapsed >= min_interval
    return known


class ElementLogSource(DataSource):
    """``spark.readStream.format("element_log").option("path", root)``.

    Options: ``startingOffsets`` (``earliest``, the default, or ``latest``; only for a new checkpoint),
    ``pauseFile`` (while that file exists the source reports no new data; see :func:`stop_element_pipeline`),
    ``dueFile`` (JSON ``DueHints``: what each stream's next window waits for), ``minBatchInterval``,
    ``floodBatchInterval`` and ``idleBatchInterval`` (seconds; see :meth:`ElementLogReader.next_end`).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def simpleStreamReader(self, schema: StructType) -> ElementLogReader:  # noqa: N802
        if "path" not in self.options:
            raise ValueError("element_log needs option 'path' (the stream log root directory)")
        starting = self.options.get("startingOffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"element_log: startingOffsets must be earliest or latest, not {starting!r}")
        pause, due = self.options.get("pauseFile"), self.options.get("dueFile")
        interval = float(self.options.get("minBatchInterval", "0"))
        flood = float(self.options.get("floodBatchInterval", "0"))
        idle = float(self.options.get("idleBatchInterval", "0"))
        return ElementLogReader(Path(self.options["path"]), starting, Path(pause) if pause else None, interval, flood,
                                Path(due) if due else None, idle)


def register(spark: SparkSession) -> None:
    """Register the source with a session (registration is per session, and idempotent)."""
    spark.dataSource.register(ElementLogSource)


def element_stream(
    spark: SparkSession, root: Path, starting: str = "earliest", pause_file: Path | None = None,
    min_batch_interval: float = 0.0, flood_batch_interval: float = 0.0, due_file: Path | None = None,
    idle_batch_interval: float = 0.0,
) -> DataFrame:
    """The streaming DataFrame of all records of all streams under ``root``."""
    register(spark)
    reader = spark.readStream.format(SOURCE_NAME).option("path", str(root)).option("startingOffsets", starting)
    for name, path in (("pauseFile", pause_file), ("dueFile", due_file)):
        if path is not None:
            reader = reader.option(name, str(path))
    for name, seconds in (("minBatchInterval", min_batch_interval), ("floodBatchInterval", flood_batch_interval),
                          ("idleBatchInterval", idle_batch_interval)):
        if seconds > 0:
            reader = reader.option(name, str(seconds))
    return reader.load()


# --------------------------------------------------------------------------------------------- the pipeline

PAUSE_FILE = "_pause"
#: In the checkpoint directory: the batch handler's ``DueHints`` (``write_due_hints``), read by the source.
DUE_FILE = "_due.json"


def _pause_paths(checkpoint: Path) -> tuple[Path, Path]:
    return checkpoint / PAUSE_FILE, checkpoint / (PAUSE_FILE + ".ack")


def start_element_pipeline(
    spark: SparkSession,
    root: Path,
    checkpoint: Path,
    on_batch: Callable[[DataFrame, int], None],
    trigger_seconds: float = 0,
    *,
    starting: str = "earliest",
    query_name: str | None = None,
    min_batch_interval: float = 0.0,
    flood_batch_interval: float = 0.0,
    idle_batch_interval: float = 0.0,
) -> StreamingQuery:
    """Run ``on_batch(batch_df, batch_id)`` for every micro-batch of new records, via ``foreachBatch``.

    Spark writes a batch's offsets to ``checkpoint`` before running it and marks it done after
    ``on_batch`` returns; a batch not marked done (``on_batch`` raised, crash, hard stop) is re-run with the
    same ``batch_id`` and the same rows on restart. Stop with :func:`stop_element_pipeline`, which never
    cuts a batch; even so, keep ``on_batch`` idempotent per ``batch_id`` to survive crashes.

    ``on_batch`` may write ``write_due_hints`` (what each stream's next window waits for): records that complete
    nothing then wait up to ``idle_batch_interval``. The hints of an earlier run are removed here: until the first
    batch writes new ones, every stream counts as "cannot tell".
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    for marker in (*_pause_paths(checkpoint), checkpoint / DUE_FILE):
        marker.unlink(missing_ok=True)
    stream = element_stream(spark, root, starting, pause_file=_pause_paths(checkpoint)[0],
                            min_batch_interval=min_batch_interval, flood_batch_interval=flood_batch_interval,
                            due_file=checkpoint / DUE_FILE, idle_batch_interval=idle_batch_interval)
    writer = stream.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def write_due_hints(checkpoint: Path, hints: DueHints) -> None:
    """Replace the due file at once (a new file renamed over the old: the source never reads half of one). No
    fsync: after a crash the file is removed at start (``start_element_pipeline``)."""
    path = checkpoint / DUE_FILE
    temporary = path.with_name(DUE_FILE + ".new")
    temporary.write_text(json.dumps(hints, sort_keys=True))
    temporary.replace(path)


def stop_element_pipeline(query: StreamingQuery, checkpoint: Path, timeout: float = 30.0) -> bool:
    """Stop between batches: pause the source, wait until it confirms, then stop the query.

    ``query.stop()`` alone interrupts the query thread wherever it is; measured: the interrupt can land
    while the commit of a finished batch is being written, so the batch is re-run on restart. Instead a
    marker file pauses the source (it reports no new data), and the reader acknowledges on its next
    ``read`` (Spark's ``latestOffset``), which Spark only makes once the previous batch is committed. Returns whether
    the acknowledgement came within ``timeout`` (the query is stopped either way).
    """
    pause, ack = _pause_paths(checkpoint)
    clean = False
    if query.isActive:
        pause.touch()
        deadline = time.monotonic() + timeout
        while query.isActive and time.monotonic() < deadline:
            if ack.exists():
                clean = True
                break
            time.sleep(0.01)
    query.stop()
    for marker in (pause, ack):
        marker.unlink(missing_ok=True)
    return clean
