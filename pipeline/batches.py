"""The continuous path (docs/streams.md, "The Spark pipeline"): a Spark streaming query over every stream's element
log, and its batch handler. Spark only *summarizes* each micro-batch; the window semantics are
``sparql_ext.window_state`` (pure, tested without a JVM).

One micro-batch (``apply_batch``) is ONE Spark job:

1. the driver lists, per stream, the sequences that are assignable as of its committed state
   (``window_state.assignable``) as a small literal table, and ``assignment.batch_ranges`` runs one
   fixed-shape plan over the batch: every record once, every element with the k range of each assignable
   sequence of its stream. The result is collected once, as Arrow;
2. the driver summarizes it per stream (``BatchSummary``: max element ordinal and time, max punctuation,
   registrations read, and the k ranges folded into ordinal runs per sequence and window);
3. ``window_state.advance`` makes the stream's next state, the windows that completed and retention's cut;
   the windows and state are committed (``WindowLog.commit`` is idempotent per batch id, so a replayed batch
   materializes nothing twice); once every stream has committed, the ``on_windows`` callbacks run (rules) with all
   the batch's new revisions, then each stream's cut is applied.

Failures: an exception in a batch is logged with the batch id and stream, recorded in ``status()`` and
re-raised, which terminates the Spark query (Spark does not retry a failed micro-batch by itself). A
supervisor thread then restarts the query from its checkpoint with exponential back-off; Spark re-runs
the failed batch with the same id and rows, streams that already committed it skip it. Skipping the
failing stream instead would lose its records for good (the source offsets move on), so a persistently
failing stream blocks the pipeline, visibly (``last_error``, ``restarts``), rather than silently losing
windows.
"""

from __future__ import annotations

import copy
import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from pipeline.assignment import batch_ranges, fold_batch, sequence_table
from pipeline.element_source import (
    DueHints,
    start_element_pipeline,
    stop_element_pipeline,
    write_due_hints,
)
from pipeline.errors import PipelineError
from pipeline.spark import SparkSettings, spark_session
from pipeline.status import PipelineStatus, observe_window_latency, status_document
from sparql_ext.histogram import Histogram
from sparql_ext.window_data import AssignmentRow
from sparql_ext.window_state import BatchSummary, Step, advance, assignable, next_due
from store.log_reading import append_warm_up_records
from store.migrate import RESET_MARKER
from store.stream import Stream
from store.streams import StreamCatalog
from store.windows import WindowRevision, new_revision

log = logging.getLogger(__name__)

#: What one batch committed: per stream, its new window revisions (in order of sequence and index).
Committed = list[tuple[Stream, list[WindowRevision]]]

#: Under a steady flow, a batch with data starts no sooner than this after the previous one (an isolated
#: element still starts one at once): bounds the pipeline's CPU share while streams ingest fast, at the cost
#: of up to this much latency then (see ``ElementLogReader.next_end``).
MIN_BATCH_INTERVAL = 0.25
#: While streams flood (``pipeline.element_source.batch_due``), batches start no sooner than this apart.
FLOOD_BATCH_INTERVAL = 0.8
#: Records that complete no window (``sparql_ext.window_state.next_due``) wait up to this for a batch; the record
#: that completes one starts a batch at once. Not a round number of seconds: a batch on this clock would otherwise
#: keep coinciding with the completion of 1 s windows and delay it.
IDLE_BATCH_INTERVAL = 1.7
_INDEX_CATCH_UP_SECONDS = 30.0  # the index is updated right after the log fsync: this is a safety net
_MAX_BACKOFF_SECONDS = 60.0


class WindowPipeline:
    """The Spark streaming query over ``<data_dir>/streams`` and its foreachBatch handler."""

    def __init__(self, catalog: StreamCatalog, data_dir: Path, settings: SparkSettings | None = None,
                 *, trigger_seconds: float = 0.0, min_batch_interval: float = MIN_BATCH_INTERVAL,
                 flood_batch_interval: float = FLOOD_BATCH_INTERVAL, idle_batch_interval: float = IDLE_BATCH_INTERVAL,
                 warm_up: bool = True) -> None:
        self.catalog = catalog
        self.data_dir = data_dir
        self.settings = settings or SparkSettings()
        self.trigger_seconds = trigger_seconds
        self.min_batch_interval = min_batch_interval
        self.flood_batch_interval = flood_batch_interval
        self.idle_batch_interval = idle_batch_interval
        self._due: DueHints | None = None  # the hints last written (``_write_due``)
        self.warm_up = warm_up
        self.root = data_dir / "streams"
        self.checkpoint = data_dir / "spark" / "checkpoint"
        self.ready = threading.Event()  # set once the query runs (session start takes seconds)
        self.spark: SparkSession | None = None
        self._owns_session = False  # whether start() created the process-wide session (or found one running)
        self._query: StreamingQuery | None = None
        self._stopping = threading.Event()
        self._abandoned = threading.Event()  # a stop asked for while start() runs (abandon_start)
        self._supervisor: threading.Thread | None = None
        self._lock = threading.Lock()
        self._status = PipelineStatus()
        # Called after a batch commits new window revisions of a stream (e.g. the rule runner); a callback's
        # exception is recorded and does not stop the pipeline.
        self.on_windows: list[Callable[[Committed], None]] = []
        # Called once the query runs (e.g. the rule runner warming Spark's Python workers for rules in executors);
        # a callback's exception is recorded and does not stop the pipeline.
        self.on_started: list[Callable[[], None]] = []

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Create the session and start the query (blocking, ~6 s the first time in a process). After
        ``abandon_start`` it stops at its next step: once the session exists, no query is started; once the query
        runs, its first batch is not waited for (``stop`` then stops it)."""
        try:
            self._restart_from_scratch_if_asked()
            self._owns_session = SparkContext._active_spark_context is None
            self.spark = spark_session(self.settings)
            if self._abandoned.is_set():
                return
            self.root.mkdir(parents=True, exist_ok=True)
            if self.warm_up:
                self._prime()
            self._stopping.clear()
            self._query = self._start_query()
        except Exception as error:
            self._record_error(f"pipeline start failed: {error}")
            raise
        self._supervisor = threading.Thread(target=self._supervise, name="window-pipeline", daemon=True)
        self._supervisor.start()
        if self.warm_up:
            self._wait_primed()
        if self._abandoned.is_set():
            return
        self.ready.set()
        for callback in list(self.on_started):
            try:
                callback()
            except Exception as error:  # noqa: BLE001 - a callback must not stop the pipeline
                self._record_error(f"on_started callback failed: {error!r}")

    def _prime(self, records: int = 2_000) -> None:
        """Append a few element records to the warm-up log, which no stream owns (``store.log_reading``): they make the
        query's first batch, and ``start`` waits for it.

        The first batch in a JVM pays for class loading, the Python data source's processes, code generation and
        the JIT: measured ≈ 13 s on 2 cores, during an ingest flood, so that every window of the first 20 s of the
        flood waited that long; once warm, such a batch takes ≈ 0.3 s. Primed, "ready" means warm."""
        append_warm_up_records(self.root, records, int(time.time() * 1e6))

    def _wait_primed(self, timeout: float = 120.0) -> None:
        """Until the query has run its first batch (the primed records, and whatever else was waiting)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stopping.is_set() and not self._abandoned.is_set():
            with self._lock:
                if self._status.batches or self._status.errors:
                    return
            time.sleep(0.05)
        if not self._abandoned.is_set():
            log.warning("window pipeline: no first batch after %.0f s", timeout)

    def abandon_start(self) -> None:
        """A stop asked for while ``start`` runs (in the background): it returns at its next step instead of starting
        the query and waiting for its first batch (≈ 5 s of a server stopped just after it starts). Call
        ``stop`` once it has returned."""
        self._abandoned.set()

    def _restart_from_scratch_if_asked(self) -> None:
        """A migrated log (``store.migrate``) no longer matches the checkpoint's positions: start a new one."""
        marker = self.checkpoint.parent / RESET_MARKER
        if not marker.exists():
            return
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is not None:
                stream.windows.restart_batches()
        marker.unlink()
        log.warning("window pipeline: a new checkpoint (the element logs were migrated); every log is read again")

    def start_in_background(self) -> threading.Thread:
        """``start()`` in a daemon thread, so a server can answer requests while Spark boots."""
        def run() -> None:
            try:
                self.start()
            except Exception:  # recorded in status by start()
                log.exception("window pipeline did not start")
        thread = threading.Thread(target=run, name="window-pipeline-start", daemon=True)
        thread.start()
        return thread

    def stop(self, *, stop_session: bool = False, timeout: float = 30.0) -> None:
        """Stop between batches (never cutting one). The session is process-wide: ``stop_session`` stops it only if
        this pipeline's start created it (a session that was running before, e.g. a test module's, is kept)."""
        self._stopping.set()
        query = self._query
        if query is not None:
            stop_element_pipeline(query, self.checkpoint, timeout)
        if self._supervisor is not None:
            self._supervisor.join(timeout)
        self.ready.clear()
        if stop_session and self._owns_session and self.spark is not None:
            self.spark.stop()
            self.spark = None

    def _start_query(self) -> StreamingQuery:
        assert self.spark is not None
        self._due = None  # the start removes the due file
        return start_element_pipeline(self.spark, self.root, self.checkpoint, self.apply_batch, self.trigger_seconds,
                                      query_name=None, min_batch_interval=self.min_batch_interval,
                                      flood_batch_interval=self.flood_batch_interval,
                                      idle_batch_interval=self.idle_batch_interval)

    def _supervise(self) -> None:
        """Restart the query after a failed batch (Spark re-runs that batch from the checkpoint)."""
        backoff = 1.0
        while not self._stopping.is_set():
            query = self._query
            if query is None:
                return
            try:
                if not query.awaitTermination(0.5):  # type: ignore[arg-type]  # seconds (pyspark's stub says int)
                    continue
            except Exception as error:  # StreamingQueryException: a batch raised
                log.warning("window pipeline query failed: %s", str(error).splitlines()[0] if str(error) else error)
            if self._stopping.is_set():
                return
            self._stopping.wait(backoff)
            if self._stopping.is_set():
                return
            backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
            try:
                self._query = self._start_query()
                with self._lock:
                    self._status.restarts += 1
                log.info("window pipeline query restarted")
            except Exception as error:  # noqa: BLE001 - keep supervising; status shows it
                self._record_error(f"pipeline restart failed: {error}")

    # -- status -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Pipeline state for ``/status``: batches, timing, errors, and per stream its sequences."""
        with self._lock:
            s = copy.copy(self._status)
            s.last_batch_phases, s.skipped_empty_windows = dict(s.last_batch_phases), dict(s.skipped_empty_windows)
            s.window_latency = dict(s.window_latency)
        return status_document(s, self.catalog, self._query, self.ready.is_set())

    def caught_up(self, stream: Stream) -> bool:
        """True once the pipeline has read everything committed to ``stream`` (elements, stream time and
        registrations; call ``stream.flush()`` first for "everything accepted")."""
        state = stream.windows.state
        return (state.seen >= stream.head()
                and (stream.stream_time is None or state.stream_time == stream.stream_time)
                and all(sequence.id in state.next_index for sequence in stream.windows.sequences()))

    def wait_caught_up(self, stream: Stream, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.caught_up(stream):
                return True
            time.sleep(0.02)
        return self.caught_up(stream)

    def _record_error(self, message: str) -> None:
        with self._lock:
            self._status.errors += 1
            self._status.last_error = message
            self._status.last_error_at = time.time()

    # -- the batch handler --------------------------------------------------------------------

    def apply_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        """foreachBatch handler: one Spark job summarizes the batch, ``sparql_ext.window_state.advance`` does the
        rest per stream (see the module doc). Raises (after recording) when a stream fails."""
        began = time.monotonic()
        stream_name = "-"
        try:
            self._retire_idle_sequences()
            assignable = self._assignable(batch_id)
            table = sequence_table((ident, name, row) for name, rows in assignable.items()
                                   for ident, row in rows.items())
            ranges = batch_ranges(batch_df, table).toArrow()  # the batch's one Spark job
            phases = {"job": time.monotonic() - began}
            summaries = _summaries(ranges)
            for name, (runs, spans) in fold_batch(ranges).items():
                summaries[name].runs, summaries[name].spans = runs, spans
            emitted = expired = 0
            steps: list[tuple[Stream, Step]] = []
            committed: Committed = []
            for stream_name, summary in summaries.items():
                advanced = self._advance(stream_name, summary, batch_id, set(assignable.get(stream_name, {})))
                if advanced is not None:
                    stream, step, revisions = advanced
                    emitted += len(step.windows)
                    steps.append((stream, step))
                    if revisions:
                        committed.append((stream, revisions))
            stream_name = "-"
            self._call_back(committed)
            for stream, step in steps:  # after the callbacks: a rule reads the elements of the windows it fires on
                expired += self._expire(stream, step)
            self._write_due()
            phases["advance"] = time.monotonic() - began - sum(phases.values())
        except Exception as error:
            message = f"batch {batch_id}, stream {stream_name}: {type(error).__name__}: {error}"
            log.exception("window pipeline: %s", message)
            self._record_error(message)
            raise
        seconds = time.monotonic() - began
        with self._lock:
            self._status.batches += 1
            self._status.last_batch_id = batch_id
            self._status.last_batch_seconds = round(seconds, 4)
            self._status.batch_seconds.observe(seconds)
            self._status.last_batch_phases = {name: round(seconds, 4) for name, seconds in phases.items()}
            self._status.windows_emitted += emitted
            self._status.expired_elements += expired

    def _write_due(self) -> None:
        """After a batch: what each stream's next window waits for (``next_due``), for the source to start the next
        batch as soon as a record completes a window (``pipeline.element_source.batch_due``). Written when changed."""
        hints: DueHints = {}
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is not None:
                due = next_due(stream.windows.state, stream.windows.sequences(), stream, stream.config.lateness)
                hints[name] = None if due is None else [due.time, due.ordinal]
        if hints != self._due:
            write_due_hints(self.checkpoint, hints)
            self._due = hints

    def _retire_idle_sequences(self) -> None:
        """Between batches: sequences nobody holds or used for a while stop being computed (``WindowLog.retire_idle``);
        their open windows are forgotten with the next state the stream commits."""
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is not None:
                for ident in stream.windows.retire_idle():
                    log.info("stream %s: sequence %s retired (no rule or continuous response reads it)", name, ident)

    def _assignable(self, batch_id: int) -> dict[str, dict[str, AssignmentRow]]:
        """Per stream, the sequences the batch job assigns elements to, as its rows (``window_state.assignable``) as
        of the stream's committed state; streams that already committed this batch (a replay) are left out."""
        result: dict[str, dict[str, AssignmentRow]] = {}
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is None or stream.windows.state.batch >= batch_id:
                continue
            specs = assignable(stream.windows.state, stream.windows.sequences())
            if specs:
                result[name] = specs
        return result

    def _advance(self, name: str, summary: BatchSummary, batch_id: int, assigned: set[str]
                 ) -> tuple[Stream, Step, list[WindowRevision]] | None:
        """One stream's batch: the pure step, then its windows and state committed (idempotent per batch id). Returns
        the stream, the step and the revisions this call committed; None for a stream deleted meanwhile or a replayed
        batch."""
        stream = self.catalog.find(name)
        if stream is None:  # deleted (or not opened by this server): its records mean nothing now
            log.debug("batch %d: skipping unknown stream %s", batch_id, name)
            return None
        state = stream.windows.state
        if state.batch >= batch_id:  # replay of a batch this stream already committed
            return None
        needed = summary.max_ordinal
        if needed is not None and not stream.wait_for(lambda: stream.head() >= needed, _INDEX_CATCH_UP_SECONDS):
            raise PipelineError(f"the index of stream {name} stays behind its log (head {stream.head()}, "
                               f"log has element {summary.max_ordinal})")
        step = advance(state, summary, stream.windows.sequences(), stream, assigned=assigned,
                       lateness=stream.config.lateness, retention=stream.config.retention)
        for ident, count in step.skipped.items():
            key = f"{name}/{ident}"
            with self._lock:
                self._status.skipped_empty_windows[key] = self._status.skipped_empty_windows.get(key, 0) + count
            log.warning("stream %s, sequence %s: skipped %d empty windows", name, ident, count)
        revisions = [new_revision(d.sequence, d.index, d.start, d.end, d.runs) for d in step.windows]
        if not stream.windows.commit(batch_id, revisions, step.state):
            return stream, step, []
        if revisions:
            self._observe_latency(stream, revisions)
        return stream, step, revisions

    def _call_back(self, committed: Committed) -> None:
        """The ``on_windows`` callbacks, once per batch with every stream's new revisions: the rules fire on all of
        them together (one durable write per output stream and one for their statuses, not one per input stream:
        with 100 streams completing windows in one batch, those writes were most of the batch)."""
        if not committed:
            return
        for callback in list(self.on_windows):
            try:
                callback(committed)
            except Exception as error:  # noqa: BLE001 - a callback must not stop the pipeline
                self._record_error(f"on_windows callback failed: {error!r}")

    def _observe_latency(self, stream: Stream, revisions: list[WindowRevision]) -> None:
        """The latency of ``revisions`` into the stream's histogram (``pipeline.status.observe_window_latency``)."""
        with self._lock:
            histogram = self._status.window_latency.setdefault(stream.config.name, Histogram())
        observe_window_latency(histogram, stream, revisions)

    @staticmethod
    def _expire(stream: Stream, step: Step) -> int:
        """Retention, after the batch's windows are committed: the cut ``advance`` decided from the committed
        state (durable first, see ``Stream.expire_before``). Returns how many elements expired."""
        if step.expire_before is None:
            return 0
        count = stream.expire_before(step.expire_before)
        log.debug("stream %s: expired %d elements below ordinal %d", stream.config.name, count, step.expire_before)
        return count


def _summaries(ranges: pa.Table) -> dict[str, BatchSummary]:
    """Per stream, the batch's max element ordinal/time, max punctuation and registrations, from the rows
    of the batch job (an element appears once per sequence of its stream: harmless for maxima)."""
    result: dict[str, BatchSummary] = {}
    if ranges.num_rows == 0:
        return result
    rows = ranges.select(["stream", "kind", "ordinal", "t", "position", "sequence"])
    grouped = rows.group_by(["stream", "kind"]).aggregate([("ordinal", "max"), ("t", "max")]).to_pylist()
    for row in grouped:
        summary = result.setdefault(row["stream"], BatchSummary())
        if row["kind"] == "element":
            summary.max_ordinal, summary.max_time = row["ordinal_max"], row["t_max"]
        elif row["kind"] == "punctuation":
            summary.max_punctuation = row["t_max"]
    registrations = rows.filter(pc.equal(rows.column("kind"), "registration")).to_pylist()
    for row in registrations:
        result[row["stream"]].registrations.append((row["position"], row["sequence"], row["ordinal"] or 0))
    for summary in result.values():
        summary.registrations.sort()
    return result
