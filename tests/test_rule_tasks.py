"""Rule firings evaluated in executors (rules/tasks.py), without Spark: which rules may go, and that an
executor's evaluation over the copied window and static data gives what the driver's gives. The Spark side (a job
on a real standalone cluster) is in tests/test_cluster.py.

The data of tests/test_evaluation.py: stream hr holds a 10:00 → 70, b 10:03 → 80, c 10:06 → 90; the firing window
is {a, b}; the dataset says the threshold is 75. Worked by hand: only b (80) is above it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from pyoxigraph import BlankNode, Literal, NamedNode, Quad

from concentrator.compose import http_app
from engine.cache import StaticResults
from engine.context import QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.results import ConstructedQuads, ConstructedTriples, Solutions
from engine.selection import SelectedWindow
from protocol import ServerConfig
from protocol.services import services_of
from rules.tasks import (
    UNREADABLE,
    ExecutorRuleFailed,
    RuleTask,
    StaysInDriver,
    WindowData,
    evaluate,
    evaluate_all,
    firing_task,
    ineligible_reason,
    placement_of,
    static_data,
    window_chunks,
)
from tests.test_connected_patient import EXAMPLE, LR, OBS, STREAMS, _rule, load_generator

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"
HOST = "http://localhost"
WINDOWED = f"{HOST}/streams/hr?WINDOWS=R/HEAD/PT5M"
HIGH = f"""CONSTRUCT {{ ?o <urn:above> ?limit }}
WHERE {{ <urn:hr> <urn:threshold> ?limit .
         SERVICE <{WINDOWED}> {{ SELECT ?o ?hr WHERE {{ GRAPH ?g {{ ?o <http://ex/hr> ?hr }} }} }}
         FILTER(?hr > ?limit) }}"""


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True))
    client: FlaskClient = app.test_client()
    r = client.post("/sparql", data="INSERT DATA { <urn:hr> <urn:threshold> 75 }",
                    headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204, r.text
    assert client.put("/streams/hr").status_code == 201
    for name, minute, hr in (("a", 0, 70), ("b", 3, 80), ("c", 6, 90)):
        body = (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"^^<{XSD}dateTime> .\n'
                f'<http://ex/{name}> {{ <http://ex/{name}obs> <http://ex/hr> {hr} . }}\n')
        r = client.post("/streams/hr", data=body, headers={"Content-Type": "application/trig"})
        assert r.status_code == 200, r.text
    return app


def firing(app: Flask) -> ExtendedEvaluator:
    """The evaluator of a firing of hr's window {a, b} (ordinals 1 and 2)."""
    evaluator: ExtendedEvaluator = services_of(app).evaluator.with_local_bases([HOST])
    return evaluator.for_rule([HOST], {("hr", "R/HEAD/PT5M"): SelectedWindow([1, 2], commit=1_000_000)})


def test_window_and_static_rules_may_go_to_executors(app: Flask) -> None:
    assert ineligible_reason(HIGH, HOST, firing(app)) is None


@pytest.mark.parametrize(("rule", "reason"), [
    ("CONSTRUCT { ?s ?p ?o } WHERE { ?x <urn:feed> ?feed SERVICE ?feed { REVISION 1 { ?s ?p ?o } } }",
     "SERVICE ?feed has extension clauses inside"),
    ("CONSTRUCT { ?s ?p ?o } WHERE { REVISION 1 { ?s ?p ?o } }", "REVISION clause"),
    ("CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <http://example.org/sparql> { ?s ?p ?o } }", "not one of this server"),
    (f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{WINDOWED}> {{ REVISION 1 {{ ?s ?p ?o }} }} }}",
     "extension clauses inside"),
])
def test_rules_needing_the_driver_say_why(app: Flask, rule: str, reason: str) -> None:
    found = ineligible_reason(rule, HOST, firing(app))
    assert found is not None and reason in found


def test_placement() -> None:
    assert placement_of("auto", "spark://10.0.0.1:7077", None) == "executors"
    assert placement_of("auto", "local[2]", None).startswith("driver: local Spark")
    assert placement_of("executors", "local[2]", None) == "executors"
    assert placement_of("driver", "spark://10.0.0.1:7077", None) == "driver: --rules-on driver"
    assert placement_of("executors", "spark://h:7077", "SERVICE ?feed (…)") == "driver: SERVICE ?feed (…)"


@pytest.mark.parametrize("reads_log", [False, True], ids=["content", "log-runs"])
def test_executor_evaluation_equals_the_drivers(app: Flask, reads_log: bool) -> None:
    evaluator = firing(app)
    driver = evaluator.query(HIGH, QueryTarget(base_iri=HOST))
    static = static_data(evaluator)
    assert static is not None
    task = firing_task(7, HIGH, HOST, evaluator, reads_log)
    [data] = task.windows.values()
    if reads_log:  # where elements a and b are in the log: no content moves; one run (they are neighbours)
        assert data.content == b"" and len(data.runs) == 1 and data.runs[0][0].endswith(".dat")
    else:
        assert data.content.count(b"<http://ex/hr>") == 2 and data.runs == ()
    result = evaluate(task, static)
    assert (result.position, result.kind) == (7, "triples")
    executor = result.construction()
    assert isinstance(executor, ConstructedTriples) and isinstance(driver, ConstructedTriples)
    limit = Literal("75", datatype=NamedNode(f"{XSD}integer"))
    expected = [(NamedNode("http://ex/bobs"), NamedNode("urn:above"), limit)]
    assert [(t.subject, t.predicate, t.object) for t in executor] == expected
    assert sorted(map(str, executor)) == sorted(map(str, driver))


def test_executor_quad_templates_and_then(app: Flask) -> None:
    # THEN() inside the SERVICE is the firing window's commit time (1 s after the epoch, given in the pin)
    rule = f"""CONSTRUCT {{ GRAPH ?o {{ ?o <urn:seen> ?then }} }}
    WHERE {{ SERVICE <{WINDOWED}> {{ SELECT ?o (<urn:x-concentrator:fn:then>() AS ?then)
                                     WHERE {{ GRAPH ?g {{ ?o <http://ex/hr> ?hr }} }} }} }}"""
    evaluator = firing(app)
    static = static_data(evaluator)
    assert static is not None
    result = evaluate(firing_task(0, rule, HOST, evaluator), static).construction()
    assert isinstance(result, ConstructedQuads)
    then = Literal("1970-01-01T00:00:01Z", datatype=NamedNode(f"{XSD}dateTime"))
    assert sorted(result, key=str) == sorted(
        [Quad(NamedNode(f"http://ex/{n}obs"), NamedNode("urn:seen"), then, NamedNode(f"http://ex/{n}obs"))
         for n in ("a", "b")], key=str)


FEED = """CONSTRUCT { ?p <urn:high> ?o }
WHERE { ?p <urn:stream> ?feed . <urn:hr> <urn:threshold> ?limit .
        SERVICE ?feed { SELECT ?o ?hr WHERE { GRAPH ?g { ?o <http://ex/hr> ?hr } } }
        FILTER(?hr > ?limit) }"""


def _insert(app: Flask, triples: str) -> None:
    r = app.test_client().post("/sparql", data=f"INSERT DATA {{ {triples} }}",
                               headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204, r.text


@pytest.mark.parametrize("reads_log", [False, True], ids=["content", "log-runs"])
def test_a_service_var_rule_travels_with_the_targets_the_driver_resolved(app: Flask, reads_log: bool) -> None:
    # p1 is fed by the firing window (hr's 5-minute windows), p2 by hr's 10-minute ones: the firing reads p1's only,
    # as the driver's evaluation of a firing does; by hand, b (80 > 75) is p1's one reading above the threshold
    _insert(app, f"<urn:p1> <urn:stream> <{WINDOWED}> . "
                 f"<urn:p2> <urn:stream> <{HOST}/streams/hr?WINDOWS=R/HEAD/PT10M> .")
    evaluator = firing(app)
    assert ineligible_reason(FEED, HOST, evaluator) is None
    task = firing_task(5, FEED, HOST, evaluator, reads_log)
    assert task.targets == {0: (WINDOWED,)} and list(task.windows) == [WINDOWED]
    if reads_log:
        assert task.windows[WINDOWED].content == b""  # where a and b are in the log: no content moves
    static = static_data(evaluator)
    assert static is not None
    result = evaluate(task, static)
    assert (result.position, result.kind) == (5, "triples"), result.payload
    executor = result.construction()
    assert [(str(t.subject), str(t.predicate), str(t.object)) for t in executor] == \
        [("<urn:p1>", "<urn:high>", "<http://ex/bobs>")]
    driver = evaluator.query(FEED, QueryTarget(base_iri=HOST))
    assert sorted(map(str, executor)) == sorted(map(str, driver))  # type: ignore[arg-type]


def test_a_service_var_bound_to_another_endpoint_keeps_the_firing_in_the_driver(app: Flask) -> None:
    _insert(app, "<urn:p3> <urn:stream> <http://example.org/streams/x?WINDOWS=R/HEAD/PT5M> .")
    with pytest.raises(StaysInDriver, match="example.org"):
        firing_task(0, FEED, HOST, firing(app))
    _insert(app, '<urn:p4> <urn:named> "not an IRI" .')
    with pytest.raises(StaysInDriver, match="not an IRI"):
        firing_task(0, FEED.replace("<urn:stream>", "<urn:named>"), HOST, firing(app))


def test_an_executor_error_comes_back_to_the_driver(app: Flask) -> None:
    evaluator = firing(app)
    static = static_data(evaluator)
    assert static is not None
    rule = f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{WINDOWED}> {{ ?s ?p ?o FILTER(<urn:no-such-fn>(?o)) }} }}"
    result = evaluate(firing_task(3, rule, HOST, evaluator), static)
    assert result.kind == "error"
    with pytest.raises(ExecutorRuleFailed, match="urn:no-such-fn"):
        result.construction()


def test_rules_over_one_window_load_it_once_in_an_executor(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluator = firing(app)
    static = static_data(evaluator)
    assert static is not None
    rules = [HIGH, HIGH.replace("<urn:above>", "<urn:over>"), HIGH.replace("FILTER(?hr > ?limit)", "")]
    tasks = [firing_task(n, rule, HOST, evaluator, True) for n, rule in enumerate(rules)]
    alone = [evaluate(task, static) for task in tasks]
    shared: StaticResults[Solutions] = StaticResults()
    [evaluate(task, static, None, shared) for task in tasks]
    # their common SERVICE SELECT is evaluated once (under the window's elements, as the driver caches it)
    assert (shared.misses, shared.hits) == (1, 2)
    reads: list[WindowData] = []
    real_read = WindowData.read

    def counted(data: WindowData) -> bytes:
        reads.append(data)
        return real_read(data)

    monkeypatch.setattr(WindowData, "read", counted)
    [chunk] = window_chunks(tasks, 1)
    together = evaluate_all(chunk, static)
    assert len(reads) == 1  # the three rules read one window: read and loaded once
    assert [(r.position, r.kind, sorted(r.payload.splitlines())) for r in together] == \
        [(r.position, r.kind, sorted(r.payload.splitlines())) for r in alone]
    assert [len(r.payload.splitlines()) for r in together] == [1, 1, 2]  # by hand: b above 75; a and b unfiltered


def test_a_window_the_executor_cannot_read_is_not_the_rules_failure(app: Flask, tmp_path: Path) -> None:
    evaluator = firing(app)
    static = static_data(evaluator)
    assert static is not None
    gone = WindowData(b"", None, ((str(tmp_path / "expired.dat"), 0, 10),))  # e.g. a segment retention removed
    result = evaluate(RuleTask(4, HIGH, HOST, {WINDOWED: gone}), static)
    assert (result.position, result.kind) == (4, UNREADABLE)  # the driver evaluates this firing itself
    assert b"expired.dat" in result.payload


def test_values_reach_the_executor_and_come_back_exactly_as_the_driver_gives_them(tmp_path: Path) -> None:
    # (uploaded, what a query over the window returns): pyoxigraph's stores give typed literals of XSD numeric types in
    # their canonical form and language tags in lower case (docs/streams.md, "Values as sent"); everything else
    # comes back as uploaded, the offset of a dateTime included
    values = [('"0075"^^<http://www.w3.org/2001/XMLSchema#integer>', '"75"^^<http://www.w3.org/2001/XMLSchema#integer>'),
              ('"1.50E0"^^<http://www.w3.org/2001/XMLSchema#double>', '"1.5"^^<http://www.w3.org/2001/XMLSchema#double>'),
              ('"2016-06-20T12:00:00+02:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>',
               '"2016-06-20T12:00:00+02:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>'),
              ('"a\\nb \\u00e9"@en-GB', '"a\\nb \u00e9"@en-gb'),
              ('" spaced "', '" spaced "'), ('"x"^^<urn:my-type>', '"x"^^<urn:my-type>')]
    app = http_app(ServerConfig(tmp_path / "data"))
    client = app.test_client()
    assert client.put("/streams/hr").status_code == 201
    body = "".join(f'<http://ex/e{n}> <{PROV}> "2016-06-20T10:0{n}:00Z"^^<{XSD}dateTime> .\n'
                   f"<http://ex/e{n}> {{ <http://ex/o{n}> <urn:v> {sent} . }}\n" for n, (sent, _) in enumerate(values))
    body += (f'<http://ex/e9> <{PROV}> "2016-06-20T10:09:00Z"^^<{XSD}dateTime> .\n'
             "<http://ex/e9> { <http://ex/o9> <urn:v> _:b1 . }\n")
    assert client.post("/streams/hr", data=body, headers={"Content-Type": "application/trig"}).status_code == 200
    rule = f"CONSTRUCT {{ ?o <urn:v> ?v }} WHERE {{ SERVICE <{WINDOWED}> {{ GRAPH ?g {{ ?o <urn:v> ?v }} }} }}"
    evaluator = services_of(app).evaluator.with_local_bases([HOST]).for_rule(
        [HOST], {("hr", "R/HEAD/PT5M"): SelectedWindow(list(range(1, len(values) + 2)), commit=1)})
    static = static_data(evaluator)
    assert static is not None
    task = firing_task(0, rule, HOST, evaluator, True)
    assert all(data.content == b"" for data in task.windows.values())  # read by the executor from the log's files
    executor = evaluate(task, static).construction()
    driver = evaluator.query(rule, QueryTarget(base_iri=HOST))
    got = {str(t.subject): t.object for t in executor}  # type: ignore[union-attr]
    assert {s: str(o) for s, o in got.items() if not isinstance(o, BlankNode)} == {
        f"<http://ex/o{n}>": returned for n, (_, returned) in enumerate(values)}
    assert isinstance(got["<http://ex/o9>"], BlankNode)
    # the same as the driver's (a blank node is labelled afresh in each window store: compared apart)
    assert sorted(str(t) for t in executor if not isinstance(t.object, BlankNode)) == \
        sorted(str(t) for t in driver if not isinstance(t.object, BlankNode))  # type: ignore[union-attr]
    services_of(app).close()


def test_the_connected_patient_alert_travels_with_both_service_vars(tmp_path: Path) -> None:
    """The seed's rule (two SERVICE ?var: a one-shot activity window, the firing heart-rate window) as a task: the
    same alert as the driver's, the connected-patient worked case by hand (tests/test_connected_patient.py): pat2's
    window {125, 135} averages 130 > 123.9."""
    generate = load_generator()
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True))
    client = app.test_client()
    r = client.post("/store", data=(EXAMPLE / "base.trig").read_bytes(), headers={"Content-Type": "application/trig"})
    assert r.status_code in (200, 201, 204), r.text
    for name, alias in STREAMS.items():
        assert client.put(f"/streams/{name}", query_string={"alias": alias}).status_code == 201
    start, minute = datetime(2016, 6, 20, 10, tzinfo=UTC), timedelta(minutes=1)
    for stream, kind, readings in (("activity-pat2", "activity", ((0, 5), (2, 4))),
                                   ("hr-pat2", "heart-rate", ((0, 125), (2, 135), (5, 115)))):
        body = "".join(generate.element(kind, start + k * minute, v) for k, v in readings)
        assert client.post(f"/streams/{stream}", data=body, headers={"Content-Type": "application/trig"}).status_code \
            == 200
    rule = _rule("heart-rate-alert")
    evaluator = services_of(app).evaluator.with_local_bases([HOST]).for_rule(
        [HOST], {("hr-pat2", "R/HEAD/PT5M"): SelectedWindow([1, 2], commit=1_000_000)})
    assert ineligible_reason(rule, HOST, evaluator) is None
    task = firing_task(0, rule, HOST, evaluator, True)
    # the heart-rate part reads the firing window only; no window content moves
    assert task.targets[1] == (f"{STREAMS['hr-pat2']}?WINDOWS=R/HEAD/PT05M",)
    assert task.targets[0] == (f"{STREAMS['activity-pat2']}?WINDOWS=HEAD/-PT05M",)  # pat2's only, not pat3's
    assert all(data.content == b"" for data in task.windows.values())
    static = static_data(evaluator)
    assert static is not None
    executor = evaluate(task, static).construction()
    driver = evaluator.query(rule, QueryTarget(base_iri=HOST))

    def values(quads: object) -> list[tuple[str, str]]:  # UUID() and blank nodes differ in each evaluation
        return sorted((str(q.predicate), str(q.object)) for q in quads  # type: ignore[attr-defined]
                      if not isinstance(q.object, BlankNode) and not str(q.object).startswith("<urn:uuid:"))

    assert values(executor) == values(driver)
    found = dict(values(executor))
    assert found[f"<{OBS}subject>"] == f"<{LR}pat2>"
    assert found[f"<{LR}threshold>"].startswith('"123.9')
    assert found[f"<{OBS}effectiveDateTime>"].startswith('"2016-06-20T10:02:00')
    services_of(app).close()
