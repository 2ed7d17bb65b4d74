"""The connected-patient rule at hospital scale: what one firing costs against the number of patients.

In process (no HTTP, no pipeline), for each ``--patients`` count N: the example's base data for N patients (birth
date, ward, a heart-rate and an activity sensor with their stream IDs, four history readings), a heart-rate and an
activity stream per patient (their aliases are the stream IDs) holding one window's readings, and the example's
rule ``examples/connected-patient/rules/heart-rate-alert.rq``. A firing is what ``RuleRunner`` runs when a
patient's heart-rate window completes: ``ExtendedEvaluator.for_rule`` with that window pinned, then ``query``.

Baseline, in the same run: pyoxigraph alone evaluating the rule's plain SPARQL 1.1 equivalent (``PLAIN``: bench.rules'
``PLAIN_RULE``) for the same patient over one in-memory store holding the base data and every patient's two windows: the
least a firing can cost, with no window to select. Both must give the same alert (the connected-patient worked case
for every patient: history mean 70, deviation 0.1, midaged, low activity, threshold 123.9; readings 125 and 135
average 130).

Prints a table (median ms per firing over ``--firings`` patients, the first firing after the data changed apart:
it fills the per-revision cache) and writes ``bench/results/patients.json`` and ``patients.png``.

    python -m bench.patients [--patients 10,100,300,1000] [--firings 20] [--plot-only]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyoxigraph import Literal, RdfFormat, Store

from bench.harness import replot, scaling_plot, write_json, write_plots
from bench.rules import PLAIN_RULE
from concentrator.compose import http_app
from engine.context import QueryTarget
from engine.results import ConstructedQuads
from engine.selection import SelectedWindow
from protocol import ServerConfig
from protocol.services import services_of

HOST = "http://localhost"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "connected-patient"
PREFIXES = """@prefix fhir: <http://hl7/org/fhir/> . @prefix obs: <http://hl7/org/fhir/Observation.> .
@prefix lr: <http://localhost/local-records#> . @prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
@prefix prov: <http://www.w3.org/ns/prov#> .
"""
START = datetime(2016, 6, 20, 10, tzinfo=UTC)
HEART_RATES, ENERGIES = ((0, 125), (2, 135)), ((0, 5), (2, 4))  # (minute, value): one window each
RULE_REF = "R/HEAD/PT5M/PT30S"  # the rule's heart-rate WindowRef, canonical (as a firing pins it)
#: bench.rules' plain SPARQL 1.1 form of the rule (each window a named graph, named by its windowed IRI, holding its
#: elements' timestamp triples), narrowed to the firing patient's heart-rate stream ID
PLAIN = PLAIN_RULE.replace("WHERE {\n", "WHERE {\n  VALUES ?heartRateStreamID { <%s> }\n", 1)
WINDOWED = {"hr": "?WINDOWS=R/HEAD/PT05M", "act": "?WINDOWS=HEAD/-PT05M"}  # as PLAIN_RULE builds them


def stream_id(kind: str, patient: int) -> str:
    return f"urn:uuid:bench-{kind}-{patient}"


def base_data(patients: int) -> str:
    """The example's records (base.trig's shape) for ``patients`` patients, each the connected-patient worked case."""
    records, history = [PREFIXES], []
    for p in range(patients):
        records.append(f'lr:pat{p} a fhir:Patient ; fhir:Patient.birthDate "1950-03-14"^^xsd:date ;\n'
                       f"  lr:isConnectedTo lr:hr-{p}, lr:act-{p} ; lr:ward lr:cardiology .\n"
                       f"lr:hr-{p} a lr:HeartRateSensor ; lr:hasStreamID <{stream_id('hr', p)}> .\n"
                       f"lr:act-{p} a lr:ActivitySensor ; lr:hasStreamID <{stream_id('act', p)}> .\n")
        history += [f"  lr:h{p}-{k} obs:subject lr:pat{p} ; obs:code lr:HeartRate ;\n"
                    f"    obs:valueQuantity [ fhir:Quantity.value {v} ; fhir:Quantity.unit \"bpm\" ] .\n"
                    for k, v in enumerate((63, 77, 63, 77))]
    return "".join(records) + "lr:history {\n" + "".join(history) + "}\n"


def observation(kind: str, minute: int, value: int) -> str:
    code, unit = ("HeartRate", "bpm") if kind == "hr" else ("EnergyExpenditure", "kcal/min")
    moment = f'"{(START + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")}"^^xsd:dateTime'
    return (f"[] a <http://hl7.org/fhir/Observation> ; obs:code lr:{code} ; obs:effectiveDateTime {moment} ;\n"
            f'  obs:valueQuantity [ fhir:Quantity.value {value} ; fhir:Quantity.unit "{unit}" ] .\n')


def readings(kind: str) -> tuple[tuple[int, int], ...]:
    return HEART_RATES if kind == "hr" else ENERGIES


def element_graph(kind: str, patient: int, minute: int) -> str:
    return f"<urn:bench:{kind}-{patient}-{minute}>"


def timestamp(kind: str, patient: int, minute: int) -> str:
    """An element's timestamp triple."""
    moment = f'"{(START + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")}"^^xsd:dateTime'
    return f"{element_graph(kind, patient, minute)} prov:generatedAtTime {moment} ."


def element(kind: str, patient: int, minute: int, value: int) -> str:
    return (f"{timestamp(kind, patient, minute)}\n"
            f"{element_graph(kind, patient, minute)} {{ {observation(kind, minute, value)} }}\n")


def concentrator_firings(patients: int, firings: int, directory: Path) -> dict[str, Any]:
    """The rule's firings on ``firings`` patients' heart-rate windows (ms each), the first one apart."""
    app = http_app(ServerConfig(directory, in_memory=True))
    client = app.test_client()
    trig = {"Content-Type": "application/trig"}
    assert client.post("/store", data=base_data(patients).encode(), headers=trig).status_code in (200, 201, 204)
    for p in range(patients):
        for kind in ("hr", "act"):
            name = f"{kind}-{p}"
            assert client.put(f"/streams/{name}", query_string={"alias": stream_id(kind, p)}).status_code == 201
            body = PREFIXES + "".join(element(kind, p, m, v) for m, v in readings(kind))
            assert client.post(f"/streams/{name}", data=body.encode(), headers=trig).status_code == 200
    rule = (EXAMPLE / "rules" / "heart-rate-alert.rq").read_text(encoding="utf-8")
    evaluator = services_of(app).evaluator.with_local_bases([HOST])
    times, alerts = [], []
    for k in range(firings + 1):
        p = (k * 7919) % patients  # patients spread over the list
        pins = {(f"hr-{p}", RULE_REF): SelectedWindow([1, 2], commit=1_000_000)}
        began = time.perf_counter()
        result = evaluator.for_rule([HOST], pins).query(rule, QueryTarget(base_iri=HOST))
        times.append((time.perf_counter() - began) * 1000)
        assert isinstance(result, ConstructedQuads)
        alerts.append({str(q.predicate.value).rsplit("#", 1)[-1]: q.object.value for q in result
                       if isinstance(q.object, Literal)})
    services_of(app).close()
    return {"first_ms": round(times[0], 2), "median_ms": round(statistics.median(times[1:]), 3),
            "alert": alerts[-1]}


def plain_firings(patients: int, firings: int) -> dict[str, Any]:
    """pyoxigraph alone: ``PLAIN`` for the same patients over one store holding every patient's two windows."""
    store = Store()
    store.load(base_data(patients).encode(), RdfFormat.TRIG)
    windows = []
    for p in range(patients):
        for kind in ("hr", "act"):
            window = f"<{stream_id(kind, p)}{WINDOWED[kind]}>"
            windows += [f"{window} {{ {timestamp(kind, p, m)} }}\n{element(kind, p, m, v)}" for m, v in readings(kind)]
    store.load((PREFIXES + "".join(windows)).encode(), RdfFormat.TRIG)
    times, triples = [], []
    for k in range(firings + 1):
        p = (k * 7919) % patients
        began = time.perf_counter()
        triples = list(store.query(PLAIN % stream_id("hr", p)))  # type: ignore[arg-type]
        times.append((time.perf_counter() - began) * 1000)
    return {"first_ms": round(times[0], 2), "median_ms": round(statistics.median(times[1:]), 3),
            "alert": {t.predicate.value.rsplit("#", 1)[-1]: t.object.value for t in triples  # type: ignore[union-attr]
                      if isinstance(t.object, Literal)}}


def plots(document: dict[str, Any], name: str) -> list[Path]:
    rows = document["rows"]
    curves = {"this server: a firing (median)": [(r["patients"], r["concentrator"]["median_ms"]) for r in rows],
              "this server: first firing after a data change": [(r["patients"], r["concentrator"]["first_ms"])
                                                                for r in rows],
              "pyoxigraph: the plain query (median)": [(r["patients"], r["plain"]["median_ms"]) for r in rows]}
    return [scaling_plot(name, "connected-patient rule: one firing against the number of patients", curves,
                         xlabel="patients", ylabel="ms per firing", log_x=True, log_y=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patients", default="10,100,300,1000", help="comma-separated patient counts")
    parser.add_argument("--firings", type=int, default=20, help="firings (patients) measured per count")
    parser.add_argument("--plot-only", action="store_true", help="measure nothing: draw the plot of the JSON again")
    args = parser.parse_args()
    if args.plot_only:
        replot(plots, "patients")
        return
    rows = []
    print(f"{'patients':>8} {'server ms':>10} {'first ms':>9} {'plain ms':>9} {'× plain':>8}")
    for patients in [int(n) for n in args.patients.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-patients-") as tmp:
            ours = concentrator_firings(patients, args.firings, Path(tmp) / "data")
        plain = plain_firings(patients, args.firings)
        if ours["alert"].get("threshold") != plain["alert"]["threshold"]:
            raise AssertionError(f"{patients} patients: the rule's alert {ours['alert']} is not the plain query's "
                                 f"{plain['alert']}")
        ratio = ours["median_ms"] / plain["median_ms"]
        rows.append({"patients": patients, "concentrator": ours, "plain": plain, "ratio_to_plain": round(ratio, 2)})
        print(f"{patients:>8,} {ours['median_ms']:>10.2f} {ours['first_ms']:>9.1f} {plain['median_ms']:>9.2f} "
              f"{ratio:>7.2f}×")
    document = {"firings": args.firings, "rows": rows}
    print(f"wrote {write_json('patients', document)}")
    write_plots(plots, document, "patients")


if __name__ == "__main__":
    main()
