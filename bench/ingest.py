"""Stream ingestion over HTTP, against pyoxigraph's own on-disk bulk load in the same run.

Run with ``python -m bench.ingest [--statements 1000000] [--streams 50]``. Three parts:

1. one chunked upload of ``--statements`` statements as elements of 10 statements (9 content
   triples + the timestamp triple) into one stream with a repeating window registered
   (``R/<t0>/PT10S``; elements are 10 ms apart in stream time): statements/s until the upload is
   committed on disk, and until the last window is materialized; ratio to ``Store.bulk_load`` of the
   same statements as N-Quads into a fresh on-disk store;
2. window latency: from the commit of the element that completes a window to that window's revision
   (p50, p99), during the flood of part 1 and at a steady 100 elements/s;
3. ``--streams`` streams uploading at once (the same total of statements): total rate and latency.

Element commit times come from the streams' ``log.jsonl`` (the server's data directory), window
revision commit times from ``GET /streams/{name}/windows``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pyoxigraph
import requests

from bench.harness import Measurement, measure, print_table, write_json
from conformance.server import RunningServer, running_server

BENCH_NAME = "ingest"
PROV = "<http://www.w3.org/ns/prov#generatedAtTime>"
XSD_DT = "<http://www.w3.org/2001/XMLSchema#dateTime>"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs
STEP_US = 10_000  # 10 ms of stream time between elements
WINDOW = "PT10S"
CHUNK_ELEMENTS = 200  # elements per HTTP chunk


def stamp(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def element_lines(stream: str, ordinal: int, at: int) -> str:
    graph = f"<http://ex/{stream}/e{ordinal}>"
    body = "".join(f'_:s{ordinal} <http://ex/p{j}> "{ordinal}-{j}" {graph} .\n' for j in range(9))
    return f'{graph} {PROV} "{stamp(at)}"^^{XSD_DT} .\n' + body


def chunks(stream: str, elements: int, start: int = 0) -> Iterator[bytes]:
    for first in range(start, start + elements, CHUNK_ELEMENTS):
        last = min(first + CHUNK_ELEMENTS, start + elements)
        yield "".join(element_lines(stream, o, T0 + o * STEP_US) for o in range(first, last)).encode()


def create(server: RunningServer, name: str) -> str:
    url = f"{server.url}/streams/{name}"
    requests.put(url).raise_for_status()
    ref = f"R/{stamp(T0)}/{WINDOW}"
    r = requests.get(url, params={"WINDOWS": ref, "timeout": "0", "answer": "latest"},
                     headers={"Accept": "application/n-quads"})
    assert r.status_code == 503, r.text  # registered, nothing complete yet
    return url


def upload(url: str, body: Iterator[bytes]) -> dict:  # type: ignore[type-arg]
    r = requests.post(url, data=body, headers={"Content-Type": "application/n-quads"})
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def punctuate_and_wait(url: str, until: int, timeout: float = 600) -> list[dict]:  # type: ignore[type-arg]
    """Punctuate at ``until`` and wait for every window ending at or before it."""
    requests.post(url, params={"punctuation": stamp(until)}).raise_for_status()
    expected = (until - T0) // 10_000_000
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sequences = requests.get(url + "/windows").json()["sequences"]
        windows = sequences[0]["windows"] if sequences else []
        if len(windows) >= expected:
            return windows  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise TimeoutError(f"{url}: {expected} windows not materialized in {timeout} s")


def latencies(server: RunningServer, name: str, windows: list[dict]) -> list[float]:  # type: ignore[type-arg]
    """ms from the commit of the first element at or past each window's end to its revision."""
    times, commits = [], []
    for line in (server.data_dir / "streams" / name / "log.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if "o" in entry:
            times.append(entry["t"])
            commits.append(entry["c"])
    result = []
    for window in windows:
        end = parse_micros(window["end"])
        completing = next((i for i, t in enumerate(times) if t >= end), None)
        if completing is None:
            continue  # completed by the final punctuation, not by an element
        result.append((parse_micros(window["committed"]) - commits[completing]) / 1000)
    return result


def parse_micros(text: str) -> int:
    value = datetime.fromisoformat(text)
    return int(value.timestamp()) * 1_000_000 + value.microsecond


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bulk_load_baseline(elements: int) -> Measurement:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.nq"
        with path.open("wb") as out:
            for chunk in chunks("base", elements):
                out.write(chunk)
        target = pyoxigraph.Store(str(Path(tmp) / "store"))
        return measure("pyoxigraph bulk_load (on disk)", elements * 10,
                       lambda: target.bulk_load(path=str(path), format=pyoxigraph.RdfFormat.N_QUADS), "statements")


def single_stream(server: RunningServer, elements: int) -> tuple[list[Measurement], list[float]]:
    url = create(server, "flood")
    start = time.perf_counter()
    answer = upload(url, chunks("flood", elements))
    committed = time.perf_counter() - start
    assert answer["committed"] == elements, answer
    last = T0 + (elements - 1) * STEP_US
    windows = punctuate_and_wait(url, last - last % 10_000_000 + 10_000_000)
    reflected = time.perf_counter() - start
    return ([Measurement("server: 1 chunked upload, committed", committed, elements * 10, "statements"),
             Measurement("server: ... and all windows materialized", reflected, elements * 10, "statements")],
            latencies(server, "flood", windows))


def steady_latency(server: RunningServer, seconds: float, rate: float) -> list[float]:
    """Elements at ``rate``/s in stream time = wall time; windows of 1 s."""
    url = f"{server.url}/streams/steady"
    requests.put(url).raise_for_status()
    now = int(time.time() * 1e6)
    r = requests.get(url, params={"WINDOWS": f"R/{stamp(now - now % 1_000_000)}/PT1S", "timeout": "0",
                                 "answer": "latest"},
                     headers={"Accept": "application/n-quads"})
    assert r.status_code == 503

    def paced() -> Iterator[bytes]:
        begin = time.monotonic()
        for ordinal in range(int(seconds * rate)):
            delay = begin + ordinal / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield element_lines("steady", ordinal, int(time.time() * 1e6)).encode()

    upload(url, paced())
    time.sleep(3)
    windows = requests.get(url + "/windows").json()["sequences"][0]["windows"]
    return latencies(server, "steady", windows)


def many_streams(server: RunningServer, streams: int, elements: int) -> tuple[Measurement, list[float]]:
    per_stream = elements // streams
    urls = [create(server, f"s{i}") for i in range(streams)]
    bodies = [list(chunks(f"s{i}", per_stream)) for i in range(streams)]  # generated before timing
    errors: list[BaseException] = []

    def run(url: str, body: list[bytes]) -> None:
        try:
            upload(url, iter(body))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(u, b)) for u, b in zip(urls, bodies, strict=True)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    last = T0 + (per_stream - 1) * STEP_US
    lat: list[float] = []
    for i, url in enumerate(urls):
        windows = punctuate_and_wait(url, last - last % 10_000_000 + 10_000_000)
        lat += latencies(server, f"s{i}", windows)
    return Measurement(f"server: {streams} streams uploading at once", seconds, per_stream * streams * 10,
                       "statements"), lat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--statements", type=int, default=1_000_000)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    elements = args.statements // 10
    baseline = bulk_load_baseline(elements)
    with running_server(["--threads", str(args.streams + 16)]) as server:
        deadline = time.monotonic() + 120
        while requests.get(server.url + "/status").json()["pipeline"].get("ready") is not True:
            if time.monotonic() > deadline:
                raise TimeoutError("the Spark pipeline did not start")
            time.sleep(0.5)
        flood, flood_latency = single_stream(server, elements)
        steady = steady_latency(server, args.steady_seconds, 100.0)
        many, many_latency = many_streams(server, args.streams, elements)
    measurements = [baseline, *flood, many]
    print_table(f"Stream ingestion: {args.statements:,} statements, elements of 10", measurements, baseline.name)
    rows = [("flood (1 stream)", flood_latency), ("steady 100 elements/s", steady),
            (f"{args.streams} streams", many_latency)]
    print("\nwindow latency: element completing a window committed -> window revision committed (ms)")
    for label, values in rows:
        print(f"  {label:<24} n={len(values):4d}  p50={percentile(values, 0.5):8.1f}  "
              f"p99={percentile(values, 0.99):8.1f}")
    path = write_json(BENCH_NAME, {
        "statements": args.statements, "streams": args.streams,
        "measurements": [m.to_dict() for m in measurements],
        "ratio_to_bulk_load": flood[0].rate / baseline.rate,
        "latency_ms": {label: {"n": len(v), "p50": percentile(v, 0.5), "p99": percentile(v, 0.99),
                               "mean": statistics.fmean(v) if v else None} for label, v in rows},
    })
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
