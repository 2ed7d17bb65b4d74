"""``element_log``: a PySpark streaming data source over the server's per-stream element logs.

The store appends one JSON line per record to the segments of ``<root>/<stream>/log/`` (``store.element_log``) and
fsyncs them; a line counts only once its ``\\n`` is on disk. Spark's offset for this source is ``{stream: log
position just past the last complete line}`` (a position is a segment's base plus an offset in it: positions only
grow), so a micro-batch is a set of position ranges, which makes replay after a restart exact:
Spark checkpoints the offsets of a batch before running it and re-runs the same ranges if it did not
commit. Why a file and not a socket: the reader runs in separate Python processes (the planner process
for offsets, executor workers for ``read``), so it cannot share memory with the server anyway, and the
log is already the durable source of truth.

The records are ``store.log_records``'s (the store writes them with the same module): a registration's row carries
in its ``ordinal`` column the last element ordinal before it; an element's row carries where its content is
(``segment``, ``offset``, ``length``: ``store.element_log.Location``).
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from store.element_log import segment_bases, segment_name
from store.log_records import ElementRecord, PunctuationRecord, RegistrationRecord, decode

log = logging.getLogger(__name__)

SOURCE_NAME = "element_log"
LOG_DIRECTORY = "log"
#: The pipeline's own log (``pipeline.batches``): a few records appended at each start make the query's first batch,
#: so that the first batch of real elements finds a warm JVM and Python workers. No stream can have this name.
WARM_UP_STREAM = ".warm-up"

SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("kind", StringType()),
        StructField("ordinal", LongType()),
        StructField("time", TimestampType()),
        StructField("sequence", StringType()),
        StructField("commit", LongType()),
        StructField("position", LongType()),
        StructField("segment", LongType()),
        StructField("offset", LongType()),
        StructField("length", LongType()),
    ]
)
#: What Spark checks returned record batches against, field for field (types, time zone, nullability).
ARROW_SCHEMA: pa.Schema = to_arrow_schema(SCHEMA, timezone="UTC")

_TAIL_BLOCK = 64 * 1024
_READ_BLOCK = 8 * 1024 * 1024
_BATCH_ROWS = 10_000

Offsets = dict[str, int]


# --------------------------------------------------------------------------------------------- file helpers


def list_streams(root: Path) -> dict[str, Path]:
    """Stream name → log directory, for every stream directory that has a log (sorted by name)."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return {}
    found: dict[str, Path] = {}
    for entry in entries:
        if (entry.name.startswith(".") and entry.name != WARM_UP_STREAM) or not entry.is_dir():
            continue
        path = Path(entry.path) / LOG_DIRECTORY
        if path.is_dir():
            found[entry.name] = path
    return found


def log_end(directory: Path, start: int) -> int:
    """The position just past the log's last complete line, reading from ``start`` (0 again when the log is shorter
    than ``start``: deleted and created again under the same name)."""
    bases = segment_bases(directory)
    if not bases:
        return 0
    last = bases[-1]
    path = directory / (segment_name(last) + ".jsonl")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return start
    if last + size < start:
        start = 0
    if last + size == start:
        return start  # nothing new (the common case of an idle poll): no read at all
    return last + complete_end(path, max(0, start - last), size)


def complete_end(path: Path, start: int, size: int | None = None) -> int:
    """Byte offset just past the last ``\\n`` in ``[start, size)`` of a file; ``start`` when there is none.

    Scans backwards from the end, so the cost is the length of the incomplete tail, not of the log.
    """
    try:
        with open(path, "rb") as f:
            if size is None:
                size = os.fstat(f.fileno()).st_size
            pos = size
            while pos > start:
                low = max(start, pos - _TAIL_BLOCK)
                f.seek(low)
                block = f.read(pos - low)
                i = block.rfind(b"\n")
                if i >= 0:
                    return low + i + 1
                pos = low
    except FileNotFoundError:
        pass
    return start


def _parse(stream: str, segment: int, position: int, line: bytes, cols: dict[str, list[Any]]) -> None:
    record = decode(line)
    row: tuple[str, int | None, int | None, str | None]
    content: tuple[int | None, int | None, int | None] = (None, None, None)
    if isinstance(record, ElementRecord):
        row = ("element", record.ordinal, record.time, None)
        if record.content is not None:
            content = (segment, *record.content)
    elif isinstance(record, PunctuationRecord):
        row = ("punctuation", None, record.time, None)
    elif isinstance(record, RegistrationRecord):
        row = ("registration", record.head, None, record.sequence)  # ordinal: last element before it
    else:
        log.warning("%s: skipping an unreadable line at byte %d", stream, position)
        return
    for name, value in zip(("kind", "ordinal", "time", "sequence"), row, strict=True):
        cols[name].append(value)
    cols["commit"].append(record.commit)
    cols["position"].append(position)
    for name, value in zip(("segment", "offset", "length"), content, strict=True):
        cols[name].append(value)


def _batch(stream: str, cols: dict[str, list[Any]]) -> pa.RecordBatch:
    n = len(cols["position"])
    arrays = [pa.array([stream] * n, pa.string())]
    for f in list(ARROW_SCHEMA)[1:]:
        arrays.append(pa.array(cols[f.name], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def read_range(stream: str, directory: Path, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Record batches for the complete lines at positions ``[start, end)`` of a stream's log (nothing of segments
    that retention deleted, or of a log that is gone).

    Each segment's bytes are decoded at once by pyarrow's JSON reader (C++; ~10× the per-line Python decode, which
    was most of a flood's pipeline cost); a range it refuses (a corrupted line) is read again line by line, which
    skips what does not decode, with a warning."""
    bases = segment_bases(directory)
    for i, base in enumerate(bases):
        limit = bases[i + 1] if i + 1 < len(bases) else end
        if limit <= start or base >= end:
            continue
        path = directory / (segment_name(base) + ".jsonl")
        first, stop = max(start, base) - base, min(end, limit) - base
        for block_start, block in _blocks(path, first, stop):
            try:
                batch = _decode_block(stream, base, base + block_start, block)
            except (pa.ArrowInvalid, ValueError):
                yield from _decode_lines(stream, base, base + block_start, block)
                continue
            if batch is not None:
                yield batch


_JSON_SCHEMA = pa.schema([("o", pa.int64()), ("t", pa.int64()), ("g", pa.string()), ("c", pa.int64()),
                          ("d", pa.int64()), ("n", pa.int64()), ("p", pa.int64()), ("r", pa.string()),
                          ("h", pa.int64())])
_KINDS = pa.array(["element", "punctuation", "registration"], pa.string())


def _decode_block(stream: str, segment: int, position: int, block: bytes) -> pa.RecordBatch | None:
    """The records of ``block`` (complete, non-blank lines: what the store writes) as one batch, columnar; raises
    ``ArrowInvalid`` when a line is not a record's JSON (the caller reads the block line by line)."""
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == 10)
    if ends.size == 0:
        return None
    starts = np.concatenate(([0], ends[:-1] + 1))
    if np.any(ends == starts):
        raise ValueError("blank line")  # pyarrow skips blank lines: the positions would no longer line up
    options = pj.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore")
    table = pj.read_json(io.BytesIO(block), read_options=pj.ReadOptions(use_threads=False, block_size=1 << 20),
                         parse_options=options)
    if table.num_rows != ends.size:
        raise ValueError("a line is not one record")
    col = {name: table.column(name).combine_chunks() for name in _JSON_SCHEMA.names}
    element = pc.and_(pc.and_(pc.is_valid(col["o"]), pc.is_valid(col["t"])), pc.is_valid(col["g"]))
    punctuation = pc.and_(pc.invert(element), pc.is_valid(col["p"]))
    registration = pc.and_(pc.and_(pc.invert(element), pc.invert(punctuation)), pc.is_valid(col["r"]))
    code = np.where(element.to_numpy(zero_copy_only=False), 0,
                    np.where(punctuation.to_numpy(zero_copy_only=False), 1,
                             np.where(registration.to_numpy(zero_copy_only=False), 2, -1)))
    n = len(code)
    has_content = pc.and_(pc.and_(element, pc.is_valid(col["d"])), pc.is_valid(col["n"]))
    nulls = pa.nulls(n, pa.int64())
    batch = pa.RecordBatch.from_arrays([
        pa.array(np.full(n, stream, dtype=object), pa.string()),
        _KINDS.take(pa.array(np.where(code < 0, 0, code))),
        pc.if_else(element, col["o"], pc.if_else(registration, col["h"], nulls)),
        pc.if_else(element, col["t"], pc.if_else(punctuation, col["p"], nulls)).cast(ARROW_SCHEMA.field("time").type),
        pc.if_else(registration, col["r"], pa.nulls(n, pa.string())),
        col["c"].fill_null(0),
        pa.array(position + starts, pa.int64()),
        pc.if_else(has_content, pa.array(np.full(n, segment, dtype=np.int64)), nulls),
        pc.if_else(has_content, col["d"], nulls),
        pc.if_else(has_content, col["n"], nulls),
    ], schema=ARROW_SCHEMA)
    unreadable = code < 0
    if unreadable.any():
        for at in (position + starts[unreadable]).tolist():
            log.warning("%s: skipping an unreadable line at byte %d", stream, at)
        batch = batch.filter(pa.array(~unreadable))
    return batch


def _decode_lines(stream: str, segment: int, position: int, block: bytes) -> Iterator[pa.RecordBatch]:
    """The records of ``block`` one line at a time (``store.log_records.decode``): lines that are not records are
    skipped with a warning."""
    names = ARROW_SCHEMA.names[1:]
    cols: dict[str, list[Any]] = {name: [] for name in names}
    offset = 0
    for line in block.split(b"\n")[:-1]:
        if line.strip():
            _parse(stream, segment, position + offset, line, cols)
        offset += len(line) + 1
        if len(cols["position"]) >= _BATCH_ROWS:
            yield _batch(stream, cols)
            cols = {name: [] for name in names}
    if cols["position"]:
        yield _batch(stream, cols)


def _blocks(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of ``path`` in ``[start, end)`` in blocks of about ``_READ_BLOCK`` bytes cut after a newline
    (``end`` is just past one: a complete line)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        f.seek(start)
        pos, carry = start, b""
        while pos < end:
            block = f.read(min(_READ_BLOCK, end - pos))
            if not block:  # the file shrank under us (deleted and re-created): stop at what is there
                break
            pos += len(block)
            data = carry + block
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                yield pos - len(data), data[:cut]


# ----------------------------------------------------------------------------------------------- the source


@dataclass
class LogSlice(InputPartition):
    """One stream's new bytes in a micro-batch; pickled to the executor's Python worker."""

    stream: str
    path: str
    start: int
    end: int


class ElementLogReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are byte positions of complete lines; holds no state besides the options.

    A stream missing from the start offset starts at 0 (it appeared after the query started). A stream
    whose directory is gone is dropped from the next offset. A log shorter than its checkpointed offset
    was deleted and re-created under the same name and is read again from 0 — reliable only if the new
    log is still shorter than the old offset when the source next looks; the store should not reuse a
    stream's directory name.
    """

    def __init__(self, root: Path, starting: str = "earliest", pause_file: Path | None = None,
                 min_batch_interval: float = 0.0) -> None:
        self.root = root
        self.starting = starting
        self.pause_file = pause_file
        self.min_batch_interval = min_batch_interval
        self._cap: Offsets | None = None
        self._last_advance = float("-inf")  # monotonic time of the last offset that had new data

    def _paused(self) -> bool:
        """True while the pause marker exists; acknowledged once by an ``.ack`` file next to it."""
        if self.pause_file is None or not self.pause_file.exists():
            return False
        ack = self.pause_file.with_name(self.pause_file.name + ".ack")
        if not ack.exists():
            ack.touch()
        return True

    def _current(self, start: Offsets) -> Offsets:
        return {name: log_end(directory, start.get(name, 0)) for name, directory in list_streams(self.root).items()}

    def initialOffset(self) -> Offsets:  # noqa: N802 (Spark's name)
        """All zeros (replay every log), or the current ends with ``startingOffsets=latest``."""
        if self.starting == "latest":
            return self._current({})
        return {name: 0 for name in list_streams(self.root)}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802
        """Current complete-line ends; the read limit is ignored (always ``ReadAllAvailable`` here).

        With ``min_batch_interval`` set, new data is reported no sooner than that many seconds after the
        previous batch with data began: an isolated element starts a batch at once, while under a steady
        flow batches are spaced out (fewer, larger batches: less CPU per element) instead of back to back.
        """
        if self._paused():
            return start
        if self.min_batch_interval > 0 and time.monotonic() - self._last_advance < self.min_batch_interval:
            return start
        ends = self._current(start)
        if self._cap is not None:  # Trigger.AvailableNow: nothing past what existed when it began
            ends = {k: min(v, self._cap[k]) if k in self._cap else start.get(k, 0) for k, v in ends.items()}
        if any(offset != start.get(name, 0) for name, offset in ends.items()):
            self._last_advance = time.monotonic()
        return dict(sorted(ends.items()))  # Spark compares offsets as JSON text: keep key order stable

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._cap = self._current({})

    def partitions(self, start: Offsets, end: Offsets) -> list[LogSlice]:
        slices = []
        for name, stop in end.items():
            begin = start.get(name, 0)
            if stop < begin:  # re-created log (see class doc)
                begin = 0
            if stop > begin:
                slices.append(LogSlice(name, str(self.root / name / LOG_DIRECTORY), begin, stop))
        return slices

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LogSlice)
        return read_range(partition.stream, Path(partition.path), partition.start, partition.end)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the logs belong to the store, which owns their retention."""


class ElementLogSource(DataSource):
    """``spark.readStream.format("element_log").option("path", root)``.

    Options: ``startingOffsets`` (``earliest``, the default, or ``latest``; only for a new checkpoint),
    ``pauseFile`` (while that file exists the source reports no new data; see :func:`stop_element_pipeline`)
    and ``minBatchInterval`` (seconds; see :meth:`ElementLogReader.latestOffset`).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> ElementLogReader:  # noqa: N802
        if "path" not in self.options:
            raise ValueError("element_log needs option 'path' (the stream log root directory)")
        starting = self.options.get("startingOffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"element_log: startingOffsets must be earliest or latest, not {starting!r}")
        pause = self.options.get("pauseFile")
        interval = float(self.options.get("minBatchInterval", "0"))
        return ElementLogReader(Path(self.options["path"]), starting, Path(pause) if pause else None, interval)


def register(spark: SparkSession) -> None:
    """Register the source with a session (registration is per session, and idempotent)."""
    spark.dataSource.register(ElementLogSource)


def element_stream(
    spark: SparkSession, root: Path, starting: str = "earliest", pause_file: Path | None = None,
    min_batch_interval: float = 0.0,
) -> DataFrame:
    """The streaming DataFrame of all records of all streams under ``root``."""
    register(spark)
    reader = spark.readStream.format(SOURCE_NAME).option("path", str(root)).option("startingOffsets", starting)
    if pause_file is not None:
        reader = reader.option("pauseFile", str(pause_file))
    if min_batch_interval > 0:
        reader = reader.option("minBatchInterval", str(min_batch_interval))
    return reader.load()


# --------------------------------------------------------------------------------------------- the pipeline

PAUSE_FILE = "_pause"


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
) -> StreamingQuery:
    """Run ``on_batch(batch_df, batch_id)`` for every micro-batch of new records, via ``foreachBatch``.

    Spark writes a batch's offsets to ``checkpoint`` before running it and marks it done after
    ``on_batch`` returns; a batch not marked done (``on_batch`` raised, crash, hard stop) is re-run with the
    same ``batch_id`` and the same rows on restart. Stop with :func:`stop_element_pipeline`, which never
    cuts a batch; even so, keep ``on_batch`` idempotent per ``batch_id`` to survive crashes.
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    for marker in _pause_paths(checkpoint):
        marker.unlink(missing_ok=True)
    stream = element_stream(spark, root, starting, pause_file=_pause_paths(checkpoint)[0],
                            min_batch_interval=min_batch_interval)
    writer = stream.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def stop_element_pipeline(query: StreamingQuery, checkpoint: Path, timeout: float = 30.0) -> bool:
    """Stop between batches: pause the source, wait until it confirms, then stop the query.

    ``query.stop()`` alone interrupts the query thread wherever it is; measured: the interrupt can land
    while the commit of a finished batch is being written, so the batch is re-run on restart. Instead a
    marker file pauses the source (it reports no new data), and the reader acknowledges on its next
    ``latestOffset`` call, which Spark only makes once the previous batch is committed. Returns whether
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
