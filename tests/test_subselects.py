"""Static sub-SELECTs of a rule firing answered once per revision of the base data (sparql_ext.subselects, engine):
which sub-SELECTs qualify (by hand, from SPARQL's scoping: only those that read the query's own dataset as their
active graph), and a firing's answers with them answered from the cache, before and after the base data changes.

The data, by hand: patient pN (N = 1, 2, 3) has heart-rate stream hrN with one reading 10·N in its window, and a
history of two readings N and 3·N (mean 2·N). A firing of hr2 gives p2: reading 20 − mean 4 = 16."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from pyoxigraph import NamedNode

from concentrator.compose import http_app
from engine.context import QueryTarget
from engine.results import ConstructedTriples
from engine.selection import SelectedWindow
from protocol import ServerConfig
from protocol.services import services_of
from sparql_ext.subselects import standalone_subselects
from tests.test_service_var_firing import sensor_stream

HOST = "http://localhost"
SUB = "{ SELECT ?s { ?s ?p ?o } }"


def spans(query: str) -> list[str]:
    return [query[s.start:s.end] for s in standalone_subselects(query)]


@pytest.mark.parametrize(("query", "expected"), [
    (f"SELECT * {{ ?s ?p ?o . {SUB} }}", [SUB]),
    (f"SELECT * {{ ?s ?p ?o OPTIONAL {SUB} }}", [SUB]),
    (f"SELECT * {{ {{ ?a ?b ?c }} UNION {SUB} MINUS {SUB} }}", [SUB, SUB]),
    (f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ {SUB} }}", [SUB]),
    (f"CONSTRUCT {{ ?s ?p ?o }} {{ {SUB} }}", [SUB]),  # WHERE is optional: the second top-level group
    (f"SELECT * {{ {{ SELECT ?s {{ {SUB} }} }} }}", [f"{{ SELECT ?s {{ {SUB} }} }}"]),  # the outermost only
    (f"SELECT * {{ GRAPH ?g {{ {SUB} }} }}", []),  # another active graph
    (f"SELECT * {{ GRAPH <http://g> {{ ?a ?b ?c }} {SUB} }}", [SUB]),  # after the GRAPH block: the query's
    (f"SELECT * {{ SERVICE <http://x/sparql> {{ {SUB} }} }}", []),
    (f"SELECT * {{ SERVICE SILENT ?x {{ {SUB} }} }}", []),
    (f"SELECT * {{ ?s ?p ?o FILTER NOT EXISTS {{ {SUB} }} }}", []),  # the outer solution is substituted there
    (f"SELECT * FROM <http://g> {{ {SUB} }}", []),  # alone, it would read the default dataset
    ("SELECT * WHERE { SELECT ?s { ?s ?p ?o } }", []),  # the WHERE group itself
    ('SELECT * { ?s ?p "{ SELECT ?s { ?s ?p ?o } }" }', []),  # in a string
])
def test_which_subselects_read_the_querys_dataset(query: str, expected: list[str]) -> None:
    assert spans(query) == expected


def test_a_standalone_subselect_keeps_the_prologue() -> None:
    query = f"BASE <http://b/> PREFIX e: <http://e/> SELECT * {{ {SUB} }}"
    (sub,) = standalone_subselects(query)
    assert sub.query == "BASE <http://b/> PREFIX e: <http://e/> SELECT ?s { ?s ?p ?o }"


RULE = """PREFIX ex: <http://ex/>
CONSTRUCT { ?p ex:above ?d } WHERE {
  ?p ex:hr ?h .
  { SELECT ?p (AVG(?r) AS ?mean) WHERE { GRAPH ex:history { ?p ex:reading ?r } } GROUP BY ?p }
  BIND (IRI(CONCAT(STR(?h), '?WINDOWS=R/HEAD/PT5M')) AS ?hs)
  SERVICE ?hs { SELECT (MAX(?v) AS ?hv) WHERE { GRAPH ?g { ?x ex:v ?v } } }
  BIND (?hv - ?mean AS ?d)
}"""


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True))
    client: FlaskClient = app.test_client()
    records = "".join(f"<http://ex/p{n}> <http://ex/hr> <urn:s:hr{n}> .\n"
                      f"<http://ex/history> {{ <http://ex/p{n}> <http://ex/reading> {n}, {3 * n} . }}\n"
                      for n in (1, 2, 3))
    r = client.post("/store", data=records, headers={"Content-Type": "application/trig"})
    assert r.status_code in (200, 201, 204), r.text
    for n in (1, 2, 3):
        sensor_stream(client, f"hr{n}", 10 * n)
    return app


def fire_hr2(app: Flask) -> list[tuple[str, str]]:
    evaluator = services_of(app).evaluator.with_local_bases([HOST]).for_rule(
        [HOST], {("hr2", "R/HEAD/PT5M"): SelectedWindow([1], commit=1_000_000)})
    result = evaluator.query(RULE, QueryTarget(base_iri=HOST))
    assert isinstance(result, ConstructedTriples)
    return sorted((t.subject.value, t.object.value) for t in result if isinstance(t.subject, NamedNode))


def test_a_firing_answers_its_static_subselect_once_per_revision_of_the_base_data(app: Flask) -> None:
    cache = services_of(app).evaluator.cache
    assert fire_hr2(app) == [("http://ex/p2", "16")]  # 20 − mean(2, 6)
    aggregate = ("PREFIX ex: <http://ex/>\nSELECT ?p (AVG(?r) AS ?mean) WHERE { GRAPH ex:history { ?p ex:reading ?r } "
                 "} GROUP BY ?p")  # the sub-SELECT as a query of its own
    assert [key[0] for key in cache._entries].count(aggregate) == 1  # noqa: SLF001 - what the cache holds
    misses = cache.misses
    assert fire_hr2(app) == [("http://ex/p2", "16")]
    assert cache.misses == misses  # the aggregate (and everything else static) came from the cache
    # a new revision of the base data: p2's history gains 13 (mean 7): the next firing computes it again
    client = app.test_client()
    r = client.post("/store", data="<http://ex/history> { <http://ex/p2> <http://ex/reading> 13 . }",
                    headers={"Content-Type": "application/trig"})
    assert r.status_code in (200, 201, 204)
    assert fire_hr2(app) == [("http://ex/p2", "13")]
    assert cache.misses > misses
    revisions = sorted(key[1] for key in cache._entries if key[0] == aggregate)  # noqa: SLF001
    assert len(revisions) == 2 and revisions[0] < revisions[1]


def test_a_subselect_with_a_blank_node_in_its_solutions_is_evaluated_in_place(app: Flask) -> None:
    """A VALUES table cannot hold a blank node: such a sub-SELECT stays in the query, with the same answer."""
    client = app.test_client()
    r = client.post("/store", data="<http://ex/p2> <http://ex/tag> [ <http://ex/label> \"x\" ] .",
                    headers={"Content-Type": "application/trig"})
    assert r.status_code in (200, 201, 204)
    text = RULE.replace("BIND (?hv - ?mean AS ?d)", "{ SELECT ?p ?t { ?p ex:tag ?t } } ?t ex:label ?l\n"
                        "  BIND (?hv - ?mean AS ?d)")
    evaluator = services_of(app).evaluator.with_local_bases([HOST]).for_rule(
        [HOST], {("hr2", "R/HEAD/PT5M"): SelectedWindow([1], commit=1_000_000)})
    result = evaluator.query(text, QueryTarget(base_iri=HOST))
    assert isinstance(result, ConstructedTriples)
    assert sorted((t.subject.value, t.object.value) for t in result) == [("http://ex/p2", "16")]


def test_a_subselect_answered_from_the_cache_changes_no_value(app: Flask) -> None:
    """The solutions go into the query as a VALUES table's text: each value comes out of the firing as pyoxigraph's
    own SPARQL gives it for the stored data (which writes numbers, dateTimes and language tags in their canonical
    forms), and a string's escapes and a custom datatype exactly as stored."""
    stored = ['"007"^^<http://www.w3.org/2001/XMLSchema#integer>', '"1.50"^^<http://www.w3.org/2001/XMLSchema#decimal>',
              '"line\\none \\"quoted\\" \\\\ tab\\t"', '"Grüße"@de-CH', '"x y"^^<http://ex/custom>',
              '"2016-06-20T10:00:00.000+02:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>']
    client = app.test_client()
    body = "".join(f"<http://ex/p2> <http://ex/note> {literal} .\n" for literal in stored)
    r = client.post("/store", data=body, headers={"Content-Type": "application/trig"})  # top level: default graph
    assert r.status_code in (200, 201, 204), r.text
    plain = services_of(app).evaluator.query("SELECT ?n { <http://ex/p2> <http://ex/note> ?n }", QueryTarget())
    expected = sorted(str(solution["n"]) for solution in plain)  # type: ignore[union-attr, index]
    assert stored[2] in expected and stored[4] in expected  # kept exactly by the store
    text = RULE.replace("CONSTRUCT { ?p ex:above ?d }", "CONSTRUCT { ?p ex:note ?n }").replace(
        "BIND (?hv - ?mean AS ?d)", "{ SELECT ?p ?n { ?p ex:note ?n } }")
    evaluator = services_of(app).evaluator.with_local_bases([HOST]).for_rule(
        [HOST], {("hr2", "R/HEAD/PT5M"): SelectedWindow([1], commit=1_000_000)})
    result = evaluator.query(text, QueryTarget(base_iri=HOST))
    assert isinstance(result, ConstructedTriples)
    assert sorted(str(t.object) for t in result) == expected
    cached = [key[0] for key in services_of(app).evaluator.cache._entries]  # noqa: SLF001
    assert any(query.endswith("SELECT ?p ?n { ?p ex:note ?n }") for query in cached)  # answered from the cache
