"""Stream ingestion over HTTP (issue 14), against pyoxigraph and the Oxigraph server in the same run.

Run with ``python -m bench.ingest`` (every part, ≈ 12 min) or e.g. ``--statements 100000 --duration 20`` (quick).
One concentrator server (``python -m concentrator serve``, Spark pipeline on, ``--threads`` streams + 16) runs for
all parts. Elements are ``--per-element`` content statements (default 10) + the timestamp triple, stream time
advancing 1 ms per element; every stream has ``R/<t0>/PT1S`` registered before its upload (``GET
/streams/NAME?WINDOWS=…&answer=latest&timeout=0``). Parts (``--parts``):

``compare``
    the same body (``--statements``, as N-Quads and as TriG with prefixes, one graph block per element), best of
    ``--repeat`` runs in alternating order: pyoxigraph ``Store.bulk_load`` on disk, ``Store.load`` on disk
    (transactional), ``Store.load`` in memory, the Oxigraph server (``oxigraph serve``, ``bench`` extra; one chunked
    ``POST /store``) and this server (one chunked ``POST /streams/NAME``: time until the answer, every element
    committed on disk, then until every window is materialized after a final punctuation). Ratios of this server
    to each baseline.
``flood``
    one chunked upload to ``/streams/s`` for ``--duration`` seconds, generated lazily in chunks of 200 elements:
    the committed HEAD (``GET /streams/s``) sampled every second (rate over time); window latency = the window
    revision's commit − the commit of the element that completed it (the first element at or past its end; commit
    times from ``GET /streams/s/elements``); CPU per component of the server (``bench.cpu``: /proc, and py-spy if
    installed) and the server's ``/status`` ingest counters (``streams.s.ingest``) when it has them.
``streams``
    ``--streams`` streams uploading at once (a client process each, bodies built beforehand, the same total of
    statements) against one stream uploading the same statements, alternating, ``--repeat`` pairs: the best
    round's total rate against the best single upload, the median of the pairs' ratios, window latency.
``steady``
    ``--steady-rate`` elements/s (paced, timestamps = the wall clock) for ``--steady-seconds``: window latency.

Output: a table, ``bench/results/ingest.json`` and PNGs next to it (``ingest_rates``, ``ingest_flood``,
``ingest_latency``, ``ingest_cpu``); bench/README.md describes them.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pyoxigraph
import requests

from bench.cpu import CpuSampler, py_spy_record, py_spy_summary, thread_naming_env
from bench.harness import (
    Measurement,
    Panel,
    PlottingUnavailable,
    Series,
    bar_plot,
    distribution_plot,
    percentile,
    print_table,
    share_plot,
    time_series_plot,
    write_json,
)
from concentrator.client import upload
from conformance.server import RunningServer, free_port, running_server
from sparql_ext.windowing import to_micros

BENCH_NAME = "ingest"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs: every stream's first element and t0
STEP_US = 1_000  # stream time between elements
WINDOW_US = 1_000_000
WINDOW_REF = "R/2016-06-20T10:00:00Z/PT1S"
CHUNK_ELEMENTS = 200  # elements per HTTP chunk
UPLOAD_TIMEOUT = 900.0  # s: waiting for an upload's answer once its body is sent
# Group commit makes per-second rates lumpy (a group of up to 5,000 elements every few seconds): "sustained" rates
# are over this many seconds.
SUSTAINED_WINDOW = 10

BULK_DISK = "pyoxigraph bulk_load (on disk)"
LOAD_DISK = "pyoxigraph load (on disk)"
LOAD_MEMORY = "pyoxigraph load (in memory)"
OXIGRAPH = "Oxigraph server: chunked POST /store"
SERVER = "this server: chunked upload, committed"
SERVER_WINDOWS = "this server: ... and all windows materialized"

# Issue 14's "Must show".
TARGET_RATE = 100_000.0  # statements/s per stream, sustained
TARGET_SECONDS = 120.0
TARGET_TO_BULK_LOAD = 1.5
TARGET_TO_OXIGRAPH = 3.0
TARGET_FLOOD_P99_MS = 2_000.0
TARGET_STEADY_P50_MS = 250.0
TARGET_STEADY_P99_MS = 1_000.0


# --- bodies -----------------------------------------------------------------------------------------------------


def stamp(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def micros(text: str) -> int:
    return to_micros(datetime.fromisoformat(text))


@dataclass(frozen=True)
class BodyFormat:
    """How elements are written: N-Quads, or TriG with prefixes and one graph block per element."""

    name: str
    label: str
    media_type: str
    rdf_format: pyoxigraph.RdfFormat

    def header(self, graphs: str) -> str:
        if self.name != "trig":
            return ""
        return (f"@prefix prov: <http://www.w3.org/ns/prov#> .\n@prefix xsd: <{XSD}> .\n"
                f"@prefix ex: <http://ex/> .\n@prefix g: <{graphs}> .\n")

    def element(self, graphs: str, n: int, at: int, per_element: int) -> str:
        """Element ``n`` (from 0) of a body whose graphs are ``graphs`` + ``e<n>``: its timestamp triple, then
        ``per_element`` statements about one blank node (an integer, a language-tagged string, plain strings)."""
        if self.name == "trig":
            values = [str(n), f'"reading {n}-1"@en', *(f'"{n}-{j}"' for j in range(2, per_element))]
            body = " ; ".join(f"ex:p{j} {v}" for j, v in enumerate(values[:per_element]))
            return f'g:e{n} prov:generatedAtTime "{stamp(at)}"^^xsd:dateTime .\ng:e{n} {{ _:s{n} {body} . }}\n'
        graph = f"<{graphs}e{n}>"
        values = [f'"{n}"^^<{XSD}integer>', f'"reading {n}-1"@en', *(f'"{n}-{j}"' for j in range(2, per_element))]
        lines = "".join(f"_:s{n} <http://ex/p{j}> {v} {graph} .\n" for j, v in enumerate(values[:per_element]))
        return f'{graph} <{PROV}> "{stamp(at)}"^^<{XSD}dateTime> .\n' + lines

    def chunk(self, graphs: str, first: int, count: int, per_element: int) -> bytes:
        return "".join(self.element(graphs, n, T0 + n * STEP_US, per_element)
                       for n in range(first, first + count)).encode()

    def chunks(self, graphs: str, elements: int, per_element: int) -> Iterator[bytes]:
        """The whole body of ``elements`` elements, ``CHUNK_ELEMENTS`` per chunk, generated as it is read."""
        yield self.header(graphs).encode()
        for first in range(0, elements, CHUNK_ELEMENTS):
            yield self.chunk(graphs, first, min(CHUNK_ELEMENTS, elements - first), per_element)


FORMATS = {
    "nquads": BodyFormat("nquads", "N-Quads", "application/n-quads", pyoxigraph.RdfFormat.N_QUADS),
    "trig": BodyFormat("trig", "TriG", "application/trig", pyoxigraph.RdfFormat.TRIG),
}


def file_chunks(path: Path, size: int = 1 << 16) -> Iterator[bytes]:
    with path.open("rb") as source:
        while block := source.read(size):
            yield block


@dataclass(frozen=True)
class Settings:
    statements: int
    per_element: int
    formats: list[str]
    repeat: int
    duration: float
    flood_format: str
    streams: int
    steady_seconds: float
    steady_rate: float
    parts: list[str]
    tmpdir: Path | None
    py_spy: bool

    @property
    def per_statement(self) -> int:
        """Statements per element: the content statements and the timestamp triple."""
        return self.per_element + 1

    @property
    def elements(self) -> int:
        return self.statements // self.per_statement


# --- the servers ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def concentrator(threads: int, names: Path) -> Iterator[RunningServer]:
    """The server under test, with its threads' names recorded in ``names`` (bench.cpu), once Spark is ready."""
    extra = thread_naming_env(names)
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)  # inherited by the server process started next, and by its children

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    try:
        with running_server(["--threads", str(threads)]) as server:
            restore()
            deadline = time.monotonic() + 180
            while requests.get(server.url + "/status", timeout=30).json()["pipeline"].get("ready") is not True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the Spark pipeline did not start:\n{server.log_tail()}")
                time.sleep(0.5)
            yield server
    finally:
        restore()


def oxigraph_executable() -> str | None:
    beside = Path(sys.executable).parent / "oxigraph"
    return str(beside) if beside.exists() else shutil.which("oxigraph")


@contextlib.contextmanager
def oxigraph_server(location: Path) -> Iterator[str]:
    """``oxigraph serve`` on a fresh on-disk location and a free port of 127.0.0.1; yields its base URL."""
    executable = oxigraph_executable()
    if executable is None:
        raise FileNotFoundError("the oxigraph server is not installed: pip install -e '.[test,bench]'")
    port = free_port()
    log = location.parent / f"{location.name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([executable, "serve", "--location", str(location), "--bind", f"127.0.0.1:{port}"],
                                   stdout=out, stderr=out)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"oxigraph serve exited:\n{log.read_text(errors='replace')}")
                with contextlib.suppress(requests.RequestException):
                    if requests.get(url + "/", timeout=2).ok:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"oxigraph serve did not answer:\n{log.read_text(errors='replace')}")
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def register(server: RunningServer, name: str) -> str:
    """Create the stream and register ``WINDOW_REF`` on it (nothing complete yet: 503); its URL."""
    url = f"{server.url}/streams/{name}"
    requests.put(url, timeout=30).raise_for_status()
    r = requests.get(url, params={"WINDOWS": WINDOW_REF, "timeout": "0", "answer": "latest"},
                     headers={"Accept": "application/n-quads"}, timeout=30)
    if r.status_code != 503:
        raise RuntimeError(f"registering {WINDOW_REF} on {name}: {r.status_code} {r.text[:300]}")
    return url


def windows_after(url: str, last_element_us: int, timeout: float = 600) -> list[dict[str, Any]]:
    """Punctuate at the end of the window holding the last element and wait until every window up to there is
    materialized; the window revisions."""
    end = last_element_us - (last_element_us - T0) % WINDOW_US + WINDOW_US
    requests.post(url, params={"punctuation": stamp(end)}, timeout=30).raise_for_status()
    return wait_for_windows(url, (end - T0) // WINDOW_US, timeout)


def wait_for_windows(url: str, expected: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        sequences = requests.get(url + "/windows", timeout=60).json()["sequences"]
        found: list[dict[str, Any]] = sequences[0]["windows"] if sequences else []
        if len(found) >= expected:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: {len(found)} of {expected} windows materialized after {timeout:g} s")
        time.sleep(0.2)


def element_commits(url: str) -> tuple[list[int], list[int]]:
    """Every retained element's timestamp and commit time (µs), in ordinal order, from ``GET …/elements`` pages."""
    times: list[int] = []
    commits: list[int] = []
    start = 0
    with requests.Session() as session:
        while True:
            page = session.get(url + "/elements", params={"from": str(start)}, timeout=120).json()
            records = page["elements"]
            if not records:
                return times, commits
            times += [micros(r["time"]) for r in records]
            commits += [int(r["committed_us"]) for r in records]
            start = records[-1]["ordinal"] + 1
            if start > page["head"]:
                return times, commits


def window_latencies(windows: list[dict[str, Any]], times: list[int], commits: list[int],
                     ) -> list[tuple[int, float]]:
    """Per window completed by an element: (its revision's commit time µs, latency ms) where latency = that commit
    − the commit of the first element at or past the window's end (the one that completed it). Windows completed
    by a punctuation (no element past their end) are left out."""
    result = []
    for window in windows:
        completing = bisect.bisect_left(times, micros(window["end"]))
        if completing < len(times):
            committed = micros(window["committed"])
            result.append((committed, (committed - commits[completing]) / 1000))
    return result


def summary(values: list[float]) -> dict[str, float | int | None]:
    """n, p50, p99, max, mean of latencies (ms)."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None, "mean": None}
    return {"n": len(values), "p50": round(percentile(values, 0.5), 1), "p99": round(percentile(values, 0.99), 1),
            "max": round(max(values), 1), "mean": round(sum(values) / len(values), 1)}


# --- compare: one body, every system ----------------------------------------------------------------------------


def pyoxigraph_run(name: str, body: Path, fmt: BodyFormat, statements: int, location: Path | None,
                   bulk: bool) -> Measurement:
    """Load ``body`` into a fresh store (on disk at ``location``, else in memory), timed with the flush to disk;
    the statement count is checked afterwards."""
    store = pyoxigraph.Store(str(location)) if location else pyoxigraph.Store()
    start = time.perf_counter()
    if bulk:
        store.bulk_load(path=str(body), format=fmt.rdf_format)
    else:
        store.load(path=str(body), format=fmt.rdf_format)
    if location:
        store.flush()
    seconds = time.perf_counter() - start
    if len(store) != statements:
        raise AssertionError(f"{name}: {len(store)} statements loaded, {statements} expected")
    del store
    if location:
        shutil.rmtree(location, ignore_errors=True)
    return Measurement(name, seconds, statements, "statements")


def oxigraph_run(body: Path, fmt: BodyFormat, statements: int, location: Path) -> Measurement:
    """One chunked ``POST /store`` of the body to a fresh Oxigraph server (a dataset load: N-Quads or TriG)."""
    try:
        with oxigraph_server(location) as url:
            start = time.perf_counter()
            r = requests.post(url + "/store", data=file_chunks(body), headers={"Content-Type": fmt.media_type},
                              timeout=UPLOAD_TIMEOUT)
            seconds = time.perf_counter() - start
            if not r.ok:
                raise RuntimeError(f"oxigraph POST /store: {r.status_code} {r.text[:300]}")
            count = requests.post(url + "/query", data="SELECT (COUNT(*) AS ?n) { { ?s ?p ?o } UNION "
                                  "{ GRAPH ?g { ?s ?p ?o } } }", timeout=300,
                                  headers={"Content-Type": "application/sparql-query",
                                           "Accept": "application/sparql-results+json"})
            loaded = int(count.json()["results"]["bindings"][0]["n"]["value"])
            if loaded != statements:
                raise AssertionError(f"oxigraph server: {loaded} statements loaded, {statements} expected")
    finally:
        shutil.rmtree(location, ignore_errors=True)
    return Measurement(OXIGRAPH, seconds, statements, "statements")


def server_run(server: RunningServer, name: str, body: Path, fmt: BodyFormat, elements: int,
               statements: int) -> list[Measurement]:
    """One chunked upload of the body to a fresh stream with the window registered: until its answer (every
    element committed), then until every window is materialized."""
    url = register(server, name)
    start = time.perf_counter()
    answer = upload(url, file_chunks(body), content_type=fmt.media_type, timeout=UPLOAD_TIMEOUT)
    committed = time.perf_counter() - start
    if answer["committed"] != elements:
        raise AssertionError(f"{name}: {answer['committed']} elements committed, {elements} expected")
    windows_after(url, T0 + (elements - 1) * STEP_US)
    materialized = time.perf_counter() - start
    return [Measurement(SERVER, committed, statements, "statements"),
            Measurement(SERVER_WINDOWS, materialized, statements, "statements")]


def compare(server: RunningServer, settings: Settings, tmp: Path) -> dict[str, Any]:
    elements, statements = settings.elements, settings.elements * settings.per_statement
    result: dict[str, Any] = {}
    bodies = {}
    for name in settings.formats:
        fmt = FORMATS[name]
        bodies[name] = tmp / f"body.{name}"
        with bodies[name].open("wb") as out:
            for chunk in fmt.chunks("http://ex/b/", elements, settings.per_element):
                out.write(chunk)
    has_oxigraph = oxigraph_executable() is not None
    if not has_oxigraph:
        print("the Oxigraph server baseline is skipped: oxigraph is not installed (pip install -e '.[test,bench]')")
    runs: dict[str, dict[str, list[Measurement]]] = {name: {} for name in settings.formats}
    for round_ in range(settings.repeat):
        for name in settings.formats:
            fmt, body = FORMATS[name], bodies[name]
            systems: list[Callable[[], Measurement | list[Measurement]]] = [
                partial(pyoxigraph_run, BULK_DISK, body, fmt, statements, tmp / "store", bulk=True),
                partial(pyoxigraph_run, LOAD_DISK, body, fmt, statements, tmp / "store", bulk=False),
                partial(pyoxigraph_run, LOAD_MEMORY, body, fmt, statements, None, bulk=False),
                *([partial(oxigraph_run, body, fmt, statements, tmp / "oxigraph")] if has_oxigraph else []),
                partial(server_run, server, f"{name}-{round_}", body, fmt, elements, statements),
            ]
            for system in systems if round_ % 2 == 0 else systems[::-1]:  # alternate: damps warm-up and drift
                done = system()
                for m in done if isinstance(done, list) else [done]:
                    runs[name].setdefault(m.name, []).append(m)
                    print(f"  {fmt.label:<8} round {round_ + 1}: {m.name:<48} {m.rate:12,.0f} statements/s",
                          flush=True)
    for name in settings.formats:
        best = {label: max(ms, key=lambda m: m.rate) for label, ms in runs[name].items()}
        server_rate = best[SERVER].rate
        result[name] = {
            "elements": elements, "statements": statements, "body_bytes": bodies[name].stat().st_size,
            "best": {label: m.to_dict() for label, m in best.items()},
            "runs": {label: [m.to_dict() for m in ms] for label, ms in runs[name].items()},
            "ratios": {f"to {label}": server_rate / m.rate for label, m in best.items()
                       if label not in (SERVER, SERVER_WINDOWS)},
        }
    return result


# --- flood: one upload for --duration seconds -------------------------------------------------------------------


def flood(server: RunningServer, settings: Settings, names: Path, tmp: Path) -> dict[str, Any]:
    fmt = FORMATS[settings.flood_format]
    url = register(server, "s")
    sent = [0]
    stop_sampling = threading.Event()
    heads: list[tuple[float, int]] = []

    def body(deadline: float) -> Iterator[bytes]:
        yield fmt.header(f"{server.url}/e/").encode()
        while time.monotonic() < deadline:
            yield fmt.chunk(f"{server.url}/e/", sent[0], CHUNK_ELEMENTS, settings.per_element)
            sent[0] += CHUNK_ELEMENTS

    def sample_heads(begin: float) -> None:
        with requests.Session() as session:
            while not stop_sampling.wait(1.0 - (time.monotonic() - begin) % 1.0):
                head = session.get(url, timeout=30).json()["head"]
                heads.append((time.monotonic() - begin, head["ordinal"] if head else 0))

    ingest_before = ingest_counters(server, "s")
    worker = worker_pid(server.process.pid)
    cpu = CpuSampler(server.process.pid, names)
    client_before = resource.getrusage(resource.RUSAGE_SELF)
    profile = tmp / "py-spy.txt"
    spy = py_spy_record(worker, settings.duration, profile) if settings.py_spy and worker else None
    if settings.py_spy and spy is None:
        print("py-spy is not installed (pip install -e '.[test,bench]'): no profile")
    cpu.start()
    begin, wall_begin = time.monotonic(), time.time()
    heads.append((0.0, 0))
    sampler = threading.Thread(target=sample_heads, args=(begin,), name="head-sampler", daemon=True)
    sampler.start()
    answer = upload(url, body(begin + settings.duration), content_type=fmt.media_type, timeout=UPLOAD_TIMEOUT)
    seconds = time.monotonic() - begin
    stop_sampling.set()
    sampler.join()
    heads.append((seconds, int(answer["head"])))
    cpu_report = cpu.stop()
    client_after = resource.getrusage(resource.RUSAGE_SELF)
    client = (client_after.ru_utime + client_after.ru_stime) - (client_before.ru_utime + client_before.ru_stime)
    cpu_report["bench_client_cpu_seconds"] = round(client, 2)
    cpu_report["other_processes_cpu_seconds"] = round(
        max(0.0, cpu_report["machine_busy_cpu_seconds"] - cpu_report["server_cpu_seconds"] - client), 2)
    profile_summary = None
    if spy is not None:
        _, errors = spy.communicate(timeout=settings.duration + 60)
        if profile.exists():
            profile_summary = py_spy_summary(profile, cpu.tids)
        else:
            print(f"py-spy wrote no profile: {errors.decode(errors='replace')[-500:]}")
    ingest_after = ingest_counters(server, "s")
    elements = int(answer["committed"])
    if elements != sent[0]:
        raise AssertionError(f"flood: {elements} elements committed, {sent[0]} sent")
    windows = windows_after(url, T0 + (elements - 1) * STEP_US)
    drained = time.monotonic() - begin
    times, commits = element_commits(url)
    if len(times) != elements:
        raise AssertionError(f"flood: {len(times)} element records, {elements} committed")
    latencies = window_latencies(windows, times, commits)
    per = settings.per_statement
    per_second = committed_per_second(commits, wall_begin, seconds, per)
    sustained = moving_average(per_second[:int(seconds)] or per_second, SUSTAINED_WINDOW)  # whole seconds
    return {
        "format": fmt.name, "seconds": round(seconds, 3), "elements": elements, "statements": elements * per,
        "rate": elements * per / seconds,
        f"rate_over_{SUSTAINED_WINDOW}s": {"min": min(sustained, default=None), "p10": percentile(sustained, 0.1),
                                            "p50": percentile(sustained, 0.5), "max": max(sustained, default=None)},
        "drain_seconds": round(drained - seconds, 3),
        "latency_ms": summary([lat for _, lat in latencies]),
        "series": {"committed_per_second": per_second, f"moving_average_{SUSTAINED_WINDOW}s": sustained,
                   "heads": [(round(t, 3), h) for t, h in heads]},
        "windows": [{"committed_s": round(c / 1e6 - wall_begin, 3), "latency_ms": round(lat, 1)}
                    for c, lat in latencies],
        "cpu": cpu_report, "py_spy": profile_summary,
        "status_ingest": {"before": ingest_before, "after": ingest_after,
                          "delta": delta(ingest_before, ingest_after)} if ingest_after is not None else None,
    }


def committed_per_second(commits: list[int], wall_begin: float, seconds: float, per_element: int) -> list[int]:
    """Statements committed in each second of the upload (element commit times, µs, bucketed by whole seconds since
    ``wall_begin``; the last, partial second included)."""
    counts = [0] * (int(seconds) + 1)
    for commit in commits:
        second = int(commit / 1e6 - wall_begin)
        if 0 <= second < len(counts):
            counts[second] += per_element
    return counts


def moving_average(values: list[int], width: int) -> list[float]:
    """The mean of each run of ``width`` consecutive values (statements/s over ``width`` seconds); fewer values
    than ``width``: their mean alone."""
    if len(values) < width:
        return [sum(values) / len(values)] if values else []
    return [sum(values[i:i + width]) / width for i in range(len(values) - width + 1)]


def worker_pid(root: int) -> int | None:
    """The gunicorn worker under the server's root process (the first Python child)."""
    from bench.cpu import process_kind, process_tree

    return next((pid for pid in process_tree(root) if process_kind(pid, root) == "worker"), None)


def ingest_counters(server: RunningServer, name: str) -> dict[str, Any] | None:
    """The server's own ingest phase timings for the stream (``/status`` → ``streams.<name>.ingest``), if any."""
    stream = requests.get(server.url + "/status", timeout=30).json()["streams"].get(name) or {}
    counters = stream.get("ingest")
    return counters if isinstance(counters, dict) else None


def delta(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """``after − before`` for the numbers of two counter dicts (nested dicts too); other values as in ``after``."""
    result: dict[str, Any] = {}
    for key, value in after.items():
        old = (before or {}).get(key)
        if isinstance(value, dict):
            result[key] = delta(old if isinstance(old, dict) else None, value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            result[key] = value - old if isinstance(old, int | float) and not isinstance(old, bool) else value
        else:
            result[key] = value
    return result


# --- many streams at once ---------------------------------------------------------------------------------------


def many_streams(server: RunningServer, settings: Settings, single_rate: float | None) -> dict[str, Any]:
    """``--streams`` streams uploading at once against one stream uploading the same statements, alternating, in
    ``--repeat`` pairs (new streams each round, as ``compare`` uses a new stream per run; the order swaps every
    pair, which damps drift and warm-up): the best round's rate against the best single upload of this part,
    and the median of the pairs' ratios. ``single_rate`` (``compare``'s best, or the flood's) is kept beside for
    reference: it ran minutes earlier, between other systems' runs."""
    fmt = FORMATS[settings.flood_format]
    rounds: list[dict[str, Any]] = []
    singles: list[dict[str, Any]] = []
    for round_ in range(settings.repeat):
        together = partial(_streams_round, server, settings, round_)
        alone = partial(_single_round, server, settings, round_)
        for run in (together, alone) if round_ % 2 == 0 else (alone, together):
            (rounds if run is together else singles).append(run())
            print(f"  {fmt.label:<8} round {round_ + 1}: "
                  f"{'one stream' if run is alone else f'{settings.streams} streams at once':<24} "
                  f"{(singles if run is alone else rounds)[-1]['rate']:12,.0f} statements/s", flush=True)
    best = max(rounds, key=lambda r: r["rate"])
    best_single = max(s["rate"] for s in singles)
    pairs = sorted(r["rate"] / s["rate"] for r, s in zip(rounds, singles, strict=True))
    return {**best, "single_stream_rate": best_single, "ratio_to_single_stream": best["rate"] / best_single,
            "pair_ratios": [round(r, 3) for r in pairs], "median_pair_ratio": percentile(pairs, 0.5),
            "compare_single_stream_rate": single_rate,
            "rounds": [{"seconds": r["seconds"], "rate": r["rate"]} for r in rounds],
            "single_rounds": [{"seconds": s["seconds"], "rate": s["rate"]} for s in singles]}


def _streams_round(server: RunningServer, settings: Settings, round_: int) -> dict[str, Any]:
    """One round of ``--streams`` streams uploading at once, each from a client process of its own, as independent
    sources would (from threads of one process, the client's own lock is in the measurement: the pairs' median
    ratio was 0.88 and 0.94 that way, against 0.97 and 1.00 from processes, in two runs of 8 alternating pairs).
    Each process builds its body first; the clock runs from the signal to start until the last answer."""
    fmt = FORMATS[settings.flood_format]
    per_stream = settings.elements // settings.streams
    names = [f"m{round_}-{i}" for i in range(settings.streams)]
    urls = [register(server, name) for name in names]
    context = multiprocessing.get_context("spawn")  # no copy of this process's threads (the CPU sampler's)
    ready, go, answers = context.Semaphore(0), context.Event(), context.Queue()
    senders = [context.Process(target=_send_stream, name=f"upload-{name}", daemon=True,
                               args=(url, name, per_stream, settings.per_element, fmt.name, ready, go, answers))
               for url, name in zip(urls, names, strict=True)]
    for sender in senders:
        sender.start()
    for _ in senders:
        if not ready.acquire(timeout=300):
            raise TimeoutError("streams: a client process did not build its body")
    start = time.perf_counter()
    go.set()
    results = [answers.get(timeout=UPLOAD_TIMEOUT) for _ in senders]
    seconds = time.perf_counter() - start
    for sender in senders:
        sender.join()
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"streams: an upload failed: {errors[0]}")
    if sorted(r["committed"] for r in results) != [per_stream] * settings.streams:
        raise AssertionError(f"streams: committed {[r['committed'] for r in results]}, {per_stream} each expected")
    latencies: list[float] = []
    for url in urls:
        windows = windows_after(url, T0 + (per_stream - 1) * STEP_US)
        latencies += [lat for _, lat in window_latencies(windows, *element_commits(url))]
    statements = per_stream * settings.streams * settings.per_statement
    return {"streams": settings.streams, "format": fmt.name, "elements_per_stream": per_stream,
            "statements": statements, "seconds": round(seconds, 3), "rate": statements / seconds,
            "latency_ms": summary(latencies), "latencies_ms": [round(v, 1) for v in latencies]}


def _send_stream(url: str, name: str, elements: int, per_element: int, fmt_name: str, ready: Any, go: Any,
                 answers: Any) -> None:
    """A client process of the streams part: build the body, say so, wait for the start, upload, put the answer
    (or the error's text)."""
    fmt = FORMATS[fmt_name]
    body = list(fmt.chunks(f"http://ex/{name}/", elements, per_element))
    ready.release()
    go.wait()
    try:
        answers.put(upload(url, body, content_type=fmt.media_type, timeout=UPLOAD_TIMEOUT))
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises
        answers.put(f"{name}: {error!r}")


def _single_round(server: RunningServer, settings: Settings, round_: int) -> dict[str, Any]:
    """The streams part's baseline: the same statements as one round, one upload to one new stream, the body
    generated beforehand in the same chunks."""
    fmt = FORMATS[settings.flood_format]
    elements = (settings.elements // settings.streams) * settings.streams
    name = f"one{round_}"
    url = register(server, name)
    body = list(fmt.chunks(f"http://ex/{name}/", elements, settings.per_element))
    start = time.perf_counter()
    answer = upload(url, body, content_type=fmt.media_type, timeout=UPLOAD_TIMEOUT)
    seconds = time.perf_counter() - start
    if answer["committed"] != elements:
        raise AssertionError(f"{name}: committed {answer['committed']}, {elements} expected")
    statements = elements * settings.per_statement
    return {"seconds": round(seconds, 3), "rate": statements / seconds}


# --- steady rate ------------------------------------------------------------------------------------------------


def steady(server: RunningServer, settings: Settings) -> dict[str, Any]:
    """``--steady-rate`` elements/s stamped with the wall clock, 1 s windows anchored at the current second."""
    fmt = FORMATS[settings.flood_format]
    url = f"{server.url}/streams/steady"
    requests.put(url, timeout=30).raise_for_status()
    now = time.time_ns() // 1000
    anchor = now - now % WINDOW_US
    r = requests.get(url, params={"WINDOWS": f"R/{stamp(anchor)}/PT1S", "timeout": "0", "answer": "latest"},
                     headers={"Accept": "application/n-quads"}, timeout=30)
    if r.status_code != 503:
        raise RuntimeError(f"registering the steady windows: {r.status_code} {r.text[:300]}")
    count = int(settings.steady_seconds * settings.steady_rate)
    last = [0]

    def paced() -> Iterator[bytes]:
        yield fmt.header(f"{server.url}/e/").encode()
        begin = time.monotonic()
        n = 0
        while n < count:
            due = min(count, int((time.monotonic() - begin) * settings.steady_rate) + 1)
            texts = []
            while n < due:
                last[0] = max(time.time_ns() // 1000, last[0] + 1)  # strictly increasing stream time
                texts.append(fmt.element(f"{server.url}/e/", n, last[0], settings.per_element))
                n += 1
            if texts:
                yield "".join(texts).encode()
            time.sleep(max(0.0, begin + n / settings.steady_rate - time.monotonic()))

    start = time.monotonic()
    answer = upload(url, paced(), content_type=fmt.media_type, timeout=UPLOAD_TIMEOUT)
    seconds = time.monotonic() - start
    if answer["committed"] != count:
        raise AssertionError(f"steady: {answer['committed']} elements committed, {count} expected")
    # windows that an element completed: those ending at or before the last element's time
    windows = wait_for_windows(url, (last[0] - anchor) // WINDOW_US, timeout=120)
    latencies = [lat for _, lat in window_latencies(windows, *element_commits(url))]
    return {"rate_target": settings.steady_rate, "elements": count, "seconds": round(seconds, 3),
            "achieved_rate": count / seconds, "window": "PT1S", "latency_ms": summary(latencies),
            "latencies_ms": [round(v, 1) for v in latencies]}


# --- report -----------------------------------------------------------------------------------------------------


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 14's "Must show", each with the measured value and whether it was met."""
    rows: list[dict[str, Any]] = []

    def add(what: str, value: float | None, target: float, at_most: bool = False) -> None:
        met = value is not None and (value <= target if at_most else value >= target)
        rows.append({"what": what, "value": value, "target": target, "at_most": at_most, "met": met})

    if "flood" in result:
        f = result["flood"]
        add(f"flood: statements/s over {f['seconds']:.0f} s (1 stream, {f['format']})", f["rate"], TARGET_RATE)
        add(f"flood: lowest {SUSTAINED_WINDOW} s mean (statements/s)", f[f"rate_over_{SUSTAINED_WINDOW}s"]["min"],
            TARGET_RATE)
        add("flood: seconds sustained", f["seconds"], TARGET_SECONDS)
        add("flood: window latency p99 (ms)", f["latency_ms"]["p99"], TARGET_FLOOD_P99_MS, at_most=True)
    for name, c in result.get("compare", {}).items():
        add(f"{name}: this server / bulk_load on disk", c["ratios"].get(f"to {BULK_DISK}"), TARGET_TO_BULK_LOAD)
        add(f"{name}: this server / bulk_load on disk (aim)", c["ratios"].get(f"to {BULK_DISK}"), 3.0)
        if f"to {OXIGRAPH}" in c["ratios"]:
            add(f"{name}: this server / Oxigraph server", c["ratios"][f"to {OXIGRAPH}"], TARGET_TO_OXIGRAPH)
    if "streams" in result and result["streams"]["ratio_to_single_stream"] is not None:
        s = result["streams"]
        add(f"{s['streams']} streams at once: total / single-stream rate", s["ratio_to_single_stream"], 1.0)
        if "median_pair_ratio" in s:
            add(f"{s['streams']} streams at once: median of the pairs' ratios", s["median_pair_ratio"], 1.0)
    if "steady" in result:
        s = result["steady"]
        add(f"steady {s['rate_target']:,.0f} elements/s: window latency p50 (ms)", s["latency_ms"]["p50"],
            TARGET_STEADY_P50_MS, at_most=True)
        add(f"steady {s['rate_target']:,.0f} elements/s: window latency p99 (ms)", s["latency_ms"]["p99"],
            TARGET_STEADY_P99_MS, at_most=True)
    return rows


def print_report(result: dict[str, Any]) -> None:
    for name, c in result.get("compare", {}).items():
        best = [Measurement(**{k: v for k, v in m.items() if k != "rate"}) for m in c["best"].values()]
        print_table(f"{FORMATS[name].label}: {c['statements']:,} statements ({c['elements']:,} elements), best of "
                    f"{len(next(iter(c['runs'].values())))}", best, BULK_DISK)
    if "flood" in result:
        f = result["flood"]
        moving = f[f"rate_over_{SUSTAINED_WINDOW}s"]
        print(f"\nflood ({f['format']}): {f['statements']:,} statements in {f['seconds']:.1f} s = {f['rate']:,.0f}/s "
              f"(over {SUSTAINED_WINDOW} s: min {_num(moving['min'])}, p10 {_num(moving['p10'])}, p50 "
              f"{_num(moving['p50'])}); windows drained {f['drain_seconds']:.1f} s after the upload")
        cpu = f["cpu"]
        print(f"CPU over the flood ({cpu['seconds']:.0f} s, {cpu['cores']} cores): server "
              f"{cpu['server_cpu_seconds']:.1f} s, bench client {cpu['bench_client_cpu_seconds']:.1f} s, "
              f"other processes {cpu['other_processes_cpu_seconds']:.1f} s")
        for component, value in cpu["components"].items():
            print(f"  {component:<68} {value['cpu_seconds']:8.1f} s  {value['share']:6.1%}")
    if "streams" in result:
        s = result["streams"]
        print(f"\n{s['streams']} streams at once: {s['statements']:,} statements in {s['seconds']:.1f} s = "
              f"{s['rate']:,.0f}/s = {s['ratio_to_single_stream']:.2f}× one stream's best in the same part "
              f"({s['single_stream_rate']:,.0f}/s); median of the {len(s['pair_ratios'])} pairs' ratios "
              f"{s['median_pair_ratio']:.2f}")
    print("\nwindow latency: element completing a window committed -> window revision committed (ms)")
    for label, values in result["latency_ms"].items():
        print(f"  {label:<28} n={values['n']:5d}  p50={_num(values['p50'])}  p99={_num(values['p99'])}")
    print("\nissue 14, must show:")
    for row in result["targets"]:
        sign = "≤" if row["at_most"] else "≥"
        print(f"  [{'x' if row['met'] else ' '}] {row['what']:<62} {_num(row['value'])} (target {sign} "
              f"{row['target']:,.4g})")


def _num(value: float | None) -> str:
    if value is None:
        return "     n/a"
    return f"{value:8,.2f}" if abs(value) < 100 else f"{value:8,.0f}"


def plots(result: dict[str, Any]) -> list[str]:
    """The PNGs of the run (none without matplotlib)."""
    written: list[Path] = []
    try:
        groups: dict[str, dict[str, float]] = {}
        for name, c in result.get("compare", {}).items():
            groups[FORMATS[name].label] = {label: m["rate"] for label, m in c["best"].items()}
        references: dict[str, str] = {g: BULK_DISK for g in groups}
        if "streams" in result and result["streams"]["single_stream_rate"]:
            s = result["streams"]
            label = f"{s['streams']} streams at once ({FORMATS[s['format']].label})"
            groups[label] = {"this server: 1 stream": s["single_stream_rate"],
                             f"this server: {s['streams']} streams": s["rate"]}
            references[label] = "this server: 1 stream"
        if groups:
            written.append(bar_plot("ingest_rates", "Ingestion rate, best of each (statements/s)", groups,
                                    reference=references))
        if "flood" in result:
            f = result["flood"]
            windows = f["windows"]
            moving = f["series"][f"moving_average_{SUSTAINED_WINDOW}s"]
            written.append(time_series_plot("ingest_flood", f"Flood: one chunked upload ({f['format']}), "
                                            f"{f['rate']:,.0f} statements/s over {f['seconds']:.0f} s", [
                Panel("statements/s", [
                    Series("committed per second (element commit times)",
                           [i + 0.5 for i in range(len(f["series"]["committed_per_second"]))],
                           f["series"]["committed_per_second"], width=0.6),
                    Series(f"mean over {SUSTAINED_WINDOW} s",
                           [i + SUSTAINED_WINDOW / 2 for i in range(len(moving))], moving, width=2.5),
                ], {"target 100,000/s": TARGET_RATE}),
                Panel("window latency (ms)", [Series("per window, at its revision's commit",
                                                     [w["committed_s"] for w in windows],
                                                     [max(w["latency_ms"], 0.1) for w in windows], points=True)],
                      {"p99 target 2 s": TARGET_FLOOD_P99_MS}, log=True),
            ], xlabel="seconds since the upload began"))
            cpu = f["cpu"]
            parts = {c: v["cpu_seconds"] for c, v in cpu["components"].items() if v["cpu_seconds"] > 0}
            parts["bench client (generating, sending)"] = cpu["bench_client_cpu_seconds"]
            parts["other processes on the machine"] = cpu["other_processes_cpu_seconds"]
            written.append(share_plot("ingest_cpu", f"Where the CPU goes during the flood ({cpu['seconds']:.0f} s, "
                                      f"{cpu['cores']} cores)", parts))
        samples: dict[str, list[float]] = {}
        if "flood" in result:
            samples["flood (1 stream)"] = [w["latency_ms"] for w in result["flood"]["windows"]]
        if "streams" in result:
            samples[f"{result['streams']['streams']} streams at once"] = result["streams"]["latencies_ms"]
        if "steady" in result:
            samples[f"steady {result['steady']['rate_target']:,.0f} elements/s"] = result["steady"]["latencies_ms"]
        if samples:
            written.append(distribution_plot(
                "ingest_latency", "Window latency: completing element committed → window revision committed",
                {k: [max(v, 0.1) for v in vs] for k, vs in samples.items()},
                marks={"250 ms": 250, "1 s": 1000, "2 s": 2000}))
    except PlottingUnavailable as error:
        print(error)
    return [str(p) for p in written]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=550_000,
                        help="statements of the compare body and of the streams part (default 550,000)")
    parser.add_argument("--per-element", type=int, default=10, help="content statements per element (default 10)")
    parser.add_argument("--formats", default="nquads,trig", help="compare's body formats (default nquads,trig)")
    parser.add_argument("--repeat", type=int, default=3, help="compare: runs of each system, best kept (default 3)")
    parser.add_argument("--duration", type=float, default=120.0, help="flood: seconds of uploading (default 120)")
    parser.add_argument("--flood-format", choices=sorted(FORMATS), default="nquads",
                        help="body format of flood, streams and steady (default nquads)")
    parser.add_argument("--streams", type=int, default=10, help="streams uploading at once (default 10)")
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument("--steady-rate", type=float, default=1000.0, help="elements/s (default 1,000)")
    parser.add_argument("--parts", default="compare,flood,streams,steady")
    parser.add_argument("--tmpdir", type=Path, default=None, help="bodies and baseline stores (default: system temp)")
    parser.add_argument("--no-py-spy", dest="py_spy", action="store_false", help="no py-spy profile of the flood")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(parts) - {"compare", "flood", "streams", "steady"}) + sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown part or format: {', '.join(unknown)}")
    settings = Settings(args.statements, args.per_element, formats, args.repeat, args.duration, args.flood_format,
                        args.streams, args.steady_seconds, args.steady_rate, parts, args.tmpdir, args.py_spy)
    result: dict[str, Any] = {"settings": {k: str(v) if isinstance(v, Path) else v
                                           for k, v in settings.__dict__.items()},
                              "loadavg_before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-", dir=settings.tmpdir) as tmp_text:
        tmp = Path(tmp_text)
        with concentrator(settings.streams + 16, tmp / "thread-names") as server:
            if "compare" in parts:
                result["compare"] = compare(server, settings, tmp)
            if "flood" in parts and settings.duration > 0:
                result["flood"] = flood(server, settings, tmp / "thread-names", tmp)
            if "streams" in parts:
                single = (result["compare"][settings.flood_format]["best"][SERVER]["rate"]
                          if settings.flood_format in result.get("compare", {}) else
                          result["flood"]["rate"] if "flood" in result else None)
                result["streams"] = many_streams(server, settings, single)
            if "steady" in parts:
                result["steady"] = steady(server, settings)
    result["loadavg_after"] = list(os.getloadavg())
    finish(result)
    path = write_json(BENCH_NAME, result)
    print(f"\nwrote {path}" + "".join(f"\nwrote {p}" for p in result["plots"]))
    return 0


def finish(result: dict[str, Any]) -> None:
    """What follows from the measured parts: the previous version's keys, the targets, the report and the plots
    (also usable on a loaded ``ingest.json`` to draw its plots again)."""
    result.update(compatibility(result))
    result["targets"] = targets(result)
    print_report(result)
    result["plots"] = plots(result)


def compatibility(result: dict[str, Any]) -> dict[str, Any]:
    """The keys the previous version of this benchmark wrote: flat best measurements, one ratio, latencies."""
    measurements: list[dict[str, Any]] = []
    for name, c in result.get("compare", {}).items():
        measurements += [{**m, "name": f"{m['name']} [{name}]"} for m in c["best"].values()]
    if "streams" in result:
        s = result["streams"]
        measurements.append(Measurement(f"this server: {s['streams']} streams uploading at once", s["seconds"],
                                        s["statements"], "statements").to_dict())
    latency: dict[str, Any] = {}
    for key, label in (("flood", "flood (1 stream)"), ("streams", "streams at once"), ("steady", "steady")):
        if key in result:
            latency[label] = result[key]["latency_ms"]
    first = next(iter(result.get("compare", {}).values()), None)
    return {"measurements": measurements, "latency_ms": latency,
            "ratio_to_bulk_load": first["ratios"].get(f"to {BULK_DISK}") if first else None}


if __name__ == "__main__":
    raise SystemExit(main())
