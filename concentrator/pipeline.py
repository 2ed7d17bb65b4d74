"""The continuous path (DESIGN §4): a Spark streaming query over every stream's element log that
assigns elements to the windows of registered sequences and materializes complete windows as revisions.

One micro-batch (``apply_batch``) does, for every stream that has new log records:

1. one Spark job summarizes the batch per stream (max element ordinal and time, max punctuation time,
   registration rows);
2. the driver decides which sequences are *live* (their registration row has been read) and which have a
   bound origin; a sequence that becomes assignable in this batch gets its *history* (elements at or
   before its registration, read from the stream's index) assigned too;
3. one Spark job assigns the batch's elements (and those histories) to windows with ``assign_windows``'s
   per-sequence parts, folds them into ordinal runs per (stream, sequence, k) — gaps and islands:
   ``ordinal − row_number()`` is constant along a run — and collects the runs;
4. the driver merges the runs into the open windows of ``PipelineState``, advances stream time and the
   watermark, materializes every window that became complete, and commits revisions and state per stream
   (``WindowLog.commit`` is idempotent per batch id, so a replayed batch materializes nothing twice).

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
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType

from concentrator.assignment import assign_one
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
_INDEX_CATCH_UP_SECONDS = 30.0  # the index is updated right after the log fsync: this is a safety net
_MAX_BACKOFF_SECONDS = 60.0

_HISTORY_SCHEMA = StructType([
    StructField("stream", StringType()), StructField("ordinal", LongType()), StructField("t", LongType()),
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
    assign: list[tuple[str, WindowSpec, int | None, tuple[int, int] | None]] = field(default_factory=list)
    # ^ (sequence, spec, live elements after this ordinal (None: all), history ordinal range or None)


@dataclass
class PipelineStatus:
    """Counters for ``/status``; written by the batch thread, read by request threads."""

    batches: int = 0
    last_batch_id: int | None = None
    last_batch_seconds: float | None = None
    last_batch_phases: dict[str, float] = field(default_factory=dict)  # seconds: summary, plan, assign, complete
    last_error: str | None = None
    last_error_at: float | None = None
    errors: int = 0
    restarts: int = 0
    windows_emitted: int = 0
    skipped_empty_windows: dict[str, int] = field(default_factory=dict)  # "stream/sequence" -> windows


class WindowPipeline:
    """The Spark streaming query over ``<data_dir>/streams`` and its foreachBatch handler."""

    def __init__(self, catalog: StreamCatalog, data_dir: Path, settings: SparkSettings | None = None,
                 *, trigger_seconds: float = 0.0) -> None:
        self.catalog = catalog
        self.data_dir = data_dir
        self.settings = settings or SparkSettings()
        self.trigger_seconds = trigger_seconds
        self.root = data_dir / "streams"
        self.checkpoint = data_dir / "spark" / "checkpoint"
        self.ready = threading.Event()  # set once the query runs (session start takes seconds)
        self.spark: SparkSession | None = None
        self._query: StreamingQuery | None = None
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._lock = threading.Lock()
        self._status = PipelineStatus()

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
                                      query_name=None)

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
            "restarts": s.restarts, "windows_emitted": s.windows_emitted,
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
        batch_df = batch_df.persist()  # read the log slices once for both jobs
        try:
            plans = []
            summaries = self._summaries(batch_df)
            phases = {"summary": time.monotonic() - began}
            for stream_name, summary in summaries.items():
                plan = self._plan(stream_name, summary, batch_id)
                if plan is not None:
                    plans.append(plan)
            stream_name = "-"
            phases["plan"] = time.monotonic() - began - sum(phases.values())
            runs = self._assign(batch_df, plans)
            phases["assign"] = time.monotonic() - began - sum(phases.values())
            emitted = 0
            for plan in plans:
                stream_name = plan.stream.config.name
                emitted += self._complete(plan, runs.get(stream_name, {}), batch_id)
            phases["complete"] = time.monotonic() - began - sum(phases.values())
        except Exception as error:
            message = f"batch {batch_id}, stream {stream_name}: {type(error).__name__}: {error}"
            log.exception("window pipeline: %s", message)
            self._record_error(message)
            raise
        finally:
            batch_df.unpersist()
        with self._lock:
            self._status.batches += 1
            self._status.last_batch_id = batch_id
            self._status.last_batch_seconds = round(time.monotonic() - began, 4)
            self._status.last_batch_phases = {name: round(seconds, 4) for name, seconds in phases.items()}
            self._status.windows_emitted += emitted

    def _summaries(self, batch_df: DataFrame) -> dict[str, _Summary]:
        """Job 1: per stream, the batch's max element ordinal/time, max punctuation and registrations."""
        kind = F.col("kind")
        micros = F.unix_micros("time")
        rows = batch_df.groupBy("stream").agg(
            F.max(F.when(kind == "element", F.col("ordinal"))).alias("max_ordinal"),
            F.max(F.when(kind == "element", micros)).alias("max_time"),
            F.max(F.when(kind == "punctuation", micros)).alias("max_punctuation"),
            F.collect_list(F.when(kind == "registration", F.struct("position", "sequence", "ordinal"))).alias("regs"),
        ).collect()
        return {row["stream"]: _Summary(row["max_ordinal"], row["max_time"], row["max_punctuation"],
                                        sorted((r["position"], r["sequence"], r["ordinal"] or 0) for r in row["regs"]))
                for row in rows}

    def _plan(self, name: str, summary: _Summary, batch_id: int) -> _Plan | None:
        """Driver: liveness, origins and histories of one stream's sequences for this batch."""
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
        seen_before = state.seen
        state.seen = max(state.seen, summary.max_ordinal or 0)
        registered_now: dict[str, int] = {}
        for _, ident, h in summary.registrations:
            sequence = stream.windows.sequence(ident)
            if sequence is None:
                log.warning("batch %d, stream %s: registration of unknown sequence %s", batch_id, name, ident)
                continue
            if ident not in state.next_index:
                state.next_index[ident] = sequence.spec.first
                registered_now[ident] = h
        plan = _Plan(stream, state, summary, {})
        for sequence in stream.windows.sequences():
            ident = sequence.id
            if ident not in state.next_index:
                continue  # registration row not read yet: not live
            spec = sequence.spec
            bound_now = False
            if spec.origin is None:
                if ident in state.origins:
                    spec = replace(spec, origin=state.origins[ident])
                elif spec.anchor is not None and spec.anchor <= state.seen and (
                        (t0 := stream.time_of(spec.anchor)) is not None):
                    state.origins[ident] = t0
                    spec = replace(spec, origin=t0)
                    bound_now = True
                else:
                    continue  # pending: nothing can be assigned yet
            plan.specs[ident] = spec
            if spec.kind != spec.step_kind:
                continue  # time width, count step: membership is computed at completion (see _materialize)
            if ident in registered_now or bound_now:
                # Elements up to here were read before the sequence could take them: its history.
                last = registered_now.get(ident, seen_before)
                plan.assign.append((ident, spec, last, _history_range(spec, stream, last)))
            else:
                plan.assign.append((ident, spec, None, None))
        return plan

    def _assign(self, batch_df: DataFrame, plans: list[_Plan]) -> dict[str, dict[str, dict[int, list[list[int]]]]]:
        """Job 2: window assignment of all streams' sequences, folded into runs; stream -> seq -> k -> runs."""
        elements = batch_df.where(F.col("kind") == "element").select("stream", "ordinal", "time")
        parts: list[DataFrame] = []
        for plan in plans:
            name = plan.stream.config.name
            for ident, spec, after, history in plan.assign:
                live = elements if after is None else elements.where(F.col("ordinal") > F.lit(after))
                part = assign_one(live, ident, name, spec)
                if part is not None:
                    parts.append(part)
                if history is not None:
                    past = self._history_frame(batch_df.sparkSession, plan.stream, history)
                    part = assign_one(past, ident, name, spec)
                    if part is not None:
                        parts.append(part)
        result: dict[str, dict[str, dict[int, list[list[int]]]]] = {}
        if not parts:
            return result
        assigned = reduce(DataFrame.unionByName, parts)
        order = Window.partitionBy("stream", "sequence", "k").orderBy("ordinal")
        islands = assigned.withColumn("_island", F.col("ordinal") - F.row_number().over(order))
        runs = islands.groupBy("stream", "sequence", "k", "_island").agg(
            F.min("ordinal").alias("first"), F.max("ordinal").alias("last"))
        for row in runs.select("stream", "sequence", "k", "first", "last").collect():
            by_k = result.setdefault(row["stream"], {}).setdefault(row["sequence"], {})
            by_k.setdefault(row["k"], []).append([row["first"], row["last"]])
        return result

    @staticmethod
    def _history_frame(spark: SparkSession, stream: Stream, history: tuple[int, int]) -> DataFrame:
        """The index's elements ``history`` (ordinals, inclusive) as an element frame, through Arrow."""
        found = stream.elements(*history)
        frame = pd.DataFrame({"stream": [stream.config.name] * len(found),
                              "ordinal": [e.ordinal for e in found], "t": [e.time for e in found]})
        df = spark.createDataFrame(frame, _HISTORY_SCHEMA)
        return df.select("stream", "ordinal", F.timestamp_micros("t").alias("time"))

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
        stream.windows.commit(batch_id, revisions, state)
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
