"""Window assignment on Spark: which windows k of which registered sequence each element belongs to.

The semantics are those of ``sparql_ext.windowing`` (the pure-Python reference; docs/streams.md, "WindowRef"), and
what the batch job computes for one sequence is its kind's ``AssignmentRow`` (``spec.window_kind.row``;
``sparql_ext.window_state.assign_ranges`` is the same arithmetic on numpy arrays, which the pure step's tests run).

**Data-driven.** The registered sequences are data, not plan: one row per (stream, sequence) with a handful of
integers (``sparql_ext.window_data.AssignmentRow``), and ONE plan of fixed shape assigns every element of a batch
to every window of every sequence of its stream, whatever the number of sequences (one more shape: with session
sequences registered). Windows in arithmetic progression (time and count windows) are the same arithmetic on one
integer ``v`` per (element, sequence):

    v  = (time in µs for time windows, ordinal for count windows) − back − base
    k ∈ [⌊(v − width) / step⌋ + 1, ⌊v / step⌋]  ∩  [kmin, kmax]

Session windows depend on the elements before: when the table holds one, the plan adds two window functions over
each (stream, sequence)'s elements in ordinal order — the latest time before each element (or the open window's,
``last``), and the running count of windows started (an element at least the gap after it starts one) — which
is the kind's Spark form (``_SESSION_COLUMNS``). Each (element, sequence) pair yields the k *range* [lo, hi]; the
range is exploded (``assign_windows``) or folded into ordinal runs by the caller (``fold_batch``).

**Why not ``functions.window``.** Spark's ``window()`` takes its durations as literals fixed at analysis
(one ``TimeWindow`` expression per duration triple), so it cannot read per-row widths and steps from a
sequence table — a plan built with it has one part per sequence, measured ≈ 0.3 s of Python per batch. The
arithmetic above computes exactly the windows ``window(time, width, step, startTime = t0 mod step)`` computes —
windows [start, start + width) with start ≡ t0 (mod step), start ≤ t < start + width — with k = (start − t0) /
step, and also handles what ``window()`` refuses (slide > duration: gaps). ``tests/test_spark_source.py`` checks
the equivalence against ``F.window`` itself.

**Why a literal, not a join.** The sequence table travels with the plan as one constant: a JSON map
stream → [sequence rows], parsed by ``from_json`` (constant-folded once by the optimizer) and looked up
per row with ``element_at(map, stream)`` — a hash join by stream whose build side is the literal. A
``createDataFrame`` + ``broadcast`` join does the same but costs a local relation round trip and a
broadcast exchange per batch (measured ≈ 150 ms more per micro-batch on this machine).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from sparql_ext.window_data import AssignmentRow, SequenceRuns, SequenceSpans

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = StructType(
    [
        StructField("sequence", StringType()),
        StructField("stream", StringType()),
        StructField("k", LongType()),
        StructField("ordinal", LongType()),
        StructField("time", TimestampType()),
    ]
)

#: One sequence row of the literal table (``sequence`` and the fields of ``AssignmentRow``).
_ROW_TYPE = ("map<string, array<struct<sequence: string, kind: string, by_time: boolean, back: bigint, base: bigint, "
             "width: bigint, step: bigint, kmin: bigint, kmax: bigint, last: bigint>>>")

#: The fixed projection of ``batch_ranges`` (``s`` is the sequence row joined to the element, or null).
_V = "(CASE WHEN s.by_time THEN unix_micros(time) ELSE ordinal END - s.back - s.base)"
# ⌊x / d⌋ exactly on longs: x − pmod(x, d) is a multiple of d, so the truncating `div` is exact.
_LO = f"greatest(({_V} - s.width - pmod({_V} - s.width, s.step)) div s.step + 1, s.kmin)"
_HI = f"least(({_V} - pmod({_V}, s.step)) div s.step, s.kmax)"
_COMMON = ("stream", "kind", "ordinal", "unix_micros(time) AS t", "position", "sequence", "s.sequence AS seq")
_RANGE_COLUMNS = (*_COMMON, f"{_LO} AS lo", f"{_HI} AS hi", "false AS spans")

#: Session windows' Spark form: ``latest`` (the latest time before the element, of the sequence's elements from t0
#: on), then ``k`` (the open window plus the windows started up to the element), then the ranges.
_IN_SESSION = "s.kind = 'session' AND unix_micros(time) >= s.base"
_BY_ORDINAL = "PARTITION BY stream, s.sequence ORDER BY ordinal ROWS BETWEEN UNBOUNDED PRECEDING AND"
_SESSION_COLUMNS = (
    f"max(CASE WHEN {_IN_SESSION} THEN unix_micros(time) END) OVER ({_BY_ORDINAL} 1 PRECEDING) AS latest",
    f"s.kmin + sum(CASE WHEN {_IN_SESSION} AND unix_micros(time) >= "
    f"coalesce(greatest(latest, s.last), {-(1 << 63)}) + s.width THEN 1 ELSE 0 END) OVER ({_BY_ORDINAL} CURRENT ROW)"
    " AS session",
    (*_COMMON, f"CASE WHEN s.kind <> 'session' THEN {_LO} WHEN {_IN_SESSION} THEN session ELSE 1 END AS lo",
     f"CASE WHEN s.kind <> 'session' THEN {_HI} WHEN {_IN_SESSION} THEN least(session, s.kmax) ELSE 0 END AS hi",
     "s.kind = 'session' AS spans"),
)

#: (sequence id, stream name, row) — one registered window sequence as the batch job assigns it.
Registration = tuple[str, str, AssignmentRow]


def sequence_table(sequences: Iterable[Registration]) -> str:
    """The literal sequence table: JSON ``{stream: [row, …]}``."""
    table: dict[str, list[dict[str, Any]]] = {}
    for sequence, stream, row in sequences:
        if row.width <= 0 or row.step <= 0:
            raise ValueError(f"window sequence {sequence}: width and step must be positive ({row.width}, {row.step})")
        table.setdefault(stream, []).append({"sequence": sequence, **asdict(row)})
    return json.dumps(table, sort_keys=True)


class _Columns:
    """The plan's Column objects, built once per Spark context (and per sequence table) rather than per batch:
    building them parses SQL text (ANTLR) and makes dozens of py4j calls — measured ≈ 90 ms of a ≈ 250 ms
    micro-batch at 1,000 elements/s, before any data moves."""

    def __init__(self) -> None:
        self._context: object | None = None
        self._ranges: list[Column] = []
        self._sessions: tuple[Column, Column, list[Column]] | None = None
        self._tables: dict[str, tuple[Column, bool]] = {}

    def _for(self, batch: DataFrame) -> None:
        context = batch.sparkSession.sparkContext
        if context is not self._context:  # a new session (tests stop and start them): the old columns are dead
            self._context, self._tables = context, {}
            self._ranges = [F.expr(text) for text in _RANGE_COLUMNS]
            latest, session, ranges = _SESSION_COLUMNS
            self._sessions = F.expr(latest), F.expr(session), [F.expr(text) for text in ranges]

    def ranges(self, batch: DataFrame, table: str) -> DataFrame:
        """``batch`` joined to its sequences, projected to the ranges."""
        self._for(batch)
        sequences, sessions = self._sequences(table)
        joined = batch.select("stream", "kind", "ordinal", "time", "position", "sequence", sequences)
        if not sessions:
            return joined.select(*self._ranges)
        assert self._sessions is not None
        latest, session, ranges = self._sessions
        return joined.select("*", latest).select("*", session).select(*ranges)

    def _sequences(self, table: str) -> tuple[Column, bool]:
        """The exploded sequence rows of each element's stream (null for other rows): ``element_at(map, stream)``
        of the literal table; and whether a row is a session (the plan then adds its window functions)."""
        found = self._tables.get(table)
        if found is None:
            if len(self._tables) >= 16:  # registrations change the table now and then: keep the recent ones
                self._tables.pop(next(iter(self._tables)))
            sequences = F.element_at(F.from_json(F.lit(table), _ROW_TYPE), F.col("stream"))
            column = F.explode_outer(F.when(F.col("kind") == F.lit("element"), sequences)).alias("s")
            sessions = any(row["kind"] == "session" for rows in json.loads(table).values() for row in rows)
            found = self._tables[table] = column, sessions
        return found


_COLUMNS = _Columns()


def batch_ranges(batch: DataFrame, table: str) -> DataFrame:
    """Every row of ``batch`` (``element_log`` schema) with, per sequence of its stream, the k range.

    Columns: ``stream, kind, ordinal, t`` (µs), ``position, sequence`` (of a registration row), ``seq`` (the
    assigned sequence, null for non-element rows and streams without sequences), ``lo, hi`` (windows
    ``lo..hi`` of ``seq`` hold the element; none if ``lo > hi``), ``spans`` (whether the sequence's kind keeps its
    windows' time spans). An element appears once per sequence of its stream (at least once), other rows once: the
    caller can summarize the batch from the same result.
    """
    return _COLUMNS.ranges(batch, table)


def assign_windows(batch: DataFrame, sequences: Sequence[Registration]) -> DataFrame:
    """Every (sequence, stream, k, ordinal, time) of the batch's elements (the ranges exploded).

    ``batch`` has the ``element_log`` schema (other record kinds are ignored). Registration positions,
    completeness and punctuation are the caller's business: this only says which windows hold which element.
    """
    ranges = batch_ranges(batch, sequence_table(sequences)).where("seq IS NOT NULL AND lo <= hi")
    return ranges.selectExpr("seq AS sequence", "stream", "explode(sequence(lo, hi)) AS k", "ordinal",
                             "timestamp_micros(t) AS time")


def assign_one(elements: DataFrame, sequence: str, stream: str, row: AssignmentRow | None) -> DataFrame | None:
    """Assignments of one sequence; ``None`` without a row (t0 still pending, or a kind the job does not assign)."""
    return None if row is None else assign_windows(elements, [(sequence, stream, row)])


def fold_batch(ranges: pa.Table) -> dict[str, tuple[SequenceRuns, SequenceSpans]]:
    """Fold ``batch_ranges`` rows into ordinal runs per (stream, sequence, k), vectorized, and for kinds that keep
    them each window's earliest and latest time: per stream, ``(runs, spans)``.

    Gaps and islands: after sorting by (stream, sequence, k, ordinal), a run breaks where the group changes
    or the ordinal does not follow the previous one.
    """
    result: dict[str, tuple[SequenceRuns, SequenceSpans]] = {}
    if ranges.num_rows == 0:
        return result
    seq = ranges.column("seq")
    lo_col, hi_col = ranges.column("lo"), ranges.column("hi")
    valid = pc.and_(pc.and_(pc.is_valid(seq), pc.is_valid(lo_col)), pc.is_valid(hi_col))
    valid = pc.and_(valid, pc.less_equal(lo_col, hi_col))
    rows = ranges.filter(valid)
    if rows.num_rows == 0:
        return result
    lo = rows.column("lo").to_numpy()
    hi = rows.column("hi").to_numpy()
    ordinal = rows.column("ordinal").to_numpy()
    group_names = pc.binary_join_element_wise(rows.column("stream"), rows.column("seq"), "\x00")
    encoded = group_names.combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = encoded.dictionary.to_pylist()
    counts = hi - lo + 1
    take = np.repeat(np.arange(len(lo)), counts)
    offsets = np.arange(take.size) - np.repeat(np.cumsum(counts) - counts, counts)
    k = lo[take] + offsets
    g, o = codes[take], ordinal[take]
    order = np.lexsort((o, k, g))
    g, k, o = g[order], k[order], o[order]
    brk = np.ones(g.size, dtype=bool)
    brk[1:] = (g[1:] != g[:-1]) | (k[1:] != k[:-1]) | (o[1:] != o[:-1] + 1)
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], g.size) - 1
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        stream, sequence = names[int(g[s])].split("\x00", 1)
        by_k = result.setdefault(stream, ({}, {}))[0].setdefault(sequence, {})
        by_k.setdefault(int(k[s]), []).append([int(o[s]), int(o[e])])
    _fold_spans(rows, result)
    return result


def _fold_spans(rows: pa.Table, into: dict[str, tuple[SequenceRuns, SequenceSpans]]) -> None:
    """Each window's earliest and latest time, for the rows of kinds that keep spans (one window per element)."""
    spanned = rows.filter(pc.fill_null(rows.column("spans"), False))
    if spanned.num_rows == 0:
        return
    grouped = spanned.group_by(["stream", "seq", "lo"]).aggregate([("t", "min"), ("t", "max")])
    for row in grouped.to_pylist():
        spans = into.setdefault(row["stream"], ({}, {}))[1].setdefault(row["seq"], {})
        spans[row["lo"]] = [row["t_min"], row["t_max"]]
