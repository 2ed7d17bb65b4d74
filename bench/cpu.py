"""Where the server's CPU goes: CPU seconds per component of a server process tree, from ``/proc``.

``CpuSampler`` reads, every ``every`` seconds, the CPU time (user + system) of every process under the server
(``python -m concentrator serve``: the gunicorn master, its worker, Spark's JVM, the Python workers Spark starts)
and of every thread of the gunicorn worker, and attributes it to a component:

- in the worker, by thread: the gunicorn request threads (``ThreadPoolExecutor-0_N``: reading the body, parsing,
  element framing), the stream committers (``commit-<stream>``: store write, log write and fsync), the native
  threads pyoxigraph's ``bulk_load`` starts for the committer's large groups, RocksDB's background threads
  (memtable flushes, compactions), the pipeline's driver side (py4j callback threads running ``foreachBatch``:
  building windows and firing rules; ``window-pipeline``), the worker's main thread (gunicorn's accept / poll
  loop), other threads, and the CPU of threads that ended between two samples (the process's total less its live
  threads'; during a flood nearly all of them are bulk-load threads: ``threads_started`` counts the Python ones);
- other processes as a whole: the JVM and Spark's Python workers are "Spark", the master is gunicorn's.

Python 3.11 does not give thread names to the OS: the server must be started with ``thread_naming_env`` in its
environment (``bench/threadnames/sitecustomize.py`` records each thread's native id and name); without it the
worker's threads are all "other threads" (RocksDB's, which name themselves, excepted).

``py_spy_record`` / ``py_spy_summary``: optionally, a sampling profile of the worker (py-spy, from the ``bench``
extra), summed per function and per component.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.server import process_tree as process_tree  # the benchmarks take it from here

THREAD_NAMES_SHIM = Path(__file__).resolve().parent / "threadnames"
TICK = 1.0 / os.sysconf("SC_CLK_TCK")

FRAMING = "framing: request threads (HTTP body, element framing, accepting)"
FRAMING_PROCESSES = "framing: framing processes (parsing, canonical TriG)"
COMMIT = "commit: commit-<stream> threads (store write, log write + fsync)"
BULK_LOAD = "commit: native threads (pyoxigraph bulk loads of large groups)"
ROCKSDB = "RocksDB background threads (flush, compaction)"
WINDOWS = "window building: pipeline driver (foreachBatch, py4j)"
WORKER_MAIN = "gunicorn worker main thread (accept, poll)"
WORKER_OTHER = "worker: other threads"
WORKER_ENDED = "worker: threads that ended between samples (mostly bulk-load threads)"
MASTER = "gunicorn master"
SPARK_JVM = "Spark: JVM"
SPARK_PYTHON = "Spark: Python workers (element-log source, daemons)"
SERVER_COMPONENTS = (FRAMING, FRAMING_PROCESSES, COMMIT, BULK_LOAD, ROCKSDB, WINDOWS, SPARK_JVM, SPARK_PYTHON,
                     WORKER_MAIN, WORKER_OTHER, WORKER_ENDED, MASTER)
#: The issue's coarse components, each a sum of the fine ones above.
GROUPS: dict[str, tuple[str, ...]] = {
    "framing": (FRAMING, FRAMING_PROCESSES),
    "log write + fsync": (COMMIT, BULK_LOAD, ROCKSDB),
    "Spark batches": (SPARK_JVM, SPARK_PYTHON),
    "window building": (WINDOWS,),
    "other server": (WORKER_MAIN, WORKER_OTHER, WORKER_ENDED, MASTER),
}


def thread_naming_env(directory: Path) -> dict[str, str]:
    """Environment variables that make a server started with them record its threads' names in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = os.environ.get("PYTHONPATH")
    return {"BENCH_THREAD_NAMES": str(directory),
            "PYTHONPATH": os.pathsep.join([str(THREAD_NAMES_SHIM), *([path] if path else [])])}


def _cpu_seconds(stat_path: str) -> float | None:
    """utime + stime of a ``/proc/…/stat`` file (fields 14 and 15), in seconds; None if it is gone."""
    try:
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * TICK


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def process_kind(pid: int, root: int) -> str:
    """``master`` (the server's root: gunicorn's arbiter), ``jvm``, ``pyspark`` (a Python process Spark started),
    ``framing`` (a framing process, ``store.canonical``), ``worker`` (another Python process: the gunicorn worker)
    or ``other``."""
    if pid == root:
        return "master"
    argv = _cmdline(pid)
    if not argv:
        return "other"
    if os.path.basename(argv[0]).startswith("java"):
        return "jvm"
    if any("pyspark" in arg for arg in argv):
        return "pyspark"
    if "store.canonical" in argv:
        return "framing"
    if "python" in os.path.basename(argv[0]):
        return "worker"
    return "other"


def thread_component(name: str, kind: str, target: str, comm: str) -> str:
    """The component of one worker thread, from its Python name, thread class and target (recorded by the shim;
    empty when unknown) and its OS name."""
    if name.startswith("commit-"):
        return COMMIT
    if name.startswith("ThreadPoolExecutor-"):  # gunicorn's gthread pool: the app has no executor of its own
        return FRAMING
    if comm.startswith("rocksdb"):
        return ROCKSDB
    if name.startswith("window-pipeline") or kind.startswith("py4j.") or target.startswith("py4j."):
        return WINDOWS
    if not name and comm == "python":
        # A thread Python did not start, under the interpreter's own OS name: pyoxigraph's Store.bulk_load builds
        # its SST files in threads of its own (seen with gdb: oxigraph::storage::rocksdb::FileBulkLoader), which
        # the committer calls for groups of 2,000 quads and more. (Also RocksDB's idle timer thread.)
        return BULK_LOAD
    return WORKER_OTHER


def _thread_names(directory: Path | None, pid: int) -> dict[int, tuple[str, str, str]]:
    if directory is None:
        return {}
    names: dict[int, tuple[str, str, str]] = {}
    try:
        lines = (directory / f"{pid}.tsv").read_text(encoding="utf-8").splitlines()
    except OSError:
        return names
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 4 and parts[0].isdigit():
            names[int(parts[0])] = (parts[1], parts[2], parts[3])
    return names


@dataclass
class CpuSampler:
    """Samples the server tree's CPU per component every ``every`` s while running (``start`` … ``stop``)."""

    root: int
    names: Path | None = None  # the thread_naming_env directory, if the server was started with it
    every: float = 0.25  # short: a thread's CPU after its last sample is only known as the process's remainder
    # (pid, tid or 0) -> (component, CPU seconds at the first sample or 0 for a newcomer, latest CPU seconds)
    _seen: dict[tuple[int, int], tuple[str, float, float]] = field(default_factory=dict)
    _worker_totals: dict[int, tuple[float, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _first: bool = True
    _machine: tuple[float, float] = (0.0, 0.0)
    started: float = 0.0
    seconds: float = 0.0
    tids: dict[int, str] = field(default_factory=dict)  # worker thread id -> component (for py-spy's stacks)
    _labels: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, tid) -> thread name
    _names_at_start: dict[int, set[int]] = field(default_factory=dict)  # worker pid -> thread ids recorded then

    def _sample(self) -> None:
        for pid in process_tree(self.root):
            kind = process_kind(pid, self.root)
            if kind == "worker":
                self._sample_worker(pid)
            else:
                component = {"master": MASTER, "jvm": SPARK_JVM, "pyspark": SPARK_PYTHON,
                             "framing": FRAMING_PROCESSES}.get(kind, WORKER_OTHER)
                self._record((pid, 0), component, _cpu_seconds(f"/proc/{pid}/stat"))
        self._first = False

    def _sample_worker(self, pid: int) -> None:
        names = _thread_names(self.names, pid)
        if self._first:
            self._names_at_start[pid] = set(names)
        total = _cpu_seconds(f"/proc/{pid}/stat")
        if total is not None:
            first, _ = self._worker_totals.get(pid, (0.0 if not self._first else total, total))
            self._worker_totals[pid] = (first, total)
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return
        for tid in tids:
            if tid == pid:
                component = WORKER_MAIN
            else:
                try:
                    comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                except OSError:
                    continue
                if names:
                    component = thread_component(*names.get(tid, ("", "", "")), comm)
                else:  # the server was started without the shim: only RocksDB's threads can be told apart
                    component = ROCKSDB if comm.startswith("rocksdb") else WORKER_OTHER
            self.tids[tid] = component
            self._record((pid, tid), component, _cpu_seconds(f"/proc/{pid}/task/{tid}/stat"))

    def _record(self, key: tuple[int, int], component: str, seconds: float | None) -> None:
        if seconds is None:
            return
        _, first, _ = self._seen.get(key, (component, seconds if self._first else 0.0, seconds))
        self._seen[key] = (component, first, seconds)
        if key[1] and key not in self._labels:
            names = _thread_names(self.names, key[0])
            try:
                comm = Path(f"/proc/{key[0]}/task/{key[1]}/comm").read_text().strip()
            except OSError:
                comm = ""
            self._labels[key] = names.get(key[1], ("", "", ""))[0] or comm

    def _started(self) -> dict[str, int]:
        """Threads of the worker started since sampling began, per component (from the shim's records; those that
        ended between two samples are among them)."""
        counts: Counter[str] = Counter()
        for pid, lines in self._names_at_start.items():
            names = _thread_names(self.names, pid)
            for tid, (name, kind, target) in names.items():
                if tid not in lines:
                    counts[thread_component(name, kind, target, "")] += 1
        return dict(counts)

    def start(self) -> None:
        self.started = time.monotonic()
        self._machine = machine_cpu()
        self._sample()

        def loop() -> None:
            while not self._stop.wait(self.every):
                self._sample()

        self._thread = threading.Thread(target=loop, name="cpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling (one last sample) and return the report: CPU seconds per component, per issue group, the
        server's total, the machine's busy CPU over the same time and what other processes used of it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.seconds = time.monotonic() - self.started
        busy, _ = machine_cpu()
        per: Counter[str] = Counter()
        for component, first, last in self._seen.values():
            per[component] += last - first
        live = Counter[int]()
        for (pid, tid), (_, first, last) in self._seen.items():
            if tid and pid in self._worker_totals:
                live[pid] += last - first
        for pid, (first, last) in self._worker_totals.items():
            per[WORKER_ENDED] += max(0.0, (last - first) - live[pid])
        server = sum(per.values())
        machine = busy - self._machine[0]
        return {
            "seconds": round(self.seconds, 2),
            "server_cpu_seconds": round(server, 2),
            "machine_busy_cpu_seconds": round(machine, 2),
            "cores": os.cpu_count(),
            "components": {c: {"cpu_seconds": round(per[c], 2), "share": round(per[c] / server, 4) if server else 0}
                           for c in SERVER_COMPONENTS},
            "groups": {g: round(sum(per[c] for c in members), 2) for g, members in GROUPS.items()},
            "threads_started": self._started(),
            "top_threads": [{"tid": tid, "name": self._labels.get((pid, tid), ""), "component": component,
                             "cpu_seconds": round(last - first, 2)}
                            for (pid, tid), (component, first, last) in sorted(
                                ((k, v) for k, v in self._seen.items() if k[1]),
                                key=lambda item: item[1][1] - item[1][2])[:15]],
        }


def machine_cpu() -> tuple[float, float]:
    """The machine's busy and idle CPU seconds since boot (``/proc/stat``, all cores)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) * TICK, idle * TICK


# --- py-spy (optional) ------------------------------------------------------------------------------------------


def py_spy() -> str | None:
    """The py-spy executable (the ``bench`` extra), or None."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def py_spy_record(pid: int, seconds: float, output: Path, rate: int = 20) -> subprocess.Popen[bytes] | None:
    """Start ``py-spy record`` on ``pid`` for ``seconds`` (collapsed stacks per thread, by function, active samples
    only, without pausing the process); None if py-spy is not installed."""
    executable = py_spy()
    if executable is None:
        return None
    return subprocess.Popen([executable, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                             "--rate", str(rate), "--format", "raw", "--output", str(output), "--nonblocking",
                             "--threads", "--function"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


PROJECT_PACKAGES = ("concentrator/", "engine/", "pipeline/", "protocol/", "rules/", "sparql_ext/", "store/")


def project_frame(frame: str) -> bool:
    """Whether a py-spy frame (``function (path/file.py:line)``) is in the project's packages."""
    where = frame[frame.rfind("(") + 1:]
    return where.startswith(PROJECT_PACKAGES) or any(f"/{p}" in where for p in PROJECT_PACKAGES)


def py_spy_summary(path: Path, components: Mapping[int, str], top: int = 15) -> dict[str, Any]:
    """From py-spy's collapsed stacks (``thread (TID);frame;…;leaf COUNT``): samples per component (by thread id),
    and the functions with most samples, on top of the stack (self: any code) and anywhere in it (inclusive: the
    project's code only, the rest being the same few frames of threading, gunicorn and Flask everywhere)."""
    per_component: Counter[str] = Counter()
    self_samples: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit() or not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = frames[0]
        tid_text = thread[thread.find("(") + 1:thread.find(")")] if thread.startswith("thread") else ""
        component = components.get(int(tid_text), WORKER_OTHER) if tid_text.isdigit() else WORKER_OTHER
        frames = frames[1:] if thread.startswith("thread") else frames
        total += count
        per_component[component] += count
        if frames:
            self_samples[frames[-1]] += count
        for frame in set(frames):
            if project_frame(frame):
                inclusive[frame] += count

    def shares(counter: Counter[str]) -> list[dict[str, Any]]:
        return [{"function": f, "samples": n, "share": round(n / total, 4)} for f, n in counter.most_common(top)]

    return {"samples": total,
            "components": {c: {"samples": n, "share": round(n / total, 4)} for c, n in per_component.most_common()},
            "self": shares(self_samples), "inclusive": shares(inclusive)}
