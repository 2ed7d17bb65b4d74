"""Streams written by earlier versions (a RocksDB store of element graphs next to ``log.jsonl``, the records without
content) moved into the element log (``store.element_log``), once, when the stream is opened.

Each recorded element's graph and its timestamp triple are read from the old store and written as the element's
content; ordinals, timestamps, commit times, origins, punctuations and registrations keep their order and values.
The old files are renamed (``log.jsonl.migrated``, ``store.migrated``), not deleted. Positions in the log change, so
the Spark pipeline's checkpoint is no longer valid: ``RESET_MARKER`` in the data directory asks the pipeline to
start from the beginning of every log (its per-stream state makes that replay change nothing).
"""

from __future__ import annotations

import logging
from pathlib import Path

from pyoxigraph import DefaultGraph, NamedNode, Quad, RdfFormat, Store, serialize

from store.element_log import LOG_DIRECTORY, ElementLog
from store.log_records import ElementRecord, LogRecord, decode
from store.terms import graph_from_text

log = logging.getLogger(__name__)

RESET_MARKER = "pipeline-reset"  # in <data>/spark/: the checkpoint no longer matches the logs
_TIMESTAMP_GRAPH = "urn:x-concentrator:timestamp:"
_GROUP = 1_000  # records per append


def migrate_stream(directory: Path, spark_directory: Path) -> bool:
    """Move a stream of the old layout into the element log; False when there is nothing to migrate."""
    old_log, old_store = directory / "log.jsonl", directory / "store"
    if not old_log.exists() or (directory / LOG_DIRECTORY).exists():
        return False
    store = Store(str(old_store)) if old_store.exists() else Store()
    target = ElementLog(directory / LOG_DIRECTORY)
    entries: list[tuple[LogRecord, bytes | None]] = []
    migrated = 0
    for line in old_log.read_bytes().splitlines():
        record = decode(line)
        if record is None:
            continue
        content = _content(store, record) if isinstance(record, ElementRecord) else None
        if isinstance(record, ElementRecord) and content is None:
            continue  # expired before the migration: its graphs were gone already
        entries.append((record, content))
        if len(entries) >= _GROUP:
            target.append(entries)
            migrated += len(entries)
            entries = []
    if entries:
        target.append(entries)
        migrated += len(entries)
    target.close()
    del store  # the last reference: pyoxigraph closes the store (RocksDB's lock)
    old_log.rename(directory / "log.jsonl.migrated")
    if old_store.exists():
        old_store.rename(directory / "store.migrated")
    spark_directory.mkdir(parents=True, exist_ok=True)
    (spark_directory / RESET_MARKER).touch()
    log.warning("stream %s: %d records moved into the element log (old files kept as *.migrated)",
                directory.name, migrated)
    return True


def _content(store: Store, record: ElementRecord) -> bytes | None:
    graph = graph_from_text(record.graph)
    quads = list(store.quads_for_pattern(None, None, None, graph))
    stamps = [Quad(q.subject, q.predicate, q.object, DefaultGraph()) for q in
              store.quads_for_pattern(None, None, None, NamedNode(f"{_TIMESTAMP_GRAPH}{record.ordinal}"))]
    if not quads and not stamps:
        return None
    return (serialize(stamps, format=RdfFormat.TRIG) or b"") + (serialize(quads, format=RdfFormat.TRIG) or b"")
