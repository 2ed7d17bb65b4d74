"""Window assignment on Spark: which windows k of which registered sequence each element belongs to.

The semantics are those of ``sparql_ext.windowing`` (the pure-Python reference; DESIGN §2), restated:

- time, forward: window k = [t0 + k·step, t0 + k·step + width), k ≥ first
- time, backward: window k = (t0 + k·step − width, t0 + k·step], k ≥ first
- step > width leaves gaps: elements there are in no window
- count: window k = ordinals [o0 + k·step, o0 + k·step + width − 1]; windows starting before ordinal 1
  are skipped
- with ``count`` set, windows k ≥ first + count are dropped

**Data-driven.** The registered sequences are data, not plan: one row per (stream, sequence) with the
spec's fields reduced to five integers (``base``, ``back``, ``width``, ``step``, ``kmin``/``kmax``, see
:func:`sequence_rows`), and ONE plan of fixed shape assigns every element of a batch to every window of
every sequence of its stream, whatever the number of sequences. Every kind of window is the same
arithmetic on one integer ``v`` per (element, sequence):

    v  = (time in µs for time windows, ordinal for count windows) − back − base
    k ∈ [⌊(v − width) / step⌋ + 1, ⌊v / step⌋]  ∩  [kmin, kmax]

Forward time windows: ``base = t0``, ``back = 0``: k·step ≤ v < k·step + width. Backward windows are
half-open the other way, (end − width, end]; on integer microseconds that is [end − width, end) of
``time − 1 µs``, so ``back = 1`` and ``base = t0 − width``. Count windows: ``base = o0``; ``kmin`` also skips
windows starting before ordinal 1. Each (element, sequence) pair yields the k *range* [lo, hi]; the range is
exploded (``assign_windows``) or folded into ordinal runs by the caller.

**Why not ``functions.window``.** Spark's ``window()`` takes its durations as literals fixed at analysis
(one ``TimeWindow`` expression per duration triple), so it cannot read per-row widths and steps from a
sequence table — a plan built with it has one part per sequence, which is what made the old plan cost
~0.3 s of Python per batch. The arithmetic above computes exactly the windows ``window(time, width,
step, startTime = t0 mod step)`` computes — windows [start, start + width) with start ≡ t0 (mod step),
start ≤ t < start + width — with k = (start − t0) / step, and also handles what ``window()`` refuses (slide
> duration: gaps). ``tests/test_spark_source.py`` checks the equivalence against ``F.window`` itself.

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
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

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

#: One sequence row of the literal table (what ``sequence_rows`` produces, in this order).
_ROW_FIELDS = ("sequence", "by_time", "back", "base", "width", "step", "kmin", "kmax")
_ROW_TYPE = ("map<string, array<struct<sequence: string, by_time: boolean, back: bigint, base: bigint, "
             "width: bigint, step: bigint, kmin: bigint, kmax: bigint>>>")

#: The fixed projection of ``assign_ranges`` (``s`` is the sequence row joined to the element, or null).
_V = "(CASE WHEN s.by_time THEN unix_micros(time) ELSE ordinal END - s.back - s.base)"
_RANGE_COLUMNS = (
    "stream", "kind", "ordinal", "unix_micros(time) AS t", "position", "sequence",
    "s.sequence AS seq",
    # ⌊x / d⌋ exactly on longs: x − pmod(x, d) is a multiple of d, so the truncating `div` is exact.
    f"greatest(({_V} - s.width - pmod({_V} - s.width, s.step)) div s.step + 1, s.kmin) AS lo",
    f"least(({_V} - pmod({_V}, s.step)) div s.step, s.kmax) AS hi",
)


class WindowSpecLike(Protocol):
    """The fields of ``sparql_ext.windowing.WindowSpec`` that assignment reads."""

    @property
    def kind(self) -> str: ...  # 'time' | 'count'

    @property
    def backward(self) -> bool: ...

    @property
    def origin(self) -> int | None: ...  # t0 in µs (time) or o0 (count); None while a time spec waits for its anchor

    @property
    def width(self) -> int: ...

    @property
    def step(self) -> int: ...

    @property
    def step_kind(self) -> str: ...  # 'time' | 'count'

    @property
    def first(self) -> int: ...

    @property
    def count(self) -> int | None: ...


#: (sequence id, stream name, spec) — one registered window sequence.
Registration = tuple[str, str, WindowSpecLike]


def sequence_row(sequence: str, spec: WindowSpecLike) -> dict[str, Any] | None:
    """The table row of one sequence; ``None`` if its t0 is still pending (nothing can be assigned yet)."""
    if spec.width <= 0 or spec.step <= 0:
        raise ValueError(f"window sequence {sequence}: width and step must be positive ({spec.width}, {spec.step})")
    if spec.kind != spec.step_kind:
        raise NotImplementedError(
            f"window sequence {sequence}: a {spec.kind} width with a {spec.step_kind} step (e.g. R/HEAD/PT05M/10) "
            "is not assigned by Spark; the caller must place these windows from element ordinals"
        )
    if spec.origin is None:
        log.debug("window sequence %s: t0 pending, nothing assigned", sequence)
        return None
    if spec.kind == "count" and spec.backward:
        raise NotImplementedError(f"window sequence {sequence}: backward count windows are not defined")
    kmin = spec.first
    if spec.kind == "count":
        kmin = max(kmin, -((spec.origin - 1) // spec.step))  # ⌈(1 − o0)/step⌉: windows start at ordinal ≥ 1
    return {"sequence": sequence, "by_time": spec.kind == "time", "back": int(spec.backward),
            "base": spec.origin - (spec.width if spec.backward else 0), "width": spec.width, "step": spec.step,
            "kmin": kmin, "kmax": None if spec.count is None else spec.first + spec.count - 1}


def sequence_table(sequences: Iterable[Registration]) -> str:
    """The literal sequence table: JSON ``{stream: [row, …]}`` (pending sequences left out)."""
    table: dict[str, list[dict[str, Any]]] = {}
    for sequence, stream, spec in sequences:
        row = sequence_row(sequence, spec)
        if row is not None:
            table.setdefault(stream, []).append(row)
    return json.dumps(table, sort_keys=True)


class _Columns:
    """The plan's Column objects, built once per Spark context (and per sequence table) rather than per batch:
    building them parses SQL text (ANTLR) and makes dozens of py4j calls — measured ≈ 90 ms of a ≈ 250 ms
    micro-batch at 1,000 elements/s, before any data moves."""

    def __init__(self) -> None:
        self._context: object | None = None
        self._ranges: list[Column] = []
        self._tables: dict[str, Column] = {}

    def _for(self, batch: DataFrame) -> None:
        context = batch.sparkSession.sparkContext
        if context is not self._context:  # a new session (tests stop and start them): the old columns are dead
            self._context, self._tables = context, {}
            self._ranges = [F.expr(text) for text in _RANGE_COLUMNS]

    def ranges(self, batch: DataFrame) -> list[Column]:
        self._for(batch)
        return self._ranges

    def sequences(self, batch: DataFrame, table: str) -> Column:
        """The exploded sequence rows of each element's stream (null for other rows): ``element_at(map, stream)``
        of the literal table."""
        self._for(batch)
        column = self._tables.get(table)
        if column is None:
            if len(self._tables) >= 16:  # registrations change the table now and then: keep the recent ones
                self._tables.pop(next(iter(self._tables)))
            sequences = F.element_at(F.from_json(F.lit(table), _ROW_TYPE), F.col("stream"))
            column = F.explode_outer(F.when(F.col("kind") == F.lit("element"), sequences)).alias("s")
            self._tables[table] = column
        return column


_COLUMNS = _Columns()


def assign_ranges(batch: DataFrame, table: str) -> DataFrame:
    """Every row of ``batch`` (``element_log`` schema) with, per sequence of its stream, the k range.

    Columns: ``stream, kind, ordinal, t`` (µs), ``position, sequence`` (of a registration row), ``seq`` (the
    assigned sequence, null for non-element rows and streams without sequences), ``lo, hi`` (windows
    ``lo..hi`` of ``seq`` hold the element; none if ``lo > hi``). An element appears once per sequence of its
    stream (at least once), other rows once: the caller can summarize the batch from the same result.
    """
    joined = batch.select("stream", "kind", "ordinal", "time", "position", "sequence",
                          _COLUMNS.sequences(batch, table))
    return joined.select(*_COLUMNS.ranges(batch))


def assign_windows(batch: DataFrame, sequences: Sequence[Registration]) -> DataFrame:
    """Every (sequence, stream, k, ordinal, time) of the batch's elements (the ranges exploded).

    ``batch`` has the ``element_log`` schema (other record kinds are ignored). Registration positions,
    completeness and punctuation are the caller's business: this only says which windows hold which element.
    """
    ranges = assign_ranges(batch, sequence_table(sequences)).where("seq IS NOT NULL AND lo <= hi")
    return ranges.selectExpr("seq AS sequence", "stream", "explode(sequence(lo, hi)) AS k", "ordinal",
                             "timestamp_micros(t) AS time")


def assign_one(elements: DataFrame, sequence: str, stream: str, spec: WindowSpecLike) -> DataFrame | None:
    """Assignments of one sequence; ``None`` if its t0 is still pending (nothing can be assigned yet)."""
    if sequence_row(sequence, spec) is None:
        return None
    return assign_windows(elements, [(sequence, stream, spec)])


Runs = dict[str, dict[str, dict[int, list[list[int]]]]]  # stream -> sequence -> k -> inclusive ordinal runs


def fold_runs(ranges: pa.Table) -> Runs:
    """Fold ``assign_ranges`` rows into ordinal runs per (stream, sequence, k), vectorized.

    Gaps and islands: after sorting by (stream, sequence, k, ordinal), a run breaks where the group changes
    or the ordinal does not follow the previous one.
    """
    result: Runs = {}
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
        by_k = result.setdefault(stream, {}).setdefault(sequence, {})
        by_k.setdefault(int(k[s]), []).append([int(o[s]), int(o[e])])
    return result
