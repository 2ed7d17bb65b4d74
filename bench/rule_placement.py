"""Rule firings in the driver vs in Spark executors (rules/tasks.py): what ``--rules-on`` trades.

One in-memory server app (no HTTP, no pipeline): a stream of ``--windows`` × ``--window`` heart-rate readings and
static data (a threshold per patient); a rule joins each window with the static data and aggregates it (the shape of
the connected-patient alert, executor-eligible). Each window is one firing, pinned as the pipeline pins it.

- **driver** (the baseline): ``ExtendedEvaluator.for_rule(…).query(rule)`` per firing, one after the other, in this
  process — what ``RuleRunner.on_windows`` does in local mode.
- **executors**: the same firings as batches of ``--batch`` firings (a pipeline batch in which that many windows
  completed, e.g. many streams or rules): the driver says where each window's elements are in the element log
  (``firing_task``; the executors read them, as a server's on this machine do), the static data is broadcast
  once, and ``ExecutorPool.run`` evaluates the batch as one Spark job on ``--spark-master`` (``local[2]`` by
  default; ``--cluster`` starts a standalone master and two workers on 127.0.0.1).

Both must construct the same triples. Prints a table (firings/s, ratio to the driver) and the per-batch split
(window copies in the driver vs the Spark job), and writes ``bench/results/rule_placement.json``.

``--scaling`` compares cluster sizes in one run: a standalone cluster of two 1-core workers, the executors' firings
measured with the application held to one worker (``spark.cores.max=1``) and with both, alternately (``--repeat``
times, the best of each kept), beside the driver; it writes ``rule_placement_<rule>_scaling.json``.

    python -m bench.rule_placement [--windows 64 --window 300 --batch 16] [--cluster | --scaling]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask import Flask

from bench.harness import RESULTS_DIR, Measurement, bar_plot, print_table, replot, share_plot, write_json, write_plots
from concentrator.compose import http_app
from conformance.spark_cluster import standalone_cluster
from engine.context import QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.selection import SelectedWindow
from pipeline.spark import SparkSettings, spark_session
from protocol import ServerConfig
from protocol.services import services_of
from rules.tasks import ExecutorPool, firing_task, ineligible_reason

HOST = "http://localhost"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"
WINDOWED = f"{HOST}/streams/hr?WINDOWS=R/HEAD/PT5M"
RULE = f"""PREFIX ex: <http://ex/>
CONSTRUCT {{ ?patient ex:alert ?avg ; ex:threshold ?limit }}
WHERE {{
  ?patient ex:threshold ?limit .
  {{ SELECT ?patient (AVG(?hr) AS ?avg) (COUNT(?o) AS ?n) WHERE {{
      SERVICE <{WINDOWED}> {{ SELECT ?patient ?o ?hr WHERE {{ GRAPH ?g {{ ?o ex:patient ?patient ; ex:hr ?hr }} }} }}
  }} GROUP BY ?patient }}
  FILTER(?avg > ?limit)
}}"""
#: A heavier rule over the same window: pairs of one patient's readings more than 20 bpm apart (a self-join, ~n²/10
#: pairs per window), so evaluation outweighs copying the window.
PAIRS = f"""PREFIX ex: <http://ex/>
CONSTRUCT {{ ?patient ex:swings ?n ; ex:threshold ?limit }}
WHERE {{
  ?patient ex:threshold ?limit .
  {{ SELECT ?patient (COUNT(*) AS ?n) WHERE {{
      SERVICE <{WINDOWED}> {{ SELECT ?patient ?a ?b WHERE {{
          GRAPH ?g {{ ?o ex:patient ?patient ; ex:hr ?a }} GRAPH ?h {{ ?p ex:patient ?patient ; ex:hr ?b }}
          FILTER(?a > ?b + 20) }} }}
  }} GROUP BY ?patient }}
}}"""
#: ``pairs`` through ``SERVICE ?var``: each patient's stream IRI is in the static data (here every patient's is the
#: windowed stream), as in the connected-patient rule; the driver resolves it per firing, the executor reads the window.
FEED = """PREFIX ex: <http://ex/>
CONSTRUCT { ?patient ex:swings ?n ; ex:threshold ?limit }
WHERE {
  ?patient ex:threshold ?limit ; ex:stream ?feed .
  SERVICE ?feed { SELECT ?patient (COUNT(*) AS ?n) WHERE {
      GRAPH ?g { ?o ex:patient ?patient ; ex:hr ?a } GRAPH ?h { ?p ex:patient ?patient ; ex:hr ?b }
      FILTER(?a > ?b + 20) } GROUP BY ?patient }
}"""
RULES = {"aggregate": RULE, "pairs": PAIRS, "feed": FEED}
PATIENTS = 10
START = datetime(2016, 6, 20, 10, tzinfo=UTC)


def build_app(directory: Path, windows: int, size: int) -> Flask:
    """Static thresholds and ``windows`` × ``size`` readings (one per second; patient i's heart rate climbs with
    the window number, so about half the windows alert)."""
    app = http_app(ServerConfig(directory, in_memory=True))
    client = app.test_client()
    static = " ".join(f"<http://ex/p{i}> <http://ex/threshold> {100 + i} ; <http://ex/stream> <{WINDOWED}> ."
                      for i in range(PATIENTS))
    assert client.post("/sparql", data=f"INSERT DATA {{ {static} }}",
                       headers={"Content-Type": "application/sparql-update"}).status_code == 204
    assert client.put("/streams/hr").status_code == 201
    for w in range(windows):
        body = []
        for j in range(size):
            second = w * size + j
            stamp = (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")
            body.append(f'<http://ex/e{second}> <{PROV}> "{stamp}"^^<{XSD}dateTime> .\n'
                        f'<http://ex/e{second}> {{ <http://ex/o{second}> <http://ex/patient> '
                        f'<http://ex/p{j % PATIENTS}> ; <http://ex/hr> {80 + w + j % 40} . }}\n')
        r = client.post("/streams/hr", data="".join(body), headers={"Content-Type": "application/trig"})
        assert r.status_code == 200, r.text
    return app


def firing(app: Flask, w: int, size: int) -> ExtendedEvaluator:
    evaluator: ExtendedEvaluator = services_of(app).evaluator.with_local_bases([HOST])
    ordinals = list(range(w * size + 1, (w + 1) * size + 1))
    return evaluator.for_rule([HOST], {("hr", "R/HEAD/PT5M"): SelectedWindow(ordinals, commit=w)})


def drop_copies(app: Flask) -> None:
    """Each firing pays for copying its window (the stream keeps the latest few copies) and for evaluating it: the
    results the driver's static cache keeps per window (shared by the rules over one window) are dropped too, or a
    round after the first would find every window's part evaluated already."""
    services_of(app).streams.get("hr")._window_stores.clear()
    services_of(app).evaluator.cache._entries.clear()


def run_driver(app: Flask, rule: str, windows: int, size: int) -> tuple[float, list[str]]:
    drop_copies(app)
    outputs = []
    start = time.perf_counter()
    for w in range(windows):
        result = firing(app, w, size).query(rule, QueryTarget(base_iri=HOST))
        outputs.append(" ".join(sorted(map(str, result))))
    return time.perf_counter() - start, outputs


def run_executors(app: Flask, pool: ExecutorPool, rule: str, windows: int, size: int, batch: int
                  ) -> tuple[float, list[str], list[dict[str, float]]]:
    drop_copies(app)
    outputs: list[str] = []
    splits = []
    start = time.perf_counter()
    static = pool.static(firing(app, 0, size))
    for first in range(0, windows, batch):
        began = time.perf_counter()
        tasks = [firing_task(w, rule, HOST, firing(app, w, size), pool.reads_log)
                 for w in range(first, min(first + batch, windows))]
        copied = time.perf_counter()
        results = sorted(pool.run(tasks, static), key=lambda r: r.position)
        splits.append({"copy_s": copied - began, "job_s": time.perf_counter() - copied})
        outputs.extend(" ".join(sorted(map(str, r.construction()))) for r in results)
    return time.perf_counter() - start, outputs, splits


@contextlib.contextmanager
def master(args: argparse.Namespace) -> Iterator[str]:
    if not args.cluster:
        yield args.spark_master
        return
    with standalone_cluster(workers=2, cores=1, memory="1g") as cluster:
        yield cluster.master_url


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>.png``: firings/s in the driver beside Spark executors; ``<name>_batch.png``: a batch's time, window
    copies and the Spark job; ``rule_placement.png``: every rule_placement_*.json result side by side (rules,
    local executors and a cluster of two workers)."""
    config = document["config"]
    where = "a cluster of two workers" if config.get("cluster") else config["spark_master"]
    drawn = [
        bar_plot(name, f"Rule {config['rule']}: {config['windows']} windows of {config['window']} readings, "
                 f"{config['batch']} firings per Spark job ({where})",
                 {config["rule"]: {m["name"]: m["rate"] for m in document["measurements"]}},
                 reference=document["measurements"][0]["name"], unit="firings/s"),
        share_plot(f"{name}_batch", f"A batch of {config['batch']} firings in the executors", document["per_batch_ms"],
                   unit="ms"),
    ]
    runs = {path.stem: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(RESULTS_DIR.glob("rule_placement_*.json"))}
    groups = {}
    for run in runs.values():
        if "measurements" not in run or run["config"].get("scaling"):
            continue
        label = f"{run['config']['rule']}, " + ("2 workers" if run["config"].get("cluster") else
                                                run["config"]["spark_master"])
        driver, executors = run["measurements"]
        groups[label] = {"driver": driver["rate"], "executors": executors["rate"]}
    if len(groups) > 1:
        drawn.append(bar_plot("rule_placement", "Rule firings per second: the driver beside Spark executors",
                              groups, reference="driver", unit="firings/s"))
    return drawn


def scaling(args: argparse.Namespace, name: str) -> None:
    """1 worker against 2 (the same cluster, the application held to ``spark.cores.max`` cores), alternately."""
    rule = RULES[args.rule]
    best: dict[str, float] = {}
    splits: dict[str, list[dict[str, float]]] = {"1 worker": [], "2 workers": []}
    with tempfile.TemporaryDirectory() as tmp, standalone_cluster(workers=2, cores=1, memory="1g") as cluster:
        app = build_app(Path(tmp) / "data", args.windows, args.window)
        expected: list[str] = []
        for _ in range(args.repeat):
            seconds, expected = run_driver(app, rule, args.windows, args.window)
            best["driver"] = min(best.get("driver", seconds), seconds)
            for workers in (1, 2):
                label = f"{workers} worker" + ("s" if workers > 1 else "")
                spark = spark_session(SparkSettings(master=cluster.master_url, conf={"spark.cores.max": str(workers)}))
                pool = ExecutorPool(lambda: spark, reads_log=True)  # noqa: B023 - used within this iteration only
                run_executors(app, pool, rule, args.batch, args.window, args.batch)  # warm-up: executors, workers
                executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
                assert executors == workers, f"{label}: {executors} executors"
                times = []
                for _ in range(args.rounds):
                    seconds, outputs, batch_splits = run_executors(app, pool, rule, args.windows, args.window,
                                                                   args.batch)
                    assert outputs == expected, "executors constructed something else than the driver"
                    times.append(seconds)
                    splits[label].extend(batch_splits)
                best[label] = min(best.get(label, statistics.median(times)), statistics.median(times))
                spark.stop()
    measurements = [Measurement("driver (in process, one by one)", best["driver"], args.windows, "firings")] + [
        Measurement(f"executors, {label} (1 core each, {args.batch} per job)", best[label], args.windows, "firings")
        for label in ("1 worker", "2 workers")]
    print_table(f"Rule firings ({args.rule}): {args.windows} windows of {args.window} readings, 1 worker against 2 "
                f"(best of {args.repeat} alternating runs, each the median of {args.rounds})", measurements,
                measurements[1].name)
    ratio = measurements[2].rate / measurements[1].rate
    print(f"\n2 workers / 1 worker: {ratio:.2f}x")
    payload: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k != "plot_only"},
        "measurements": [m.to_dict() for m in measurements],
        "ratio_2_workers_to_1": ratio,
        "per_batch_ms": {label: {"copy": round(statistics.median(s["copy_s"] for s in found) * 1000, 1),
                                 "job": round(statistics.median(s["job_s"] for s in found) * 1000, 1)}
                         for label, found in splits.items()},
    }
    print(f"wrote {write_json(name, payload)}")
    write_plots(scaling_plots, payload, name)


def scaling_plots(document: dict[str, Any], name: str) -> list[Path]:
    config = document["config"]
    rates = {m["name"]: m["rate"] for m in document["measurements"]}
    return [bar_plot(name, f"Rule {config['rule']} in Spark executors: 1 worker against 2 (1 core each), "
                     f"{config['windows']} windows of {config['window']} readings",
                     {config["rule"]: rates}, reference=document["measurements"][1]["name"], unit="firings/s")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--window", type=int, default=300, help="readings per window")
    parser.add_argument("--batch", type=int, default=16, help="firings per Spark job")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rule", choices=sorted(RULES), default="aggregate")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--cluster", action="store_true", help="start a standalone master and two workers")
    parser.add_argument("--scaling", action="store_true",
                        help="executors on a cluster of 1 worker against 2 (1 core each), alternately")
    parser.add_argument("--repeat", type=int, default=2, help="--scaling: alternations (the best of each is kept)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of this rule's (and --cluster's) JSON again")
    args = parser.parse_args()
    name = f"rule_placement_{args.rule}" + ("_cluster" if args.cluster else "_scaling" if args.scaling else "")
    if args.plot_only:
        replot(scaling_plots if args.scaling else plots, name)
        return
    if args.scaling:
        scaling(args, name)
        return
    with tempfile.TemporaryDirectory() as tmp, master(args) as spark_master:
        app = build_app(Path(tmp) / "data", args.windows, args.window)
        rule = RULES[args.rule]
        assert ineligible_reason(rule, HOST, firing(app, 0, args.window)) is None
        spark = spark_session(SparkSettings(master=spark_master))
        pool = ExecutorPool(lambda: spark, reads_log=True)  # as the server's on this machine
        run_executors(app, pool, rule, args.batch, args.window, args.batch)  # warm-up: Python workers, broadcast
        driver_times, executor_times, all_splits = [], [], []
        for _ in range(args.rounds):
            seconds, expected = run_driver(app, rule, args.windows, args.window)
            driver_times.append(seconds)
            seconds, outputs, splits = run_executors(app, pool, rule, args.windows, args.window, args.batch)
            executor_times.append(seconds)
            all_splits.extend(splits)
            assert outputs == expected, "executors constructed something else than the driver"
        alerts = sum(1 for o in expected if o)
        spark.stop()
    measurements = [Measurement("driver (in process, one by one)", statistics.median(driver_times), args.windows,
                                "firings"),
                    Measurement(f"executors ({spark_master}, {args.batch} per job)",
                                statistics.median(executor_times), args.windows, "firings")]
    print_table(f"Rule firings ({args.rule}): {args.windows} windows of {args.window} readings, {alerts} with output "
                f"(median of {args.rounds})", measurements, measurements[0].name)
    copy = statistics.median(s["copy_s"] for s in all_splits)
    job = statistics.median(s["job_s"] for s in all_splits)
    print(f"\nper batch of {args.batch}: window copies in the driver {copy * 1000:.1f} ms, "
          f"Spark job {job * 1000:.1f} ms")
    config = {k: v for k, v in vars(args).items() if k != "plot_only"}
    payload: dict[str, Any] = {
        "config": {**config, "spark_master": spark_master},
        "measurements": [m.to_dict() for m in measurements],
        "ratio_executors_to_driver": measurements[1].rate / measurements[0].rate,
        "per_batch_ms": {"copy": round(copy * 1000, 1), "job": round(job * 1000, 1)},
        "windows_with_output": alerts,
    }
    print(f"wrote {write_json(name, payload)}")
    write_plots(plots, payload, name)


if __name__ == "__main__":
    main()
