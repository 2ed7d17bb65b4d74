"""The window pipeline's account of itself for ``/status`` (and ``/metrics``, which reads it): its counters
(``PipelineStatus``, written by the batch thread), per stream what it has read and the sequences it computes, window
latency, and Spark's own report of the last micro-batch. Nothing here changes the pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming.query import StreamingQuery

from sparql_ext.histogram import Histogram
from store.stream import Stream
from store.streams import StreamCatalog
from store.windows import WindowRevision


@dataclass
class PipelineStatus:
    """Counters for ``/status``; written by the batch thread, read by request threads."""

    batches: int = 0
    last_batch_id: int | None = None
    last_batch_seconds: float | None = None
    last_batch_phases: dict[str, float] = field(default_factory=dict)  # seconds: job, advance
    last_error: str | None = None
    last_error_at: float | None = None
    errors: int = 0
    restarts: int = 0
    windows_emitted: int = 0
    expired_elements: int = 0
    skipped_empty_windows: dict[str, int] = field(default_factory=dict)  # "stream/sequence" -> windows
    batch_seconds: Histogram = field(default_factory=Histogram)  # every batch's time, since start-up
    # per stream: from stream time reaching a window's end (the commit of the record that completed it) to the
    # window revision's commit, since start-up
    window_latency: dict[str, Histogram] = field(default_factory=dict)


def status_document(s: PipelineStatus, catalog: StreamCatalog, query: StreamingQuery | None, ready: bool
                    ) -> dict[str, Any]:
    """The pipeline's ``/status`` document from ``s`` (a copy taken under the pipeline's lock), the streams' committed
    states and the query."""
    streams: dict[str, Any] = {}
    for name in catalog.names():
        stream = catalog.find(name)
        if stream is None:
            continue
        state = stream.windows.state
        streams[name] = {
            "batch": state.batch, "watermark": state.watermark, "stream_time": state.stream_time,
            "seen": state.seen,
            # what the pipeline has not read yet: elements, and stream time (seconds)
            "lag_elements": max(0, stream.head() - state.seen) if len(stream) else 0,
            "lag_seconds": _lag_seconds(stream.stream_time, state.stream_time),
            "window_latency_seconds": s.window_latency.get(name, Histogram()).to_json(),
            "sequences": {
                seq.id: {"ref": seq.ref, "live": seq.id in state.next_index,
                         "pending": seq.spec.origin is None and seq.id not in state.origins,
                         "next_index": state.next_index.get(seq.id),
                         "open_windows": len(state.open.get(seq.id, {})),
                         "emitted": stream.windows.emitted(seq.id)}
                for seq in stream.windows.sequences()},
        }
    return {
        "ready": ready, "active": bool(query is not None and query.isActive),
        "batches": s.batches, "last_batch_id": s.last_batch_id, "last_batch_seconds": s.last_batch_seconds,
        "last_batch_phases": s.last_batch_phases,
        "last_error": s.last_error, "last_error_at": s.last_error_at, "errors": s.errors,
        "restarts": s.restarts, "windows_emitted": s.windows_emitted, "expired_elements": s.expired_elements,
        "skipped_empty_windows": s.skipped_empty_windows, "batch_seconds": s.batch_seconds.to_json(),
        "streams": streams, "spark_progress": _progress(query),
    }


def observe_window_latency(histogram: Histogram, stream: Stream, revisions: list[WindowRevision]) -> None:
    """Window latency: from when a window could first be computed — stream time reached its end plus the lateness (a
    count window: its last element committed), or its sequence was registered if that came later — to its revision's
    commit. Windows whose completing record has expired are not observed."""
    for revision in revisions:
        sequence = stream.windows.sequence(revision.sequence)
        if sequence is None:
            continue
        if sequence.spec.kind == "count":
            record = stream.record(revision.end)
            reached = None if record is None else record.commit
        else:
            reached = stream.reached_at(revision.end + stream.config.lateness)
        if reached is not None:
            histogram.observe(max(0, revision.commit - max(reached, sequence.registered)) / 1_000_000)


def _progress(query: StreamingQuery | None) -> dict[str, Any] | None:
    """Spark's own account of the last micro-batch (its id, rows, and milliseconds per phase: latestOffset,
    queryPlanning, addBatch = our handler, walCommit, …), for /status; None before the first one."""
    if query is None:
        return None
    try:
        progress = query.lastProgress
    except Exception:  # noqa: BLE001 - the query may be stopping; status must still answer
        return None
    if not progress:
        return None
    return {"batch_id": progress.get("batchId"), "rows": progress.get("numInputRows"),
            "timestamp": progress.get("timestamp"), "duration_ms": progress.get("durationMs")}


def _lag_seconds(stream_time: int | None, read_time: int | None) -> float | None:
    """How far the stream's committed stream time is ahead of what the pipeline has read, in seconds (0 for an empty
    stream; None while the pipeline has read nothing of a stream that has a stream time)."""
    if stream_time is None:
        return 0.0
    return None if read_time is None else max(0, stream_time - read_time) / 1_000_000
