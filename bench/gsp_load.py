"""Bulk N-Quads load: concentrator ``POST /store`` versus a bare pyoxigraph ``bulk_load``.

Run with ``python -m bench.gsp_load [--graphs 100000] [--per-graph 10] [--repeat 1]``.
Both sides load the same generated N-Quads file into a fresh on-disk store; the target is a
server rate of at least half the baseline rate (ratio >= 0.5).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyoxigraph
import requests

from bench.harness import Measurement, bar_plot, measure, print_table, replot, write_json, write_plots

BENCH_NAME = "gsp_load"
BASELINE = "pyoxigraph bulk_load"
SERVER = "server POST /store"
TARGET_RATIO = 0.5
PROJECT_ROOT = Path(__file__).resolve().parent.parent
COUNT_QUERY = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"
EX = "http://example.org/bench/"
PREDICATES = tuple(f"<{EX}p/{name}>" for name in ("label", "comment", "value", "note"))
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 2
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0


# --------------------------------------------------------------------------- data generation


def _literal(n: int) -> str:
    """A literal of varied length (about 5..170 characters), sometimes language-tagged."""
    text = f"v{n} {FILLER[: (n * 37) % len(FILLER)]}".rstrip()
    return f'"{text}"@en' if n % 5 == 0 else f'"{text}"'


def _graph_lines(g: int, per_graph: int) -> str:
    graph = f"<{EX}g/{g}>"
    lines = []
    for i in range(per_graph):
        n = g * per_graph + i
        pred = PREDICATES[n % len(PREDICATES)]
        lines.append(f"<{EX}s/{n}> {pred} {_literal(n)} {graph} .\n")
    return "".join(lines)


def generate_nquads(path: Path, graphs: int, per_graph: int) -> int:
    """Write graphs x per_graph quads (distinct subjects) to ``path``; return its size in bytes."""
    with path.open("w", encoding="utf-8", buffering=1 << 20) as out:
        for g in range(graphs):
            out.write(_graph_lines(g, per_graph))
    return path.stat().st_size


# --------------------------------------------------------------------------- baseline


def _store_count(store: pyoxigraph.Store) -> int:
    solutions = store.query(COUNT_QUERY)
    assert isinstance(solutions, pyoxigraph.QuerySolutions)
    literal = next(iter(solutions))["n"]
    assert literal is not None
    return int(literal.value)


def _timed_bulk_load(store_dir: Path, data: Path, expected: int) -> Measurement:
    store = pyoxigraph.Store(str(store_dir))

    def load() -> None:
        store.bulk_load(path=str(data), format=pyoxigraph.RdfFormat.N_QUADS)
        store.flush()

    result = measure(BASELINE, expected, load)
    count = _store_count(store)
    if count != expected:
        raise RuntimeError(f"baseline store holds {count} quads, expected {expected}")
    return result


def run_baseline(data: Path, expected: int, workdir: Path) -> Measurement:
    """bulk_load + flush into a fresh on-disk store; the count check afterwards is not timed."""
    store_dir = Path(tempfile.mkdtemp(prefix="baseline-", dir=workdir))
    try:
        return _timed_bulk_load(store_dir, data, expected)
    finally:
        gc.collect()  # make sure the store is closed before its files are deleted
        shutil.rmtree(store_dir, ignore_errors=True)


# --------------------------------------------------------------------------- server


@dataclass
class Server:
    """A running ``concentrator serve`` subprocess."""

    process: subprocess.Popen[bytes]
    base: str
    log_path: Path
    log: IO[bytes]

    def log_tail(self, limit: int = 4000) -> str:
        self.log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return text[-limit:]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: Path, workdir: Path) -> Server:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "concentrator",
        "serve",
        "--data",
        str(data_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    log_path = workdir / f"server-{port}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = Server(process, f"http://127.0.0.1:{port}", log_path, log)
    try:
        wait_ready(server)
    except BaseException:
        stop_server(server)
        raise
    return server


def wait_ready(server: Server, timeout: float = STARTUP_TIMEOUT) -> None:
    """Poll ``GET /status`` until it answers 200."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"server exited with code {server.process.returncode} before "
                f"answering /status; log:\n{server.log_tail()}"
            )
        try:
            response = requests.get(server.base + "/status", timeout=2)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except requests.RequestException as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise RuntimeError(
        f"server not ready after {timeout:.0f} s (last: {last}); log:\n{server.log_tail()}"
    )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_server(server: Server) -> None:
    """Terminate, then kill if still alive after STOP_TIMEOUT seconds.

    The server runs in its own session, so stray worker processes it leaves behind (its
    process group) are killed as well, with a warning.
    """
    pgid = server.process.pid
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"warning: server ignored SIGTERM for {STOP_TIMEOUT:.0f} s; killing it")
            server.process.kill()
            server.process.wait()
    if _group_alive(pgid):
        print("warning: server left processes behind after exiting; killing them")
        os.killpg(pgid, signal.SIGKILL)
    server.log.close()


def post_store(server: Server, data: Path) -> None:
    """Stream the N-Quads file to ``POST /store``; it must answer 2xx."""
    with data.open("rb") as body:
        response = requests.post(
            server.base + "/store", data=body, headers={"Content-Type": "application/n-quads"}
        )
    if not 200 <= response.status_code < 300:
        raise RuntimeError(
            f"POST /store answered HTTP {response.status_code}: "
            f"{response.text[:1000]}\nserver log:\n{server.log_tail()}"
        )


def server_count(server: Server) -> int:
    response = requests.post(
        server.base + "/sparql",
        data=COUNT_QUERY.encode("utf-8"),
        timeout=600,
        headers={
            "Content-Type": "application/sparql-query",
            "Accept": "application/sparql-results+json",
        },
    )
    if response.status_code != 200:
        raise RuntimeError(
            f"POST /sparql answered HTTP {response.status_code}: {response.text[:1000]}"
        )
    return int(response.json()["results"]["bindings"][0]["n"]["value"])


def run_server(data: Path, expected: int, workdir: Path) -> Measurement:
    """Start a fresh server, time one POST /store, verify the count, stop the server."""
    data_dir = Path(tempfile.mkdtemp(prefix="server-", dir=workdir))
    server = start_server(data_dir, workdir)
    try:
        result = measure(SERVER, expected, lambda: post_store(server, data))
        count = server_count(server)
        if count != expected:
            raise RuntimeError(f"server holds {count} quads after POST /store, expected {expected}")
        return result
    finally:
        stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)


# --------------------------------------------------------------------------- driver


Runner = Callable[[Path, int, Path], Measurement]


def run_rounds(data: Path, expected: int, workdir: Path, repeat: int) -> list[Measurement]:
    """Alternate the order: baseline, server, server, baseline, baseline, server, ..."""
    runners: list[Runner] = [run_baseline, run_server]
    runs: list[Measurement] = []
    for round_no in range(repeat):
        order = runners if round_no % 2 == 0 else runners[::-1]
        for runner in order:
            result = runner(data, expected, workdir)
            print(
                f"  round {round_no + 1}: {result.name:<22} {result.seconds:8.3f} s "
                f"{result.rate:12,.0f} quads/s",
                flush=True,
            )
            runs.append(result)
    return runs


def best_of(runs: list[Measurement], name: str) -> Measurement:
    return min((m for m in runs if m.name == name), key=lambda m: m.seconds)


def report(args: argparse.Namespace, size: int, runs: list[Measurement]) -> dict[str, Any]:
    baseline, server = best_of(runs, BASELINE), best_of(runs, SERVER)
    ratio = server.rate / baseline.rate
    met = ratio >= TARGET_RATIO
    title = (
        f"GSP bulk load: {baseline.items:,} quads in {args.graphs:,} graphs "
        f"({size / 1e6:.1f} MB N-Quads), best of {args.repeat}"
    )
    print_table(title, [baseline, server], BASELINE)
    print(
        f"\nratio server/baseline = {ratio:.3f}; target >= {TARGET_RATIO} "
        f"-> {'MET' if met else 'NOT MET'}"
    )
    return {
        "parameters": {
            "graphs": args.graphs,
            "per_graph": args.per_graph,
            "repeat": args.repeat,
            "quads": baseline.items,
            "file_bytes": size,
        },
        "runs": [m.to_dict() for m in runs],
        "best": {"baseline": baseline.to_dict(), "server": server.to_dict()},
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": met,
    }


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>_rates.png``: the server's bulk load beside pyoxigraph's, best of the rounds, with their ratio."""
    best, parameters = document["best"], document["parameters"]
    baseline, server = best["baseline"], best["server"]
    return [bar_plot(f"{name}_rates", f"Bulk load of {parameters['quads']:,} quads in {parameters['graphs']:,} graphs "
                     f"(best of {parameters['repeat']}; target ratio {document['target_ratio']})",
                     {"one N-Quads file": {baseline["name"]: baseline["rate"], server["name"]: server["rate"]}},
                     reference=baseline["name"], unit="quads/s")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gsp_load", description=__doc__)
    parser.add_argument("--graphs", type=int, default=100_000, help="named graphs (100000)")
    parser.add_argument("--per-graph", type=int, default=10, help="quads per graph (10)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; best of each is kept")
    parser.add_argument("--tmpdir", type=Path, default=None, help="where temp files go")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/gsp_load.json again")
    args = parser.parse_args(argv)
    if args.graphs < 1 or args.per_graph < 1 or args.repeat < 1:
        parser.error("--graphs, --per-graph and --repeat must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot_only:
        replot(plots, BENCH_NAME)
        return 0
    expected = args.graphs * args.per_graph
    workdir = Path(tempfile.mkdtemp(prefix="bench-gsp-load-", dir=args.tmpdir))
    try:
        data = workdir / "data.nq"
        start = time.perf_counter()
        size = generate_nquads(data, args.graphs, args.per_graph)
        print(
            f"generated {expected:,} quads ({size / 1e6:.1f} MB) in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
        runs = run_rounds(data, expected, workdir, args.repeat)
        document = report(args, size, runs)
        path = write_json(BENCH_NAME, document)
        print(f"results written to {path}")
        write_plots(plots, document, BENCH_NAME)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
