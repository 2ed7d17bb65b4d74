"""Load test and soak (issue 6, "Load"): one real server, many uploaders, subscribers and queries at once.

One server (``conformance.server.running_server``: on-disk data in a temp dir, local Spark, 127.0.0.1 only) and
``--streams`` streams (default 20), each with the tumbling window sequence ``R/HEAD/PT05S`` registered. Phases:

1. **warm-up**: each stream gets 12 s of elements stamped in the recent past, so that two windows complete and
   ``answer=latest`` has something to answer; waits until Spark has emitted them.
2. **idle baseline**: the query mix (below) for ``--idle-seconds`` on the otherwise idle server.
3. **load**: for ``--seconds``, at once:
   - one uploader thread per stream: consecutive chunked uploads (``concentrator.client.upload`` of a paced
     generator) of ``--upload-seconds`` of elements each, at ``--rate`` elements/s, timestamps = wall clock
     (strictly increasing per stream). Ack latency = the upload's answer − the generator's last element sent;
   - one continuous subscriber per stream (``concentrator.client.windows``, multipart) on ``R/HEAD/PT05S`` with
     a COUNT query: windows received, delivery latency = received − the part's ``Window-Committed``;
   - ``--query-threads`` threads looping over the query mix, ``--pause`` s between requests: ``sparql`` (SELECT
     over the dataset), ``gsp`` (GET /store?graph=), ``latest`` (a windowed IRI with ``answer=latest``),
     ``status`` (GET /status);
   - a sampler of resident memory (VmRSS) of the server process and all its descendants (gunicorn worker,
     Spark's JVM, PySpark workers) every ``--sample-every`` s.
4. **stop**: uploaders end their upload at the deadline; every stream's HEAD ordinal must equal the elements its
   uploads had acknowledged (no data lost); a punctuation per stream completes one more window, so each
   subscriber gets it and disconnects; every thread is joined; the server is stopped and the temp dir removed.

Errors (expected 0): any non-2xx answer, exception, refused upload, subscriber ending early or still running
at the end, lost element. They are counted, never retried or hidden.

**Soak** (``--soak``): the same with ``retention=PT30S`` on every stream, a lighter load (``--soak-rate``,
``--soak-pause``) for ``--soak-seconds`` (default 600), memory sampled every ``--soak-sample-every`` s; bounded
means the total RSS's maximum over the second half is ≤ 1.1 × its maximum over the first half; the
least-squares slope over the second half is reported in MB/min.

    .venv/bin/python -m bench.load                      # load: 60 s -> bench/results/load.json
    .venv/bin/python -m bench.load --soak               # soak: 10 min -> bench/results/soak.json
    .venv/bin/python -m bench.load --seconds 10         # quick
    .venv/bin/python -m bench.load --soak --soak-seconds 60

Exit status 1 if there was any error (or, in the soak, memory was not bounded).
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from bench.harness import (
    Measurement,
    Panel,
    Series,
    bar_plot,
    print_table,
    replot,
    summary_plot,
    time_series_plot,
    write_json,
    write_plots,
)
from concentrator.client import ClientError, upload, windows
from conformance.server import RunningServer, running_server

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
WINDOW_REF = "R/HEAD/PT05S"  # tumbling 5 s windows of application time (= wall clock here): one per 5 s
WINDOW_US = 5_000_000
COUNT = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"
GRAPH = "http://example.org/load/base"
SPARQL_SELECT = "SELECT ?s ?o WHERE { GRAPH ?g { ?s <http://example.org/load/p> ?o } } ORDER BY ?s LIMIT 50"
QUERY_KINDS = ("sparql", "gsp", "latest", "status")


def stamp(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).isoformat(timespec="microseconds")


def element(stream: str, n: int, micros: int) -> str:
    """One element: a named graph of three triples and its timestamp triple (TriG)."""
    g = f"<urn:load:{stream}:e{n}>"
    return (f'{g} <{PROV}> "{stamp(micros)}"^^<{XSD_DT}> .\n'
            f"{g} {{ <urn:load:{stream}:o{n}> <urn:load:hr> {60 + n % 40} ; <urn:load:seq> {n} ; "
            f"<urn:load:src> <urn:load:{stream}> . }}\n")


class Errors:
    """Every error of the run, counted by kind; the first few messages of each kind kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add(self, kind: str, message: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            examples = self.examples.setdefault(kind, [])
            if len(examples) < 5:
                examples.append(message[:500])

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def summary(values: list[float]) -> dict[str, float | int | None]:
    """n, p50, p99, max of latencies in ms."""
    values = sorted(values)
    if not values:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}

    def pct(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 1)

    return {"n": len(values), "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(values[-1], 1)}


# --- uploaders ------------------------------------------------------------------------------------------------


@dataclass
class Uploader:
    """One stream's uploader: its clock (timestamps strictly increase) and what the server acknowledged."""

    server: RunningServer
    stream: str
    errors: Errors
    next_n: int = 0
    due: float = 0.0  # when the next element is due (monotonic): pacing runs on across consecutive uploads
    t0_us: int = 0  # the sequence's t0: the first element's timestamp
    last_us: int = 0
    acked: int = 0
    sent: int = 0
    uploads: int = 0
    ack_ms: list[float] = field(default_factory=list)

    def _stamp(self, micros: int) -> int:
        self.last_us = max(micros, self.last_us + 1)
        return self.last_us

    def paced(self, count: int, rate: float, deadline: float, ended: list[float]) -> Iterator[bytes]:
        """``count`` elements at ``rate``/s (stamped with the wall clock), fewer if the deadline comes first;
        records when the last one was handed to the connection (the generator resumes after it was sent)."""
        self.due = max(self.due, time.monotonic() - 1.0)  # a late uploader catches up at most 1 s of backlog
        for _ in range(count):
            if self.due >= deadline:
                break
            delay = self.due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.due += 1 / rate
            data = element(self.stream, self.next_n, self._stamp(time.time_ns() // 1000)).encode()
            self.next_n += 1
            self.sent += 1
            yield data
        ended.append(time.monotonic())

    def one_upload(self, session: requests.Session, data: Iterator[bytes] | list[str], ended: list[float]) -> None:
        """One chunked upload; its answer's ``committed`` is what counts as acknowledged."""
        url = f"{self.server.url}/streams/{self.stream}"
        try:
            answer = upload(url, data, session=session, timeout=120)
        except (ClientError, requests.RequestException) as error:
            self.errors.add("upload", f"{self.stream}: {type(error).__name__}: {error}")
            return
        if ended:
            self.ack_ms.append((time.monotonic() - ended[0]) * 1000)
        self.acked += int(answer["committed"])
        self.uploads += 1

    def run(self, rate: float, upload_seconds: float, deadline: float) -> None:
        self.due = time.monotonic()
        try:
            with requests.Session() as session:
                while time.monotonic() < deadline:
                    ended: list[float] = []
                    count = max(1, int(rate * upload_seconds))
                    self.one_upload(session, self.paced(count, rate, deadline, ended), ended)
        except Exception as error:  # noqa: BLE001 - a dead uploader thread must show as an error
            self.errors.add("uploader", f"{self.stream}: {type(error).__name__}: {error}")


def warm_up(uploader: Uploader, server: RunningServer, errors: Errors) -> None:
    """Elements over the last 12 s, the sequence registered at the first: two complete windows at once."""
    now = time.time_ns() // 1000
    first = uploader.t0_us = now - 12_000_000
    with requests.Session() as session:
        uploader.one_upload(session, [element(uploader.stream, 0, uploader._stamp(first))], [])
        uploader.next_n = 1
        register(session, errors, f"{server.url}/streams/{uploader.stream}")
        past = [element(uploader.stream, n, uploader._stamp(first + n * 500_000)) for n in range(1, 24)]
        uploader.next_n = 24
        uploader.one_upload(session, past, [])


def register(session: requests.Session, errors: Errors, url: str) -> None:
    """Register the sequence without waiting: 503 is the documented answer while no window has completed."""
    response = session.get(url, params={"WINDOWS": WINDOW_REF, "answer": "latest", "timeout": "0"}, timeout=30)
    if response.status_code not in (200, 503):
        errors.add("register", f"{response.status_code}: {response.text.strip()[:300]}")


def punctuate(server: RunningServer, uploaders: list[Uploader], errors: Errors, offset_us: int = 0) -> None:
    """Advance each stream's time to its last element + ``offset_us`` (or to now if later): completes the
    windows up to there, empty ones included."""
    for u in uploaders:
        u.last_us = max(u.last_us + offset_us, time.time_ns() // 1000) + 1
        try:
            requests.post(f"{server.url}/streams/{u.stream}", params={"punctuation": stamp(u.last_us)},
                          timeout=30).raise_for_status()
        except requests.RequestException as error:
            errors.add("punctuation", f"{u.stream}: {error}")


# --- subscribers ----------------------------------------------------------------------------------------------


@dataclass
class Subscriber:
    """A continuous response on ``WINDOW_REF``: the window indexes received and their delivery latency. Its
    ``R/HEAD/…`` is a sequence of its own, anchored at the stream's HEAD when it subscribes, so its first window is
    window 0. It disconnects after the first window ending past ``until_us`` (set at the end, before the punctuation
    that completes that window)."""

    server: RunningServer
    stream: str
    errors: Errors
    until_us: int | None = None
    indexes: list[int] = field(default_factory=list)
    ends_us: list[int] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)

    def run(self) -> None:
        url = f"{self.server.url}/streams/{self.stream}"
        try:
            for window in windows(url, WINDOW_REF, query=COUNT):
                now = time.time()
                committed = datetime.fromisoformat(window.committed.replace("Z", "+00:00")).timestamp()
                self.latency_ms.append((now - committed) * 1000)
                self.indexes.append(window.index)
                self.ends_us.append(round(datetime.fromisoformat(window.end.replace("Z", "+00:00")).timestamp() * 1e6))
                if self.until_us is not None and self.ends_us[-1] > self.until_us:
                    return  # closing the generator disconnects
        except Exception as error:  # noqa: BLE001 - any failure of a subscriber is an error of the run
            self.errors.add("subscriber", f"{self.stream}: {type(error).__name__}: {error}")
            return
        self.errors.add("subscriber", f"{self.stream}: the continuous response ended early")

    def check(self) -> None:
        """Every window of its sequence from window 0 to the last, each once, in order."""
        if self.until_us is None:
            return
        if self.indexes != list(range(len(self.indexes))) or not self.ends_us or self.ends_us[-1] <= self.until_us:
            self.errors.add("windows", f"{self.stream}: received windows {self.indexes}, expected 0, 1, … up to the "
                                       f"one ending after {stamp(self.until_us)}")


# --- the query mix --------------------------------------------------------------------------------------------


def query(session: requests.Session, errors: Errors, kind: str, url: str, params: dict[str, str],
          headers: dict[str, str] | None = None) -> float | None:
    """One GET; its latency in ms (the body read), or None after an error (counted)."""
    start = time.perf_counter()
    try:
        response = session.get(url, params=params, headers=headers, timeout=60)
        _ = response.content
    except requests.RequestException as error:
        errors.add(kind, f"{type(error).__name__}: {error}")
        return None
    if not response.ok:
        errors.add(kind, f"{response.status_code}: {response.text.strip()[:300]}")
        return None
    return (time.perf_counter() - start) * 1000


@dataclass
class QueryMix:
    """Threads looping over the query kinds until a deadline; latencies per kind."""

    server: RunningServer
    streams: list[str]
    errors: Errors
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in QUERY_KINDS})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def request(self, session: requests.Session, kind: str, rng: random.Random) -> float | None:
        url = self.server.url
        if kind == "sparql":
            return query(session, self.errors, kind, f"{url}/sparql", {"query": SPARQL_SELECT},
                         {"Accept": "application/sparql-results+json"})
        if kind == "gsp":
            return query(session, self.errors, kind, f"{url}/store", {"graph": GRAPH}, {"Accept": "text/turtle"})
        if kind == "latest":
            stream = rng.choice(self.streams)
            return query(session, self.errors, kind, f"{url}/streams/{stream}",
                         {"WINDOWS": WINDOW_REF, "answer": "latest", "timeout": "30", "query": COUNT},
                         {"Accept": "application/sparql-results+json"})
        return query(session, self.errors, kind, f"{url}/status", {})

    def loop(self, seed: int, deadline: float, pause: float) -> None:
        rng = random.Random(seed)
        kinds = list(QUERY_KINDS)
        with requests.Session() as session:
            k = seed  # threads start at different kinds
            while time.monotonic() < deadline:
                kind = kinds[k % len(kinds)]
                k += 1
                ms = self.request(session, kind, rng)
                if ms is not None:
                    with self.lock:
                        self.latencies[kind].append(ms)
                time.sleep(pause)

    def run(self, threads: int, seconds: float, pause: float) -> float:
        """Run for ``seconds``; returns the elapsed time."""
        start = time.monotonic()
        workers = [threading.Thread(target=self.loop, args=(n, start + seconds, pause), daemon=True)
                   for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(seconds + 120)
        return time.monotonic() - start


# --- memory ---------------------------------------------------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # after the command name, which may hold spaces
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _group(pid: int, root: int) -> str:
    """Which part of the server a process is: the gunicorn master, its worker, Spark's JVM, PySpark workers."""
    if pid == root:
        return "master"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmdline.split(" ", 1)[0]:
        return "jvm"
    if "pyspark" in cmdline:
        return "pyspark"
    if "python" in cmdline.split(" ", 1)[0]:
        return "worker"
    return "other"


def _kb(path: str, key: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass  # the process is gone
    return 0


def rss_sample(root: int) -> dict[str, float]:
    """VmRSS in MB of ``root`` and all its descendants, summed per group, their ``total``, and ``total_pss``
    (proportional set size: pages shared between processes — PySpark's forked workers — counted once)."""
    children = _children_map()
    sample: dict[str, float] = {}
    pss = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        group = _group(pid, root)
        sample[group] = sample.get(group, 0.0) + _kb(f"/proc/{pid}/status", "VmRSS:") / 1024
        pss += _kb(f"/proc/{pid}/smaps_rollup", "Pss:")
    sample["total"] = sum(sample.values())
    sample["total_pss"] = pss / 1024
    return {k: round(v, 1) for k, v in sample.items()}


@dataclass
class MemorySampler:
    """A thread sampling resident memory every ``every`` s until stopped: (seconds since start, sample)."""

    root: int
    every: float
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    begin: float = 0.0  # times are relative to it: negative during the setup, 0 when the load starts

    def start(self) -> threading.Thread:
        self.begin = time.monotonic()

        def loop() -> None:
            while True:
                self.samples.append((round(time.monotonic() - self.begin, 1), rss_sample(self.root)))
                if self.stop.wait(self.every):
                    return

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread

    def mark_load_start(self) -> None:
        """Samples are timed from now on; one is taken now (the load's start, Spark's JVM running)."""
        self.samples = [(round(t - (time.monotonic() - self.begin), 1), s) for t, s in self.samples]
        self.begin = time.monotonic()
        self.samples.append((0.0, rss_sample(self.root)))

    def during_load(self) -> list[tuple[float, dict[str, float]]]:
        return [(t, s) for t, s in self.samples if t >= 0]

    def report(self) -> dict[str, dict[str, float]]:
        """Per group: at the load's start, max during the load, at the end (MB; absent from a sample: 0)."""
        samples = self.during_load()
        groups = sorted({g for _, s in samples for g in s}, key=lambda g: (g.startswith("total"), g))
        groups = [g for g in groups if any(s.get(g) for _, s in samples)]
        return {g: {"start_mb": samples[0][1].get(g, 0.0), "max_mb": max(s.get(g, 0.0) for _, s in samples),
                    "end_mb": samples[-1][1].get(g, 0.0)} for g in groups}


def boundedness(samples: list[tuple[float, dict[str, float]]], key: str = "total") -> dict[str, Any]:
    """Max of the first and second halves, bounded = second ≤ 1.1 × first, least-squares slope of the second
    half in MB/min (what a leak would show as a steady positive slope)."""
    if len(samples) < 4:
        return {"bounded": None, "reason": "fewer than 4 samples"}
    half = samples[-1][0] / 2
    first = [s.get(key, 0.0) for t, s in samples if t <= half]
    second = [(t, s.get(key, 0.0)) for t, s in samples if t > half]
    xs = [t / 60 for t, _ in second]
    ys = [v for _, v in second]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return {"first_half_max_mb": max(first), "second_half_max_mb": max(ys),
            "bounded": max(ys) <= 1.1 * max(first), "second_half_slope_mb_per_min": round(slope, 2)}


# --- the run --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    streams: int
    seconds: float
    rate: float  # elements/s per stream
    upload_seconds: float
    idle_seconds: float
    query_threads: int
    pause: float
    sample_every: float
    retention: str | None
    server_threads: int


def setup(server: RunningServer, settings: Settings, errors: Errors) -> list[Uploader]:
    """Base data for the GSP and SPARQL queries, the streams (with retention in the soak), the warm-up."""
    base = "".join(f"<http://example.org/load/s{n}> <http://example.org/load/p> {n} .\n" for n in range(200))
    requests.put(f"{server.url}/store", params={"graph": GRAPH}, data=base.encode(),
                 headers={"Content-Type": "text/turtle"}, timeout=30).raise_for_status()
    names = [f"s{n:02d}" for n in range(settings.streams)]
    params = {"retention": settings.retention} if settings.retention else {}
    for name in names:
        requests.put(f"{server.url}/streams/{name}", params=params, timeout=30).raise_for_status()
    uploaders = [Uploader(server, name, errors) for name in names]
    threads = [threading.Thread(target=warm_up, args=(u, server, errors)) for u in uploaders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # Spark starts in the background: its first batch is slow
    wait_for_windows(server, {u.stream: 1 for u in uploaders}, timeout=180)
    return uploaders


def wait_for_windows(server: RunningServer, wanted: dict[str, int], timeout: float) -> None:
    """Until each stream's sequence has emitted at least ``wanted[stream]`` windows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        streams = requests.get(f"{server.url}/status", timeout=30).json()["streams"]
        if all(min((s["windows_emitted"] for s in streams[n]["sequences"].values()), default=0) >= count
               for n, count in wanted.items()):
            return
        time.sleep(0.5)
    raise TimeoutError(f"windows not emitted in {timeout:g} s:\n{server.log_tail()}")


def complete_windows(u: Uploader) -> int:
    """How many windows of ``u``'s stream its stream time completes (tumbling, from t0)."""
    return (u.last_us - u.t0_us) // WINDOW_US


def wait_for_subscribers(server: RunningServer, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(requests.get(f"{server.url}/status", timeout=30).json()["continuous"]) < count:
        if time.monotonic() > deadline:
            raise TimeoutError("the subscribers did not all register")
        time.sleep(0.2)


def run(settings: Settings) -> dict[str, Any]:
    errors = Errors()
    args = ["--threads", str(settings.server_threads)]
    with running_server(args, timeout=120) as server:
        memory = MemorySampler(server.process.pid, settings.sample_every)
        sampler = memory.start()
        uploaders = setup(server, settings, errors)
        names = [u.stream for u in uploaders]
        warm_acked = {u.stream: u.acked for u in uploaders}

        idle = QueryMix(server, names, errors)
        idle_seconds = idle.run(settings.query_threads, settings.idle_seconds, settings.pause)

        # the windows between the warm-up and now complete here (empty ones), not at the first live element
        punctuate(server, uploaders, errors)
        wait_for_windows(server, {u.stream: complete_windows(u) for u in uploaders}, timeout=120)
        subscribers = [Subscriber(server, u.stream, errors) for u in uploaders]
        sub_threads = [threading.Thread(target=s.run, daemon=True) for s in subscribers]
        for thread in sub_threads:
            thread.start()
        wait_for_subscribers(server, len(subscribers))

        memory.mark_load_start()
        start = time.monotonic()
        deadline = start + settings.seconds
        up_threads = [threading.Thread(target=u.run, args=(settings.rate, settings.upload_seconds, deadline),
                                       daemon=True) for u in uploaders]
        for thread in up_threads:
            thread.start()
        loaded = QueryMix(server, names, errors)
        load_seconds = loaded.run(settings.query_threads, settings.seconds, settings.pause)
        for thread in up_threads:
            thread.join(180)
            if thread.is_alive():
                errors.add("uploader", "an uploader was still running 180 s after the deadline")
        upload_seconds = time.monotonic() - start

        lost = check_no_loss(server, uploaders, errors)
        finish_subscribers(server, uploaders, subscribers, sub_threads, errors)
        status = requests.get(f"{server.url}/status", timeout=30).json()
        memory.stop.set()
        sampler.join(30)
        memory.samples.append((round(time.monotonic() - memory.begin, 1), rss_sample(server.process.pid)))
    return report(settings, errors, uploaders, warm_acked, subscribers, idle, idle_seconds, loaded, load_seconds,
                  upload_seconds, lost, status, memory)


def check_no_loss(server: RunningServer, uploaders: list[Uploader], errors: Errors) -> dict[str, Any]:
    """Each stream's HEAD ordinal (elements ever committed, expired ones included) = elements acknowledged."""
    mismatches = {}
    retained = 0
    for u in uploaders:
        described = requests.get(f"{server.url}/streams/{u.stream}", timeout=30).json()
        head = described["head"]["ordinal"] if described["head"] else 0
        retained += described["elements"]
        if head != u.acked:
            mismatches[u.stream] = {"head": head, "acked": u.acked}
            errors.add("lost", f"{u.stream}: HEAD ordinal {head}, acknowledged {u.acked}")
    # with retention, expired elements are gone from the stream but still count in its HEAD ordinal
    return {"streams_checked": len(uploaders), "mismatches": mismatches,
            "acknowledged_elements": sum(u.acked for u in uploaders), "retained_elements": retained}


def finish_subscribers(server: RunningServer, uploaders: list[Uploader], subscribers: list[Subscriber],
                       threads: list[threading.Thread], errors: Errors) -> None:
    """A punctuation one window past each stream's last element completes one more window; each subscriber
    disconnects once it has the last window that punctuation completes (it ends after the punctuation's time less a
    window), and must have had every window since it subscribed."""
    for u, s in zip(uploaders, subscribers, strict=True):
        s.until_us = max(u.last_us + WINDOW_US, time.time_ns() // 1000) + 1 - WINDOW_US
    punctuate(server, uploaders, errors, WINDOW_US)
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(0.1, deadline - time.monotonic()))
    stuck = sum(t.is_alive() for t in threads)
    if stuck:
        errors.add("subscriber", f"{stuck} subscriber(s) had not received their last window 60 s after the stop")
    for s in subscribers:
        s.check()


def report(settings: Settings, errors: Errors, uploaders: list[Uploader], warm_acked: dict[str, int],
           subscribers: list[Subscriber], idle: QueryMix, idle_seconds: float, loaded: QueryMix,
           load_seconds: float, upload_seconds: float, lost: dict[str, Any], status: dict[str, Any],
           memory: MemorySampler) -> dict[str, Any]:
    acked = sum(u.acked - warm_acked[u.stream] for u in uploaders)
    offered = settings.rate * settings.streams
    throughput = [Measurement("offered", settings.seconds, int(offered * settings.seconds), unit="elements"),
                  Measurement("acknowledged", upload_seconds, acked, unit="elements")]
    for kind in QUERY_KINDS:
        throughput.append(Measurement(f"{kind} idle", idle_seconds, len(idle.latencies[kind]), unit="req"))
        throughput.append(Measurement(f"{kind} load", load_seconds, len(loaded.latencies[kind]), unit="req"))
    print_table(f"{settings.streams} streams × {settings.rate:g} el/s, {settings.streams} subscribers, "
                f"{settings.query_threads} query threads, {settings.seconds:g} s (ratio to the offered rate)",
                throughput, "offered")

    queries = {}
    for kind in QUERY_KINDS:
        i, load = summary(idle.latencies[kind]), summary(loaded.latencies[kind])
        ratio = {q: round(load[q] / i[q], 2) if load[q] and i[q] else None for q in ("p50_ms", "p99_ms")}
        queries[kind] = {"idle": i, "load": load, "load_over_idle": ratio,
                         "errors": errors.counts.get(kind, 0)}
    ack = summary([ms for u in uploaders for ms in u.ack_ms])
    delivery = summary([ms for s in subscribers for ms in s.latency_ms])
    windows_received = [len(s.indexes) for s in subscribers]

    print("\nlatency (ms)            idle p50   idle p99   load p50   load p99   p50 ×   p99 ×   errors")
    for kind, q in queries.items():
        print(f"{kind:<22} {_f(q['idle']['p50_ms'])} {_f(q['idle']['p99_ms'])} {_f(q['load']['p50_ms'])} "
              f"{_f(q['load']['p99_ms'])} {_f(q['load_over_idle']['p50_ms'], 7)} "
              f"{_f(q['load_over_idle']['p99_ms'], 7)} {q['errors']:>8}")
    print(f"{'upload ack':<22} {'':>10} {'':>10} {_f(ack['p50_ms'])} {_f(ack['p99_ms'])}"
          f"{'':>16} {errors.counts.get('upload', 0):>8}")
    print(f"{'window delivery':<22} {'':>10} {'':>10} {_f(delivery['p50_ms'])} {_f(delivery['p99_ms'])}"
          f"{'':>16} {errors.counts.get('subscriber', 0):>8}")
    missing = errors.counts.get("windows", 0)
    print(f"windows per subscriber: min {min(windows_received)}, max {max(windows_received)}; subscribers missing "
          f"a window of their sequence since subscribing: {missing}")

    rss = memory.report()
    print("\nresident memory (MB)    start        max        end")
    for group, r in rss.items():
        print(f"{group:<20} {r['start_mb']:>10.1f} {r['max_mb']:>10.1f} {r['end_mb']:>10.1f}")
    print(f"\nerrors: {errors.total} {errors.counts or ''}; streams with elements lost: {len(lost['mismatches'])} "
          f"(acknowledged {lost['acknowledged_elements']}, still retained {lost['retained_elements']})")
    pipeline = status.get("pipeline") or {}
    return {
        "errors": {"total": errors.total, "by_kind": errors.counts, "examples": errors.examples},
        "uploads": {"offered_el_per_s": offered, "acknowledged_elements": acked,
                    "achieved_el_per_s": round(acked / upload_seconds, 1), "seconds": round(upload_seconds, 2),
                    "uploads": sum(u.uploads for u in uploaders), "ack_latency": ack,
                    "sent_elements": sum(u.sent for u in uploaders)},
        "no_loss": lost,
        "subscribers": {"count": len(subscribers), "windows_received_min": min(windows_received),
                        "windows_received_max": max(windows_received), "delivery_latency": delivery},
        "queries": queries,
        "throughput": [m.to_dict() for m in throughput],
        "memory_mb": rss,
        "memory_samples": [{"t": t, **s} for t, s in memory.samples],
        "pipeline": {k: pipeline.get(k) for k in ("batches", "errors", "last_batch_ms", "last_error") if k in pipeline},
    }


def _f(value: float | None, width: int = 10) -> str:
    return f"{value:>{width}.1f}" if value is not None else f"{'n/a':>{width}}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--soak", action="store_true", help="the soak (retention on, lighter load, long run)")
    parser.add_argument("--streams", type=int, default=20, help="streams = uploaders = subscribers")
    parser.add_argument("--seconds", type=float, default=60.0, help="load: duration")
    parser.add_argument("--rate", type=float, default=25.0, help="load: elements/s per stream")
    parser.add_argument("--pause", type=float, default=0.05, help="load: seconds between a query thread's requests")
    parser.add_argument("--sample-every", type=float, default=2.0, help="load: seconds between RSS samples")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="soak: duration")
    parser.add_argument("--soak-rate", type=float, default=10.0, help="soak: elements/s per stream")
    parser.add_argument("--soak-pause", type=float, default=0.25, help="soak: seconds between a thread's requests")
    parser.add_argument("--soak-sample-every", type=float, default=5.0, help="soak: seconds between RSS samples")
    parser.add_argument("--retention", default="PT30S", help="soak: each stream's retention")
    parser.add_argument("--upload-seconds", type=float, default=2.0, help="elements per upload, in seconds")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="the idle baseline's duration")
    parser.add_argument("--query-threads", type=int, default=4)
    parser.add_argument("--server-threads", type=int, default=None, help="default: 2 × streams + query threads + 16")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/load.json (soak.json) again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, "soak" if args.soak else "load")
        return 0
    threads = args.server_threads or 2 * args.streams + args.query_threads + 16
    settings = Settings(
        streams=args.streams, seconds=args.soak_seconds if args.soak else args.seconds,
        rate=args.soak_rate if args.soak else args.rate, upload_seconds=args.upload_seconds,
        idle_seconds=args.idle_seconds, query_threads=args.query_threads,
        pause=args.soak_pause if args.soak else args.pause,
        sample_every=args.soak_sample_every if args.soak else args.sample_every,
        retention=args.retention if args.soak else None, server_threads=threads)
    result = run(settings)
    failed = result["errors"]["total"] > 0
    if args.soak:
        result["boundedness"] = {g: boundedness([(t, s) for t, s in _samples(result)], g)
                                 for g in result["memory_mb"]}
        total = result["boundedness"]["total"]
        print(f"soak: total RSS first-half max {total.get('first_half_max_mb')} MB, second-half max "
              f"{total.get('second_half_max_mb')} MB, bounded: {total.get('bounded')}, second-half slope "
              f"{total.get('second_half_slope_mb_per_min')} MB/min")
        failed = failed or total.get("bounded") is False
    name = "soak" if args.soak else "load"
    parameters = {k: v for k, v in vars(args).items() if k != "plot_only"} | {"server_threads": threads}
    path = write_json(name, {"parameters": parameters, "result": result})
    print(f"wrote {path}")
    write_plots(plots, {"parameters": parameters, "result": result}, name)
    return 1 if failed else 0


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>_latency.png``: upload acknowledgement, window delivery and query latency (idle and under load);
    ``<name>_queries.png``: query rates idle and under load; ``<name>_memory.png``: memory per process over time."""
    result = document["result"]
    queries = result["queries"]
    summaries = {"upload acknowledged": result["uploads"]["ack_latency"],
                 "window delivered": result["subscribers"]["delivery_latency"]}
    for kind, measured in queries.items():
        for phase in ("idle", "load"):
            summaries[f"{kind} ({phase})"] = measured[phase]
    uploads = result["uploads"]
    rates = {m["name"]: m["rate"] for m in result["throughput"]}
    groups = {kind: {phase: rates[f"{kind} {phase}"] for phase in ("idle", "load") if f"{kind} {phase}" in rates}
              for kind in queries}
    samples = result["memory_samples"]
    parts = [key for key in dict.fromkeys(k for s in samples for k in s) if key not in ("t", "total_pss")]
    drawn = [
        summary_plot(f"{name}_latency", f"{document['parameters']['streams']} streams at "
                     f"{uploads['offered_el_per_s']:,.0f} elements/s offered ({uploads['achieved_el_per_s']:,.0f} "
                     "acknowledged): latencies", summaries),
        bar_plot(f"{name}_queries", "Queries per second, idle and under load", groups, reference="idle",
                 unit="requests/s"),
    ]
    if samples:
        drawn.append(time_series_plot(f"{name}_memory", "Resident memory by process (t < 0: start-up and the idle "
                                      "baseline)", [Panel("MB", [Series(part, [s["t"] for s in samples if part in s],
                                                                          [s[part] for s in samples if part in s])
                                                                   for part in parts])]))
    return drawn


def _samples(result: dict[str, Any]) -> list[tuple[float, dict[str, float]]]:
    """The memory samples of the load phase (t ≥ 0), as (t, sample)."""
    return [(s["t"], {k: v for k, v in s.items() if k != "t"}) for s in result["memory_samples"] if s["t"] >= 0]


if __name__ == "__main__":
    raise SystemExit(main())
