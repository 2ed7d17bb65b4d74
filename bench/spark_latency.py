"""Latency from appending an element line to the Spark pipeline's ``on_batch`` seeing it.

The store appends (and fsyncs) each element's content and record to the stream's element log; the ``element_log``
source picks it up in the next micro-batch (trigger 0: as soon as the previous one is done). Elements are accepted by
a real ``Stream`` one at a time at a fixed rate, and each one's latency is measured from its commit (``Stream.flush``
returned: durable and indexed) to the moment ``on_batch`` has collected it (same process, ``time.perf_counter``).

Runs, each on a fresh stream root and checkpoint:

1. **baseline** — a plain Python thread polling the log every 10 ms (Spark's idle polling delay) and
   reading its new complete records (``store.log_reading``, as the source reads them): the floor any file-fed
   pipeline has.
2. **spark** — ``start_element_pipeline`` with ``on_batch`` = collect the batch.
3. **spark+assign** — the same, with ``on_batch`` = window assignment (5 s windows sliding by 1 s) + collect.

It prints p50/p90/p99/max per run with the ratio of p50 to the baseline's, the micro-batch phase timings
Spark reports (median over batches with data), and writes ``bench/results/spark_latency.json``.

    .venv/bin/python -m bench.spark_latency                 # 20 elements/s for 15 s per run
    .venv/bin/python -m bench.spark_latency --rate 50 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from pyoxigraph import Literal, NamedNode, Quad

from bench.harness import bar_plot, replot, summary_plot, write_json, write_plots
from sparql_ext.window_data import AssignmentRow
from store.durable import now_micros
from store.elements import ParsedElement
from store.log_reading import log_directory, log_end, read_records
from store.stream import StreamConfig
from store.streams import StreamCatalog

T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z, µs
STREAM = "bench"


#: A forward sliding window sequence (5 s windows every 1 s from T0), as the batch job reads it.
SLIDING = AssignmentRow("time", True, 0, T0, 5_000_000, 1_000_000, 0, None)


class Appender:
    """Commits elements through the store (``Stream.accept``, then ``flush``: one durable commit each, as a sensor's
    upload) and records when each was committed."""

    def __init__(self, root: Path) -> None:
        self.catalog = StreamCatalog(root)
        self.stream = self.catalog.put(StreamConfig(STREAM))[0]
        self.appended: dict[int, float] = {}
        self.next_ordinal = 1

    def append(self) -> int:
        t = T0 + self.next_ordinal * 50_000
        graph = NamedNode(f"urn:g:{self.next_ordinal}")
        element = ParsedElement(graph, [Quad(graph, NamedNode("urn:v"), Literal(str(self.next_ordinal)), graph)], t)
        ordinal = self.stream.accept(element, now_micros())
        self.stream.flush()
        self.appended[ordinal] = time.perf_counter()
        self.next_ordinal = ordinal + 1
        return ordinal

    def close(self) -> None:
        self.catalog.close()

    def run(self, rate: float, seconds: float) -> None:
        """Append at a fixed rate; the schedule does not drift when an append is slow."""
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.append()


class Seen:
    """Ordinal → first time it was seen downstream; lets the runner wait for a given ordinal."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}
        self._cond = threading.Condition()

    def add(self, ordinals: list[int]) -> None:
        now = time.perf_counter()
        with self._cond:
            for o in ordinals:
                self.at.setdefault(o, now)
            self._cond.notify_all()

    def wait_for(self, ordinal: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: ordinal in self.at, timeout)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: with few samples p99 is an observed value)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def summarize(name: str, appender: Appender, seen: Seen, first: int) -> dict[str, Any]:
    latencies = [(seen.at[o] - t) * 1000 for o, t in appender.appended.items() if o >= first and o in seen.at]
    missing = [o for o in appender.appended if o >= first and o not in seen.at]
    return {
        "name": name,
        "elements": len(latencies),
        "missing": len(missing),
        "p50_ms": percentile(latencies, 50),
        "p90_ms": percentile(latencies, 90),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "mean_ms": statistics.fmean(latencies),
    }


def measure(name: str, root: Path, start: Callable[[Seen], Callable[[], None]], rate: float, seconds: float) -> dict:
    """Warm up with one element, then append at ``rate`` for ``seconds`` and wait for the last one."""
    appender, seen = Appender(root), Seen()
    stop = start(seen)
    try:
        warm = appender.append()
        if not seen.wait_for(warm, 120):
            raise RuntimeError(f"{name}: the warm-up element never arrived")
        appender.run(rate, seconds)
        seen.wait_for(appender.next_ordinal - 1, 30)
    finally:
        stop()
        appender.close()
    return summarize(name, appender, seen, warm + 1)


def tail_poller(root: Path, seen: Seen, interval: float = 0.01) -> Callable[[], None]:
    """Baseline: poll the log for new complete records every ``interval`` seconds."""
    done = threading.Event()
    directory = log_directory(root, STREAM)

    def loop() -> None:
        position = 0
        while not done.is_set():
            end = log_end(directory, position)
            for batch in read_records(STREAM, directory, position, end):
                elements = batch.filter(pc.equal(batch.column("kind"), "element"))
                seen.add(elements.column("ordinal").to_pylist())
            position = end
            time.sleep(interval)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return lambda: (done.set(), thread.join())  # type: ignore[func-returns-value]


def phase_medians(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Median of each ``durationMs`` phase over micro-batches that had input rows."""
    with_data = [p for p in progress if p.get("numInputRows", 0) > 0]
    phases: dict[str, list[float]] = {}
    for p in with_data:
        for phase, ms in p.get("durationMs", {}).items():
            phases.setdefault(phase, []).append(ms)
    medians = {phase: statistics.median(values) for phase, values in sorted(phases.items())}
    medians["batches_with_data"] = len(with_data)
    medians["rows_per_batch"] = statistics.fmean(p["numInputRows"] for p in with_data) if with_data else 0.0
    return medians


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>.png``: append → foreachBatch latency, Spark's source beside a plain poller; ``<name>_phases.png``:
    the median micro-batch's phases (Spark's own progress reports), with and without window assignment."""
    rate = document["parameters"]["rate"]
    phases = {run: {k: v for k, v in medians.items() if k not in ("batches_with_data", "rows_per_batch")}
              for run, medians in document["micro_batch_phase_medians_ms"].items()}
    by_phase = {phase: {run: phases[run][phase] for run in phases if phases[run].get(phase)}
                for phase in dict.fromkeys(p for medians in phases.values() for p in medians)}
    return [
        summary_plot(name, f"Log line appended → foreachBatch saw it ({rate:g} elements/s)",
                     {run["name"]: {**run, "n": run["elements"]} for run in document["runs"]}),
        bar_plot(f"{name}_phases", "Median micro-batch phases (batches with data)",
                 {phase: bars for phase, bars in by_phase.items() if bars}, reference="spark", unit="ms"),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="elements per second (default 20)")
    parser.add_argument("--seconds", type=float, default=15.0, help="duration of each run (default 15)")
    parser.add_argument("--tmpdir", type=Path, default=None)
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/spark_latency.json again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, "spark_latency")
        return

    from pipeline.assignment import assign_windows
    from pipeline.element_source import start_element_pipeline, stop_element_pipeline
    from pipeline.spark import SparkSettings, spark_session

    runs: list[dict[str, Any]] = []
    phases: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        base = Path(tmp)
        poll_root = base / "poll"
        runs.append(
            measure("baseline (poll 10 ms)", poll_root, lambda s: tail_poller(poll_root, s), args.rate, args.seconds)
        )

        started = time.perf_counter()
        spark = spark_session(
            SparkSettings(
                app_name="bench-spark-latency", conf={"spark.sql.streaming.numRecentProgressUpdates": "10000"}
            )
        )
        session_seconds = time.perf_counter() - started

        def spark_run(name: str, assign: bool) -> None:
            root, checkpoint = base / name / "streams", base / name / "checkpoint"
            queries = []

            def start(seen: Seen) -> Callable[[], None]:
                def on_batch(df: Any, batch_id: int) -> None:
                    if assign:
                        rows = assign_windows(df, [("s", STREAM, SLIDING)]).select("ordinal").collect()
                    else:
                        rows = df.where("kind = 'element'").select("ordinal").collect()
                    seen.add([r.ordinal for r in rows])

                query = start_element_pipeline(spark, root, checkpoint, on_batch, trigger_seconds=0)
                queries.append(query)
                return lambda: stop_element_pipeline(query, checkpoint)

            runs.append(measure(name, root, start, args.rate, args.seconds))
            phases[name] = phase_medians([json.loads(p.json) for p in queries[0].recentProgress])

        spark_run("spark", assign=False)
        spark_run("spark+assign", assign=True)
        spark.stop()

    baseline = runs[0]["p50_ms"]
    print(
        f"\nappend → on_batch latency, {args.rate:g} elements/s for {args.seconds:g} s per run "
        f"(Spark session start {session_seconds:.1f} s)"
    )
    header = f"{'name':<22} {'n':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p50 ratio':>10}"
    print(header)
    print("-" * len(header))
    for r in runs:
        print(
            f"{r['name']:<22} {r['elements']:>5} {r['p50_ms']:8.1f} {r['p90_ms']:8.1f} {r['p99_ms']:8.1f} "
            f"{r['max_ms']:8.1f} {r['p50_ms'] / baseline:10.1f}"
        )
    for name, medians in phases.items():
        described = ", ".join(f"{k} {v:g}" for k, v in medians.items())
        print(f"{name} micro-batch phases (median ms over batches with data): {described}")
    document = {
        "parameters": {"rate": args.rate, "seconds": args.seconds, "trigger_seconds": 0},
        "session_start_seconds": session_seconds,
        "runs": runs,
        "micro_batch_phase_medians_ms": phases,
    }
    path = write_json("spark_latency", document)
    print(f"wrote {path}")
    write_plots(plots, document, "spark_latency")


if __name__ == "__main__":
    main()
