"""The element logs as other packages read them: which logs there are, where each one's complete records end, the
records of a position range as Arrow record batches (``RECORD_SCHEMA``), and the warm-up log. Element contents by
byte runs are ``store.log_contents``'. The layout (``store.element_log``) and the record lines (``store.log_records``)
stay the store's: nothing outside ``store`` imports those two (``tests/test_imports.py``).

Records are decoded column-wise by pyarrow's JSON reader (no Python object per record), line by line only where a
block holds something that is not a record (a torn or foreign line). A registration's row carries in its ``ordinal``
column the last element ordinal before it; an element's row carries where its content is (``segment``, ``offset``,
``length``).

The Spark source's processes read records with this module: it imports the log's two modules, numpy and pyarrow, and
nothing of the dataset, pyoxigraph or the SPARQL parser.
"""

from __future__ import annotations

import functools
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from store.element_log import LOG_DIRECTORY, records_file, segment_bases
from store.log_records import KEY_TYPES, ElementRecord, PunctuationRecord, RegistrationRecord, decode, encode

__all__ = ["RECORD_SCHEMA", "WARM_UP_LOG", "append_warm_up_records", "list_logs", "log_directory", "log_end",
           "range_completes", "read_records"]

log = logging.getLogger(__name__)

#: A log no stream owns (a stream's name never starts with "."): a reader's own element records, to warm up on
#: (``append_warm_up_records``). ``list_logs`` lists it with the streams' logs.
WARM_UP_LOG = ".warm-up"

#: One row per record: ``stream``, ``kind`` (element, punctuation, registration), ``ordinal`` (an element's, or the
#: last element's before a registration), ``time`` (an element's timestamp or a punctuation's), ``sequence`` (a
#: registration's), ``commit`` (µs), ``position`` (of its line in the log), and where an element's content is.
RECORD_SCHEMA = pa.schema([
    ("stream", pa.string()),
    ("kind", pa.string()),
    ("ordinal", pa.int64()),
    ("time", pa.timestamp("us", tz="UTC")),
    ("sequence", pa.string()),
    ("commit", pa.int64()),
    ("position", pa.int64()),
    ("segment", pa.int64()),
    ("offset", pa.int64()),
    ("length", pa.int64()),
])

#: The record keys the columnar decode reads (``f``, an element's origin, is not read).
_KEYS = pa.schema([(key, getattr(pa, KEY_TYPES[key])()) for key in ("o", "t", "g", "c", "d", "n", "p", "r", "h")])

_TAIL_BLOCK = 64 * 1024
_READ_BLOCK = 8 * 1024 * 1024
_BATCH_ROWS = 10_000

# ------------------------------------------------------------------------------------------------- which logs


def log_directory(root: Path, stream: str) -> Path:
    """The log of stream ``stream`` under the streams' directory ``root``."""
    return root / stream / LOG_DIRECTORY


def list_logs(root: Path) -> dict[str, Path]:
    """Stream name → log directory, for every stream directory that has a log, and the warm-up log (sorted by name)."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return {}
    found: dict[str, Path] = {}
    for entry in entries:
        if (entry.name.startswith(".") and entry.name != WARM_UP_LOG) or not entry.is_dir():
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
    path = records_file(directory, last)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return start
    if last + size < start:
        start = 0
    if last + size == start:
        return start  # nothing new (the common case of an idle poll): no read at all
    return last + _complete_end(path, max(0, start - last), size)


def _complete_end(path: Path, start: int, size: int) -> int:
    """Byte offset just past the last ``\\n`` in ``[start, size)`` of a file; ``start`` when there is none.

    Scans backwards from the end, so the cost is the length of the incomplete tail, not of the log.
    """
    try:
        with open(path, "rb") as f:
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


# ---------------------------------------------------------------------------------------------------- records


def read_records(stream: str, directory: Path, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Record batches (``RECORD_SCHEMA``) for the complete lines at positions ``[start, end)`` of a stream's log
    (nothing of segments that retention deleted, or of a log that is gone).

    Each segment's bytes are decoded at once by pyarrow's JSON reader (C++; ~10× the per-line Python decode, which
    was most of a flood's pipeline cost); a range it refuses (a corrupted line) is read again line by line, which
    skips what does not decode, with a warning."""
    for base, position, block in _range_blocks(directory, start, end):
        try:
            batch = _decode_block(stream, base, position, block)
        except (pa.ArrowInvalid, ValueError):
            yield from _decode_lines(stream, base, position, block)
            continue
        if batch is not None:
            yield batch


def range_completes(directory: Path, start: int, end: int, due_time: int | None, due_ordinal: int | None) -> bool:
    """Whether the records at ``[start, end)`` may complete one of the stream's windows, given what its next window
    waits for (``sparql_ext.window_state.next_due``): a record that is not an element (a punctuation moves stream
    time, a registration starts a sequence), or an element with a timestamp ≥ ``due_time`` or an ordinal ≥
    ``due_ordinal``. A block that does not decode counts as completing (the batch then reads it as usual)."""
    for base, position, block in _range_blocks(directory, start, end):
        try:
            batch = _decode_block("", base, position, block)
        except (pa.ArrowInvalid, ValueError):
            return True
        if batch is None:
            continue
        kinds = batch.column("kind")
        if not pc.all(pc.equal(kinds, "element")).as_py():
            return True
        if due_time is not None and pc.max(batch.column("time").cast(pa.int64())).as_py() >= due_time:
            return True
        if due_ordinal is not None and pc.max(batch.column("ordinal")).as_py() >= due_ordinal:
            return True
    return False


def _range_blocks(directory: Path, start: int, end: int) -> Iterator[tuple[int, int, bytes]]:
    """(segment base, position, bytes) of the complete lines at positions ``[start, end)``, segment by segment."""
    bases = segment_bases(directory)
    for i, base in enumerate(bases):
        limit = bases[i + 1] if i + 1 < len(bases) else end
        if limit <= start or base >= end:
            continue
        first, stop = max(start, base) - base, min(end, limit) - base
        for block_start, block in _blocks(records_file(directory, base), first, stop):
            yield base, base + block_start, block


@functools.cache
def _kinds() -> pa.Array:
    """The record kinds as an Arrow array, made on first use: ``pa.array`` makes pyarrow import pandas (≈ 0.4 s of CPU)
    to ask whether its input is a pandas object, and Spark's planner processes, which import this module but decode
    nothing, need not pay for it."""
    return pa.array(["element", "punctuation", "registration"], pa.string())


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
    options = pj.ParseOptions(explicit_schema=_KEYS, unexpected_field_behavior="ignore")
    table = pj.read_json(io.BytesIO(block), read_options=pj.ReadOptions(use_threads=False, block_size=1 << 20),
                         parse_options=options)
    if table.num_rows != ends.size:
        raise ValueError("a line is not one record")
    col = {name: table.column(name).combine_chunks() for name in _KEYS.names}
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
        _kinds().take(pa.array(np.where(code < 0, 0, code))),
        pc.if_else(element, col["o"], pc.if_else(registration, col["h"], nulls)),
        pc.if_else(element, col["t"], pc.if_else(punctuation, col["p"], nulls)).cast(RECORD_SCHEMA.field("time").type),
        pc.if_else(registration, col["r"], pa.nulls(n, pa.string())),
        col["c"].fill_null(0),
        pa.array(position + starts, pa.int64()),
        pc.if_else(has_content, pa.array(np.full(n, segment, dtype=np.int64)), nulls),
        pc.if_else(has_content, col["d"], nulls),
        pc.if_else(has_content, col["n"], nulls),
    ], schema=RECORD_SCHEMA)
    unreadable = code < 0
    if unreadable.any():
        for at in (position + starts[unreadable]).tolist():
            log.warning("%s: skipping an unreadable line at byte %d", stream, at)
        batch = batch.filter(pa.array(~unreadable))
    return batch


def _decode_lines(stream: str, segment: int, position: int, block: bytes) -> Iterator[pa.RecordBatch]:
    """The records of ``block`` one line at a time (``store.log_records.decode``): lines that are not records are
    skipped with a warning."""
    names = RECORD_SCHEMA.names[1:]
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
    for f in list(RECORD_SCHEMA)[1:]:
        arrays.append(pa.array(cols[f.name], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


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


# ---------------------------------------------------------------------------------------------------- warm-up


def append_warm_up_records(root: Path, count: int, now: int, *, restart_past: int = 4 << 20) -> None:
    """Append ``count`` element records (ordinals 1…``count``, a millisecond apart from ``now`` µs, no content) to the
    warm-up log under ``root``, without fsync (they matter to no stream). The log is written again from scratch once
    it passes ``restart_past`` bytes (a reader then reads it from its start, as a re-created log)."""
    directory = log_directory(root, WARM_UP_LOG)
    path = records_file(directory, 0)
    if path.exists() and path.stat().st_size > restart_past:
        path.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    lines = "".join(encode(ElementRecord(ordinal, now + 1_000 * ordinal, f"<urn:warm-up:{ordinal}>", now, None,
                                         (0, 1))) + "\n" for ordinal in range(1, count + 1))
    with path.open("a") as out:
        out.write(lines)
