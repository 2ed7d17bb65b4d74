"""Window assignment on Spark: which windows k of which registered sequence each element belongs to.

The semantics are those of ``sparql_ext.windowing`` (the pure-Python reference; DESIGN §2), restated:

- time, forward: window k = [t0 + k·step, t0 + k·step + width), k ≥ first
- time, backward: window k = (t0 + k·step − width, t0 + k·step], k ≥ first
- step > width leaves gaps: elements there are in no window
- count: window k = ordinals [o0 + k·step, o0 + k·step + width − 1]; windows starting before ordinal 1
  are skipped
- with ``count`` set, windows k ≥ first + count are dropped

Time windows go through ``pyspark.sql.functions.window`` so the pipeline can hand the result straight to
Spark's window aggregation, watermarks and state. Spark's window has two rules we must work around: the
slide must not exceed the duration (so with gaps we tumble by ``step`` and then cut each window to
``width``), and ``startTime`` must be smaller than the slide (so windows are aligned to t0 by
``startTime = t0 mod step``, which also makes k = (start − t0) / step an exact integer). Backward windows
are half-open the other way, (start, end]; on integer microseconds that is [start, end) of ``time − 1 µs``.

Count windows are computed with integer arithmetic on ordinals instead (each element explodes into the
k range of the windows that hold it): ordinals are already dense integers, so casting them to fake
timestamps to reuse ``window`` would only add conversions and alignment rules, and the k range is exact
for any width/step combination, gaps included.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import reduce
from typing import Protocol

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


class WindowSpecLike(Protocol):
    """The fields of ``sparql_ext.windowing.WindowSpec`` that assignment reads."""

    kind: str  # 'time' | 'count'
    backward: bool
    origin: int | None  # t0 in µs (time) or o0 (count); None while a time spec waits for its anchor
    width: int
    step: int
    step_kind: str  # 'time' | 'count'
    first: int
    count: int | None


#: (sequence id, stream name, spec) — one registered window sequence.
Registration = tuple[str, str, WindowSpecLike]


def _micros(n: int) -> str:
    """A Spark interval string; microseconds keep every duration exact."""
    return f"{n} microseconds"


def _limit_k(df: DataFrame, spec: WindowSpecLike) -> DataFrame:
    df = df.where(F.col("k") >= F.lit(spec.first))
    if spec.count is not None:
        df = df.where(F.col("k") < F.lit(spec.first + spec.count))
    return df


def _time_windows(elements: DataFrame, spec: WindowSpecLike) -> DataFrame:
    """(k, ordinal, time) for a time-width, time-step spec, via ``functions.window``."""
    assert spec.origin is not None
    t0, width, step = spec.origin, spec.width, spec.step
    duration = step if step > width else width  # Spark refuses slide > duration: tumble by step, cut below
    start_time = (t0 - duration) % step if spec.backward else t0 % step
    t = F.unix_micros("time")
    shifted = F.timestamp_micros(t - 1) if spec.backward else F.col("time")
    df = elements.withColumn("_w", F.window(shifted, _micros(duration), _micros(step), _micros(start_time)))
    df = df.withColumn("_ws", F.unix_micros("_w.start"))
    if spec.backward:  # window k ends at t0 + k·step; holds (end − width, end]
        anchor = F.col("_ws") + F.lit(duration)
        if duration != width:
            df = df.where(t > anchor - F.lit(width))
    else:  # window k starts at t0 + k·step; holds [start, start + width)
        anchor = F.col("_ws")
        if duration != width:
            df = df.where(t < anchor + F.lit(width))
    # anchor − t0 is a multiple of step by the choice of start_time, so truncating division is exact.
    df = df.withColumn("k", ((anchor - F.lit(t0)) / F.lit(step)).cast("long"))
    return _limit_k(df, spec).select("k", "ordinal", "time")


def _count_windows(elements: DataFrame, spec: WindowSpecLike) -> DataFrame:
    """(k, ordinal, time) for an element-count spec: window k holds o0 + k·step … o0 + k·step + width − 1."""
    assert spec.origin is not None
    o0, width, step = spec.origin, spec.width, spec.step
    rel = F.col("ordinal") - F.lit(o0)
    hi = _floor_div_col(rel, step)  # last window starting at or before o
    lo = _floor_div_col(rel - F.lit(width), step) + F.lit(1)  # first window still holding o
    k_min = max(spec.first, -((o0 - 1) // step))  # -⌊(o0−1)/step⌋ = ⌈(1−o0)/step⌉: starts at ordinal ≥ 1
    lo = F.greatest(lo, F.lit(k_min))
    if spec.count is not None:
        hi = F.least(hi, F.lit(spec.first + spec.count - 1))
    df = elements.withColumn("_lo", lo).withColumn("_hi", hi).where(F.col("_lo") <= F.col("_hi"))
    df = df.withColumn("k", F.explode(F.sequence(F.col("_lo"), F.col("_hi"))))
    return df.select("k", "ordinal", "time")


def _floor_div_col(x: Column, d: int) -> Column:
    """⌊x / d⌋ for d > 0 on long columns, exactly (Spark's ``div`` truncates toward zero)."""
    return F.floor((x - F.pmod(x, F.lit(d))) / F.lit(d)).cast("long")


def assign_one(elements: DataFrame, sequence: str, stream: str, spec: WindowSpecLike) -> DataFrame | None:
    """Assignments of one sequence; ``None`` if its t0 is still pending (nothing can be assigned yet)."""
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
    mine = elements.where(F.col("stream") == F.lit(stream))
    body = _time_windows(mine, spec) if spec.kind == "time" else _count_windows(mine, spec)
    return body.select(F.lit(sequence).alias("sequence"), F.lit(stream).alias("stream"), "k", "ordinal", "time")


def assign_windows(batch: DataFrame, sequences: Sequence[Registration]) -> DataFrame:
    """Every (sequence, stream, k, ordinal, time) of the batch's elements; one union part per sequence.

    ``batch`` has the ``element_log`` schema (other record kinds are ignored). Registration positions,
    completeness and punctuation are the caller's business: this only says which windows hold which element.
    """
    elements = batch.where(F.col("kind") == F.lit("element")).select("stream", "ordinal", "time")
    parts = [part for seq, stream, spec in sequences if (part := assign_one(elements, seq, stream, spec)) is not None]
    if not parts:
        return batch.sparkSession.createDataFrame([], OUTPUT_SCHEMA)
    return reduce(DataFrame.unionByName, parts)
