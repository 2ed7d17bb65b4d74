"""Rules (issue 4): latency, per-window cost against plain pyoxigraph, and throughput of 1,000 rules.

Three parts, each against what it can be compared with in the same run:

a. **Connected-patient latency** (a real server, Spark pipeline, HTTP). ``examples/connected-patient``: base data
   via ``POST /store``, the four sensor streams with their ``urn:uuid:`` aliases, the heart-rate-alert rule with its
   heart-rate WindowRef made tumbling (``R/HEAD/PT05M``, as tests/test_connected_patient.py does) writing to
   ``alerts``. pat2's activity readings (energy 5: threshold 123.9 bpm; the rule reads them through the one-shot
   window ``HEAD/-PT05M``, which does not fire it) are uploaded first; then ``--windows`` heart-rate windows of
   300 readings each (one per second of application time; three windows in four average 129.85 bpm and alert, the
   fourth 109.85 and does not). Window k is completed by the first reading of window k+1, uploaded alone; the
   benchmark waits for the rule's firing before uploading the rest of window k+1 (``--upload-chunk`` readings per
   request), so each firing runs on an otherwise idle server (sensors sending one reading per second leave it as
   idle). Chunks of 100 keep each group commit of the stream under the 2,000 quads from which it uses
   ``bulk_load``, as a live sensor's readings do: a bulk-loaded group makes every later window query of that
   stream slower (see bench/README.md). For each window:

   - **revision → output committed**: the alert element's commit time in the ``alerts`` stream (``GET
     /streams/alerts/elements``: taken when its group commit starts, before the quads are written and the log
     fsync'd) minus the window
     revision's commit time (``GET /streams/hr-pat2/windows``: ``committed``, taken when the pipeline materializes
     it, before the revision file's fsync). Both are the server's wall clock (µs). Only alerting windows have an
     output element;
   - **firing duration**: the rule status' ``last_latency_ms`` read after each firing (every window): evaluation +
     output accepted and flushed (fsync'd), not the rule-status save that follows it;
   - for context, completing element committed → window revision (the Spark pipeline) and → output committed.

   The first ``--warmup`` windows are left out (JIT, Python workers, first queries).

b. **Per-window cost: rule firing vs plain pyoxigraph** (in-process, no HTTP, no Spark). The same rule, base data
   and readings in a ``RevisionedDataset`` + ``StreamCatalog`` + ``RuleRegistry`` on disk; the stream is committed
   every ``--commit-every`` elements (default 50, ≈ 400 quads: ``Store.extend``, as a sensor's trickle is; 0 commits
   a window at once, ≥ 2,000 quads, which the stream writes with ``bulk_load``); window revisions are materialized
   by hand (what the pipeline writes). The rule's cost is what ``RuleRunner.fire`` evaluates:
   ``evaluator.for_rule([base], pins).query(rule, QueryTarget(base_iri=base))`` with the firing window pinned
   (``engine.selection.revision_window``), over one of the ``LIVE_WINDOWS`` latest windows (as a firing on a
   completed window is: its elements are still among those the stream keeps in memory, ``Stream.window_store``),
   with the stream's kept window copies dropped first so that each firing pays for copying its window; a second row
   fires on an old window, copied from the on-disk store. The baseline is one pyoxigraph ``Store`` holding the base
   data, the activity window and the heart-rate window's 300 elements (each window's timestamp triples in a graph
   named by its windowed IRI, ``urn:uuid:…?WINDOWS=R/HEAD/PT05M``), queried with a plain SPARQL 1.1 CONSTRUCT: each
   ``SERVICE ?var`` becomes a sub-SELECT grouped by the windowed IRI (``GRAPH ?svc { ?g prov:generatedAtTime ?t }
   GRAPH ?g { … }``) joined on it. Both must give the same alert (patient, average, threshold, effective time). On
   disk (the concentrator's stores are) and in memory; alternating order, ``--rounds`` rounds, medians. Two more
   rows show why windows are copied: the heart-rate SERVICE's inner SELECT alone, over a view of the stream's store
   (``default_graph=`` its 300 timestamp graphs, ``named_graphs=`` its 300 element graphs: what rules read before
   ``Stream.window_store``), and over a store holding only the window. Above the 2× target, a few firings are
   profiled with cProfile.

c. **1,000 rules over 100 streams** (a real server, Spark pipeline, HTTP). ``--streams`` streams, each windowed by
   ``--rules-per-stream`` rules reading ``SERVICE <BASE/streams/sNNN?WINDOWS=R/HEAD/PT10S>`` (one shared sequence
   per stream; rule j emits an element when the window's average exceeds 10·j: half of them do) into one output
   stream. ``--many-windows`` windows of 10 elements (1 s apart) per stream are uploaded at once, then a
   punctuation completes the last. Firings per second = firings completed (the rules' ``firings`` + ``waiting`` +
   ``failures`` counters, ``GET /rules`` polled every 0.25 s) over the wall time from the start of the uploads to
   the last firing; also the rate between 10 % and 90 % of the firings. Baseline: the plain SPARQL 1.1 version of
   every (rule, window) evaluated by pyoxigraph on one on-disk store holding every window. Registration: every rule
   in one ``PUT /rules`` request (rules/s: request sent to answer received; target ≥ 1,000), then, as a second
   figure, the same rules again through ``PUT /rules/NAME``, one request each (replacing them with the same text).

    .venv/bin/python -m bench.rules                                   # quick: 8 windows, 10 streams × 10 rules
    .venv/bin/python -m bench.rules --windows 45 --rounds 90 --streams 100 --many-windows 5   # the full run

Prints a table per part and writes ``bench/results/rules.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import io
import json
import pstats
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import requests
from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Store

from bench.harness import (
    RESULTS_DIR,
    Measurement,
    Panel,
    Series,
    bar_plot,
    distribution_plot,
    print_table,
    replot,
    scaling_plot,
    summary_plot,
    time_series_plot,
    write_json,
    write_plots,
)
from bench.ingest import element_commits
from conformance.server import RunningServer, running_server
from engine.context import EvaluationContext, QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.selection import revision_window
from rules.registry import Rule, RuleRegistry
from rules.tasks import PLACEMENTS
from sparql_ext import parse_extended
from store import RevisionedDataset
from store.elements import PROV_GENERATED_AT_TIME
from store.framing import ElementFramer
from store.stream import Stream, StreamConfig
from store.streams import StreamCatalog
from store.windows import PipelineState, WindowRevision, new_revision

BENCH_NAME = "rules"
TARGET_COST_RATIO = 2.0
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "connected-patient"
RULE_NAME = "heart-rate-alert"
TUMBLING = "R/HEAD/PT05M"
STREAMS = {  # stream name -> alias (the stream ID in base.trig)
    "hr-pat2": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000201",
    "activity-pat2": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000202",
    "hr-pat3": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000301",
    "activity-pat3": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000302",
}
T0 = datetime(2016, 6, 20, 10, tzinfo=UTC)
T0_US = 1_466_416_800_000_000
PER_WINDOW = 300  # heart-rate readings per 5-minute window, one per second
LIVE_WINDOWS = 6  # part b fires on the latest windows: 6 × 300 × 7 quads fit in Stream's RECENT_QUADS_KEPT
LR = "http://localhost/local-records#"
OBS = "http://hl7/org/fhir/Observation."
QUANTITY_VALUE = "http://hl7/org/fhir/Quantity.value"
PROV = PROV_GENERATED_AT_TIME
Alert = tuple[str, str, str, str]  # patient, average, threshold, effective time (lexical forms)

# The heart-rate-alert rule in plain SPARQL 1.1: each SERVICE ?var is a sub-SELECT over the named graphs of the
# window its IRI names (the window's timestamp triples are in a graph named by the windowed IRI), grouped by that
# IRI and joined on it. Everything else is the rule's text.
PLAIN_RULE = """PREFIX fhir: <http://hl7/org/fhir/>
PREFIX obs:  <http://hl7/org/fhir/Observation.>
PREFIX prov: <http://www.w3.org/ns/prov#>
PREFIX lr:   <http://localhost/local-records#>
CONSTRUCT {
    ?obsID a <http://hl7/org/fhir/Observation> ; obs:subject ?patient ;
           obs:effectiveDateTime ?heartRate_time ;
           obs:code lr:AbnormallyHighHeartRate ;
           obs:valueQuantity [ fhir:Quantity.value ?heartRate_avgST ; fhir:Quantity.unit 'bpm' ] ;
           lr:threshold ?heartRate_threshold ;
           obs:valueCodeableConcept [ fhir:CodeableConcept.text 'yes' ] . }
WHERE {
  ?patient lr:isConnectedTo ?heartRateSensor .
  ?heartRateSensor lr:hasStreamID ?heartRateStreamID ; a lr:HeartRateSensor .
  ?patient lr:isConnectedTo ?activitySensor .
  ?activitySensor lr:hasStreamID ?activityStreamID ; a lr:ActivitySensor .
  ?patient fhir:Patient.birthDate ?birthdate .
  { SELECT ?patient (SAMPLE(?mean) AS ?heartRate_base)
           (AVG(ABS(?reading - ?mean)) / SAMPLE(?mean) AS ?patient_heartRate_std)
    WHERE {
      { SELECT ?patient (AVG(?value) AS ?mean)
        WHERE { GRAPH lr:history { ?h obs:subject ?patient ; obs:code lr:HeartRate ;
                                      obs:valueQuantity [ fhir:Quantity.value ?value ] } }
        GROUP BY ?patient }
      GRAPH lr:history { ?r obs:subject ?patient ; obs:code lr:HeartRate ;
                            obs:valueQuantity [ fhir:Quantity.value ?reading ] }
    }
    GROUP BY ?patient }
  BIND (IRI(CONCAT(STR(?activityStreamID), '?WINDOWS=HEAD/-PT05M')) AS ?service_activity_ST)
  { SELECT ?service_activity_ST (MAX(?energy) AS ?maxEnergyExp) (MAX(?activityTime) AS ?activity_time)
    WHERE { GRAPH ?service_activity_ST { ?a prov:generatedAtTime ?agen }
            GRAPH ?a { [] a <http://hl7.org/fhir/Observation> ; obs:code lr:EnergyExpenditure ;
                          obs:effectiveDateTime ?activityTime ;
                          obs:valueQuantity [ fhir:Quantity.value ?energy ] . } }
    GROUP BY ?service_activity_ST }
  BIND ((YEAR(?activity_time) - YEAR(?birthdate)) AS ?age)
  VALUES (?ageLevel ?ageMin ?ageMax ?ageFactor) {
    (lr:elderly 70 120 0.7) (lr:midaged 30 70 1.0) (lr:young 0 30 1.3) }
  FILTER (?age >= ?ageMin && ?age < ?ageMax)
  VALUES (?activityLevel ?energyExpMin ?energyExpMax ?activityFactor) {
    (lr:high 25 100 2.0) (lr:medium 11 25 1.0) (lr:low 0 10 0.7) }
  FILTER (?maxEnergyExp >= ?energyExpMin * ?ageFactor && ?maxEnergyExp < ?energyExpMax * ?ageFactor)
  BIND (((1 + ?patient_heartRate_std) * ?activityFactor) AS ?relHeartRate_delta_threshold)
  BIND ((?heartRate_base * (1 + ?relHeartRate_delta_threshold)) AS ?heartRate_threshold)
  BIND (IRI(CONCAT(STR(?heartRateStreamID), '?WINDOWS=R/HEAD/PT05M')) AS ?service_heartRate_ST)
  { SELECT ?service_heartRate_ST (AVG(?heartRate) AS ?heartRate_avgST) (MAX(?heartRateTime) AS ?heartRate_time)
    WHERE { GRAPH ?service_heartRate_ST { ?g prov:generatedAtTime ?gen }
            GRAPH ?g { [] a <http://hl7.org/fhir/Observation> ;
                          obs:effectiveDateTime ?heartRateTime ;
                          obs:valueQuantity [ fhir:Quantity.value ?heartRate ; fhir:Quantity.unit 'bpm' ] . } }
    GROUP BY ?service_heartRate_ST }
  FILTER (?heartRate_avgST > ?heartRate_threshold)
  BIND (UUID() AS ?obsID)
}
"""


# -- shared ---------------------------------------------------------------------------------------------------

def load_generator() -> ModuleType:
    """examples/connected-patient/generate.py (not a package: the example is meant to be copied)."""
    spec = importlib.util.spec_from_file_location("connected_patient_generate", EXAMPLE / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATE = load_generator()


def rule_text() -> str:
    """The example's rule with tumbling 5-minute windows (each reading in exactly one window)."""
    text = (EXAMPLE / "rules" / f"{RULE_NAME}.rq").read_text(encoding="utf-8")
    assert "?WINDOWS=R/HEAD/PT05M/PT30S" in text
    return text.replace("?WINDOWS=R/HEAD/PT05M/PT30S", f"?WINDOWS={TUMBLING}")


def alerting(k: int) -> bool:
    """Three heart-rate windows in four alert."""
    return k % 4 != 3


def reading(k: int, i: int) -> int:
    """Reading i of window k: 120..140 bpm (average 129.85 > 123.9: alert) or 100..120 (109.85: none)."""
    return (130 if alerting(k) else 110) + i % 21 - 10


def heart_rate_trig(k: int, first: int = 0, last: int = PER_WINDOW - 1) -> str:
    """Readings first..last of window k as TriG elements, one per second from the window's start."""
    return "".join(GENERATE.element("heart-rate", T0 + timedelta(seconds=PER_WINDOW * k + i), reading(k, i))
                   for i in range(first, last + 1))


def activity_trig() -> str:
    """pat2's activity at 10:00 and 10:02: energy 5 and 4 (low: activity factor 0.7), the last 5 minutes of it."""
    return "".join(GENERATE.element("activity", T0 + timedelta(minutes=m), v) for m, v in ((0, 5), (2, 4)))


def stamp(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micros(text: str) -> int:
    value = datetime.fromisoformat(text)
    return int(value.timestamp()) * 1_000_000 + value.microsecond


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summarize(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    return {"n": len(values), "p50_ms": round(percentile(values, 0.5), 1), "p90_ms": round(percentile(values, 0.9), 1),
            "p99_ms": round(percentile(values, 0.99), 1), "max_ms": round(max(values), 1),
            "mean_ms": round(statistics.fmean(values), 1)}


def commit_times(server: RunningServer, stream: str) -> dict[int, tuple[int, int]]:
    """A stream's elements: ordinal -> (timestamp, commit time), in µs (``GET /streams/NAME/elements``; the first
    element is ordinal 1: nothing here expires)."""
    times, commits = element_commits(f"{server.url}/streams/{stream}")
    return {ordinal: pair for ordinal, pair in enumerate(zip(times, commits, strict=True), start=1)}


def wait_for_pipeline(server: RunningServer, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while requests.get(server.url + "/status", timeout=10).json()["pipeline"].get("ready") is not True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Spark pipeline did not start:\n{server.log_tail()}")
        time.sleep(0.5)


def alerts_of(result: Any) -> set[Alert]:
    """(patient, average, threshold, effective time) of each alert among constructed triples or quads."""
    by_subject: dict[Any, dict[str, Any]] = {}
    for t in result:
        by_subject.setdefault(t.subject, {})[t.predicate.value] = t.object
    values = {subject: props[QUANTITY_VALUE].value for subject, props in by_subject.items() if QUANTITY_VALUE in props}
    found = set()
    for props in by_subject.values():
        if f"{OBS}subject" in props:
            found.add((props[f"{OBS}subject"].value, values[props[f"{OBS}valueQuantity"]],
                       props[f"{LR}threshold"].value, props[f"{OBS}effectiveDateTime"].value))
    return found


# -- a. latency on a real server ------------------------------------------------------------------------------

class Client:
    """The HTTP calls part a makes."""

    def __init__(self, server: RunningServer) -> None:
        self.url = server.url
        self.session = requests.Session()

    def ok(self, response: requests.Response) -> requests.Response:
        if not response.ok:
            raise RuntimeError(f"{response.request.method} {response.url}: {response.status_code} {response.text}")
        return response

    def upload(self, stream: str, trig: str) -> None:
        self.ok(self.session.post(f"{self.url}/streams/{stream}", data=trig.encode(),
                                  headers={"Content-Type": "application/trig"}, timeout=120))

    def punctuate(self, stream: str, micros: int) -> None:
        self.ok(self.session.post(f"{self.url}/streams/{stream}", params={"punctuation": stamp(micros)}, timeout=60))

    def rule_status(self, name: str) -> dict[str, Any]:
        response = self.session.get(f"{self.url}/rules/{name}", headers={"Accept": "application/json"}, timeout=60)
        return self.ok(response).json()  # type: ignore[no-any-return]

    def wait_fired(self, name: str, count: int, timeout: float = 300) -> dict[str, Any]:
        """The rule's status once it has fired (or been skipped, or failed) ``count`` times."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.rule_status(name)
            if status["firings"] + status["waiting"] + status["failures"] >= count:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"rule {name}: {count} firings not reached in {timeout:g} s: {status}")
            time.sleep(0.02)


def connected_patient_latency(windows: int, warmup: int, chunk: int) -> dict[str, Any]:
    """Part a: see the module docstring."""
    with running_server() as server:
        client = Client(server)
        wait_for_pipeline(server)
        client.ok(client.session.post(f"{server.url}/store", data=(EXAMPLE / "base.trig").read_bytes(),
                                      headers={"Content-Type": "application/trig"}, timeout=60))
        for name, alias in STREAMS.items():
            client.ok(client.session.put(f"{server.url}/streams/{name}", params={"alias": alias}, timeout=60))
        client.ok(client.session.put(f"{server.url}/rules/{RULE_NAME}", params={"output": "alerts"}, data=rule_text(),
                                     headers={"Content-Type": "application/sparql-query"}, timeout=60))
        client.upload("activity-pat2", activity_trig())  # read through HEAD/-PT05M: it does not fire the rule
        firing_ms: dict[int, float] = {}
        began = time.monotonic()
        for first in range(0, PER_WINDOW, chunk):
            client.upload("hr-pat2", heart_rate_trig(0, first, min(first + chunk, PER_WINDOW) - 1))
        for k in range(1, windows + 1):
            if k < windows:
                client.upload("hr-pat2", heart_rate_trig(k, 0, 0))  # completes window k-1
            else:
                client.punctuate("hr-pat2", T0_US + PER_WINDOW * k * 1_000_000)
            status = client.wait_fired(RULE_NAME, k)
            if status["failures"]:
                raise RuntimeError(f"the rule failed: {status}\n{server.log_tail()}")
            firing_ms[k - 1] = status["last_latency_ms"]
            if k < windows:
                for first in range(1, PER_WINDOW, chunk):
                    client.upload("hr-pat2", heart_rate_trig(k, first, min(first + chunk, PER_WINDOW) - 1))
        seconds = time.monotonic() - began
        status = client.rule_status(RULE_NAME)
        expected = sum(alerting(k) for k in range(windows))
        if status["outputs"] != expected:
            raise RuntimeError(f"{status['outputs']} alerts, expected {expected}: {status}")
        sequences = client.ok(client.session.get(f"{server.url}/streams/hr-pat2/windows", timeout=60)).json()
        [sequence] = [s for s in sequences["sequences"] if s["ref"] == "R/HEAD/PT5M"]
        revisions = {window["index"]: window for window in sequence["windows"]}
        outputs = dict(commit_times(server, "alerts").values())  # an alert's time (its window's end) -> its commit
        hr_commits = {ordinal: commit for ordinal, (_, commit) in commit_times(server, "hr-pat2").items()}
        static_cache = client.ok(client.session.get(f"{server.url}/status", timeout=60)).json().get("static_cache")
    to_output, spark, end_to_end, firings = [], [], [], []
    for k in range(warmup, windows):
        revision = revisions[k]
        committed = parse_micros(revision["committed"])
        firings.append(firing_ms[k])
        completing = hr_commits.get(PER_WINDOW * (k + 1) + 1)  # the next window's first reading
        if completing is not None:
            spark.append((committed - completing) / 1000)
        end = parse_micros(revision["end"])
        if end in outputs:
            to_output.append((outputs[end] - committed) / 1000)
            if completing is not None:
                end_to_end.append((outputs[end] - completing) / 1000)
        elif alerting(k):
            raise RuntimeError(f"window {k} alerted but no output element has its end time {revision['end']}")
    return {"windows": windows, "warmup": warmup, "elements_per_window": PER_WINDOW, "upload_chunk": chunk,
            "alerts": expected,
            "wall_seconds": round(seconds, 1), "static_cache": static_cache,
            "revision_to_output_committed": summarize(to_output),
            "firing_duration": summarize(firings),
            "completing_element_to_revision": summarize(spark),
            "completing_element_to_output_committed": summarize(end_to_end),
            "firing_ms_by_window": [firing_ms[k] for k in range(windows)]}


# -- b. per-window cost, in-process ---------------------------------------------------------------------------

def _feed(stream: Stream, trig: str, group: int = 0) -> list[int]:
    """Append TriG elements; ``group`` > 0: wait for the commit every ``group`` elements."""
    ordinals = []
    for element in ElementFramer(io.BytesIO(trig.encode()), RdfFormat.TRIG, PROV):
        ordinal = stream.accept(element, received=0)
        assert ordinal is not None
        ordinals.append(ordinal)
        if group and len(ordinals) % group == 0:
            stream.flush()
    stream.flush()
    return ordinals


def _materialize(stream: Stream, sequence: str, k: int, start: int, ordinals: list[int]) -> WindowRevision:
    """Commit window k of ``sequence`` (elements ``ordinals``, a run) as the pipeline does after a batch."""
    revision = new_revision(sequence, k, start, start + PER_WINDOW * 1_000_000, ((ordinals[0], ordinals[-1]),))
    state = PipelineState(batch=stream.windows.state.batch + 1, next_index={sequence: k + 1})
    assert stream.windows.commit(state.batch, [revision], state)
    return revision


class InProcess:
    """The concentrator's components on disk, with the connected-patient data, and the rule registered."""

    def __init__(self, directory: Path, windows: int, commit_every: int) -> None:
        self.base = "http://localhost"
        self.dataset = RevisionedDataset(directory / "data")
        self.catalog = StreamCatalog(directory / "streams")
        self.evaluator = ExtendedEvaluator(EvaluationContext.for_requests(self.dataset, self.catalog, []))
        self.dataset.add(self.dataset.stage(io.BytesIO((EXAMPLE / "base.trig").read_bytes()), RdfFormat.TRIG))
        for name, alias in STREAMS.items():
            self.catalog.put(StreamConfig(name, aliases=[alias]))
        self.registry = RuleRegistry(directory / "rules", self.evaluator)
        self.rule: Rule = self.registry.put(RULE_NAME, rule_text(), "alerts", self.base)[0]
        inputs = {i.stream: i for i in self.rule.inputs}
        self.activity = self.catalog.get("activity-pat2")
        self.activity_ordinals = _feed(self.activity, activity_trig())  # the rule reads it through HEAD/-PT05M
        self.heart_rate = self.catalog.get("hr-pat2")
        self.hr_input = inputs["hr-pat2"]
        self.windows: list[WindowRevision] = []
        for k in range(windows):
            ordinals = _feed(self.heart_rate, heart_rate_trig(k), commit_every)
            start = T0_US + PER_WINDOW * k * 1_000_000
            self.windows.append(_materialize(self.heart_rate, self.hr_input.sequence, k, start, ordinals))
        [hr_part] = [p for p in parse_extended(self.rule.text, self.base).parts if p.target == "?service_heartRate_ST"]
        assert isinstance(hr_part.inner, str)
        self.hr_inner: str = hr_part.inner

    def fire(self, k: int) -> Any:
        """What RuleRunner.fire evaluates when heart-rate window k completes."""
        pins = {(self.hr_input.stream, self.hr_input.ref): revision_window("time", self.windows[k])}
        return self.evaluator.for_rule([self.rule.base], pins).query(self.rule.text,
                                                                     QueryTarget(base_iri=self.rule.base))

    def inner_over_view(self, k: int) -> Any:
        """The heart-rate SERVICE's inner SELECT over the window as the rule reads it (a view of the stream)."""
        defaults, named = self.heart_rate.dataset_graphs(self.windows[k].ordinals())
        return list(self.heart_rate.store.query(self.hr_inner, default_graph=defaults, named_graphs=named))

    def window_quads(self, stream: Stream, ordinals: Iterable[int], iri: str) -> Iterator[Quad]:
        """A window's quads, its timestamp triples in a graph named by its windowed IRI."""
        graph = NamedNode(iri)
        for quad in stream.dataset_quads(ordinals):
            yield Quad(quad.subject, quad.predicate, quad.object, graph) \
                if isinstance(quad.graph_name, DefaultGraph) else quad

    def baseline_store(self, k: int, path: Path | None) -> Store:
        """Base data + pat2's activity (its last 5 minutes) + heart-rate window k, in one Store (on disk: ``path``)."""
        store = Store(str(path)) if path is not None else Store()
        store.load(path=str(EXAMPLE / "base.trig"), format=RdfFormat.TRIG)
        store.extend(self.window_quads(self.activity, self.activity_ordinals,
                                       f"{STREAMS['activity-pat2']}?WINDOWS=HEAD/-PT05M"))
        store.extend(self.window_quads(self.heart_rate, self.windows[k].ordinals(),
                                       f"{STREAMS['hr-pat2']}?WINDOWS={TUMBLING}"))
        store.flush()
        return store

    def window_store(self, k: int) -> Store:
        """Only heart-rate window k, its timestamp triples in the default graph (as the window dataset)."""
        store = Store()
        store.extend(self.heart_rate.dataset_quads(self.windows[k].ordinals()))
        return store

    def close(self) -> None:
        self.catalog.close()
        self.dataset.close()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000, result


def _cost_round(world: InProcess, k: int, path: Path, *, reverse: bool, times: dict[str, list[float]]) -> int:
    """One round of part b over window k: each system once (in reverse order every other round); checks that they
    agree and returns the alerts."""
    disk = world.baseline_store(k, path)
    memory = world.baseline_store(k, None)
    window = world.window_store(k)
    list(disk.query(PLAIN_RULE))  # untimed first query on a fresh store
    list(memory.query(PLAIN_RULE))
    old = k % (len(world.windows) - LIVE_WINDOWS)  # a window whose elements are no longer in memory

    def fire(window: int) -> Any:
        world.heart_rate._window_stores.clear()  # noqa: SLF001 - measure the window's copy, not a kept one
        return world.fire(window)

    runs: dict[str, Callable[[], Any]] = {
        "rule": lambda: fire(k), "historic": lambda: fire(old), "disk": lambda: list(disk.query(PLAIN_RULE)),
        "memory": lambda: list(memory.query(PLAIN_RULE)), "view": lambda: world.inner_over_view(k),
        "window": lambda: list(window.query(world.hr_inner))}
    results: dict[str, Any] = {}
    for key in reversed(runs) if reverse else list(runs):
        elapsed, results[key] = _timed(runs[key])
        times[key].append(elapsed)
    expected = alerts_of(results["rule"])
    for key in ("disk", "memory"):
        if alerts_of(results[key]) != expected:
            raise AssertionError(f"window {k}: {key} gives {alerts_of(results[key])}, the rule {expected}")
    if bool(expected) != alerting(k) or any(a[0] != f"{LR}pat2" or float(a[2]) != 123.9 for a in expected):
        raise AssertionError(f"window {k}: unexpected alerts {expected}")
    if bool(alerts_of(results["historic"])) != alerting(old):
        raise AssertionError(f"window {old}: unexpected alerts {alerts_of(results['historic'])}")
    if _avg(results["view"]) != _avg(results["window"]):
        raise AssertionError(f"window {k}: the inner SELECT differs over the view and over a copy")
    return len(expected)


def evaluation_cost(windows: int, rounds: int, profile_firings: int, commit_every: int) -> dict[str, Any]:
    """Part b: see the module docstring."""
    if windows <= LIVE_WINDOWS:
        raise SystemExit(f"part b needs --windows above {LIVE_WINDOWS}: live windows and older ones")
    names = {"rule": "rule firing, live window: ExtendedEvaluator.for_rule(…).query",
             "historic": "rule firing, historic window (copied from disk)",
             "disk": "pyoxigraph Store on disk: plain SPARQL 1.1 rule",
             "memory": "pyoxigraph Store in memory: plain SPARQL 1.1 rule",
             "view": "  hr SERVICE inner SELECT over a view of the stream store",
             "window": "  hr SERVICE inner SELECT over a store of the window"}
    times: dict[str, list[float]] = {key: [] for key in names}
    with tempfile.TemporaryDirectory(prefix="bench-rules-") as tmp:
        setup_began = time.monotonic()
        world = InProcess(Path(tmp), windows, commit_every)
        setup_seconds = time.monotonic() - setup_began
        for k in range(min(2, windows)):
            world.fire(k)  # warm-up: the static prefixes' cache, first queries
        alerts_seen = 0
        for r in range(rounds):
            k = windows - 1 - r % LIVE_WINDOWS  # the latest windows: their elements are still in memory
            alerts_seen += _cost_round(world, k, Path(tmp) / f"baseline-{r}", reverse=r % 2 == 1, times=times)
            gc.collect()
        medians = {key: statistics.median(values) for key, values in times.items()}
        ratio = medians["rule"] / medians["disk"]
        profile = None
        if ratio > TARGET_COST_RATIO and profile_firings:
            profiler = cProfile.Profile()
            profiler.enable()
            for r in range(profile_firings):
                world.heart_rate._window_stores.clear()  # noqa: SLF001
                world.fire(windows - 1 - r % LIVE_WINDOWS)
            profiler.disable()
            profile = _top_functions(profiler, 12)
        stream_elements = len(world.heart_rate)
        world.close()
    rows = {names[key]: {"median_ms": round(medians[key], 2), "p90_ms": round(percentile(values, 0.9), 2),
                         "cost_vs_disk_baseline": round(medians[key] / medians["disk"], 2)}
            for key, values in times.items()}
    return {"windows": windows, "rounds": rounds, "elements_per_window": PER_WINDOW, "commit_every": commit_every,
            "stream_elements": stream_elements, "alerts_checked": alerts_seen, "setup_seconds": round(setup_seconds, 1),
            "rows": rows, "cost_ratio": round(ratio, 2),
            "cost_ratio_vs_memory": round(medians["rule"] / medians["memory"], 2),
            "target_cost_ratio": TARGET_COST_RATIO, "target_met": ratio <= TARGET_COST_RATIO,
            "profiled_firings": profile_firings if profile else 0, "profile": profile}


def _avg(solutions: list[Any]) -> str:
    return str(solutions[0]["heartRate_avgST"])


def _top_functions(profiler: cProfile.Profile, count: int) -> dict[str, list[dict[str, Any]]]:
    """The functions with the most own time, and the project's functions with the most cumulative time."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())

    def entry(key: tuple[str, int, str], value: tuple[int, int, float, float, Any]) -> dict[str, Any]:
        file, line, name = key
        return {"function": name if file == "~" else f"{Path(file).parent.name}/{Path(file).name}:{line}({name})",
                "calls": value[1], "tottime_s": round(value[2], 3), "cumtime_s": round(value[3], 3),
                "own_share": round(value[2] / total, 3), "cum_share": round(value[3] / total, 3)}

    own = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:count]
    project = [(k, v) for k, v in stats.items() if "/store/" in k[0] or "/sparql_ext/" in k[0]]
    cumulative = sorted(project, key=lambda item: item[1][3], reverse=True)[:count]
    return {"by_own_time": [entry(k, v) for k, v in own], "by_cumulative_time": [entry(k, v) for k, v in cumulative]}


# -- c. many rules on a real server ---------------------------------------------------------------------------

MANY_REF = "R/HEAD/PT10S"
MANY_PER_WINDOW = 10
MANY_OUTPUT = "many-out"
# part c polls GET /rules this often for the firings done (the run ends at the first poll that sees them all: with
# firings taking ≈ 2 s in all, a one-second poll made the figure a step function of the poll)
POLL_SECONDS = 0.25
POLLED_FIELDS = "firings,waiting,failures"  # not every rule's latency histogram: 1,000 of them took ≈ 20 ms a poll


def many_rule(base: str, stream: str, j: int) -> str:
    return (f"PREFIX prov: <http://www.w3.org/ns/prov#>\n"
            f"CONSTRUCT {{ ?w <urn:bench:avg> ?avg ; <urn:bench:rule> {j} }} WHERE {{\n"
            f"  SERVICE <{base}/streams/{stream}?WINDOWS={MANY_REF}> {{\n"
            "    SELECT (AVG(?v) AS ?avg) (MAX(?t) AS ?end) WHERE { ?g prov:generatedAtTime ?t "
            "GRAPH ?g { ?o <urn:bench:v> ?v } } }\n"
            f"  FILTER (?avg > {10 * j})\n"
            f"  BIND (IRI(CONCAT('urn:bench:window:{stream}:', STR(?end))) AS ?w)\n}}")


def many_plain(stream: str, k: int, j: int) -> str:
    return (f"PREFIX prov: <http://www.w3.org/ns/prov#>\n"
            f"CONSTRUCT {{ ?w <urn:bench:avg> ?avg ; <urn:bench:rule> {j} }} WHERE {{\n"
            "  { SELECT (AVG(?v) AS ?avg) (MAX(?t) AS ?end) WHERE { "
            f"GRAPH <urn:bench:windows:{stream}:{k}> {{ ?g prov:generatedAtTime ?t }} "
            "GRAPH ?g { ?o <urn:bench:v> ?v } } }\n"
            f"  FILTER (?avg > {10 * j})\n"
            f"  BIND (IRI(CONCAT('urn:bench:window:{stream}:', STR(?end))) AS ?w)\n}}")


def many_value(s: int, n: int) -> int:
    return (n * 37 + s * 11) % 101  # 0..100, averaging about 50 over a window


def many_elements(s: int, windows: int) -> Iterator[tuple[str, int, int]]:
    """(graph IRI, time µs, value) of stream s's elements: 10 per 10-second window, 1 s apart."""
    for n in range(windows * MANY_PER_WINDOW):
        yield f"urn:bench:s{s}:e{n}", T0_US + n * 1_000_000, many_value(s, n)


def many_trig(s: int, windows: int) -> str:
    return "".join(
        f'<{g}> <{PROV}> "{stamp(t)}"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n'
        f"<{g}> {{ <urn:bench:o{n}> <urn:bench:v> {v} . }}\n"
        for n, (g, t, v) in enumerate(many_elements(s, windows)))


def many_baseline(streams: int, rules_per_stream: int, windows: int, directory: Path) -> tuple[Measurement, int]:
    """Every (rule, window)'s plain SPARQL 1.1 CONSTRUCT on one on-disk store holding every window."""
    store = Store(str(directory / "many-baseline"))
    prov = NamedNode(PROV)
    xsd_datetime = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
    for s in range(streams):
        quads = []
        for n, (g, t, v) in enumerate(many_elements(s, windows)):
            window = NamedNode(f"urn:bench:windows:s{s:03d}:{n // MANY_PER_WINDOW}")
            quads.append(Quad(NamedNode(g), prov, Literal(stamp(t), datatype=xsd_datetime), window))
            quads.append(Quad(NamedNode(f"urn:bench:o{n}"), NamedNode("urn:bench:v"), Literal(v), NamedNode(g)))
        store.extend(quads)
    store.flush()
    queries = [many_plain(f"s{s:03d}", k, j) for k in range(windows) for s in range(streams)
               for j in range(rules_per_stream)]
    list(store.query(queries[0]))
    outputs = 0
    start = time.perf_counter()
    for query in queries:
        outputs += 1 if any(True for _ in store.query(query)) else 0
    seconds = time.perf_counter() - start
    return Measurement("pyoxigraph: plain rule query per (rule, window)", seconds, len(queries), "firings"), outputs


def many_rules(streams: int, rules_per_stream: int, windows: int, upload_threads: int = 4,
               rules_on: str = "auto") -> dict[str, Any]:
    """Part c: see the module docstring (``rules_on``: the server's ``--rules-on``)."""
    names = [f"s{s:03d}" for s in range(streams)]
    total_rules = streams * rules_per_stream
    expected = total_rules * windows
    with tempfile.TemporaryDirectory(prefix="bench-rules-many-") as tmp:
        baseline, baseline_outputs = many_baseline(streams, rules_per_stream, windows, Path(tmp))
    with running_server(["--threads", str(upload_threads + 16), "--rules-on", rules_on]) as server:
        client = Client(server)
        wait_for_pipeline(server)
        began = time.monotonic()
        for name in names:
            client.ok(client.session.put(f"{server.url}/streams/{name}", timeout=60))
        streams_created = time.monotonic() - began
        rules = [{"name": f"{name}-r{j}", "query": many_rule(server.url, name, j), "output": MANY_OUTPUT}
                 for name in names for j in range(rules_per_stream)]
        body = json.dumps({"rules": rules}).encode()  # made before timing
        began = time.monotonic()
        created = client.ok(client.session.put(f"{server.url}/rules", data=body,
                                               headers={"Content-Type": "application/json"}, timeout=600)).json()
        registration = time.monotonic() - began  # every rule registered, in one request
        if len(created["created"]) != total_rules:
            raise RuntimeError(f"PUT /rules created {len(created['created'])} rules, expected {total_rules}")
        # the second figure: the same rules through PUT /rules/NAME, one request each (replacing them with the same
        # text: the analysis, checks and durable write of a registration, not its sequence registration)
        put_ms: list[float] = []
        for rule in rules:
            put_began = time.perf_counter()
            client.ok(client.session.put(
                f"{server.url}/rules/{rule['name']}", params={"output": MANY_OUTPUT}, data=rule["query"],
                headers={"Content-Type": "application/sparql-query"}, timeout=60))
            put_ms.append((time.perf_counter() - put_began) * 1000)
        one_by_one = sum(put_ms) / 1000
        bodies = [many_trig(s, windows) for s in range(streams)]  # generated before timing
        samples: list[tuple[float, int]] = []
        errors: list[BaseException] = []

        def upload(indices: list[int]) -> None:
            session = requests.Session()
            try:
                for s in indices:
                    url = f"{server.url}/streams/{names[s]}"
                    client.ok(session.post(url, data=bodies[s].encode(), headers={"Content-Type": "application/trig"},
                                           timeout=300))
                    client.ok(session.post(url, params={"punctuation": stamp(T0_US + windows * 10_000_000)},
                                           timeout=300))
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=upload, args=(list(range(t, streams, upload_threads)),))
                   for t in range(upload_threads)]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        uploaded = None
        done = 0
        deadline = start + 900
        while done < expected:
            if uploaded is None and not any(thread.is_alive() for thread in threads):
                uploaded = time.monotonic() - start
            if errors:
                raise errors[0]
            time.sleep(POLL_SECONDS)
            rules = client.ok(client.session.get(f"{server.url}/rules", params={"fields": POLLED_FIELDS},
                                                 timeout=120)).json()
            done = sum(r["firings"] + r["waiting"] + r["failures"] for r in rules)
            samples.append((time.monotonic() - start, done))
            if time.monotonic() > deadline:
                raise TimeoutError(f"{done} of {expected} firings after 900 s:\n{server.log_tail()}")
        for thread in threads:
            thread.join()
        uploaded = uploaded if uploaded is not None else time.monotonic() - start
        rules = client.ok(client.session.get(f"{server.url}/rules", timeout=120)).json()
        status = client.ok(client.session.get(f"{server.url}/status", timeout=60)).json()
    elapsed = samples[-1][0]
    firings = sum(r["firings"] for r in rules)
    outputs = sum(r["outputs"] for r in rules)
    failures = sum(r["failures"] for r in rules)
    latencies = [r["last_latency_ms"] for r in rules if r["last_latency_ms"] is not None]
    if failures or firings != expected:
        raise RuntimeError(f"{firings} firings, {failures} failures, expected {expected} firings")
    if outputs != baseline_outputs:
        raise RuntimeError(f"the rules emitted {outputs} elements, the plain queries {baseline_outputs}")
    low = next(t for t, n in samples if n >= 0.1 * expected)
    high = next(t for t, n in samples if n >= 0.9 * expected)
    low_n = next(n for t, n in samples if t == low)
    high_n = next(n for t, n in samples if t == high)
    steady = (high_n - low_n) / (high - low) if high > low else None
    server_run = Measurement(f"server: {total_rules:,} rules, firings completed", elapsed, firings, "firings")
    return {"streams": streams, "rules_per_stream": rules_per_stream, "rules": total_rules, "rules_on": rules_on,
            "windows_per_stream": windows, "elements_per_window": MANY_PER_WINDOW, "window_ref": MANY_REF,
            "streams_created_seconds": round(streams_created, 2),
            "registration_seconds": round(registration, 2),
            "registration_rules_per_second": round(total_rules / registration, 1),
            "put_rule_seconds": round(one_by_one, 1),
            "put_rule_rules_per_second": round(total_rules / one_by_one, 1),
            "put_rule_ms": {"first_tenth": summarize(put_ms[: len(put_ms) // 10]),
                            "last_tenth": summarize(put_ms[-(len(put_ms) // 10):])},
            "upload_seconds": round(uploaded, 1), "firings": firings, "outputs": outputs,
            "wall_seconds": round(elapsed, 1),
            "firings_per_second": round(firings / elapsed, 1),
            "steady_firings_per_second": None if steady is None else round(steady, 1),
            "last_firing_duration_ms": summarize(latencies),
            "pipeline": {key: status.get("pipeline", {}).get(key) for key in ("batches", "last_batch_seconds")},
            "samples": [[round(t, 1), n] for t, n in samples],
            "measurements": [baseline.to_dict(), server_run.to_dict()],
            "ratio_to_baseline": round(server_run.rate / baseline.rate, 4)}


# -- main -----------------------------------------------------------------------------------------------------

def _print_latency(result: dict[str, Any]) -> None:
    print(f"\na. connected-patient rule, {result['windows']} windows of {PER_WINDOW} heart-rate elements "
          f"({result['alerts']} alert; first {result['warmup']} left out): latency (ms)")
    print(f"  {'':<44} {'n':>4} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for key, label in (("revision_to_output_committed", "window revision -> output element committed"),
                       ("firing_duration", "firing duration (rule status last_latency_ms)"),
                       ("completing_element_to_revision", "completing element -> window revision"),
                       ("completing_element_to_output_committed", "completing element -> output committed")):
        row = result[key]
        print(f"  {label:<44} {row['n']:>4} {row['p50_ms']!s:>8} {row['p90_ms']!s:>8} {row['p99_ms']!s:>8} "
              f"{row['max_ms']!s:>8}")


def _print_cost(result: dict[str, Any]) -> None:
    print(f"\nb. per-window cost, {result['rounds']} alternating rounds over {result['windows']} windows of "
          f"{PER_WINDOW} elements (stream of {result['stream_elements']:,} elements)")
    width = max(len(name) for name in result["rows"])
    print(f"  {'':<{width}} {'median ms':>10} {'p90 ms':>10} {'× disk':>8}")
    for name, row in result["rows"].items():
        print(f"  {name:<{width}} {row['median_ms']:>10} {row['p90_ms']:>10} {row['cost_vs_disk_baseline']:>8}")
    met = "met" if result["target_met"] else "NOT met"
    print(f"  rule / plain pyoxigraph (on disk): {result['cost_ratio']}× (target ≤ {TARGET_COST_RATIO:g}×: {met}); "
          f"in memory: {result['cost_ratio_vs_memory']}×")
    if result["profile"]:
        print(f"  cProfile of {result['profiled_firings']} firings: by own time")
        for row in result["profile"]["by_own_time"][:4]:
            print(f"    {row['own_share']:6.1%}  {row['tottime_s']:7.3f} s  {row['calls']:>6}  {row['function']}")
        print("  by cumulative time (store/, sparql_ext/)")
        for row in result["profile"]["by_cumulative_time"][:10]:
            print(f"    {row['cum_share']:6.1%}  {row['cumtime_s']:7.3f} s  {row['calls']:>6}  {row['function']}")


def _print_many(result: dict[str, Any]) -> None:
    measurements = [Measurement(m["name"], m["seconds"], m["items"], m["unit"]) for m in result["measurements"]]
    print_table(f"c. {result['rules']:,} rules over {result['streams']} streams, {result['windows_per_stream']} "
                "windows each: firings per second", measurements, measurements[0].name)
    print(f"  registration: PUT /rules {result['registration_seconds']} s ({result['registration_rules_per_second']} "
          f"rules/s; target ≥ 1,000); one PUT /rules/NAME per rule (replacing) {result.get('put_rule_seconds')} s "
          f"({result.get('put_rule_rules_per_second')} rules/s); {result['streams']} streams created in "
          f"{result.get('streams_created_seconds')} s")
    print(f"  uploads {result['upload_seconds']} s; {result['firings']:,} firings, {result['outputs']:,} outputs in "
          f"{result['wall_seconds']} s: {result['firings_per_second']} firings/s "
          f"(10–90 %: {result['steady_firings_per_second'] or 'n/a'}/s); last firing duration p50 "
          f"{result['last_firing_duration_ms']['p50_ms']} ms")


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """Per part that ran: (a) ``<name>_latency.png`` (latency summaries) and ``<name>_firings.png`` (firing time per
    window, its distribution); (b) ``<name>_cost.png`` (evaluation cost per firing beside plain pyoxigraph);
    (c) ``<name>_many.png`` (1,000 rules: firings/s beside the baseline), ``<name>_many_firings.png`` (firings over
    time) and ``<name>_registration.png`` (PUT /rules latency as the rule count grows)."""
    drawn: list[Path] = []
    if "latency" in document:
        latency = document["latency"]
        keys = ("completing_element_to_revision", "revision_to_output_committed", "firing_duration",
                "completing_element_to_output_committed")
        drawn.append(summary_plot(f"{name}_latency", f"Connected-patient rule: {latency['windows']} windows of "
                                  f"{latency['elements_per_window']} elements",
                                  {key.replace("_", " "): latency[key] for key in keys if key in latency}))
        firing = latency.get("firing_ms_by_window", [])
        drawn.append(distribution_plot(f"{name}_firings", "Firing time per window (evaluation + output commit)",
                                       {"rule firings": firing}))
    if "evaluation_cost" in document:
        rows = document["evaluation_cost"]["rows"]
        baseline = next(label for label, row in rows.items() if row.get("cost_vs_disk_baseline") == 1.0)
        drawn.append(bar_plot(f"{name}_cost", "Cost of one firing (target: at most "
                              f"{document['evaluation_cost']['target_cost_ratio']:g}× the plain rule on disk)",
                              {q: {label.strip(): row[f"{q}_ms"] for label, row in rows.items()}
                               for q in ("median", "p90")}, reference=baseline.strip(), unit="ms"))
    if "many_rules" in document:
        many = document["many_rules"]
        drawn.append(bar_plot(f"{name}_many", f"{many['rules']:,} rules over {many['streams']} streams: firings per "
                              "second", {"firings": {m["name"]: m["rate"] for m in many["measurements"]}},
                              reference=many["measurements"][0]["name"], unit="firings/s"))
        samples = many.get("samples", [])
        if samples:
            drawn.append(time_series_plot(f"{name}_many_firings", f"{many['rules']:,} rules: firings completed",
                                          [Panel("firings", [Series("completed", [t for t, _ in samples],
                                                                    [n for _, n in samples])])]))
        tenth = many["rules"] // 10
        put = many["put_rule_ms"]
        curves = {f"{q} PUT /rules/NAME": [(tenth / 2, put["first_tenth"][f"{q}_ms"]),
                                      (many["rules"] - tenth / 2, put["last_tenth"][f"{q}_ms"])]
                  for q in ("p50", "p99")}
        drawn.append(scaling_plot(f"{name}_registration", "Replacing rules one request each (first and last tenth; "
                                  "PUT /rules registers them all in one)", curves, xlabel="rules registered",
                                  ylabel="ms"))
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rules", description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8, help="heart-rate windows of 300 elements (a and b)")
    parser.add_argument("--warmup", type=int, default=2, help="windows of part a left out")
    parser.add_argument("--upload-chunk", type=int, default=100,
                        help="part a: heart-rate elements per upload request (≥ 286 can make one group commit of "
                             "≥ 2,000 quads, which the stream writes with bulk_load)")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds of part b")
    parser.add_argument("--commit-every", type=int, default=50,
                        help="part b: commit the stream every N elements (0: one group per window, ≥ 2,000 quads, "
                             "which the stream writes with bulk_load)")
    parser.add_argument("--profile-firings", type=int, default=5, help="firings profiled when b misses its target")
    parser.add_argument("--streams", type=int, default=10, help="streams of part c")
    parser.add_argument("--rules-per-stream", type=int, default=10)
    parser.add_argument("--many-windows", type=int, default=2, help="windows per stream in part c")
    parser.add_argument("--parts", default="abc", help="which parts to run (default: abc)")
    parser.add_argument("--rules-on", choices=PLACEMENTS, default="auto",
                        help="part c: the server's --rules-on (auto: the driver in local mode)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/rules.json again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, BENCH_NAME)
        return 0
    payload: dict[str, Any] = {"parameters": {k: v for k, v in vars(args).items() if k != "plot_only"}}
    if "b" in args.parts:
        payload["evaluation_cost"] = evaluation_cost(args.windows, args.rounds, args.profile_firings,
                                                      args.commit_every)
        _print_cost(payload["evaluation_cost"])
    if "a" in args.parts:
        payload["latency"] = connected_patient_latency(args.windows, args.warmup, args.upload_chunk)
        _print_latency(payload["latency"])
    if "c" in args.parts:
        payload["many_rules"] = many_rules(args.streams, args.rules_per_stream, args.many_windows,
                                           rules_on=args.rules_on)
        _print_many(payload["many_rules"])
    payload.update(_kept_parts(args.parts))
    path = write_json(BENCH_NAME, payload)
    print(f"\nwrote {path}")
    write_plots(plots, payload, BENCH_NAME)
    return 0


def _kept_parts(parts: str) -> dict[str, Any]:
    """The parts of the previous ``rules.json`` that this run did not measure, kept as they were (with the
    environment they were measured in), so ``--parts c`` does not erase parts a and b."""
    path = RESULTS_DIR / f"{BENCH_NAME}.json"
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    kept = {key: previous[key] for part, key in (("a", "latency"), ("b", "evaluation_cost"), ("c", "many_rules"))
            if part not in parts and key in previous}
    if kept:
        earlier = previous.get("kept_from_earlier_runs", {})
        kept["kept_from_earlier_runs"] = {key: earlier.get(key, previous.get("environment")) for key in kept}
    return kept


if __name__ == "__main__":
    raise SystemExit(main())
