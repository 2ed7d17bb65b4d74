"""A stream's element log: the source of truth for its elements, their content included.

Layout under ``<data>/streams/<name>/log/``: segments, each a pair of files named by the segment's *base*, the
global byte offset of its first record::

    00000000000000000000.jsonl   one line per record (``store.log_records``): elements, punctuations and
                                 window sequence registrations, in commit order
    00000000000000000000.dat     the contents of the segment's elements, as canonical TriG (an element's
                                 timestamp triple, then its graph block): its record says where (``d``, ``n``)

A record's *position* is its segment's base plus its offset in the ``.jsonl`` file: positions only grow, so the
Spark source reads the log as one sequence of byte ranges, whatever segments retention deletes. A group of records
is one ``append``: the contents are written and fsynced first, then the records, then fsynced; a record counts only
once its line is complete on disk, so a crash leaves nothing half-visible (a torn last line is cut at start-up,
and content no record names is ignored, then overwritten). Segments roll over at ``SEGMENT_BYTES`` of content;
retention deletes whole segments (``drop_before``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from store.log_records import ElementRecord, LogRecord, decode, encode

LOG_DIRECTORY = "log"  # in a stream's directory
SEGMENT_BYTES = 64 << 20  # content bytes per segment before a new one starts
_SUFFIXES = (".jsonl", ".dat")


@dataclass(frozen=True)
class Location:
    """Where an element's content is: its segment (base) and its byte range in the segment's ``.dat``."""

    segment: int
    offset: int
    length: int


def runs(locations: Sequence[Location]) -> list[Location]:
    """``locations`` with neighbouring ranges of one segment merged (a window's elements are usually one run).

    >>> [(r.segment, r.offset, r.length) for r in runs([Location(0, 0, 5), Location(0, 5, 3), Location(0, 20, 1)])]
    [(0, 0, 8), (0, 20, 1)]
    """
    merged: list[Location] = []
    for location in locations:
        last = merged[-1] if merged else None
        if last is not None and location.segment == last.segment and location.offset == last.offset + last.length:
            merged[-1] = Location(last.segment, last.offset, last.length + location.length)
        else:
            merged.append(location)
    return merged


@dataclass
class _Segment:
    base: int
    records: int = 0  # bytes of complete records in the .jsonl
    content: int = 0  # bytes of referenced content in the .dat
    last_ordinal: int = 0  # of the elements it holds (0: none)


def segment_name(base: int) -> str:
    return f"{base:020d}"


def records_file(directory: Path, base: int) -> Path:
    """The ``.jsonl`` file of segment ``base`` of the log in ``directory``."""
    return directory / (segment_name(base) + ".jsonl")


def segment_bases(directory: Path) -> list[int]:
    """The bases of the segments in a log directory, ascending (a segment exists once its ``.jsonl`` does)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(name[:-6]) for name in names if name.endswith(".jsonl") and name[:-6].isdigit())


class ElementLog:
    """The segments of one stream's log; appends are serialized by the caller (the stream's committer)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # segments list and file handles (reads come from many threads)
        self._segments: list[_Segment] = [_Segment(base) for base in segment_bases(directory)]
        self._readers: dict[int, int] = {}  # segment base -> an open file descriptor of its .dat
        self._writers: dict[str, tuple[int, int]] = {}  # suffix -> (segment base, descriptor open for appending)
        self.fsync_seconds = 0.0  # spent waiting for the disk (both fsyncs of every append)
        self.bytes_written = 0

    # -- paths ---------------------------------------------------------------------------------------------------

    def _path(self, base: int, suffix: str) -> Path:
        return self.directory / (segment_name(base) + suffix)

    @property
    def end(self) -> int:
        """The position just past the last complete record."""
        if not self._segments:
            return 0
        last = self._segments[-1]
        return last.base + last.records

    # -- recovery ------------------------------------------------------------------------------------------------

    def recover(self) -> Iterator[tuple[int, LogRecord, Location | None]]:
        """Every record, in order, with its position and (elements) its content's location; cuts a torn last line
        of each segment and forgets content no record names. Call once, at start-up, before appending."""
        for segment in self._segments:
            path = self._path(segment.base, ".jsonl")
            data = path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):  # the process died while appending this line
                with path.open("r+b") as torn:
                    torn.truncate(end)
            segment.records = end
            offset = 0
            for line in data[:end].split(b"\n")[:-1]:
                record = decode(line)
                position, offset = segment.base + offset, offset + len(line) + 1
                if record is None:
                    continue
                location = None
                if isinstance(record, ElementRecord) and record.content is not None:
                    location = Location(segment.base, record.content[0], record.content[1])
                    segment.content = max(segment.content, location.offset + location.length)
                    segment.last_ordinal = max(segment.last_ordinal, record.ordinal)
                yield position, record, location
            with self._path(segment.base, ".dat").open("ab") as content:
                content.truncate(segment.content)  # content written before a crash that no record names

    # -- appending -----------------------------------------------------------------------------------------------

    def append(self, entries: Sequence[tuple[LogRecord, bytes | None]]) -> list[Location | None]:
        """Write a group of records (an element's with its content) durably: contents, fsync, records, fsync.
        Returns the content locations, in order (None for records without content)."""
        segment = self._writable()
        locations: list[Location | None] = []
        blobs: list[bytes] = []
        lines: list[str] = []
        offset = segment.content
        for record, content in entries:
            if content is not None and isinstance(record, ElementRecord):
                location = Location(segment.base, offset, len(content))
                lines.append(encode(record, (offset, len(content))))
                blobs.append(content)
                offset += len(content)
                segment.last_ordinal = max(segment.last_ordinal, record.ordinal)
            else:
                location = None
                lines.append(encode(record))
            locations.append(location)
        text = ("\n".join(lines) + "\n").encode()
        content = b"".join(blobs)
        if content:
            self._write(segment.base, ".dat", content)
        self._write(segment.base, ".jsonl", text)
        self.bytes_written += len(content) + len(text)
        segment.content = offset
        segment.records += len(text)
        return locations

    def _write(self, base: int, suffix: str, data: bytes) -> None:
        """Append ``data`` to a file of segment ``base`` and make it durable (the descriptor stays open for the next
        group: opening the file per write cost ≈ 4 % of a flood's CPU)."""
        writer = self._writers.get(suffix)
        if writer is None or writer[0] != base:
            if writer is not None:
                os.close(writer[1])
            writer = (base, os.open(self._path(base, suffix), os.O_WRONLY | os.O_APPEND))
            self._writers[suffix] = writer
        view = memoryview(data)
        while view:
            view = view[os.write(writer[1], view):]
        started = time.perf_counter()
        os.fdatasync(writer[1])  # the data and the file's new size: what a reader after a crash needs
        self.fsync_seconds += time.perf_counter() - started

    def _writable(self) -> _Segment:
        with self._lock:
            if not self._segments or self._segments[-1].content >= SEGMENT_BYTES:
                segment = _Segment(self.end)
                for suffix in _SUFFIXES:
                    self._path(segment.base, suffix).touch()
                _fsync_directory(self.directory)
                self._segments.append(segment)
            return self._segments[-1]

    # -- reading -------------------------------------------------------------------------------------------------

    def read(self, locations: Sequence[Location]) -> bytes:
        """The contents at ``locations``, concatenated in order; neighbouring ranges are read at once."""
        return b"".join(self._pread(run) for run in runs(locations))

    def content_file(self, segment: int) -> Path:
        """The ``.dat`` file holding the contents of ``segment`` (which another process may read, e.g. a Spark
        executor building a window: contents never change once written)."""
        return self._path(segment, ".dat")

    def _pread(self, location: Location) -> bytes:
        with self._lock:
            descriptor = self._readers.get(location.segment)
            if descriptor is None:
                descriptor = os.open(self._path(location.segment, ".dat"), os.O_RDONLY)
                self._readers[location.segment] = descriptor
        return os.pread(descriptor, location.length, location.offset)

    # -- retention -----------------------------------------------------------------------------------------------

    def drop_before(self, ordinal: int) -> int:
        """Delete the segments (but the last one) whose elements all have ordinals below ``ordinal``; returns how
        many. Their records are gone too: a reader of positions before the first segment reads nothing."""
        dropped = 0
        with self._lock:
            while len(self._segments) > 1 and self._segments[0].last_ordinal < ordinal:
                segment = self._segments.pop(0)
                descriptor = self._readers.pop(segment.base, None)
                if descriptor is not None:
                    os.close(descriptor)
                for suffix in _SUFFIXES:
                    self._path(segment.base, suffix).unlink(missing_ok=True)
                dropped += 1
        return dropped

    def close(self) -> None:
        with self._lock:
            for descriptor in self._readers.values():
                os.close(descriptor)
            self._readers.clear()
            for _, descriptor in self._writers.values():
                os.close(descriptor)
            self._writers.clear()


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
