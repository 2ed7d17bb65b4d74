"""Latency distributions counted in buckets: window latency (the pipeline), rule latency (rule firing) and pipeline
batch time are observed where they happen and read by ``/status`` and ``/metrics`` (``protocol.metrics``). Pure:
no I/O and no metrics library, so the layers that observe stay free of one; the buckets are Prometheus's
convention (cumulative counts of observations ≤ each upper bound, then ``+Inf``), counted since start-up.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

#: Upper bounds in seconds: from a fast rule firing (milliseconds) to a pipeline that fell a minute behind.
LATENCY_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """Observations counted per bucket, with their count and sum; thread-safe (observed by one thread, read by
    request threads)."""

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"bucket bounds must increase: {list(bounds)}")
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # per bucket, not cumulative; the last is above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        # an observation equal to a bound belongs to that bound's bucket (Prometheus: le, "less or equal")
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self._sum += seconds

    def to_json(self) -> dict[str, object]:
        """``{"buckets": [[bound, cumulative count], …, ["+Inf", count]], "count": n, "sum": seconds}``."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[list[object]] = []
        running = 0
        for bound, count in zip([*self.bounds, "+Inf"], counts, strict=True):
            running += count
            cumulative.append([bound, running])
        return {"buckets": cumulative, "count": running, "sum": round(total, 6)}
