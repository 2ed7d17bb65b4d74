"""RSP-QL registrations (docs/rsp-ql.md): what registering costs, and what a window's evaluation costs through a
registration compared with the same query written as a rule, in the same run. In-process (the Flask app, no Spark:
windows are committed by hand as the pipeline commits them).

a. **Registering**: 1,000 RSP-QL queries in one ``PUT /queries`` request, against the baseline of 1,000 rules in
   one ``PUT /rules`` request (the project's bulk registration), each over 10 streams, alternating.
b. **A window's evaluation**: a registered query's result over one window (``delivery.results.pinned_result``, what
   ``GET /queries/NAME/results`` evaluates per window) against the same query written by hand as a rule (its
   firing's evaluation: ``ExtendedEvaluator.for_rule`` with the window pinned), over one window of ``--elements``
   elements; median of ``--repeat`` alternating evaluations. Both read the window each time (``RAND()`` keeps the
   window's sub-SELECT out of the static-results cache, which would otherwise answer both from memory).

Usage: ``.venv/bin/python -m bench.rspql [--queries 1000] [--elements 500] [--repeat 200] [--plot-only]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import Measurement, bar_plot, print_table, replot, write_json, write_plots
from concentrator.compose import http_app
from delivery.results import PinnedQuery, pinned_result
from engine.context import QueryTarget
from engine.selection import SelectedWindow
from protocol.services import ServerConfig, services_of

NAME = "rspql"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
STREAMS = 10
T0 = "2016-06-20T10:00:00Z"
# RAND() keeps a window's inner SELECT out of the static-results cache (docs/rules.md): both sides evaluate the window
UNCACHED = "BIND(RAND() AS ?r)"


def registration(j: int) -> str:
    return (f"PREFIX ex: <http://ex/>\nREGISTER RSTREAM <http://ex/out{j}> AS\n"
            f"SELECT ?avg FROM NAMED WINDOW ex:w ON ex:s{j % STREAMS} [RANGE PT5M STEP PT1M]\n"
            f"WHERE {{ WINDOW ex:w {{ SELECT (AVG(?v) AS ?avg) WHERE {{ ?o ex:hr ?v FILTER(?v > {j % 50}) "
            f"{UNCACHED} }} }} }}")


def rule(j: int) -> str:
    return (f"PREFIX ex: <http://ex/>\nCONSTRUCT {{ ex:r{j} ex:avg ?avg }} WHERE {{ SERVICE "
            f"<http://localhost/streams/s{j % STREAMS}?WINDOWS=R/{T0}/PT5M/PT1M> {{ SELECT (AVG(?v) AS ?avg) "
            f"WHERE {{ GRAPH ?g {{ ?o ex:hr ?v }} FILTER(?v > {j % 50}) {UNCACHED} }} }} }}")


def register(queries: int, rounds: int) -> list[Measurement]:
    best: dict[str, float] = {}
    for round_ in range(rounds):
        for system in (("rules", "queries") if round_ % 2 == 0 else ("queries", "rules")):
            with tempfile.TemporaryDirectory() as tmp:
                app = http_app(ServerConfig(Path(tmp) / "data", max_body_bytes=100_000_000))
                client = app.test_client()
                for s in range(STREAMS):
                    client.put(f"/streams/s{s}?alias=http://ex/s{s}")
                if system == "queries":
                    body: dict[str, Any] = {"queries": [{"name": f"q{j}", "query": registration(j), "t0": T0}
                                                        for j in range(queries)]}
                else:
                    body = {"rules": [{"name": f"r{j}", "query": rule(j), "output": f"out{j % STREAMS}"}
                                      for j in range(queries)]}
                start = time.perf_counter()
                answer = client.put(f"/{system}", json=body)
                elapsed = time.perf_counter() - start
                assert answer.status_code == 201, answer.get_data(as_text=True)[:500]
                services_of(app).close()
                best[system] = min(best.get(system, elapsed), elapsed)
    return [Measurement("PUT /rules (baseline)", best["rules"], queries, "rules"),
            Measurement("PUT /queries (RSP-QL)", best["queries"], queries, "queries")]


def evaluation(elements: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        app = http_app(ServerConfig(Path(tmp) / "data", max_body_bytes=100_000_000))
        client = app.test_client()
        client.put("/streams/s0?alias=http://ex/s0")
        stamp = "^^<http://www.w3.org/2001/XMLSchema#dateTime>"
        at = "2016-06-20T10:{:02d}:{:02d}.{}Z"
        body = "".join(f'<http://ex/e{n}> <{PROV}> "{at.format(n // 600, n // 10 % 60, n % 10)}"{stamp} .\n'
                       f"<http://ex/e{n}> {{ <http://ex/o{n}> <http://ex/hr> {60 + n % 80} . }}\n"
                       for n in range(elements))
        assert client.post("/streams/s0", data=body, content_type="application/trig").status_code == 200
        described = client.put(f"/queries/q?t0={T0}", data=registration(0),
                               content_type="application/sparql-query").get_json()
        window = described["windows"][0]
        services = services_of(app)
        stream = services.streams.get("s0")
        ordinals = list(range(1, elements + 1))
        commit = stream.accepted_time or 0
        pinned = PinnedQuery(described["compiled"], "http://localhost", "s0", window["windows"],
                             {("s0", window["windows"]): window["sequence"]})
        selected = SelectedWindow(ordinals, commit)

        def via_registration() -> Any:
            return pinned_result(pinned, ordinals, commit, services.evaluator)

        def via_rule() -> Any:
            firing = services.evaluator.for_rule(["http://localhost"], {("s0", window["windows"]): selected})
            return list(firing.query(rule(0), QueryTarget(base_iri="http://localhost")))  # type: ignore[arg-type]

        assert via_registration() is not None and len(via_rule()) == 1
        samples: dict[str, list[float]] = {"rule": [], "registration": []}
        for n in range(repeat):
            for name, run in ((("rule", via_rule), ("registration", via_registration)) if n % 2 == 0 else
                              (("registration", via_registration), ("rule", via_rule))):
                start = time.perf_counter()
                run()
                samples[name].append((time.perf_counter() - start) * 1000)
        services.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {"elements": elements, "repeat": repeat, "median_ms": medians,
            "ratio": medians["registration"] / medians["rule"]}


def plots(document: dict[str, Any], name: str) -> list[Path]:
    rates = {m["name"]: m["rate"] for m in document["registering"]}
    medians = document["evaluation"]["median_ms"]
    return [bar_plot(f"{name}_registering", "Registering 1,000 in one request", {"per second": rates},
                     reference="PUT /rules (baseline)", unit="registrations/s"),
            bar_plot(f"{name}_evaluation", "One window's evaluation (median)",
                     {"ms": {"rule (baseline)": medians["rule"], "RSP-QL registration": medians["registration"]}},
                     reference="rule (baseline)", unit="ms")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else NAME)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--elements", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="registration runs of each, alternating (best kept)")
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    if args.plot_only:
        replot(plots, NAME)
        return
    registering = register(args.queries, args.rounds)
    print_table(f"a. registering {args.queries} in one request", registering, "PUT /rules (baseline)")
    evaluated = evaluation(args.elements, args.repeat)
    print(f"\nb. one window of {args.elements} elements, median of {args.repeat}: rule "
          f"{evaluated['median_ms']['rule']:.2f} ms, RSP-QL registration {evaluated['median_ms']['registration']:.2f}"
          f" ms, ratio {evaluated['ratio']:.3f}")
    document = {"registering": [m.to_dict() for m in registering], "evaluation": evaluated}
    print(f"wrote {write_json(NAME, document)}")
    write_plots(plots, {"benchmark": NAME, **document}, NAME)


if __name__ == "__main__":
    main()
