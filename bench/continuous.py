"""Continuous responses under load (issue 5): subscribers on one stream while it ingests.

A real server (Spark pipeline, HTTP; its continuous responses are held by the fan-out, ``delivery/``). One run,
two phases over fresh streams, alternating nothing else:

1. **baseline**: one uploader sends elements at ``--rate`` elements/s (a paced chunked upload of small
   elements: one triple and a timestamp) for ``--seconds``; nobody subscribes. Ingest rate = elements
   committed / the upload's duration.
2. **subscribed**: ``--subscribers`` clients open a continuous response on the stream's
   ``R/HEAD/PT01S`` windows with ``SELECT (COUNT(*) AS ?n)`` (multipart, concentrator.client), then the same
   upload runs. Delivery latency per window = the time the *last* subscriber had the window's part − the
   window revision's commit time (``Window-Committed``; same machine, same clock); p50 and p99 over the
   windows. The ingest rate is compared with the baseline's.

    .venv/bin/python -m bench.continuous                                   # quick: 20 subscribers, 1,000 el/s, 10 s
    .venv/bin/python -m bench.continuous --subscribers 100 --rate 10000 --seconds 20   # the issue's run

Prints a table and writes ``bench/results/continuous.json``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from bench.harness import (
    RESULTS_DIR,
    Measurement,
    bar_plot,
    environment,
    print_table,
    replot,
    scaling_plot,
    summary_plot,
    write_json,
    write_plots,
)
from concentrator.client import windows
from conformance.server import RunningServer, running_server

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z: application time of the first element
COUNT = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"


def stamp(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6).astimezone().isoformat(timespec="microseconds")


def element_batches(count: int, rate: float) -> list[bytes]:
    """``count`` elements 1/rate s apart in application time (so a 1 s window completes about every second), in
    batches of 1/50 s of sending; built before the upload so that the bench process spends its time reading."""
    batch = max(1, int(rate / 50))
    spacing = int(1_000_000 / rate)
    batches = []
    for first in range(0, count, batch):
        lines = []
        for n in range(first, min(first + batch, count)):
            t = f'"{stamp(T0 + n * spacing)}"^^<{XSD_DT}>'
            lines.append(f"<urn:e:{n}> <{PROV}> {t} .\n<urn:e:{n}> {{ <urn:s:{n}> <urn:v> {n % 100} . }}\n")
        batches.append("".join(lines).encode())
    return batches


def paced(batches: list[bytes], rate: float, count: int, started: list[float]) -> Iterator[bytes]:
    """The batches, each sent when its first element is due at ``rate`` elements per second."""
    per_batch = count / len(batches)
    begin = time.monotonic()
    started.append(begin)
    for k, data in enumerate(batches):
        delay = begin + k * per_batch / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield data


def ingest(server: RunningServer, name: str, count: int, rate: float) -> Measurement:
    url = f"{server.url}/streams/{name}"
    started: list[float] = []
    batches = element_batches(count, rate)
    response = requests.post(url, data=paced(batches, rate, count, started),
                             headers={"Content-Type": "application/trig"}, timeout=600)
    response.raise_for_status()
    seconds = time.monotonic() - started[0]
    committed = response.json()["committed"]
    return Measurement(name, seconds, committed, unit="elements")


def subscribe(url: str, received: dict[int, list[float]], committed: dict[int, float], lock: threading.Lock,
              ready: threading.Barrier, windows_wanted: int) -> None:
    ready.wait()
    for window in windows(url, f"R{windows_wanted}/HEAD/PT01S", query=COUNT):
        now = time.time()
        with lock:
            received.setdefault(window.index, []).append(now)
            committed[window.index] = datetime.fromisoformat(window.committed.replace("Z", "+00:00")).timestamp()


def run(subscribers: int, rate: float, seconds: float, threads: int) -> dict[str, Any]:
    count = int(rate * seconds)
    windows_wanted = int(seconds) - 1  # 1 s windows of application time; the last one stays open
    with running_server(["--threads", str(threads)]) as server:
        for name in ("baseline", "subscribed"):
            requests.put(f"{server.url}/streams/{name}", timeout=30).raise_for_status()
        baseline = ingest(server, "baseline", count, rate)
        received: dict[int, list[float]] = {}
        committed: dict[int, float] = {}
        lock = threading.Lock()
        ready = threading.Barrier(subscribers + 1)
        url = f"{server.url}/streams/subscribed"
        clients = [threading.Thread(target=subscribe, args=(url, received, committed, lock, ready, windows_wanted),
                                    daemon=True) for _ in range(subscribers)]
        for client in clients:
            client.start()
        ready.wait()
        deadline = time.monotonic() + 60
        while len(requests.get(f"{server.url}/status", timeout=30).json()["continuous"]) < subscribers:
            if time.monotonic() > deadline:
                raise TimeoutError("the subscribers did not all register")
            time.sleep(0.2)
        subscribed = ingest(server, "subscribed", count, rate)
        for client in clients:
            client.join(300)
        complete = {k: v for k, v in received.items() if len(v) == subscribers}
        latencies = sorted((max(times) - committed[k]) * 1000 for k, times in complete.items())
    table = [baseline, Measurement("subscribed", subscribed.seconds, subscribed.items, unit="elements")]
    print_table(f"ingest at {rate:,.0f} elements/s target, {count:,} elements: without and with "
                f"{subscribers} subscribers", table, "baseline")
    summary = _summary(latencies)
    print(f"delivery latency, window revision -> last of {subscribers} subscribers, {len(latencies)} windows: "
          f"p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, max {summary['max_ms']} ms; "
          f"windows every subscriber got: {len(complete)}/{windows_wanted}")
    return {"subscribers": subscribers, "rate_target": rate, "elements": count, "server_threads": threads,
            "ingest": [m.to_dict() for m in table],
            "ingest_ratio": round(subscribed.rate / baseline.rate, 3) if baseline.rate else None,
            "delivery_latency_to_last_subscriber": summary, "windows_complete": len(complete),
            "windows_expected": windows_wanted}


def _summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}

    def pct(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 1)

    return {"n": len(values), "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(values[-1], 1)}


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>_ingest.png``: the ingest rate with subscribers beside the same upload without; ``<name>_latency.png``:
    delivery latency to the last subscriber; ``continuous_scaling.png``: that latency against the offered rate, over
    every continuous*.json result (one point per run)."""
    result = document["result"]
    rate, subscribers = result["rate_target"], result["subscribers"]
    drawn = [
        bar_plot(f"{name}_ingest", f"Ingest with {subscribers} continuous subscribers beside the same upload without",
                 {f"{rate:,.0f} elements/s offered": {m["name"]: m["rate"] for m in result["ingest"]}},
                 reference="baseline", unit="elements/s"),
        summary_plot(f"{name}_latency", "Window revision committed → the last subscriber received it",
                     {f"{subscribers} subscribers, {rate:,.0f} el/s": result["delivery_latency_to_last_subscriber"]}),
    ]
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(RESULTS_DIR.glob("continuous*.json"))]
    runs = [run["result"] for run in runs if run.get("benchmark") == "continuous"]
    if len(runs) > 1:
        curves = {f"{q} delivery latency": [(r["rate_target"], r["delivery_latency_to_last_subscriber"][f"{q}_ms"])
                                            for r in runs] for q in ("p50", "p99")}
        drawn.append(scaling_plot("continuous_scaling", f"Delivery latency as the offered rate grows "
                                  f"({subscribers} subscribers)", curves, xlabel="elements/s offered",
                                  ylabel="ms", log_y=True))
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.continuous", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0, help="elements per second uploaded")
    parser.add_argument("--seconds", type=float, default=10.0, help="upload duration")
    parser.add_argument("--threads", type=int, default=None, help="server threads (default: subscribers + 16)")
    parser.add_argument("--name", default="continuous", help="result file name (bench/results/NAME.json)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/NAME.json again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, args.name)
        return 0
    result = run(args.subscribers, args.rate, args.seconds, args.threads or args.subscribers + 16)
    parameters = {k: v for k, v in vars(args).items() if k != "plot_only"}
    document = {"environment": environment(), "parameters": parameters, "result": result}
    path = write_json(args.name, document)
    print(f"wrote {path}")
    write_plots(plots, {"benchmark": "continuous", **document}, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
