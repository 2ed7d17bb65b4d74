"""Rules (issue 4): registry, cycle refusal, HTTP CRUD, and one end-to-end firing on a real server."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient
from pyoxigraph import RdfFormat

from conformance.server import RunningServer, running_server
from engine.context import EvaluationContext
from engine.evaluation import ExtendedEvaluator
from rules.errors import RuleCycle, RuleRejected
from rules.registry import RuleRegistry, rule_file
from store import RevisionedDataset
from store.stream import StreamConfig
from store.streams import StreamCatalog

BASE = "http://localhost"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"


def rule_text(base: str, stream: str, ref: str = "R/2016-06-20T10:00:00Z/PT05M") -> str:
    return (
        f"CONSTRUCT {{ GRAPH ?e {{ ?e <http://ex/avg> ?avg }} ?e <{PROV}> ?t }} WHERE {{ "
        f"SERVICE <{base}/streams/{stream}?WINDOWS={ref}> {{ "
        f"SELECT (AVG(?v) AS ?avg) (MAX(?time) AS ?t) WHERE {{ ?g <{PROV}> ?time "
        "GRAPH ?g { ?o <http://ex/hr> ?v } } } "
        "FILTER(?avg > 100) BIND(IRI(CONCAT('http://ex/alert/', STR(?t))) AS ?e) }")


@pytest.fixture
def registry(tmp_path: Path) -> RuleRegistry:
    catalog = StreamCatalog(tmp_path / "streams", in_memory=True)
    for name in ("a", "b", "c"):
        catalog.put(StreamConfig(name))
    dataset = RevisionedDataset(tmp_path / "data", in_memory=True)
    return RuleRegistry(tmp_path / "rules", ExtendedEvaluator(EvaluationContext.for_requests(dataset, catalog, [])))


def _add(dataset: RevisionedDataset, turtle: str) -> None:
    dataset.add(dataset.stage(io.BytesIO(turtle.encode()), RdfFormat.TURTLE))


def _delete_all(dataset: RevisionedDataset) -> None:
    dataset.update("DELETE WHERE { ?s ?p ?o }")


def test_registry_analyses_inputs_registers_sequences_and_persists(registry: RuleRegistry, tmp_path: Path) -> None:
    rule, created = registry.put("r1", rule_text(BASE, "a"), f"{BASE}/streams/out", BASE)
    assert created and rule.output == "out"
    assert [(i.stream, i.ref) for i in rule.inputs] == [("a", "R/2016-06-20T10:00:00Z/PT5M")]
    assert registry.catalog.find("out") is not None  # created
    assert registry.catalog.get("a").windows.sequence(rule.inputs[0].sequence) is not None
    again = RuleRegistry(tmp_path / "rules", registry.evaluator)
    assert again.get("r1").text == rule.text and again.get("r1").inputs == rule.inputs
    assert registry.reading("a", rule.inputs[0].sequence) == [rule]


def test_windows_clause_inside_service_is_an_input(registry: RuleRegistry) -> None:
    text = (f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{BASE}/streams/b> {{ "
            "WINDOWS R/HEAD/PT01M { GRAPH ?g { ?s ?p ?o } } } }")
    rule, _ = registry.put("w", text, "out", BASE)
    assert [(i.stream, i.ref) for i in rule.inputs] == [("b", "R/HEAD/PT1M")]


def test_service_var_bound_without_data_is_discovered_and_no_windowed_input_is_refused(
        registry: RuleRegistry) -> None:
    variable = ("CONSTRUCT { ?s ?p ?o } WHERE { "
                "BIND(IRI(CONCAT('http://localhost/streams/a', '?WINDOWS=R/HEAD/PT01M')) AS ?svc) "
                "SERVICE ?svc { ?s ?p ?o } }")
    rule, _ = registry.put("v", variable, "out", BASE)
    assert [(i.stream, i.ref) for i in rule.inputs] == [("a", "R/HEAD/PT1M")] and rule.discovers
    with pytest.raises(RuleRejected, match="never fire"):
        registry.put("n", "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", "out", BASE)
    with pytest.raises(RuleRejected, match="depends on the result of another"):
        registry.put("d", "CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <http://localhost/sparql> { ?x <urn:feed> ?svc } "
                          "SERVICE ?svc { ?s ?p ?o } }", "out", BASE)
    with pytest.raises(RuleRejected, match="top level"):
        registry.put("t", "CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <http://localhost/streams/a?WINDOWS=R/HEAD/PT01M> "
                          "{ ?x <urn:feed> ?svc SERVICE ?svc { ?s ?p ?o } } }", "out", BASE)
    with pytest.raises(RuleRejected):
        registry.put("x", rule_text(BASE, "a"), "not a name!", BASE)


DISCOVERING = """PREFIX lr: <http://localhost/local-records#>
CONSTRUCT { ?s ?p ?o } WHERE {
  ?sensor lr:hasStreamID ?id ; lr:kind "hr" .
  FILTER (?max > 3)
  BIND (IRI(CONCAT(STR(?id), '?WINDOWS=R/HEAD/PT01M')) AS ?svc)
  SERVICE ?svc { SELECT (MAX(?v) AS ?max) WHERE { GRAPH ?g { ?s ?p ?v } } }
}"""


def test_service_var_inputs_follow_the_dataset(registry: RuleRegistry) -> None:
    dataset = registry.evaluator.dataset
    rule, _ = registry.put("disc", DISCOVERING, "out", BASE)
    assert rule.inputs == [] and rule.discovers  # no sensor yet: accepted, fires once data names a stream
    _add(dataset, '<http://localhost/s/1> <http://localhost/local-records#hasStreamID> <http://localhost/streams/a> ;'
                  ' <http://localhost/local-records#kind> "hr" .\n'
                  '<http://localhost/s/2> <http://localhost/local-records#hasStreamID> <http://localhost/streams/b> ;'
                  ' <http://localhost/local-records#kind> "activity" .\n'
                  '<http://localhost/s/3> <http://localhost/local-records#hasStreamID> <http://elsewhere/streams/x> ;'
                  ' <http://localhost/local-records#kind> "hr" .\n'
                  '<http://localhost/s/4> <http://localhost/local-records#hasStreamID> <http://localhost/streams/zz> ;'
                  ' <http://localhost/local-records#kind> "hr" .\n')
    # s/2 is not an hr sensor, s/3 is not this server's, stream zz does not exist (yet)
    assert [(i.stream, i.ref) for i in registry.get("disc").inputs] == [("a", "R/HEAD/PT1M")]
    sequence = registry.get("disc").inputs[0].sequence
    assert registry.catalog.get("a").windows.sequence(sequence) is not None
    assert registry.reading("a", sequence) == [registry.get("disc")]
    registry.catalog.put(StreamConfig("zz"))  # creating the stream discovers it
    assert [i.stream for i in registry.get("disc").inputs] == ["a", "zz"]
    _delete_all(dataset)
    assert registry.get("disc").inputs == []
    again = RuleRegistry(registry.directory, registry.evaluator)
    assert again.get("disc").discovers and again.get("disc").inputs == []


def test_static_prefix_is_cached_per_dataset_revision(registry: RuleRegistry) -> None:
    dataset, cache = registry.evaluator.dataset, registry.evaluator.cache
    _add(dataset, '<http://localhost/s/1> <http://localhost/local-records#hasStreamID> <http://localhost/streams/a> ;'
                  ' <http://localhost/local-records#kind> "hr" .\n')
    before = cache.status()
    registry.put("disc", DISCOVERING, "out", BASE)
    registry.put("disc", DISCOVERING, "out", BASE)  # same prefix, same revision: from the cache
    after = cache.status()
    assert (after["misses"] - before["misses"], after["hits"] - before["hits"]) == (1, 1)
    _add(dataset, '<http://localhost/s/9> <http://localhost/local-records#kind> "none" .\n')  # new revision
    assert cache.status()["misses"] == after["misses"] + 1  # re-discovery after the commit: evaluated again


def test_cycles_are_refused(registry: RuleRegistry) -> None:
    with pytest.raises(RuleCycle):
        registry.put("self", rule_text(BASE, "a"), "a", BASE)
    registry.put("ab", rule_text(BASE, "a"), "b", BASE)
    registry.put("bc", rule_text(BASE, "b"), "c", BASE)
    with pytest.raises(RuleCycle):
        registry.put("ca", rule_text(BASE, "c"), "a", BASE)
    registry.put("ca", rule_text(BASE, "c"), "d", BASE)  # no cycle
    registry.put("ab", rule_text(BASE, "a"), "e", BASE)  # replacing a rule drops its old edge
    registry.put("ca2", rule_text(BASE, "c"), "a", BASE)


def test_rule_file_header() -> None:
    assert rule_file("# output: <http://x/streams/alerts>\nCONSTRUCT {} WHERE {}").output == "http://x/streams/alerts"
    assert rule_file("# output: alerts\n").output == "alerts"
    assert rule_file("CONSTRUCT {} WHERE {}").output is None
    declared = rule_file("# a comment\n# output: out\n# report: non-empty\n# operator: istream\nCONSTRUCT {} {}\n"
                         "# output: not-a-header")
    assert (declared.output, declared.report, declared.operator) == ("out", "non-empty", "istream")


def test_report_policy_and_operator_are_validated_and_kept(registry: RuleRegistry) -> None:
    rule, _ = registry.put("r", rule_text(BASE, "a"), "out", BASE, "non-empty", "istream")
    again = RuleRegistry(registry.directory, registry.evaluator).get("r")
    assert (again.report, again.operator) == ("non-empty", "istream")
    with pytest.raises(RuleRejected, match="sometimes"):
        registry.put("bad", rule_text(BASE, "a"), "out", BASE, "sometimes", None)
    with pytest.raises(RuleRejected, match="upstream"):
        registry.put("bad", rule_text(BASE, "a"), "out", BASE, None, "upstream")


def test_http_crud(client: FlaskClient) -> None:
    assert client.put("/streams/hr").status_code in (200, 201, 204)
    headers = {"Content-Type": "application/sparql-query"}
    text = rule_text(BASE, "hr")
    response = client.put("/rules/alert?output=alerts", data=text, headers=headers)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert client.put("/rules/alert?output=alerts", data=text, headers=headers).status_code == 204
    assert client.get("/rules/alert").get_data(as_text=True) == text
    status = client.get("/rules/alert", headers={"Accept": "application/json"}).get_json()
    assert status["output"] == "alerts" and status["firings"] == 0 and status["last_error"] is None
    listed = client.get("/rules").get_json()
    assert [r["name"] for r in listed] == ["alert"]
    assert client.get("/rules?fields=firings,failures").get_json() == [{"name": "alert", "firings": 0, "failures": 0}]
    unknown = client.get("/rules?fields=firings,speed")
    assert unknown.status_code == 400 and "'speed'" in unknown.get_data(as_text=True)
    assert client.get("/streams/alerts").status_code == 200
    cyclic = client.put("/rules/loop?output=hr", data=text, headers=headers)
    assert cyclic.status_code == 409
    bad = client.put("/rules/bad?output=x", data="CONSTRUCT { ?s ?p ?o } WHERE { SERVICE ?s { ?s ?p ?o } }",
                     headers=headers)
    assert bad.status_code == 400
    assert client.put("/rules/nooutput", data=text, headers=headers).status_code == 400
    assert client.delete("/rules/alert").status_code == 204
    assert client.get("/rules/alert").status_code == 404
    assert client.get("/rules").get_json() == []


def _trig(minute: str, value: int) -> str:
    stamp = f'"2016-06-20T10:{minute}:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
    return (f"<http://ex/e{minute}> <{PROV}> {stamp} .\n"
            f"<http://ex/e{minute}> {{ <http://ex/o{minute}> <http://ex/hr> {value} . }}\n")


@pytest.mark.jvm
def test_end_to_end_alert(spark_server: RunningServer) -> None:
    # 127.0.0.1:9 is allowed so that the broken rule below registers and fails at run time (nothing listens there)
    server = spark_server  # the shared server of this test worker (tests/conftest.py)
    base = server.url
    trig = {"Content-Type": "application/trig"}
    assert requests.put(f"{base}/streams/e2e-hr", timeout=10).ok
    response = requests.put(f"{base}/rules/e2e-alert", params={"output": "e2e-alerts"}, data=rule_text(base, "e2e-hr"),
                            headers={"Content-Type": "application/sparql-query"}, timeout=10)
    assert response.status_code == 201, response.text
    # a deterministic output (the window's element count) under IStream: both windows hold 2 elements, so the
    # second firing has nothing new to report (RStream would append 2 elements, IStream 1)
    counting = (f"CONSTRUCT {{ <urn:count> <urn:n> ?n }} WHERE {{ SERVICE <{base}/streams/e2e-hr?WINDOWS="
                "R/2016-06-20T10:00:00Z/PT05M> { SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } } }")
    response = requests.put(f"{base}/rules/e2e-counting", params={"output": "e2e-counts", "operator": "istream"},
                            data=counting, headers={"Content-Type": "application/sparql-query"}, timeout=10)
    assert response.status_code == 201, response.text
    # a rule that fails at run time (its second SERVICE is unreachable): reported, the other keeps firing
    broken = rule_text(base, "e2e-hr").replace("FILTER(?avg > 100)",
                                           "SERVICE <http://127.0.0.1:9/sparql> { ?x ?y ?z } FILTER(?avg > 100)")
    response = requests.put(f"{base}/rules/e2e-broken", params={"output": "e2e-nothing"}, data=broken,
                            headers={"Content-Type": "application/sparql-query"}, timeout=10)
    assert response.status_code == 201, response.text
    body = _trig("00", 120) + _trig("01", 130) + _trig("05", 80) + _trig("06", 90)
    body += f"<http://ex/p> <{PROV}> \"2016-06-20T10:10:00Z\"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n"
    response = requests.post(f"{base}/streams/e2e-hr", data=body.encode(), headers=trig, timeout=10)
    assert response.ok, response.text
    deadline = time.monotonic() + 60
    status: dict = {}
    while time.monotonic() < deadline:
        status = requests.get(f"{base}/rules/e2e-alert", headers={"Accept": "application/json"}, timeout=10).json()
        if status["firings"] >= 2 or status["failures"]:
            break
        time.sleep(0.5)
    assert status["firings"] == 2 and status["failures"] == 0, (status, server.log_tail())
    assert status["outputs"] == 1
    deadline = time.monotonic() + 30
    while True:  # the rules fire one after the other: the others may still be on their second window
        listed = {r["name"]: r for r in requests.get(f"{base}/rules", timeout=10).json()
                  if r["name"].startswith("e2e-")}
        if all(r["firings"] + r["failures"] >= 2 for r in listed.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    counting_status = listed["e2e-counting"]
    assert (counting_status["firings"], counting_status["outputs"], counting_status["operator"]) == (
        2, 1, "istream")
    broken_status = requests.get(f"{base}/rules/e2e-broken", headers={"Accept": "application/json"}, timeout=10).json()
    assert broken_status["failures"] == 2 and broken_status["firings"] == 0 and broken_status["outputs"] == 0
    assert "http://127.0.0.1:9/sparql" in broken_status["last_error"]
    assert broken_status["last_window"].startswith("e2e-hr window 1 (2016-06-20T10:05:00Z")
    assert len(broken_status["log"]) == 2
    assert "rule e2e-broken failed on e2e-hr window 0" in server.log_tail()
    query = ("SELECT ?g ?t ?avg WHERE { ?g <http://www.w3.org/ns/prov#generatedAtTime> ?t "
             "GRAPH ?g { ?g <http://ex/avg> ?avg } }")
    response = requests.post(f"{base}/streams/e2e-alerts", data=query, timeout=10, headers={
        "Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"})
    assert response.ok, response.text
    rows = response.json()["results"]["bindings"]
    assert len(rows) == 1, rows
    assert rows[0]["t"]["value"].startswith("2016-06-20T10:01:00")
    assert float(rows[0]["avg"]["value"]) == 125


def test_rules_directory_loads_in_any_order_and_reports_bad_files(registry: RuleRegistry, tmp_path: Path) -> None:
    rules = tmp_path / "rules-dir"
    rules.mkdir()
    # "a-chained" reads the output of "b-first": alphabetical order alone would fail it
    (rules / "a-chained.rq").write_text("# output: final\n" + rule_text(BASE, "middle"))
    (rules / "b-first.rq").write_text("# output: middle\n" + rule_text(BASE, "a"))
    (rules / "c-bad.rq").write_text(rule_text(BASE, "a"))  # no output line
    errors = registry.load_directory(rules, BASE)
    assert registry.names() == ["a-chained", "b-first"]
    assert len(errors) == 1 and "c-bad.rq" in errors[0] and "# output:" in errors[0]
    with pytest.raises(RuleRejected, match="nowhere, which do not exist"):
        registry.put("lost", rule_text(BASE, "nowhere"), "out", BASE)


def test_serve_loads_the_rules_directory_at_start_up() -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "connected-patient" / "rules"
    with running_server(["--no-pipeline", "--rules", str(example)]) as server:
        listed = requests.get(f"{server.url}/rules", timeout=10).json()
        assert [(r["name"], r["output"]) for r in listed] == [("care-team-page", "pages"),
                                                              ("heart-rate-alert", "alerts")]
        care = next(r for r in listed if r["name"] == "care-team-page")
        assert care["inputs"] == [{"stream": "alerts", "windows": "R/HEAD/HEAD/1"}]  # <streams/alerts?…> resolved
        alert = next(r for r in listed if r["name"] == "heart-rate-alert")
        assert alert["discovers_inputs"] and alert["inputs"] == []  # no base data yet: nothing to watch
        assert "rule not loaded" not in server.log_tail()
