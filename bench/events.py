"""Event rules (issue 18): incremental matching per arriving element against the naive way, re-evaluating the
pattern as a SPARQL self-join over the whole window at each element.

For each window size N (the last N elements: ``EVENT <…/streams/prices?WINDOWS=HEAD~(N−1)/HEAD>``) and each pattern
(a two-step ``E1 SEQ E2``, a four-step ``E1 SEQ E2 SEQ E3 SEQ E4``, and the join ``E1 AND E2`` of EP-SPARQL, in either
order in time; the steps joined on the company), a stream of N + M elements (one price of one of ``--keys`` companies
per element, a second apart) is stored in a real stream; then, for the M arrivals after the window is full:

- **incremental**: what an event rule's worker does per element (``rules/event_rules.py``): the element's content
  from the element log into an in-memory pyoxigraph store, each EVENT's pattern over it, ``EventMatcher.arrive``;
- **naive**: the window's N elements in one pyoxigraph store (the newest added, the oldest removed), the same pattern
  as one SELECT joining N graphs by their timestamps (``FILTER (?t1 < ?t2 …)``; none for AND), and its new
  solutions (those not in the previous evaluation's). Measured on the first arrivals only, up to
  ``--naive-seconds`` per case.

Both find the same new matches (as the sets of elements they use) at each measured arrival (checked). The derived
events' output (the rule's CONSTRUCT and the output element's commit) is the same work for both and left out.
Prints a table, writes ``bench/results/events.json`` and ``events.png``.
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pyoxigraph import NamedNode, RdfFormat, Store

from bench.harness import replot, scaling_plot, write_json, write_plots
from concentrator.compose import open_services
from protocol.services import ServerConfig, Services
from rules.event_rules import EventRuleWorker
from rules.event_spec import event_rule_spec
from rules.registry import Rule
from sparql_ext.windowing import format_micros
from store.durable import now_micros
from store.framing import ElementFramer
from store.stream import Stream
from store.stream_config import StreamConfig

BASE = "http://localhost"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
T0 = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z
SECOND = 1_000_000


CASES = [("SEQ", 2), ("SEQ", 4), ("AND", 2)]  # (operator, steps)


def rule_text(steps: int, size: int, operator: str = "SEQ") -> str:
    window = f"<{BASE}/streams/prices?WINDOWS=HEAD~{size - 1}/HEAD>"
    events = f" {operator} ".join(f"EVENT {window} {{ ?c :price ?p{i} }}" for i in range(1, steps + 1))
    return f"PREFIX : <http://ex/>\nCONSTRUCT {{ ?c :seq ?p{steps} }} WHERE {{ MATCH {{ {events} }} }}"


def naive_query(steps: int, operator: str = "SEQ") -> str:
    """The same pattern as a self-join over the window's graphs (in time order for SEQ); its solutions name the
    elements."""
    graphs = " ".join(f"?g{i}" for i in range(1, steps + 1))
    patterns = " ".join(f"GRAPH ?g{i} {{ ?c <http://ex/price> ?p{i} }} ?g{i} <{PROV}> ?t{i} ."
                        for i in range(1, steps + 1))
    order = " && ".join(f"?t{i} < ?t{i + 1}" for i in range(1, steps))
    return f"SELECT {graphs} WHERE {{ {patterns} {f'FILTER ({order})' if operator == 'SEQ' else ''} }}"


def label(row: dict[str, Any]) -> str:
    operator = row.get("operator", "SEQ")
    return f"{row['steps']}-step SEQ" if operator == "SEQ" else f"{row['steps']}-way {operator}"


def feed(stream: Stream, count: int, keys: int, seed: int) -> None:
    rng = random.Random(seed)
    stamp = "^^<http://www.w3.org/2001/XMLSchema#dateTime>"
    for first in range(1, count + 1, 1000):
        body = "".join(f'<http://ex/e{k}> <{PROV}> "{format_micros(T0 + k * SECOND)}"{stamp} .\n'
                       f"<http://ex/e{k}> {{ <http://ex/c{rng.randrange(keys)}> <http://ex/price> "
                       f"{rng.randrange(1, 1000)} . }}\n" for k in range(first, min(first + 1000, count + 1)))
        for element in ElementFramer(io.BytesIO(body.encode()), RdfFormat.TRIG, PROV):
            stream.accept(element, now_micros())
        stream.flush()


def measure_case(services: Services, stream: Stream, steps: int, size: int, measured: int, naive_seconds: float,
                 operator: str = "SEQ") -> dict[str, Any]:
    text = rule_text(steps, size, operator)
    evaluator = services.evaluator.with_local_bases([BASE])
    spec = event_rule_spec(text, BASE, evaluator)
    assert spec is not None
    rule = Rule(f"bench-{operator.lower()}-{steps}-{size}", text, "out", BASE, [], events=["prices"])
    worker = EventRuleWorker(rule, services.rules, Path(tempfile.mkdtemp(prefix="event-bench-")))
    [iri] = spec.streams
    graphs = {o: NamedNode(stream.graph_of(o)[1:-1]) for o in range(1, size + measured + 1)}  # type: ignore[index]
    ordinals = {graph: ordinal for ordinal, graph in graphs.items()}

    def elements(row: tuple[NamedNode, ...]) -> tuple[NamedNode, ...]:
        """A match's elements in time order, each once (a join may use one element twice)."""
        return tuple(sorted(set(row), key=ordinals.__getitem__))

    def arrive(ordinal: int) -> set[tuple[NamedNode, ...]]:
        at = stream.time_of(ordinal)
        assert at is not None
        matches = worker.matcher.arrive(ordinal, at, worker._solutions(stream, ordinal, at, iri), stream=iri)
        return {tuple(graphs[e.ordinal] for e in m.elements) for m in matches}

    for ordinal in range(1, size + 1):  # fill the window (not measured)
        arrive(ordinal)
    incremental: list[float] = []
    found: dict[int, set[tuple[NamedNode, ...]]] = {}
    for ordinal in range(size + 1, size + measured + 1):
        started = time.perf_counter()
        found[ordinal] = arrive(ordinal)
        incremental.append(time.perf_counter() - started)
    state = worker.matcher.stats()

    window = Store()  # the naive way: the window's elements as named graphs, their timestamps in the default graph
    def add(ordinal: int) -> None:
        window.load(stream.contents([ordinal]), RdfFormat.TRIG, lenient=True)

    def drop(ordinal: int) -> None:
        graph = graphs[ordinal]
        for quad in [*window.quads_for_pattern(None, None, None, graph), *window.quads_for_pattern(graph, None, None)]:
            window.remove(quad)
    query = naive_query(steps, operator)

    def evaluate() -> set[tuple[NamedNode, ...]]:
        return {elements(tuple(row[f"g{i}"] for i in range(1, steps + 1)))
                for row in window.query(query)}  # type: ignore[union-attr]

    for ordinal in range(1, size + 1):
        add(ordinal)
    previous = evaluate()
    naive: list[float] = []
    spent = 0.0
    for ordinal in range(size + 1, size + measured + 1):
        if spent > naive_seconds and len(naive) >= 3:
            break
        started = time.perf_counter()
        add(ordinal)
        drop(ordinal - size)
        current = evaluate()
        new = current - previous
        naive.append(time.perf_counter() - started)
        spent += naive[-1]
        previous = current
        assert new == found[ordinal], (steps, size, ordinal, len(new), len(found[ordinal]))
    matches = sum(len(found[o]) for o in found)
    return {"operator": operator, "steps": steps, "window": size, "arrivals": measured, "naive_arrivals": len(naive),
            "incremental_us": round(1e6 * statistics.median(incremental), 1),
            "incremental_p90_us": round(1e6 * sorted(incremental)[int(0.9 * len(incremental))], 1),
            "naive_us": round(1e6 * statistics.median(naive), 1),
            "matches_per_element": round(matches / measured, 3),
            "elements_per_second": round(len(incremental) / sum(incremental)),
            "matches_per_second": round(matches / sum(incremental)),
            "state": state}


def run(sizes: list[int], measured: int, keys: int, naive_seconds: float, directory: Path) -> list[dict[str, Any]]:
    services = open_services(ServerConfig(directory / "data", in_memory=True))
    try:
        stream, _ = services.streams.put(StreamConfig("prices"))
        feed(stream, max(sizes) + measured, keys, seed=18)
        rows = []
        for operator, steps in CASES:
            for size in sizes:
                rows.append(measure_case(services, stream, steps, size, measured, naive_seconds, operator))
                row = rows[-1]
                print(f"{label(row)}, window {size:>6}: incremental {row['incremental_us']:>9,.1f} µs/element, "
                      f"naive {row['naive_us']:>12,.1f} µs/element ({row['naive_arrivals']} arrivals), "
                      f"{row['matches_per_element']} matches/element", flush=True)
        return rows
    finally:
        services.close()


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>.png``: time per arriving element against the window size, incremental and naive, per pattern."""
    cases = dict.fromkeys(label(row) for row in document["rows"])
    curves = {f"{way}, {case}": [(row["window"], row[f"{way}_us"]) for row in document["rows"] if label(row) == case]
              for case in cases for way in ("incremental", "naive")}
    return [scaling_plot(name, "Event matching: time per arriving element (median) against the window size",
                         curves, xlabel="window (elements)", ylabel="µs per element", log_x=True, log_y=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="window sizes (elements), comma-separated")
    parser.add_argument("--arrivals", type=int, default=1000, help="arrivals measured after the window is full")
    parser.add_argument("--keys", type=int, default=5000, help="companies (the join key's distinct values)")
    parser.add_argument("--naive-seconds", type=float, default=5.0, help="time spent on naive arrivals per case")
    parser.add_argument("--name", default="events", help="result file name (bench/results/NAME.json)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/NAME.json again")
    args = parser.parse_args()
    if args.plot_only:
        replot(plots, args.name)
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="events-bench-") as tmp:
        rows = run(sizes, args.arrivals, args.keys, args.naive_seconds, Path(tmp))
    print(f"{'pattern':<12} {'window':>7} {'incr. µs':>10} {'naive µs':>12} {'speed-up':>9} {'matches/el':>11}")
    for row in rows:
        print(f"{label(row):<12} {row['window']:>7} {row['incremental_us']:>10,.1f} {row['naive_us']:>12,.1f} "
              f"{row['naive_us'] / row['incremental_us']:>9,.1f} {row['matches_per_element']:>11}")
    document = {"keys": args.keys, "arrivals": args.arrivals, "naive_seconds": args.naive_seconds, "rows": rows}
    path = write_json(args.name, document)
    print(f"wrote {path}")
    write_plots(plots, document, args.name)


if __name__ == "__main__":
    main()
