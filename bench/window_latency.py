"""Latency from the commit of the element that completes a window to the commit of its window revision.

A ``WindowPipeline`` (trigger 0) runs over a fresh data directory with one stream and two sequences:

- **time** — ``R/HEAD/PT01S`` (tumbling 1 s windows); element n has timestamp t0 + n s, so element n+1
  completes window n−1 (its timestamp reaches the window's end, the watermark);
- **count** — ``R/HEAD/HEAD/1`` (one-element count windows, sliding by one): element n completes its own
  window.

Elements are accepted one at a time, ``--interval`` seconds apart (wall clock), so that each one lands in
its own micro-batch or nearly. For every window, latency = revision commit time (``WindowRevision.commit``)
− commit time of the completing element (``ElementRecord.commit``); both are the store's own µs clocks in
this process. The first ``--warmup`` windows (JIT and worker warm-up; each waited for before the next
element) are left out.

    .venv/bin/python -m bench.window_latency                  # 50 windows of each kind
    .venv/bin/python -m bench.window_latency --windows 100 --interval 0.2

Prints a table and writes ``bench/results/window_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyoxigraph import Literal, NamedNode, Quad

from bench.harness import RESULTS_DIR, replot, scaling_plot, share_plot, summary_plot, write_json, write_plots
from pipeline.batches import WindowPipeline
from pipeline.spark import SparkSettings
from sparql_ext.windowing import resolve
from sparql_ext.windowref import parse_window_ref
from store.elements import ParsedElement
from store.stream import Stream, StreamConfig
from store.streams import StreamCatalog

T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z, µs
S = 1_000_000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summarize(latencies: list[float]) -> dict[str, float | int]:
    return {"n": len(latencies), "p50_ms": round(percentile(latencies, 0.5), 1),
            "p90_ms": round(percentile(latencies, 0.9), 1), "p99_ms": round(percentile(latencies, 0.99), 1),
            "max_ms": round(max(latencies), 1), "mean_ms": round(statistics.fmean(latencies), 1)}


def tree_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) of a process and all its live descendants: here the Python driver, the
    Spark JVM it launched and the JVM's Python workers."""
    children: dict[int, list[tuple[int, list[str]]]] = {}
    fields: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        fields[int(entry)] = stat
        children.setdefault(int(stat[1]), []).append((int(entry), stat))
    root = pid or os.getpid()
    ticks, todo = 0, [root]
    ticks += sum(int(x) for x in fields.get(root, ["0"] * 15)[11:13])
    while todo:
        for child, stat in children.get(todo.pop(), []):
            ticks += sum(int(x) for x in stat[11:13])
            todo.append(child)
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_cores_over(seconds: float) -> float:
    """Average cores the process tree used over ``seconds`` of wall time (sleeping meanwhile)."""
    before, began = tree_cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return round((tree_cpu_seconds() - before) / (time.monotonic() - began), 3)


def element(stream: Stream, n: int) -> ParsedElement:
    graph = NamedNode(f"urn:bench:{n}")
    return ParsedElement(graph, [Quad(NamedNode("urn:bench:s"), NamedNode("urn:bench:v"), Literal(n), graph)],
                         T0 + n * S)


def run(windows: int, interval: float, warmup: int, directory: Path, idle_seconds: float = 10.0,
        pipeline_options: dict[str, Any] | None = None, conf: dict[str, str] | None = None) -> dict[str, Any]:
    catalog = StreamCatalog(directory / "streams")
    settings = SparkSettings(app_name="bench-window-latency", conf=conf or {})
    pipeline = WindowPipeline(catalog, directory, settings, **(pipeline_options or {}))
    batches: list[dict[str, float]] = []
    handler = pipeline.apply_batch

    def timed(batch_df: Any, batch_id: int) -> None:  # every batch's wall time and phases
        handler(batch_df, batch_id)
        status = pipeline.status()
        batches.append({"seconds": status["last_batch_seconds"], **status["last_batch_phases"]})

    pipeline.apply_batch = timed  # type: ignore[method-assign]
    began = time.monotonic()
    pipeline.start()
    start_seconds = time.monotonic() - began
    stream = catalog.put(StreamConfig("bench"))[0]
    stream.accept(element(stream, 1), received=0)
    stream.flush()
    refs = {"time": "R/HEAD/PT01S", "count": "R/HEAD/HEAD/1"}
    sequences = {kind: stream.register(ref, resolve(parse_window_ref(ref), stream)) for kind, ref in refs.items()}
    total = windows + warmup
    idle_cores = None
    try:
        for n in range(2, total + 3):
            stream.accept(element(stream, n), received=0)
            if n <= warmup + 1:  # warm-up: the first batches take seconds (JIT, Python workers)
                stream.flush()
                pipeline.wait_caught_up(stream, 120)
                if n == warmup + 1:
                    if idle_seconds:
                        idle_cores = cpu_cores_over(idle_seconds)  # no input: the pipeline's polling alone
                    measured_from, cpu_before, wall_before = len(batches), tree_cpu_seconds(), time.monotonic()
            else:
                time.sleep(interval)
        stream.flush()
        for sequence in sequences.values():
            if stream.windows.wait_for_window(sequence.id, total, 120) is None:
                raise RuntimeError(f"window {total} of {sequence.ref} did not come: {pipeline.status()}")
        busy_cores = round((tree_cpu_seconds() - cpu_before) / (time.monotonic() - wall_before), 3)
        status = pipeline.status()
    finally:
        pipeline.stop(stop_session=True)
    results: dict[str, Any] = {}
    for kind, sequence in sequences.items():
        latencies = []
        for revision in stream.windows.revisions(sequence.id)[warmup:total]:
            # time: window k = [t0+k s, t0+(k+1) s) is completed by element k+2 (timestamp t0+(k+2) s ≥ end);
            # count: window k = ordinal k+1 (o0 = 1) is completed by that element itself.
            completing = revision.index + 2 if kind == "time" else revision.end
            record = stream.record(completing)
            assert record is not None
            latencies.append((revision.commit - record.commit) / 1000)
        results[kind] = {"ref": sequence.ref, **summarize(latencies)}
    catalog.close()
    measured = batches[measured_from:]
    phases = {name: round(1000 * statistics.median(b.get(name, 0.0) for b in measured), 1)
              for name in dict.fromkeys(key for b in measured for key in b)}
    return {"pipeline_start_seconds": round(start_seconds, 2), "batches": status["batches"],
            "measured_batches": len(measured), "batch_median_ms": phases,
            "batch_p90_ms": round(1000 * percentile([b["seconds"] for b in measured], 0.9), 1),
            "idle_cpu_cores": idle_cores, "ingest_cpu_cores": busy_cores,
            "windows": results}


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>_windows.png``: window latency of the time and count sequences; ``<name>_batch.png``: where a median
    batch's time goes; ``window_latency_scaling.png``: latency against the element interval, over every
    window_latency*.json result."""
    interval = document["interval_seconds"]
    phases = {phase: ms for phase, ms in document["batch_median_ms"].items() if phase != "seconds"}
    drawn = [
        summary_plot(f"{name}_windows", f"Window latency: completing element committed → window revision committed "
                     f"(an element every {interval:g} s)",
                     {f"{kind} windows {row['ref']}": row for kind, row in document["windows"].items()}),
        share_plot(f"{name}_batch", f"A median micro-batch ({document['batch_median_ms']['seconds']:g} ms) by phase, "
                   f"over {document['measured_batches']} batches", phases, unit="ms"),
    ]
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(RESULTS_DIR.glob("window_latency*.json"))]
    runs = [run for run in runs if "interval_seconds" in run and "windows" in run]
    if len(runs) > 1:
        curves = {f"{kind} windows, {q}": [(run["interval_seconds"], run["windows"][kind][f"{q}_ms"]) for run in runs]
                  for kind in ("time", "count") for q in ("p50", "p99")}
        drawn.append(scaling_plot("window_latency_scaling", "Window latency as elements come further apart", curves,
                                  xlabel="seconds between elements", ylabel="ms", log_x=True))
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=50, help="windows measured per sequence")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between elements")
    parser.add_argument("--warmup", type=int, default=10, help="windows left out at the start")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement (0: skip)")
    parser.add_argument("--name", default="window_latency", help="result file name (bench/results/NAME.json)")
    parser.add_argument("--min-batch-interval", type=float, default=None,
                        help="seconds (default: the pipeline's MIN_BATCH_INTERVAL)")
    parser.add_argument("--polling-delay", default=None, help="spark.sql.streaming.pollingDelay (default: spark.py)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/NAME.json again")
    args = parser.parse_args()
    if args.plot_only:
        replot(plots, args.name)
        return
    options = {} if args.min_batch_interval is None else {"min_batch_interval": args.min_batch_interval}
    conf = {} if args.polling_delay is None else {"spark.sql.streaming.pollingDelay": args.polling_delay}
    with tempfile.TemporaryDirectory(prefix="window-latency-") as tmp:
        measured = run(args.windows, args.interval, args.warmup, Path(tmp), args.idle, options, conf)
    measured = {"options": {**options, **conf}, **measured}
    print(f"pipeline start {measured['pipeline_start_seconds']} s, {measured['measured_batches']} batches measured, "
          f"median ms {measured['batch_median_ms']}, p90 {measured['batch_p90_ms']} ms; "
          f"CPU cores idle {measured['idle_cpu_cores']}, ingesting {measured['ingest_cpu_cores']}")
    print(f"{'sequence':<22} {'n':>4} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for kind, row in measured["windows"].items():
        print(f"{kind + ' ' + row['ref']:<22} {row['n']:>4} {row['p50_ms']:>8} {row['p90_ms']:>8} "
              f"{row['p99_ms']:>8} {row['max_ms']:>8}")
    document = {"interval_seconds": args.interval, "trigger_seconds": 0, **measured}
    path = write_json(args.name, document)
    print(f"wrote {path}")
    write_plots(plots, document, args.name)


if __name__ == "__main__":
    main()
