"""Evaluating extended SPARQL (docs/extended-sparql.md): REVISION, WINDOWS, SERVICE, THEN() and quad templates.

Tiny datasets, expected results worked out by hand in comments."""

from __future__ import annotations

from pathlib import Path

import pyoxigraph
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from concentrator.compose import http_app
from conformance.server import running_server
from engine.context import EvaluationContext, QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.results import ConstructedQuads
from engine.selection import SelectedWindow
from protocol import ServerConfig
from protocol.services import services_of
from sparql_ext import QuerySyntaxError
from sparql_ext.windowing import format_micros
from store import RevisionedDataset
from store.stream import Stream
from store.streams import StreamCatalog

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
ALIAS = "urn:uuid:6f1c0a4e-0000-4000-8000-0000000000aa"
HOST = "http://localhost"  # the Flask test client's host_url
WINDOW_QUERY = f"?g <{PROV}> ?t GRAPH ?g {{ ?o <http://ex/hr> ?hr }}"


def element(name: str, minute: int, hr: int) -> str:
    """One TriG element <http://ex/NAME> at 10:MM, holding a blank node with a heart rate."""
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ _:{name}obs <http://ex/hr> {hr} . }}\n')


def upload(client: FlaskClient, name: str, body: str) -> None:
    r = client.post(f"/streams/{name}", data=body, headers={"Content-Type": "application/trig"})
    assert r.status_code == 200, r.text


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return http_app(ServerConfig(tmp_path / "data", in_memory=True))


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """Base data over three revisions, and stream hr: a 10:00 → 70, b 10:03 → 80, c 10:06 → 90 (one
    upload each, so each element has its own commit time)."""
    c = app.test_client()
    for update in ('INSERT DATA { <urn:a> <urn:status> "draft" }',
                   'DELETE DATA { <urn:a> <urn:status> "draft" } ; INSERT DATA { <urn:a> <urn:status> "final" }',
                   f'INSERT DATA {{ <urn:c1> <urn:revision> 1 . <urn:c2> <urn:revision> 2 . '
                   f'<urn:sensor> <urn:hasStreamID> <{ALIAS}> }}'):
        r = c.post("/sparql", data=update, headers={"Content-Type": "application/sparql-update"})
        assert r.status_code == 204, r.text
    assert c.put("/streams/hr", query_string={"alias": ALIAS}).status_code == 201
    for name, minute, hr in (("a", 0, 70), ("b", 3, 80), ("c", 6, 90)):
        upload(c, "hr", element(name, minute, hr))
    return c


def evaluator(app: Flask) -> ExtendedEvaluator:
    return services_of(app).evaluator.with_local_bases([HOST])  # type: ignore[no-any-return]


def stream(app: Flask) -> Stream:
    return services_of(app).streams.get("hr")  # type: ignore[no-any-return]


def select(client: FlaskClient, query: str) -> list[dict[str, str]]:
    """Solutions of a query at /sparql, as {variable: N-Triples term}, in result order."""
    r = client.post("/sparql", data=query, headers={"Content-Type": "application/sparql-query",
                                                    "Accept": "application/sparql-results+json"})
    assert r.status_code == 200, r.text
    return _solutions(pyoxigraph.parse_query_results(r.data, pyoxigraph.QueryResultsFormat.JSON))


def _solutions(results: object) -> list[dict[str, str]]:
    assert isinstance(results, pyoxigraph.QuerySolutions)
    names = [v.value for v in results.variables]
    return [{n: str(s[n]) for n in names if s[n] is not None} for s in results]


def _int(value: int) -> str:
    return f'"{value}"^^<http://www.w3.org/2001/XMLSchema#integer>'


# --- REVISION -------------------------------------------------------------------------------------------------------

def test_revision_constant(client: FlaskClient) -> None:
    # revision 1 inserted "draft", revision 2 replaced it by "final"; HEAD (3) still says "final"
    assert select(client, "SELECT ?st WHERE { REVISION 1 { <urn:a> <urn:status> ?st } }") == [{"st": '"draft"'}]
    assert select(client, "SELECT ?st WHERE { REVISION HEAD~1 { <urn:a> <urn:status> ?st } }") == [{"st": '"final"'}]
    assert select(client, "SELECT ?st WHERE { REVISION '1' { <urn:a> <urn:status> ?st } }") == [{"st": '"draft"'}]
    # joined with a pattern over HEAD: <urn:c1> exists only at HEAD
    assert select(client, "SELECT ?st WHERE { <urn:c1> ?p ?r . REVISION 1 { <urn:a> <urn:status> ?st } }") == [
        {"st": '"draft"'}]


def test_revision_variable_bound_per_solution(client: FlaskClient) -> None:
    # ?c1 names revision 1 (draft), ?c2 revision 2 (final): one inner evaluation per value of ?r
    rows = select(client, "SELECT ?c ?r ?st WHERE { ?c <urn:revision> ?r . REVISION ?r { <urn:a> <urn:status> ?st } }"
                          " ORDER BY ?c")
    assert rows == [{"c": "<urn:c1>", "r": _int(1), "st": '"draft"'},
                    {"c": "<urn:c2>", "r": _int(2), "st": '"final"'}]


def test_revision_of_a_stream_is_its_elements_up_to_it(client: FlaskClient) -> None:
    # inside SERVICE <stream>, REVISION 2 is the stream after element 2 (a, b): two element graphs
    rows = select(client, f"SELECT ?n WHERE {{ SERVICE <{HOST}/streams/hr> {{ REVISION 2 {{ "
                          "SELECT (COUNT(?g) AS ?n) WHERE { GRAPH ?g {} } } } }")
    assert rows == [{"n": _int(2)}]


# --- WINDOWS and THEN() ---------------------------------------------------------------------------------------------

def test_windows_over_a_stream(app: Flask, client: FlaskClient) -> None:
    # HEAD is c (10:06): HEAD/-PT05M = (10:01, 10:06] holds b and c; HEAD alone is c; HEAD~2/HEAD~1 is a, b
    ev = evaluator(app)
    target = ev.local_target(f"{HOST}/streams/hr")
    assert target is not None
    for ref, expected in (("HEAD/-PT05M", [80, 90]), ("HEAD", [90]), ("HEAD~2/HEAD~1", [70, 80])):
        result = ev.query(f"SELECT ?hr WHERE {{ WINDOWS {ref} {{ {WINDOW_QUERY} }} }} ORDER BY ?hr", target)
        assert [int(s["hr"].value) for s in result] == expected  # type: ignore[union-attr]
    # the same through /sparql, with the stream's IRI as a SERVICE around WINDOWS
    rows = select(client, f"SELECT ?hr WHERE {{ SERVICE <{HOST}/streams/hr> {{ WINDOWS HEAD/-PT05M {{ {WINDOW_QUERY} }}"
                          " } } ORDER BY ?hr")
    assert rows == [{"hr": _int(80)}, {"hr": _int(90)}]


def test_windows_needs_a_stream(client: FlaskClient) -> None:
    r = client.get("/sparql", query_string={"query": "SELECT * { WINDOWS HEAD { ?s ?p ?o } }"})
    assert r.status_code == 400 and "not a stream" in r.text


def test_then_inside_a_window_is_its_commit_time(app: Flask, client: FlaskClient) -> None:
    hr = stream(app)
    commits = {o: format_micros(hr.record(o).commit) for o in (1, 2, 3)}  # type: ignore[union-attr]
    assert len(set(commits.values())) == 3  # one upload per element
    dt = f"^^<{XSD_DT}>"
    # a one-shot window: the commit time of its last element (c for HEAD/-PT05M, b for HEAD~2/HEAD~1)
    rows = select(client, f"SELECT ?t1 ?t2 WHERE {{ SERVICE <{HOST}/streams/hr> {{ "
                          "WINDOWS HEAD/-PT05M { BIND(THEN() AS ?t1) } WINDOWS HEAD~2/HEAD~1 { BIND(THEN() AS ?t2) } "
                          "} }")
    assert rows == [{"t1": f'"{commits[3]}"{dt}', "t2": f'"{commits[2]}"{dt}'}]
    # THEN() inside a windowed SERVICE IRI; and outside all parts: the dataset revision's commit time
    head = services_of(app).dataset.revision(3)
    rows = select(client, f"SELECT ?w ?top WHERE {{ SERVICE <{HOST}/streams/hr?WINDOWS=HEAD~2> "
                          "{ SELECT (THEN() AS ?w) {} } BIND(THEN() AS ?top) }")
    top = format_micros(int(head.committed_at.timestamp() * 1_000_000))
    assert rows == [{"w": f'"{commits[1]}"{dt}', "top": f'"{top}"{dt}'}]


# --- SERVICE --------------------------------------------------------------------------------------------------------

def test_service_variable_bound_to_an_alias_with_windows(client: FlaskClient) -> None:
    # ?id is the stream's alias urn:uuid; ?id + '?WINDOWS=HEAD/-PT05M' is b and c of stream hr, in-process
    rows = select(client, "SELECT ?id ?hr WHERE { <urn:sensor> <urn:hasStreamID> ?id . "
                          "BIND(IRI(CONCAT(STR(?id), '?WINDOWS=HEAD/-PT05M')) AS ?svc) "
                          f"SERVICE ?svc {{ {WINDOW_QUERY} }} }} ORDER BY ?hr")
    assert rows == [{"id": f"<{ALIAS}>", "hr": _int(80)}, {"id": f"<{ALIAS}>", "hr": _int(90)}]


def test_a_rule_firing_reads_only_the_window_that_fired(app: Flask, client: FlaskClient) -> None:
    # Two feeds: hr's repeating windows (the firing input) and stream other's HEAD. A firing pinned to hr's
    # window restricts SERVICE ?feed to that IRI: the other feed is not read (not re-reported).
    assert client.put("/streams/other").status_code == 201
    upload(client, "other", element("x", 1, 55))
    windowed, other = f"{HOST}/streams/hr?WINDOWS=R/HEAD/PT5M", f"{HOST}/streams/other?WINDOWS=HEAD"
    r = client.post("/sparql", data=f"INSERT DATA {{ <urn:s1> <urn:feed> <{windowed}> . "
                                     f"<urn:s2> <urn:feed> <{other}> }}",
                    headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 204, r.text
    query = f"SELECT ?s ?hr WHERE {{ ?s <urn:feed> ?feed SERVICE ?feed {{ {WINDOW_QUERY} }} }}"
    pinned = SelectedWindow([1, 2])  # hr's elements a (70) and b (80): the window that fired
    firing = evaluator(app).for_rule([HOST], {("hr", "R/HEAD/PT5M"): pinned})
    rows = _solutions(firing.query(query, QueryTarget(base_iri=HOST)))
    assert sorted((r["s"], r["hr"]) for r in rows) == [("<urn:s1>", _int(70)), ("<urn:s1>", _int(80))]
    # a firing of some other input: no value is restricted; the other feed is read, and hr's sequence, with no
    # complete window (no Spark here), joins nothing instead of failing the firing
    elsewhere = evaluator(app).for_rule([HOST], {("zz", "R/HEAD/PT5M"): pinned})
    rows = _solutions(elsewhere.query(query, QueryTarget(base_iri=HOST)))
    assert [(r["s"], r["hr"]) for r in rows] == [("<urn:s2>", _int(55))]


def test_rules_over_one_window_share_its_static_parts(app: Flask, client: FlaskClient) -> None:
    # Two rules' firings over hr's window {a 70, b 80}: the same inner SELECT is evaluated once (a cache miss, then
    # a hit), each rule's own FILTER still applies; a window of other elements, or a volatile inner, is evaluated anew
    inner = f"SELECT (AVG(?hr) AS ?avg) WHERE {{ {WINDOW_QUERY} }}"
    windowed = f"{HOST}/streams/hr?WINDOWS=R/HEAD/PT5M"

    def rule(threshold: int, select: str = inner) -> str:
        return f"SELECT ?avg WHERE {{ SERVICE <{windowed}> {{ {select} }} FILTER (?avg > {threshold}) }}"

    def fire(window: list[int], text: str) -> list[str]:
        firing = evaluator(app).for_rule([HOST], {("hr", "R/HEAD/PT5M"): SelectedWindow(window)})
        return [r["avg"] for r in _solutions(firing.query(text, QueryTarget(base_iri=HOST)))]

    cache = evaluator(app).cache
    before = cache.status()
    assert fire([1, 2], rule(70)) == ['"75"^^<http://www.w3.org/2001/XMLSchema#decimal>']
    assert fire([1, 2], rule(75)) == []  # same window, same inner: from the cache, then this rule's FILTER
    after = cache.status()
    assert (after["misses"] - before["misses"], after["hits"] - before["hits"]) == (1, 1)
    assert fire([2, 3], rule(70)) == ['"85"^^<http://www.w3.org/2001/XMLSchema#decimal>']  # other elements
    volatile = inner.replace("(AVG(?hr) AS ?avg)", "(AVG(?hr) AS ?avg) (NOW() AS ?now)")
    fire([1, 2], rule(70, volatile))
    fire([1, 2], rule(70, volatile))
    assert cache.status()["misses"] == after["misses"] + 1 and cache.status()["hits"] == after["hits"]


def test_service_silent_to_an_unreachable_endpoint(client: FlaskClient) -> None:
    query = "SELECT ?x WHERE { BIND(1 AS ?x) SERVICE SILENT <http://127.0.0.1:9/sparql> { ?s ?p ?o } }"
    # SILENT: the failed part is one solution binding nothing (the join identity), as W3C service7 checks
    assert select(client, query) == [{"x": _int(1)}]
    r = client.get("/sparql", query_string={"query": query.replace("SILENT ", "")})
    assert r.status_code == 400 and "SERVICE" in r.text


def test_blank_nodes_cross_parts_and_come_back(app: Flask, client: FlaskClient) -> None:
    # the element's blank node goes through VALUES as a skolem IRI and comes back as a blank node
    rows = select(client, f"SELECT ?o ?hr WHERE {{ SERVICE <{HOST}/streams/hr?WINDOWS=HEAD> {{ {WINDOW_QUERY} }} }}")
    assert len(rows) == 1 and rows[0]["o"].startswith("_:") and rows[0]["hr"] == _int(90)
    hr = stream(app)
    window = hr.window_store([hr.head()])  # the window dataset the SERVICE read (kept: the latest are cached)
    [quad] = [q for q in window.quads_for_pattern(None, pyoxigraph.NamedNode("http://ex/hr"), None, None)
              if q.object.value == "90"]
    assert rows[0]["o"] == str(quad.subject)  # the dataset's own label: joins with it stay possible


@pytest.mark.slow
def test_service_in_process_equals_http(tmp_path: Path) -> None:
    with running_server(["--no-pipeline"]) as server:
        url = f"{server.url}/streams/s"
        assert requests.put(url).status_code == 201
        body = element("a", 0, 70) + element("b", 3, 80) + element("c", 6, 90)
        assert requests.post(url, data=body, headers={"Content-Type": "application/trig"}).status_code == 200
        query = (f"SELECT ?o ?hr ?then WHERE {{ SERVICE <{url}?WINDOWS=HEAD/-PT05M> {{ {WINDOW_QUERY} "
                 "BIND(THEN() AS ?then) } }")
        # in-process: the server evaluates SERVICE to its own windowed IRI without HTTP
        r = requests.post(f"{server.url}/sparql", data=query, headers={
            "Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"})
        assert r.status_code == 200, r.text + server.log_tail()
        in_process = _solutions(pyoxigraph.parse_query_results(r.content, pyoxigraph.QueryResultsFormat.JSON))
        # over HTTP: an evaluator with no local bases posts the part to the windowed IRI
        dataset = RevisionedDataset(tmp_path / "d", in_memory=True)
        catalog = StreamCatalog(tmp_path / "s", in_memory=True)
        remote = ExtendedEvaluator(EvaluationContext.for_requests(dataset, catalog, [], requests.Session()))
        over_http = _solutions(remote.query(query, QueryTarget()))
        catalog.close()
        dataset.close()
    key = lambda row: row["hr"]  # noqa: E731
    assert sorted(in_process, key=key) == sorted(over_http, key=key)
    assert [row["hr"] for row in sorted(in_process, key=key)] == [_int(80), _int(90)]
    assert all(row["o"].startswith("_:") and "then" in row for row in in_process)


# --- quad templates -------------------------------------------------------------------------------------------------

TEMPLATE = f"""CONSTRUCT {{
  GRAPH ?alert {{ [] <urn:hr> ?hr ; <urn:level> "high" }}
  ?alert <urn:at> ?t .
}} WHERE {{
  SERVICE <{HOST}/streams/hr?WINDOWS=HEAD/-PT05M> {{ {WINDOW_QUERY} }}
  BIND(IRI(CONCAT("urn:alert:", STR(?hr))) AS ?alert)
  OPTIONAL {{ ?alert <urn:never> ?unbound }}
}}"""


def test_quad_template_one_graph_per_solution_fresh_blank_nodes(app: Flask, client: FlaskClient) -> None:
    # two solutions (80 at 10:03, 90 at 10:06): graphs urn:alert:80 and urn:alert:90, each with one blank node
    # holding 2 quads, plus one default-graph triple per solution: 6 quads
    r = client.post("/sparql", data=TEMPLATE, headers={"Content-Type": "application/sparql-query",
                                                       "Accept": "application/n-quads"})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/n-quads")
    quads = list(pyoxigraph.parse(r.data, pyoxigraph.RdfFormat.N_QUADS))
    assert len(quads) == 6
    by_graph: dict[str, set[str]] = {}
    for quad in quads:
        by_graph.setdefault(str(quad.graph_name), set()).add(str(quad.subject))
    assert set(by_graph) == {"<urn:alert:80>", "<urn:alert:90>", "DEFAULT"}
    subjects = by_graph["<urn:alert:80>"] | by_graph["<urn:alert:90>"]
    assert len(subjects) == 2 and all(s.startswith("_:") for s in subjects)  # fresh per solution
    assert by_graph["DEFAULT"] == {"<urn:alert:80>", "<urn:alert:90>"}
    defaults = {(str(q.subject), q.object.value) for q in quads if isinstance(q.graph_name, pyoxigraph.DefaultGraph)}
    assert defaults == {("<urn:alert:80>", "2016-06-20T10:03:00Z"), ("<urn:alert:90>", "2016-06-20T10:06:00Z")}
    # the evaluator's own result: pyoxigraph Quads
    result = evaluator(app).query(TEMPLATE, QueryTarget())
    assert isinstance(result, ConstructedQuads) and len(result) == 6
    trig = client.post("/sparql", data=TEMPLATE, headers={"Content-Type": "application/sparql-query",
                                                          "Accept": "application/trig"})
    assert trig.status_code == 200 and len(list(pyoxigraph.parse(trig.data, pyoxigraph.RdfFormat.TRIG))) == 6


def test_quad_template_skips_unbound_variables(app: Flask, client: FlaskClient) -> None:
    query = TEMPLATE.replace("?alert <urn:at> ?t .", "?alert <urn:at> ?unbound .")
    result = evaluator(app).query(query, QueryTarget())
    assert len(result) == 4 and all(not isinstance(q.graph_name, pyoxigraph.DefaultGraph)  # type: ignore[union-attr]
                                    for q in result)  # type: ignore[union-attr]


# --- errors ---------------------------------------------------------------------------------------------------------

SYNTAX_ERROR = f"""SELECT * WHERE {{
  SERVICE <{HOST}/streams/hr> {{
    WINDOWS HEAD {{
      ?g ?p ex:missing .
      ?a ?b ?c }} }} }}"""


def test_syntax_error_inside_windows_is_at_the_users_line_and_column(app: Flask, client: FlaskClient) -> None:
    # pyoxigraph stops right after the undeclared prefixed name ex:missing: line 4, column 7 + len("?g ?p ex:missing")
    with pytest.raises(QuerySyntaxError) as caught:
        evaluator(app).query(SYNTAX_ERROR, QueryTarget())
    assert (caught.value.line, caught.value.column) == (4, 23)
    r = client.get("/sparql", query_string={"query": SYNTAX_ERROR})
    assert r.status_code == 400 and "line 4 column 23" in r.text


def test_plain_sparql_still_takes_the_plain_path(client: FlaskClient) -> None:
    assert select(client, "SELECT ?st WHERE { <urn:a> <urn:status> ?st }") == [{"st": '"final"'}]
    r = client.get("/sparql", query_string={"query": "SELECT * WHERE { ?s ?p }"})
    assert r.status_code == 400 and "line 1" in r.text


def test_a_stopped_evaluation_keeps_no_result_for_another_thread_to_free(app: Flask, client: FlaskClient) -> None:
    # pyoxigraph's results may only be freed by the thread that made them. A query stopped while its solutions are
    # read (its budget spent: engine.plain.stopping) raises from inside pyoxigraph; the error, kept in a reference
    # cycle (as error handling often does), is then freed by this thread's garbage collector: nothing it holds may
    # be a result made on the evaluating thread (pyo3 reports that as an unraisable "unsendable" error, and leaks).
    import gc
    import sys
    import threading

    from engine import plain

    evaluator = services_of(app).evaluator
    numbers = " ".join(str(n) for n in range(300))
    query = f"SELECT * WHERE {{ VALUES ?a {{ {numbers} }} VALUES ?b {{ {numbers} }} VALUES ?c {{ 1 2 3 4 5 6 7 8 }} " \
            f"SERVICE <{HOST}/streams/hr?WINDOWS=HEAD> {{ {WINDOW_QUERY} }} }}"  # 720,000 solutions, an extended query
    kept: list[BaseException] = []

    def evaluate() -> None:
        try:
            with plain.stopping(lambda: True):
                evaluator.with_local_bases([HOST]).query(query, QueryTarget(base_iri=f"{HOST}/sparql"))
        except Exception as error:  # noqa: BLE001 - the error is what the test keeps
            error.cycle = error  # type: ignore[attr-defined]
            kept.append(error)

    thread = threading.Thread(target=evaluate)
    thread.start()
    thread.join()
    assert len(kept) == 1 and "stopped" in str(kept[0]), kept
    unraisable: list[object] = []
    previous, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        kept.clear()
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert unraisable == []
