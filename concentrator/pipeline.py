"""The continuous path (DESIGN §4): a Spark streaming query over every stream's element log that
assigns elements to the windows of registered sequences and materializes complete windows as revisions.

One micro-batch (``apply_batch``) is, in the common case, ONE Spark job:

1. the driver lists the sequences that are assignable as of each stream's committed state (live — their
   registration row has been read — with a bound origin) as a small literal table, and
   ``assignment.assign_ranges`` runs one fixed-shape plan over the batch: every record once, every element
   with the k range of each window sequence of its stream. The result is collected once, as Arrow;
2. the driver summarizes the batch per stream from those rows (max element ordinal and time, max
   punctuation time, registration rows), decides which sequences are live and which origins bind, and folds
   the k ranges into ordinal runs per (stream, sequence, k) (``fold_runs``, vectorized gaps and islands);
3. only in a batch where a sequence *becomes* assignable (its registration row is read, or its t0 binds):
   a second job assigns it every element read so far, this batch's included, from the stream's index
   (its history), through the same plan;
4. the driver merges the runs into the open windows of ``PipelineState``, advances stream time and the
   watermark, materializes every window that became complete, and commits revisions and state per stream
   (``WindowLog.commit`` is idempotent per batch id, so a replayed batch materializes nothing twice);
5. streams with a ``retention`` then expire the elements older than it that no open or next window of any
   registered sequence can hold (``_expire``; the cut is durable, see ``Stream.expire_before``).

Decisions are made only from what the pipeline has read (``PipelineState.seen``/``stream_time``), never
from the stream's live index head, so a batch replayed after a crash decides exactly as before. The
windows produced are those of ``sparql_ext.windowing.windows`` (the reference) with the same watermark.

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
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType

from concentrator.assignment import Runs as AssignedRuns
from concentrator.assignment import assign_ranges, fold_runs, sequence_table
from concentrator.element_source import start_element_pipeline, stop_element_pipeline
from concentrator.spark import SparkSettings, spark_session
from sparql_ext.windowing import WindowSpec, bounds, is_complete, window
from store.stream import Stream
from store.streams import StreamCatalog
from store.windows import PipelineState, Runs, WindowRevision, new_revision

log = logging.getLogger(__name__)

#: Consecutive empty windows one sequence may emit in one batch before the rest of the empty stretch is
#: skipped (a stream quiet for a day under a 1 s step would otherwise emit 86,400 empty revisions at once).
MAX_EMPTY_RUN = 10_000
#: Under a steady flow, a batch with data starts no sooner than this after the previous one (an isolated
#: element still starts one at once): bounds the pipeline's CPU share while streams ingest fast, at the cost
#: of up to this much latency then (see ``ElementLogReader.latestOffset``).
MIN_BATCH_INTERVAL = 0.25
_INDEX_CATCH_UP_SECONDS = 30.0  # the index is updated right after the log fsync: this is a safety net
_MAX_BACKOFF_SECONDS = 60.0

_HISTORY_SCHEMA = StructType([
    StructField("stream", StringType()), StructField("kind", StringType()), StructField("ordinal", LongType()),
    StructField("t", LongType()),
])


@dataclass
class _Summary:
    """What one batch holds for one stream (from the summary job)."""

    max_ordinal: int | None
    max_time: int | None
    max_punctuation: int | None
    registrations: list[tuple[int, str, int]]  # (log position, sequence id, h), in log order


@dataclass
class _Plan:
    """One stream's work in a batch, prepared in the driver before the assignment job."""

    stream: Stream
    state: PipelineState
    summary: _Summary
    specs: dict[str, WindowSpec]  # live sequences with a bound origin (bound spec)
    history: list[tuple[str, WindowSpec, tuple[int, int]]] = field(default_factory=list)
    # ^ sequences that became assignable in this batch: (sequence, bound spec, index ordinal range to assign)


@dataclass
class PipelineStatus:
    """Counters for ``/status``; written by the batch thread, read by request threads."""

    batches: int = 0
    last_batch_id: int | None = None
    last_batch_seconds: float | None = None
    last_batch_phases: dict[str, float] = field(default_factory=dict)  # seconds: job, plan, [history,] complete
    last_error: str | None = None
    last_error_at: float | None = None
    errors: int = 0
    restarts: int = 0
    windows_emitted: int = 0
    expired_elements: int = 0
    skipped_empty_windows: dict[str, int] = field(default_factory=dict)  # "stream/sequence" -> windows


class WindowPipeline:
    """The Spark streaming query over ``<data_dir>/streams`` and its foreachBatch handler."""

    def __init__(self, catalog: StreamCatalog, data_dir: Path, settings: SparkSettings | None = None,
                 *, trigger_seconds: float = 0.0, min_batch_interval: float = MIN_BATCH_INTERVAL) -> None:
        self.catalog = catalog
        self.data_dir = data_dir
        self.settings = settings or SparkSettings()
        self.trigger_seconds = trigger_seconds
        self.min_batch_interval = min_batch_interval
        self.root = data_dir / "streams"
        self.checkpoint = data_dir / "spark" / "checkpoint"
        self.ready = threading.Event()  # set once the query runs (session start takes seconds)
        self.spark: SparkSession | None = None
        self._query: StreamingQuery | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._lock = threading.Lock()
        self._status = PipelineStatus()
        # Called after a batch commits new window revisions of a stream (e.g. the rule runner); a callback's
        # exception is recorded and does not stop the pipeline.
        self.on_windows: list[Callable[[Stream, list[WindowRevision]], None]] = []

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Create the session and start the query (blocking, ~6 s the first time in a process)."""
        try:
            self.spark = spark_session(self.settings)
            self.root.mkdir(parents=True, exist_ok=True)
            self._stopping.clear()
            self._query = self._start_query()
        except Exception as error:
            self._record_error(f"pipeline start failed: {error}")
            raise
        self._supervisor = threading.Thread(target=self._supervise, name="window-pipeline", daemon=True)
        self._supervisor.start()
        self.ready.set()

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
        """Stop between batches (never cutting one); the session is kept unless asked (it is process-wide)."""
        self._stopping.set()
        query = self._query
        if query is not None:
            stop_element_pipeline(query, self.checkpoint, timeout)
        if self._supervisor is not None:
            self._supervisor.join(timeout)
        self.ready.clear()
        if stop_session and self.spark is not None:
            self.spark.stop()
            self.spark = None

    def _start_query(self) -> StreamingQuery:
        assert self.spark is not None
        return start_element_pipeline(self.spark, self.root, self.checkpoint, self.apply_batch, self.trigger_seconds,
                                      query_name=None, min_batch_interval=self.min_batch_interval)

    def _supervise(self) -> None:
        """Restart the query after a failed batch (Spark re-runs that batch from the checkpoint)."""
        backoff = 1.0
        while not self._stopping.is_set():
            query = self._query
            if query is None:
                return
            try:
                if not query.awaitTermination(0.5):
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
            s = copy.deepcopy(self._status)
        query = self._query
        streams: dict[str, Any] = {}
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is None:
                continue
            state = stream.windows.state
            streams[name] = {
                "batch": state.batch, "watermark": state.watermark, "stream_time": state.stream_time,
                "seen": state.seen,
                "sequences": {
                    seq.id: {"ref": seq.ref, "live": seq.id in state.next_index,
                             "pending": seq.spec.origin is None and seq.id not in state.origins,
                             "next_index": state.next_index.get(seq.id),
                             "open_windows": len(state.open.get(seq.id, {})),
                             "emitted": stream.windows.emitted(seq.id)}
                    for seq in stream.windows.sequences()},
            }
        return {
            "ready": self.ready.is_set(), "active": bool(query is not None and query.isActive),
            "batches": s.batches, "last_batch_id": s.last_batch_id, "last_batch_seconds": s.last_batch_seconds,
            "last_batch_phases": s.last_batch_phases,
            "last_error": s.last_error, "last_error_at": s.last_error_at, "errors": s.errors,
            "restarts": s.restarts, "windows_emitted": s.windows_emitted, "expired_elements": s.expired_elements,
            "skipped_empty_windows": s.skipped_empty_windows, "streams": streams,
        }

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
        """foreachBatch handler; see the module doc. Raises (after recording) when a stream fails."""
        began = time.monotonic()
        stream_name = "-"
        try:
            self._retire_idle_sequences()
            assignable = self._assignable(batch_id)
            table = sequence_table((ident, name, spec) for name, specs in assignable.items()
                                   for ident, spec in specs.items())
            ranges = assign_ranges(batch_df, table).toArrow()  # the batch's one Spark job
            phases = {"job": time.monotonic() - began}
            plans = []
            for stream_name, summary in _summaries(ranges).items():
                plan = self._plan(stream_name, summary, batch_id, set(assignable.get(stream_name, {})))
                if plan is not None:
                    plans.append(plan)
            stream_name = "-"
            runs = fold_runs(ranges)
            phases["plan"] = time.monotonic() - began - sum(phases.values())
            if any(plan.history for plan in plans):
                _merge_into(runs, self._assign_history(batch_df.sparkSession, plans))
                phases["history"] = time.monotonic() - began - sum(phases.values())
            emitted = expired = 0
            for plan in plans:
                stream_name = plan.stream.config.name
                emitted += self._complete(plan, runs.get(stream_name, {}), batch_id)
            phases["complete"] = time.monotonic() - began - sum(phases.values())
            for plan in plans:
                stream_name = plan.stream.config.name
                expired += self._expire(plan.stream)
            if expired:
                phases["expire"] = time.monotonic() - began - sum(phases.values())
        except Exception as error:
            message = f"batch {batch_id}, stream {stream_name}: {type(error).__name__}: {error}"
            log.exception("window pipeline: %s", message)
            self._record_error(message)
            raise
        with self._lock:
            self._status.batches += 1
            self._status.last_batch_id = batch_id
            self._status.last_batch_seconds = round(time.monotonic() - began, 4)
            self._status.last_batch_phases = {name: round(seconds, 4) for name, seconds in phases.items()}
            self._status.windows_emitted += emitted
            self._status.expired_elements += expired

    def _retire_idle_sequences(self) -> None:
        """Between batches: sequences nobody holds or used for a while stop being computed (``WindowLog.retire_idle``);
        their open windows are forgotten with the next state the stream commits."""
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is not None:
                for ident in stream.windows.retire_idle():
                    log.info("stream %s: sequence %s retired (no rule or continuous response reads it)", name, ident)

    def _assignable(self, batch_id: int) -> dict[str, dict[str, WindowSpec]]:
        """Per stream, the sequences Spark assigns this batch's elements to: those live with a bound origin
        as of the stream's committed state (a sequence that becomes assignable in this batch gets all of its
        elements, this batch's included, from the index instead; see ``_plan``). Time-width, count-step
        sequences are placed by the driver (``_materialize``) and left out."""
        result: dict[str, dict[str, WindowSpec]] = {}
        for name in self.catalog.names():
            stream = self.catalog.find(name)
            if stream is None:
                continue
            state = stream.windows.state
            if state.batch >= batch_id:
                continue
            specs = {}
            for sequence in stream.windows.sequences():
                spec = _bound_spec(sequence.spec, state, sequence.id)
                if sequence.id in state.next_index and spec is not None and spec.kind == spec.step_kind:
                    specs[sequence.id] = spec
            if specs:
                result[name] = specs
        return result

    def _plan(self, name: str, summary: _Summary, batch_id: int, assigned: set[str]) -> _Plan | None:
        """Driver: liveness, origins and histories of one stream's sequences for this batch.

        ``assigned``: the sequences whose assignments the batch job computed (``_assignable``)."""
        stream = self.catalog.find(name)
        if stream is None:  # deleted (or not opened by this server): its records mean nothing now
            log.debug("batch %d: skipping unknown stream %s", batch_id, name)
            return None
        state = copy.deepcopy(stream.windows.state)
        if state.batch >= batch_id:  # replay of a batch this stream already committed
            return None
        if summary.max_ordinal is not None and not stream.wait_for(
                lambda: stream.head() >= summary.max_ordinal, _INDEX_CATCH_UP_SECONDS):
            raise RuntimeError(f"the index of stream {name} stays behind its log (head {stream.head()}, "
                               f"log has element {summary.max_ordinal})")
        state.seen = max(state.seen, summary.max_ordinal or 0)
        for retired in [ident for ident in state.open if stream.windows.sequence(ident) is None]:
            del state.open[retired]  # its next_index stays: its revisions remain readable by id
        for _, ident, _h in summary.registrations:
            sequence = stream.windows.sequence(ident)
            if sequence is None:
                log.warning("batch %d, stream %s: registration of unknown sequence %s", batch_id, name, ident)
                continue
            if ident not in state.next_index:
                state.next_index[ident] = sequence.spec.first
        plan = _Plan(stream, state, summary, {})
        for sequence in stream.windows.sequences():
            ident = sequence.id
            if ident not in state.next_index:
                continue  # registration row not read yet: not live
            spec = _bound_spec(sequence.spec, state, ident)
            if spec is None and sequence.spec.anchor is not None and sequence.spec.anchor <= state.seen and (
                    (t0 := stream.time_of(sequence.spec.anchor)) is not None):
                state.origins[ident] = t0
                spec = replace(sequence.spec, origin=t0)
            if spec is None:
                continue  # pending: nothing can be assigned yet
            plan.specs[ident] = spec
            if spec.kind != spec.step_kind:
                continue  # time width, count step: membership is computed at completion (see _materialize)
            if ident not in assigned:
                # Became assignable in this batch (registration read, or t0 bound): every element read so
                # far, this batch's included, is its history, assigned from the index.
                history = _history_range(spec, stream, state.seen)
                if history is not None:
                    plan.history.append((ident, spec, history))
        return plan

    def _assign_history(self, spark: SparkSession, plans: list[_Plan]) -> AssignedRuns:
        """A second job, only in a batch where a sequence becomes assignable: its history from the index,
        through the same plan as the batch (a local frame instead of the source)."""
        frames = []
        registrations = []
        for plan in plans:
            if not plan.history:
                continue
            name = plan.stream.config.name
            first = min(history[0] for _, _, history in plan.history)
            last = max(history[1] for _, _, history in plan.history)
            found = plan.stream.elements(first, last)  # one copy per stream: its fresh sequences share it
            frames.append(pd.DataFrame({"stream": name, "kind": "element", "ordinal": [e.ordinal for e in found],
                                        "t": [e.time for e in found]}))
            registrations.extend((ident, name, spec) for ident, spec, _ in plan.history)
        frame = pd.concat(frames, ignore_index=True)
        df = spark.createDataFrame(frame, _HISTORY_SCHEMA).selectExpr(
            "stream", "kind", "ordinal", "timestamp_micros(t) AS time", "CAST(NULL AS BIGINT) AS position",
            "CAST(NULL AS STRING) AS sequence")
        return fold_runs(assign_ranges(df, sequence_table(registrations)).toArrow())

    def _complete(self, plan: _Plan, runs: dict[str, dict[int, list[list[int]]]], batch_id: int) -> int:
        """Merge runs, advance time, materialize complete windows and commit; returns windows emitted."""
        stream, state, summary = plan.stream, plan.state, plan.summary
        for ident, by_k in runs.items():
            opened = state.open.setdefault(ident, {})
            for k, new in by_k.items():
                opened[k] = _merge_runs(opened.get(k, []), new)
        times = [t for t in (state.stream_time, summary.max_time, summary.max_punctuation) if t is not None]
        if times:
            state.stream_time = max(times)
            state.watermark = state.stream_time - stream.config.lateness
        revisions: list[WindowRevision] = []
        for ident, spec in plan.specs.items():
            revisions.extend(self._materialize(stream, state, ident, spec))
        if stream.windows.commit(batch_id, revisions, state) and revisions:
            for callback in list(self.on_windows):
                try:
                    callback(stream, revisions)
                except Exception as error:  # noqa: BLE001 - a callback must not stop the pipeline
                    self._record_error(f"on_windows callback failed: {error!r}")
        return len(revisions)

    def _materialize(self, stream: Stream, state: PipelineState, ident: str, spec: WindowSpec) -> list[WindowRevision]:
        """Every window of one sequence that became complete, in order of k, popped from the open windows."""
        out: list[WindowRevision] = []
        opened = state.open.setdefault(ident, {})
        k = state.next_index[ident]
        limit = None if spec.count is None else spec.first + spec.count
        empty_run = 0
        while (limit is None or k < limit) and self._is_complete(spec, k, stream, state):
            if spec.kind == "time" and spec.step_kind == "count":
                # assign_windows does not place time-width/count-step windows (a window starts at every
                # step-th element): their members are read here, in the driver, from the stream's index.
                # Complete means the watermark passed the end, so every member has been read already.
                found = window(spec, k, stream)
                assert found is not None
                start, end, members = found.start, found.end, _runs_of(found.elements)
                opened.pop(k, None)
            else:
                window_bounds = bounds(spec, k, stream)
                assert window_bounds is not None
                start, end = window_bounds
                members = tuple((first, last) for first, last in opened.pop(k, []))
            if not members:
                empty_run += 1
                if empty_run > MAX_EMPTY_RUN:
                    target = self._skip_target(spec, k, opened, state, limit)
                    if target > k:
                        key = f"{stream.config.name}/{ident}"
                        with self._lock:
                            skipped = self._status.skipped_empty_windows
                            skipped[key] = skipped.get(key, 0) + target - k
                        log.warning("stream %s, sequence %s: skipped %d empty windows %d..%d",
                                    stream.config.name, ident, target - k, k, target - 1)
                        k, empty_run = target, 0
                        continue
            else:
                empty_run = 0
            out.append(new_revision(ident, k, start, end, members))
            k += 1
        state.next_index[ident] = k
        for stale in [j for j in opened if j < k]:  # cannot happen within the lateness rules; keep state small
            log.debug("stream %s, sequence %s: dropping late assignment to window %d", stream.config.name, ident, stale)
            del opened[stale]
        if not opened:
            state.open.pop(ident, None)
        return out

    def _expire(self, stream: Stream) -> int:
        """Retention (DESIGN: elements older than every registered window and the retention expire): after
        the batch's windows are committed, drop the oldest elements whose time is below the stream time
        minus ``config.retention`` and that no open or future window of any registered sequence can hold.
        Decided from the committed pipeline state only; returns how many elements expired."""
        retention = stream.config.retention
        state = stream.windows.state
        if retention is None or state.stream_time is None or stream.first_ordinal > state.seen:
            return 0
        bound = _expiry_bound(stream, state)
        if bound is None:
            return 0
        limit, threshold = bound
        threshold = min(threshold, state.stream_time - retention)
        cut = stream.first_ordinal
        limit = min(limit, state.seen + 1)  # never what the pipeline has not read (and assigned) yet
        while cut < limit and (t := stream.time_of(cut)) is not None and t < threshold:
            cut += 1
        if cut <= stream.first_ordinal:
            return 0
        count = stream.expire_before(cut)
        log.debug("stream %s: expired %d elements below ordinal %d", stream.config.name, count, cut)
        return count

    @staticmethod
    def _is_complete(spec: WindowSpec, k: int, stream: Stream, state: PipelineState) -> bool:
        """``windowing.is_complete`` with the pipeline's own head (count windows), for deterministic replays."""
        if spec.kind == "count":
            window_bounds = bounds(spec, k, stream)
            return window_bounds is not None and state.seen >= window_bounds[1]
        return is_complete(spec, k, stream, state.watermark)

    @staticmethod
    def _skip_target(spec: WindowSpec, k: int, opened: dict[int, list[list[int]]], state: PipelineState,
                     limit: int | None) -> int:
        """After a long empty stretch of a time/time sequence: the next window holding an element read so
        far, or the first window not complete yet — every complete window in between is empty."""
        if spec.kind != "time" or spec.step_kind != "time" or spec.origin is None or state.watermark is None:
            return k
        reach = state.watermark - spec.origin - (0 if spec.backward else spec.width)
        first_incomplete = reach // spec.step + 1  # first k whose end is past the watermark
        candidates = [first_incomplete] + [j for j in opened if j > k]
        target = min(candidates)
        return max(k, target if limit is None else min(target, limit))


def _summaries(ranges: pa.Table) -> dict[str, _Summary]:
    """Per stream, the batch's max element ordinal/time, max punctuation and registrations, from the rows
    of the batch job (an element appears once per sequence of its stream: harmless for maxima)."""
    result: dict[str, _Summary] = {}
    if ranges.num_rows == 0:
        return result
    rows = ranges.select(["stream", "kind", "ordinal", "t", "position", "sequence"])
    grouped = rows.group_by(["stream", "kind"]).aggregate([("ordinal", "max"), ("t", "max")]).to_pylist()
    for row in grouped:
        summary = result.setdefault(row["stream"], _Summary(None, None, None, []))
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


def _bound_spec(spec: WindowSpec, state: PipelineState, ident: str) -> WindowSpec | None:
    """The spec with the origin the pipeline bound (``None`` while it is pending)."""
    if spec.origin is not None:
        return spec
    if ident in state.origins:
        return replace(spec, origin=state.origins[ident])
    return None


def _merge_into(runs: AssignedRuns, more: AssignedRuns) -> None:
    for stream, sequences in more.items():
        for ident, by_k in sequences.items():
            into = runs.setdefault(stream, {}).setdefault(ident, {})
            for k, new in by_k.items():
                into[k] = _merge_runs(into.get(k, []), new)


def _history_range(spec: WindowSpec, stream: Stream, last: int) -> tuple[int, int] | None:
    """Ordinals of the index to assign as history: from the first window's start up to ``last``."""
    if last < 1:
        return None
    assert spec.origin is not None
    if spec.kind == "count":
        lo = max(1, spec.origin + spec.first * spec.step)
    elif stream.config.lateness:
        lo = 1  # timestamps are not ordered by ordinal: no cheap lower bound
    else:
        at = spec.origin + spec.first * spec.step
        start = at - spec.width if spec.backward else at
        # forward windows hold [start, …): first element at or after start; backward (start, …]: after it
        before = stream.last_at_or_before(start if spec.backward else start - 1)
        lo = (before or 0) + 1
    lo = max(lo, stream.first_ordinal)
    return (lo, last) if lo <= last else None


def _expiry_bound(stream: Stream, state: PipelineState) -> tuple[int, int] | None:
    """(ordinal, time): every element still needed by an open window or by the next window of a registered
    sequence (live or not yet read) has an ordinal ≥ the first and a time ≥ the second; ``None`` if nothing
    may expire (a sequence whose anchor the index must still resolve)."""
    assert state.stream_time is not None
    limit, threshold = stream.head() + 1, state.stream_time
    for by_k in state.open.values():
        for runs in by_k.values():
            limit = min([limit] + [first for first, _ in runs])
    # A window whose start is not known yet starts after a time the stream has not reached (its anchor is
    # still to come, and elements come at most `lateness` late): (stream time − lateness, …) forward,
    # (… − width, …] backward.
    for sequence in stream.windows.sequences():
        spec = sequence.spec
        k = state.next_index.get(sequence.id, spec.first)
        if spec.count is not None and k >= spec.first + spec.count:
            continue  # finished: needs nothing
        unknown = state.stream_time - stream.config.lateness - spec.width + 1
        if spec.kind == "count":
            assert spec.origin is not None
            limit = min(limit, max(1, spec.origin + k * spec.step))
            continue
        if spec.step_kind == "count":
            if spec.anchor is None:
                # a dateTime anchor: bounds() finds o0 as the element after the last one before t0 — keep that one
                assert spec.origin is not None
                before = stream.last_at_or_before(spec.origin - 1)
                if before is None and stream.first_ordinal > 1:
                    return None
                limit = min(limit, before or limit)
            window_bounds = bounds(spec, k, stream)
            start = None if window_bounds is None else window_bounds[0]
        else:
            origin = _bound_spec(spec, state, sequence.id)
            t0 = origin.origin if origin is not None else (
                None if spec.anchor is None else stream.time_of(spec.anchor))
            start = None if t0 is None else t0 + k * spec.step - (spec.width if spec.backward else 0)
        if start is None:
            threshold = min(threshold, unknown)
        else:  # forward windows hold [start, …), backward (start, …]
            threshold = min(threshold, start + 1 if spec.backward else start)
    return limit, threshold


def _merge_runs(old: Iterable[list[int]], new: Iterable[list[int]]) -> list[list[int]]:
    """Union of inclusive ordinal runs, sorted, adjacent runs joined."""
    merged: list[list[int]] = []
    for first, last in sorted([list(r) for r in old] + [list(r) for r in new]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def _runs_of(ordinals: Iterable[int]) -> Runs:
    runs: list[list[int]] = []
    for o in ordinals:
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    return tuple((a, b) for a, b in runs)
