"""Every query has a budget (issue 31): heavy queries stopped at their budget while the server stays responsive, and
plain queries evaluated side by side in the query processes (engine/workers.py).

    .venv/bin/python -m bench.queries                        # every part (≈ 4 min on 2 cores)
    .venv/bin/python -m bench.queries --parts costs          # one part
    .venv/bin/python -m bench.queries --plot-only            # the plots of bench/results/queries.json again

1. ``costs`` — in the bench process, the parts of engine/workers.py and store/dataset.py: a snapshot of HEAD (a
   RocksDB checkpoint, ``RevisionedDataset.snapshot``) of an on-disk dataset of 1,500 and of ``--quads`` quads
   (median of 10, each after a one-quad write: a new HEAD revision), of the revision before HEAD (a checkpoint with
   one delta undone), opening one read-only; a query process's start (the fork server, once per server process;
   then a worker, until it answered ``ASK {}``), its memory (unique set size, idle and after counting the large
   store); kill latency (a heavy query with a 1 s budget: its deadline to its answer, and to its process gone, 5
   times); and the in-process baseline (as ``--query-processes 0`` evaluates): the same heavy query on a pyoxigraph
   ``Store`` (in a child process, so that it can be stopped at all) is still running at budget + 2 s.
2. ``overload`` — a real server (``python -m concentrator serve``, default flags, Spark pipeline on, an on-disk data
   directory, ``--query-timeout`` ``--budget``), 1,500 triples (500 subjects × 3 properties). Each phase runs, for
   budget + 4 s: a chunked upload to a stream of its own, as fast as the server takes it (elements/s: over the whole
   upload, and over the heavy queries' window, from ``/status``), ``GET /status`` every 0.1 s and ``ASK { ?s ?p ?o }``
   every 0.1 s from another client (source address 127.0.0.2), with latencies; and, 1 s in, ``--heavy`` (64) heavy
   queries at once (``SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?a ?p ?x . ?b ?p ?y . ?c ?p ?z } }``, 375 million rows),
   anonymous: their answers (status, seconds). Phases: ``baseline`` (no heavy query), ``one address`` (all 64 from
   127.0.0.1: ``--queries-per-client`` refuses 60 at once), ``16 addresses`` (4 from each of 127.0.1.1–16: the
   queue and the request threads' bound refuse most, the others wait for their budget). After each phase, once the
   last heavy query was answered and the upload and the pollers stopped, the server's CPU (its process tree, the
   query processes apart) over 2 s.
3. ``parallel`` — on a server of its own (default flags: the default budget), 8 CPU-bound queries
   (``SELECT (COUNT(*) AS ?n)`` of a two-pattern join over 3,000 triples, ≈ 0.75 s each) at once, each from its own
   client address, against the same 8 one after another; alternating, best of ``--repeat`` (3). The in-process
   baseline: the same queries on an on-disk pyoxigraph ``Store`` in the bench process (in-process evaluation), from 8
   threads (pyoxigraph releases the GIL) against one after another.

Targets (issue 31): /status p99 < 0.5 s and the small query's p99 < 1 s while the heavy queries run; the upload's rate
≥ 0.7× its rate without them; every heavy query answered within budget + 2 s; the CPU back to idle (the query
processes' CPU over the 2 s window ≈ 0); at once / one after another ≤ 0.65.

Prints tables, writes ``bench/results/queries.json`` and its plots (``queries_*.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import requests
from pyoxigraph import Literal, NamedNode, Quad, QueryResultsFormat, RdfFormat, Store

from bench.cpu import TICK, process_tree
from bench.harness import (
    Measurement,
    bar_plot,
    environment,
    percentile,
    print_table,
    replot,
    summary_plot,
    write_json,
    write_plots,
)
from conformance.server import RunningServer, running_server
from engine.budget import Budget, QueryLimits
from engine.errors import QueryBudgetExceeded
from engine.query_process import QueryTask
from engine.snapshots import Snapshots
from engine.workers import QueryPool
from store import RevisionedDataset

BENCH_NAME = "queries"
HEAVY = "SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?a ?p ?x . ?b ?p ?y . ?c ?p ?z } }"
SMALL = "ASK { ?s ?p ?o }"
CARTESIAN = "http://ex/cartesian"
MEDIUM = "http://ex/medium"
CPU_BOUND = f"SELECT (COUNT(*) AS ?n) {{ GRAPH <{MEDIUM}> {{ ?a ?p ?x . ?b ?p ?y }} }}"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs
POLL_SECONDS = 0.1
CPU_WINDOW = 2.0
FORMATS = {"solutions": ("application/sparql-results+json", QueryResultsFormat.JSON.media_type),
           "graph": ("application/n-triples", RdfFormat.N_TRIPLES.media_type)}

TARGET_STATUS_P99_MS = 500.0
TARGET_SMALL_P99_MS = 1000.0
TARGET_UPLOAD_RATIO = 0.7
TARGET_STOP_GRACE = 2.0
TARGET_PARALLEL_RATIO = 0.65
TARGET_IDLE_CPU = 0.2  # CPU-seconds of the query processes over the 2 s window


def triples(graph: str, subjects: int, properties: int = 3) -> str:
    return "".join(f"<http://ex/s{i}> <http://ex/p{j}> {i} .\n" for i in range(subjects) for j in range(properties))


def summary(values: list[float]) -> dict[str, Any]:
    """n, p50, p99, max (ms) of latencies in seconds."""
    if not values:
        return {"n": 0}
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 0.5), 1), "p99_ms": round(percentile(ms, 0.99), 1),
            "max_ms": round(max(ms), 1)}


# --- 1. costs ---------------------------------------------------------------------------------------------------


def _dataset(directory: Path, quads: int) -> RevisionedDataset:
    dataset = RevisionedDataset(directory)
    body = directory.parent / f"{directory.name}.nq"
    with body.open("w") as out:
        for i in range(quads):
            out.write(f"<http://ex/s{i // 3}> <http://ex/p{i % 3}> \"{i}\" <{CARTESIAN}> .\n")
    with body.open("rb") as source:
        dataset.add(dataset.stage(source, RdfFormat.N_QUADS))
    body.unlink()
    return dataset


def _checkpoints(dataset: RevisionedDataset, where: Path, count: int) -> dict[str, Any]:
    """``count`` snapshots of HEAD, each after a one-quad write; one of HEAD~1; opening one read-only (ms)."""
    head, past, opened = [], [], []
    for k in range(count):
        dataset.update(f'INSERT DATA {{ <http://ex/x> <http://ex/y> "{k}" }}')
        path = where / f"head-{k}"
        started = time.perf_counter()
        dataset.snapshot(dataset.head, path)
        head.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        store = Store.read_only(str(path))
        opened.append((time.perf_counter() - started) * 1000)
        del store
        shutil.rmtree(path)
        path = where / f"past-{k}"
        started = time.perf_counter()
        dataset.snapshot(dataset.head - 1, path)
        past.append((time.perf_counter() - started) * 1000)
        shutil.rmtree(path)
    return {"head_ms": round(statistics.median(head), 1), "head_max_ms": round(max(head), 1),
            "head_minus_1_ms": round(statistics.median(past), 1),
            "open_read_only_ms": round(statistics.median(opened), 1)}


def _memory(pid: int) -> dict[str, float]:
    """The unique set size (what the process alone holds) and the proportional set size, MB."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0])
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    return {"uss_mb": round(uss / 1024, 1), "pss_mb": round(fields["Pss"] / 1024, 1),
            "rss_mb": round(fields["Rss"] / 1024, 1)}


def _task(query: str) -> QueryTask:
    return QueryTask(query, "http://bench/sparql", None, None, FORMATS)


def _pool(dataset: RevisionedDataset, where: Path, processes: int = 1) -> QueryPool:
    snapshots = Snapshots(where / "snapshots", dataset.snapshot, lambda: dataset.head)
    return QueryPool(QueryLimits(processes=processes), snapshots, where / "spool")


def _timed_query(pool: QueryPool, dataset: RevisionedDataset, query: str) -> float:
    started = time.perf_counter()
    output = pool.evaluate(_task(query), dataset.head, pool.budget(), lambda: False)
    output.file.close()
    return (time.perf_counter() - started) * 1000


def _in_process_heavy(path: str) -> None:
    store = Store.read_only(path)
    list(store.query(HEAVY))  # minutes


def costs(quads: int, tmp: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    small = _dataset(tmp / "small", 1500)
    large = _dataset(tmp / "large", quads)
    (tmp / "snaps").mkdir()
    result["checkpoint"] = {"1,500 quads": _checkpoints(small, tmp / "snaps", 10),
                            f"{quads:,} quads": _checkpoints(large, tmp / "snaps", 10)}
    first = _pool(small, tmp / "pool1")
    start: dict[str, float] = {"fork server + worker + snapshot + ASK": _timed_query(first, small, "ASK {}")}
    start["ASK, warm worker"] = _timed_query(first, small, "ASK {}")
    second = _pool(small, tmp / "pool2")
    start["worker + snapshot + ASK (fork server running)"] = _timed_query(second, small, "ASK {}")
    start["worker start (difference)"] = start["worker + snapshot + ASK (fork server running)"] - \
        start["ASK, warm worker"] - result["checkpoint"]["1,500 quads"]["head_ms"]
    result["start_ms"] = {key: round(value, 1) for key, value in start.items()}
    (pid,) = first.status()["process_ids"]
    memory = {"idle, after ASK on 1,500 quads": _memory(pid)}
    big = _pool(large, tmp / "pool3")
    _timed_query(big, large, "SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } }")
    (pid,) = big.status()["process_ids"]
    memory[f"after counting {quads:,} quads"] = _memory(pid)
    memory["server process (this bench), for scale"] = _memory(os.getpid())
    result["worker_memory"] = memory
    answered, gone = [], []
    for _ in range(5):
        (pid,) = first.status()["process_ids"]
        budget = Budget.start(60, 1.0, "1")
        try:
            first.evaluate(_task(HEAVY), small.head, budget, lambda: False).file.close()
        except QueryBudgetExceeded:
            answered.append((time.monotonic() - budget.deadline) * 1000)
        while Path(f"/proc/{pid}").exists():
            time.sleep(0.001)
        gone.append((time.monotonic() - budget.deadline) * 1000)
        while len(first.status()["process_ids"]) < 1:  # its replacement
            time.sleep(0.01)
    result["kill_latency_ms"] = {"answered_after_deadline": summary([a / 1000 for a in answered]),
                                 "process_gone_after_deadline": summary([g / 1000 for g in gone])}
    # in-process evaluation: pyoxigraph in the process itself; only a process of its own can be stopped at all
    snapshot = tmp / "inproc"
    small.snapshot(small.head, snapshot)
    child = multiprocessing.get_context("spawn").Process(target=_in_process_heavy, args=(str(snapshot),), daemon=True)
    child.start()
    child.join(1.0 + TARGET_STOP_GRACE)
    result["in_process_heavy"] = {"running_at_budget_plus_2_s": child.is_alive(), "budget_seconds": 1.0}
    child.kill()
    child.join()
    for pool in (first, second, big):
        pool.close()
    small.close()
    large.close()
    return result


def costs_in_child(quads: int, tmp: Path) -> dict[str, Any]:
    """``costs`` in a ``python -c`` process: a query process imports its parent's main module again unless it is a
    package's ``__main__`` (the server runs as ``python -m concentrator``), and this module would add ≈ 110 ms and
    ≈ 15 MB to each."""
    code = (f"import json; from pathlib import Path; from bench.queries import costs; "
            f"print(json.dumps(costs({quads}, Path({str(tmp)!r}))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the costs part failed:\n{done.stderr}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def print_costs(result: dict[str, Any]) -> None:
    print("\ncosts (engine/workers.py, store/dataset.py)")
    for size, found in result["checkpoint"].items():
        print(f"  snapshot of HEAD, {size:>17}: {found['head_ms']:6.1f} ms median (max {found['head_max_ms']} ms); "
              f"HEAD~1 {found['head_minus_1_ms']} ms; opening it read-only {found['open_read_only_ms']} ms")
    for what, ms in result["start_ms"].items():
        print(f"  {what:<48} {ms:8.1f} ms")
    for what, memory in result["worker_memory"].items():
        print(f"  memory, {what:<42} USS {memory['uss_mb']:6.1f} MB, PSS {memory['pss_mb']:6.1f} MB, "
              f"RSS {memory['rss_mb']:6.1f} MB")
    kill = result["kill_latency_ms"]
    print(f"  a 1 s budget: answered {kill['answered_after_deadline']['p50_ms']} ms after the deadline (max "
          f"{kill['answered_after_deadline']['max_ms']}), its process gone after "
          f"{kill['process_gone_after_deadline']['p50_ms']} ms (max {kill['process_gone_after_deadline']['max_ms']})")
    print(f"  in-process (pyoxigraph on a Store, in-process): still running at budget + 2 s: "
          f"{result['in_process_heavy']['running_at_budget_plus_2_s']}")


# --- 2. overload ------------------------------------------------------------------------------------------------


def _connection(server: RunningServer, source: str, timeout: float = 120) -> http.client.HTTPConnection:
    address = urlsplit(server.url)
    assert address.hostname is not None and address.port is not None
    return http.client.HTTPConnection(address.hostname, address.port, timeout=timeout, source_address=(source, 0))


def _post_query(server: RunningServer, query: str, source: str) -> tuple[int, float, str]:
    """One query from ``source`` (a connection of its own): status, seconds, first line of the answer."""
    connection = _connection(server, source)
    started = time.perf_counter()
    try:
        connection.request("POST", "/sparql", urlencode({"query": query}),
                           {"Content-Type": "application/x-www-form-urlencoded"})
        response = connection.getresponse()
        body = response.read().decode(errors="replace")
        return response.status, time.perf_counter() - started, body.split("\n", 1)[0][:200]
    finally:
        connection.close()


class Poller(threading.Thread):
    """Call ``once`` every ``POLL_SECONDS`` until stopped: latencies (s) and failures."""

    def __init__(self, once: Callable[[], bool]) -> None:
        super().__init__(daemon=True)
        self.once = once
        self.latencies: list[float] = []
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.perf_counter()
            try:
                ok = self.once()
            except (OSError, http.client.HTTPException, requests.RequestException):
                ok = False
            self.latencies.append(time.perf_counter() - started)
            self.failures += not ok
            self.stopping.wait(POLL_SECONDS)


def _elements(started: float, seconds: float, counter: list[int]) -> Iterator[bytes]:
    """Small elements (a triple and a timestamp), 100 per chunk, for ``seconds``."""
    n = 0
    while time.monotonic() - started < seconds:
        lines = []
        for k in range(n, n + 100):
            stamp = datetime.fromtimestamp((T0 + k * 1000) / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lines.append(f'<urn:e:{k}> <{PROV}> "{stamp}"^^<{XSD_DT}> .\n<urn:e:{k}> {{ <urn:s:{k}> <urn:v> {k} . }}\n')
        n += 100
        counter[0] = n
        yield "".join(lines).encode()


def _stream_elements(server: RunningServer, stream: str) -> int:
    streams = requests.get(server.url + "/status?sections=streams", timeout=30).json()["streams"]
    return int(streams[stream]["elements"])


def _cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK


def _query_processes(root: int) -> set[int]:
    """The fork server of the query processes and its children (they share its command line)."""
    found = set()
    for pid in process_tree(root):
        try:
            if b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            pass
    return found


def cpu_window(server: RunningServer) -> dict[str, float]:
    """CPU-seconds of the server's process tree, and of its query processes, over ``CPU_WINDOW`` seconds."""
    tree = process_tree(server.process.pid)
    workers = _query_processes(server.process.pid)
    before = {pid: _cpu(pid) for pid in tree}
    time.sleep(CPU_WINDOW)
    after = {pid: _cpu(pid) for pid in process_tree(server.process.pid)}
    spent = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    return {"server_cpu_seconds": round(sum(spent.values()), 3),
            "query_processes_cpu_seconds": round(sum(v for pid, v in spent.items() if pid in workers), 3),
            "window_seconds": CPU_WINDOW}


def _kind(code: int, line: str) -> str:
    """How a heavy query was answered: refused (and why) or stopped by its budget (running, or waiting)."""
    if code == 429:
        return "429 client limit"
    if code == 503 and "waited for a free query process" in line:
        return "503 budget, waiting"
    if code == 503 and "ran past its budget" in line:
        return "503 budget, running"
    if code == 503:
        return "503 refused, queue"
    return str(code)


def phase(server: RunningServer, name: str, stream: str, sources: list[str], budget: float) -> dict[str, Any]:
    requests.put(f"{server.url}/streams/{stream}", timeout=30).raise_for_status()
    seconds = budget + 4.0
    status = Poller(lambda: requests.get(server.url + "/status", timeout=30).ok)

    def small_query() -> bool:
        code, _, _ = _post_query(server, SMALL, "127.0.0.2")
        return code == 200

    small = Poller(small_query)
    sent = [0]
    upload: dict[str, Any] = {}

    def send() -> None:
        started = time.monotonic()
        answer = requests.post(f"{server.url}/streams/{stream}", data=_elements(started, seconds, sent),
                               headers={"Content-Type": "application/trig"}, timeout=600)
        upload["seconds"] = time.monotonic() - started
        upload["committed"] = answer.json()["committed"] if answer.ok else 0

    uploader = threading.Thread(target=send, daemon=True)
    status.start()
    small.start()
    uploader.start()
    time.sleep(1.0)
    answers: list[tuple[int, float, str]] = []
    lock = threading.Lock()
    window_start = time.monotonic()
    committed_before = _stream_elements(server, stream)

    def heavy(source: str, ready: threading.Barrier) -> None:
        ready.wait()
        found = _post_query(server, HEAVY, source)
        with lock:
            answers.append(found)

    ready = threading.Barrier(len(sources)) if sources else None
    threads = [threading.Thread(target=heavy, args=(source, ready), daemon=True) for source in sources]
    for thread in threads:
        thread.start()
    if threads:
        for thread in threads:
            thread.join(budget + 60)
    else:
        time.sleep(budget)  # the baseline's "heavy window"
    window = time.monotonic() - window_start
    committed_during = _stream_elements(server, stream) - committed_before
    last_answer = time.monotonic()
    uploader.join(seconds + 120)
    status.stopping.set()
    small.stopping.set()
    status.join()
    small.join()
    settled = time.monotonic() - last_answer
    cpu = cpu_window(server)
    codes: dict[str, int] = {}
    for code, _, line in answers:
        codes[_kind(code, line)] = codes.get(_kind(code, line), 0) + 1
    return {
        "name": name, "heavy_queries": len(sources), "client_addresses": len(set(sources)),
        "heavy_answers": codes,
        "heavy_seconds": summary([s for _, s, _ in answers]),
        "heavy_slowest_seconds": round(max((s for _, s, _ in answers), default=0.0), 2),
        "heavy_messages": sorted({f"{code}: {line}" for code, _, line in answers}),
        "status": summary(status.latencies), "status_failures": status.failures,
        "small_query": summary(small.latencies), "small_query_failures": small.failures,
        "upload": {"seconds": round(upload.get("seconds", 0.0), 2), "elements": upload.get("committed", 0),
                   "rate": round(upload.get("committed", 0) / upload["seconds"], 1) if upload.get("seconds") else 0,
                   "during_heavy_window": round(committed_during / window, 1), "window_seconds": round(window, 2)},
        "cpu_after": {**cpu, "seconds_after_last_answer": round(settled, 2)},
    }


@contextlib.contextmanager
def default_server(args: list[str], graph: str, subjects: int) -> Iterator[RunningServer]:
    """``concentrator serve`` with default flags but ``args``, its Spark pipeline ready, ``graph`` loaded."""
    with running_server(args) as server:
        deadline = time.monotonic() + 180
        while requests.get(server.url + "/status", timeout=30).json()["pipeline"].get("ready") is not True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Spark pipeline did not start:\n{server.log_tail()}")
            time.sleep(0.5)
        requests.put(f"{server.url}/store?graph={quote(graph, safe='')}", data=triples(graph, subjects),
                     headers={"Content-Type": "text/turtle"}, timeout=60).raise_for_status()
        yield server


def overload(budget: float, heavy: int, spread: int) -> dict[str, Any]:
    with default_server(["--query-timeout", f"{budget:g}"], CARTESIAN, 500) as server:
        limits = requests.get(server.url + "/status?sections=queries", timeout=30).json()["queries"]["limits"]
        per_address = max(1, heavy // spread)
        spread_sources = [f"127.0.1.{1 + i // per_address}" for i in range(heavy)]
        return {"server_limits": limits,
                "phases": [phase(server, "baseline", "base", [], budget),
                           phase(server, "one address", "one", ["127.0.0.1"] * heavy, budget),
                           phase(server, f"{spread} addresses", "spread", spread_sources, budget)]}


# --- 3. parallel ------------------------------------------------------------------------------------------------


def _server_round(server: RunningServer, together: bool) -> float:
    sources = [f"127.0.2.{i + 1}" for i in range(8)]
    started = time.perf_counter()
    if together:
        answers: list[int] = []
        ready = threading.Barrier(8)

        def one(source: str) -> None:
            ready.wait()
            answers.append(_post_query(server, CPU_BOUND, source)[0])

        threads = [threading.Thread(target=one, args=(source,)) for source in sources]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        started = min(started, time.perf_counter())
    else:
        answers = [_post_query(server, CPU_BOUND, source)[0] for source in sources]
    seconds = time.perf_counter() - started
    if answers != [200] * 8:
        raise RuntimeError(f"the CPU-bound queries answered {answers}")
    return seconds


def _in_process_round(store: Store, together: bool) -> float:
    def one() -> None:
        list(store.query(CPU_BOUND))

    started = time.perf_counter()
    if together:
        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for _ in range(8):
            one()
    return time.perf_counter() - started


def parallel(repeat: int, tmp: Path) -> dict[str, Any]:
    """On a server of its own (the default budget: 8 queries at once take seconds on 2 cores)."""
    with default_server([], MEDIUM, 1000) as server:
        return _parallel(server, repeat, tmp)


def _parallel(server: RunningServer, repeat: int, tmp: Path) -> dict[str, Any]:
    for source in ("127.0.2.1", "127.0.2.2"):  # the query processes started and the snapshot made
        _post_query(server, CPU_BOUND, source)
    store = Store(str(tmp / "in-process"))  # on disk, as the dataset's store
    store.bulk_extend(Quad(NamedNode(f"http://ex/s{i}"), NamedNode(f"http://ex/p{j}"), Literal(i), NamedNode(MEDIUM))
                      for i in range(1000) for j in range(3))
    store.flush()
    rounds: dict[str, dict[str, list[float]]] = {"server": {"at once": [], "one after another": []},
                                                 "in-process": {"at once": [], "one after another": []}}
    for k in range(repeat):
        order = [True, False] if k % 2 == 0 else [False, True]  # alternating: neither always goes first
        for together in order:
            rounds["server"]["at once" if together else "one after another"].append(_server_round(server, together))
        for together in order:
            rounds["in-process"]["at once" if together else "one after another"].append(
                _in_process_round(store, together))
    best = {system: {mode: round(min(values), 3) for mode, values in modes.items()}
            for system, modes in rounds.items()}
    ratio = {system: round(found["at once"] / found["one after another"], 3) for system, found in best.items()}
    return {"queries": 8, "query": CPU_BOUND, "repeat": repeat, "rounds": rounds, "best": best, "ratio": ratio}


# --- report -----------------------------------------------------------------------------------------------------


def targets(result: dict[str, Any], budget: float) -> dict[str, Any]:
    met: dict[str, Any] = {}
    phases = {p["name"]: p for p in result.get("overload", {}).get("phases", [])}
    if phases:
        base = phases["baseline"]
        for name, found in phases.items():
            if name == "baseline":
                continue
            met[name] = {
                "status_p99": found["status"]["p99_ms"] < TARGET_STATUS_P99_MS,
                "small_query_p99": found["small_query"]["p99_ms"] < TARGET_SMALL_P99_MS,
                "upload_ratio": round(found["upload"]["during_heavy_window"]
                                      / base["upload"]["during_heavy_window"], 3),
                "upload_ratio_whole": round(found["upload"]["rate"] / base["upload"]["rate"], 3),
                "stopped_within_budget_plus_2_s": found["heavy_slowest_seconds"] <= budget + TARGET_STOP_GRACE,
                "idle_after": found["cpu_after"]["query_processes_cpu_seconds"] <= TARGET_IDLE_CPU,
            }
            met[name]["upload_ratio_met"] = met[name]["upload_ratio"] >= TARGET_UPLOAD_RATIO
    if "parallel" in result:
        met["parallel_ratio"] = result["parallel"]["ratio"]["server"] <= TARGET_PARALLEL_RATIO
    return met


def print_report(result: dict[str, Any], budget: float) -> None:
    if "costs" in result:
        print_costs(result["costs"])
    if "overload" in result:
        print(f"\noverload: heavy queries with a {budget:g} s budget, an upload, /status and ASK from another client")
        header = (f"{'phase':<14} {'heavy':>5} {'answers':<62} {'slowest':>8} {'/status p50/p99 ms':>19} "
                  f"{'ASK p50/p99 ms':>16} {'upload el/s (window)':>21} {'CPU after: all/queries':>23}")
        print(header)
        print("-" * len(header))
        for found in result["overload"]["phases"]:
            answers = ", ".join(f"{n}× {kind}" for kind, n in sorted(found["heavy_answers"].items())) or "-"
            cpu = found["cpu_after"]
            print(f"{found['name']:<14} {found['heavy_queries']:>5} {answers:<62} {found['heavy_slowest_seconds']:>7}s "
                  f"{found['status']['p50_ms']:>9}/{found['status']['p99_ms']:<9} "
                  f"{found['small_query']['p50_ms']:>7}/{found['small_query']['p99_ms']:<8} "
                  f"{found['upload']['rate']:>9,.0f} ({found['upload']['during_heavy_window']:>8,.0f}) "
                  f"{cpu['server_cpu_seconds']:>10}/{cpu['query_processes_cpu_seconds']:<6} s")
        for found in result["overload"]["phases"]:
            for message in found["heavy_messages"]:
                print(f"  {found['name']}: {message}")
        measurements = [Measurement(f"upload, {p['name']}", p["upload"]["window_seconds"],
                                    int(p["upload"]["during_heavy_window"] * p["upload"]["window_seconds"]),
                                    "elements") for p in result["overload"]["phases"]]
        print_table("upload during the heavy queries' window, against the same window without them", measurements,
                    "upload, baseline")
    if "parallel" in result:
        found = result["parallel"]
        print(f"\n8 CPU-bound queries at once vs one after another (best of {found['repeat']}, alternating)")
        for system, best in found["best"].items():
            print(f"  {system:<11} at once {best['at once']:6.2f} s, one after another "
                  f"{best['one after another']:6.2f} s: ratio {found['ratio'][system]:.3f} "
                  f"(target ≤ {TARGET_PARALLEL_RATIO})")
    print("\ntargets met:", result.get("targets"))


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>_upload.png``: the upload's rate during the heavy queries beside the same window without;
    ``<name>_latency.png``: /status and the small query's latencies per phase; ``<name>_parallel.png``: 8 queries
    at once against one after another, the server's query processes and pyoxigraph in-process."""
    result = document["result"]
    drawn = []
    if "overload" in result:
        phases = result["overload"]["phases"]
        drawn.append(bar_plot(f"{name}_upload", "Upload rate while 64 heavy queries run (their window)",
                              {"elements/s": {p["name"]: p["upload"]["during_heavy_window"] for p in phases}},
                              reference="baseline", unit="elements/s"))
        latencies = {f"/status, {p['name']}": p["status"] for p in phases}
        latencies.update({f"ASK (127.0.0.2), {p['name']}": p["small_query"] for p in phases})
        drawn.append(summary_plot(f"{name}_latency", "Latency while heavy queries run (budget "
                                  f"{document['parameters']['budget']:g} s)", latencies))
    if "parallel" in result:
        best = result["parallel"]["best"]
        drawn.append(bar_plot(f"{name}_parallel", "8 CPU-bound queries at once vs one after another (best of "
                              f"{result['parallel']['repeat']})",
                              {system: {"one after another": found["one after another"], "at once": found["at once"]}
                               for system, found in best.items()}, reference="one after another", unit="seconds"))
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queries", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="costs,overload,parallel", help="which parts run (default: all)")
    parser.add_argument("--budget", type=float, default=5.0, help="the server's --query-timeout (default 5)")
    parser.add_argument("--heavy", type=int, default=64, help="heavy queries at once (default 64)")
    parser.add_argument("--spread", type=int, default=16, help="client addresses of the spread phase (default 16)")
    parser.add_argument("--quads", type=int, default=1_000_000, help="the large store of the costs part")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the parallel part (best of)")
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the costs part's stores go")
    parser.add_argument("--name", default=BENCH_NAME, help="result file name (bench/results/NAME.json)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/NAME.json again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, args.name)
        return 0
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-queries-", dir=args.tmpdir) as tmp:
        if "costs" in parts:
            (Path(tmp) / "costs").mkdir()
            result["costs"] = costs_in_child(args.quads, Path(tmp) / "costs")
        if "overload" in parts:
            result["overload"] = overload(args.budget, args.heavy, args.spread)
        if "parallel" in parts:
            result["parallel"] = parallel(args.repeat, Path(tmp))
    result["targets"] = targets(result, args.budget)
    print_report(result, args.budget)
    parameters = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "plot_only"}
    document = {"parameters": parameters, "result": result}
    path = write_json(args.name, document)
    print(f"wrote {path}")
    write_plots(plots, {"benchmark": BENCH_NAME, "environment": environment(), **document}, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
