"""SPARQL 1.1 Protocol over HTTP (Flask test client)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from flask.testing import FlaskClient
from pyoxigraph import RdfFormat, parse

UPDATE = "application/sparql-update"
QUERY = "application/sparql-query"


def _seed(client: FlaskClient) -> None:
    r = client.post("/sparql", data='INSERT DATA { <http://ex/a> <http://ex/p> "1" . '
                    'GRAPH <http://ex/g> { <http://ex/b> <http://ex/p> "2" } }',
                    content_type=UPDATE)
    assert r.status_code == 204 and r.headers["Revision-Ordinal"] == "1"


def test_query_get_form_and_direct(client: FlaskClient) -> None:
    _seed(client)
    q = "SELECT ?o { ?s ?p ?o }"
    for r in (client.get("/sparql", query_string={"query": q}),
              client.post("/sparql", data={"query": q}),
              client.post("/sparql", data=q, content_type=QUERY)):
        assert r.status_code == 200, r.text
        assert r.json["results"]["bindings"] == [{"o": {"type": "literal", "value": "1"}}]


@pytest.mark.parametrize(("accept", "mimetype"), [
    ("application/sparql-results+json", "application/sparql-results+json"),
    ("application/sparql-results+xml", "application/sparql-results+xml"),
    ("text/csv", "text/csv"),
    ("text/tab-separated-values", "text/tab-separated-values"),
    ("*/*", "application/sparql-results+json"),
])
def test_select_result_formats(client: FlaskClient, accept: str, mimetype: str) -> None:
    _seed(client)
    r = client.get("/sparql", query_string={"query": "SELECT ?o { ?s ?p ?o }"},
                   headers={"Accept": accept})
    assert r.status_code == 200 and r.mimetype == mimetype
    if mimetype == "text/csv":
        assert list(csv.reader(io.StringIO(r.text))) == [["o"], ["1"]]


@pytest.mark.parametrize(("accept", "fmt"), [
    ("text/turtle", RdfFormat.TURTLE), ("application/n-triples", RdfFormat.N_TRIPLES),
    ("application/rdf+xml", RdfFormat.RDF_XML), ("application/ld+json", RdfFormat.JSON_LD),
])
def test_construct_formats(client: FlaskClient, accept: str, fmt: RdfFormat) -> None:
    _seed(client)
    r = client.get("/sparql", query_string={"query": "CONSTRUCT WHERE { ?s ?p ?o }"},
                   headers={"Accept": accept})
    assert r.status_code == 200 and r.mimetype == accept
    assert [t.object.value for t in parse(r.data, fmt)] == ["1"]


def test_not_acceptable(client: FlaskClient) -> None:
    r = client.get("/sparql", query_string={"query": "ASK {}"}, headers={"Accept": "image/png"})
    assert r.status_code == 406 and "application/sparql-results+json" in r.text


def test_protocol_dataset(client: FlaskClient) -> None:
    _seed(client)
    r = client.get("/sparql", query_string={"query": "SELECT ?o { ?s ?p ?o }",
                                            "default-graph-uri": "http://ex/g"})
    assert [b["o"]["value"] for b in r.json["results"]["bindings"]] == ["2"]
    r = client.get("/sparql", query_string={"query": "ASK { ?s ?p ?o }",
                                            "named-graph-uri": "http://ex/g"})
    assert r.json["boolean"] is False  # only named graphs given: the default graph is empty


def test_query_at_revision(client: FlaskClient) -> None:
    _seed(client)
    client.post("/sparql", data='DELETE DATA { <http://ex/a> <http://ex/p> "1" }',
                content_type=UPDATE)
    ask = "ASK { <http://ex/a> <http://ex/p> \"1\" }"
    assert client.get("/sparql", query_string={"query": ask}).json["boolean"] is False
    r = client.get("/sparql", query_string={"query": ask, "revision-id": "HEAD~1"})
    assert r.json["boolean"] is True and r.headers["Revision-Ordinal"] == "1"
    r = client.get("/sparql", query_string={"query": ask, "revision-id": "HEAD~"})
    assert r.status_code == 400 and "HEAD~" in r.text


@pytest.mark.parametrize(("kwargs", "status"), [
    ({"method": "PUT", "data": {"query": "ASK {}"}}, 405),
    ({"method": "GET", "query_string": "query=ASK%7B%7D&query=ASK%7B%7D"}, 400),
    ({"method": "POST", "data": "ASK {}", "content_type": "text/plain"}, 415),
    ({"method": "POST", "data": "query=ASK%7B%7D"}, 400),
    ({"method": "POST", "data": "ASK {}", "content_type": QUERY + "; charset=UTF-16"}, 415),
    ({"method": "GET", "query_string": {"query": "ASK {"}}, 400),
    ({"method": "GET", "query_string": {"update": "CLEAR ALL"}}, 400),
    ({"method": "POST", "data": "CLEAR XYZ", "content_type": UPDATE}, 400),
])
def test_bad_requests(client: FlaskClient, kwargs: dict[str, object], status: int) -> None:
    r = client.open("/sparql", **kwargs)  # type: ignore[arg-type]
    assert r.status_code == status, r.text


def test_query_syntax_error_gives_a_location(client: FlaskClient) -> None:
    r = client.get("/sparql", query_string={"query": "SELECT * WHERE {\n ?s ?p }"})
    assert r.status_code == 400 and "line 2 column 9" in r.text


def test_update_with_using_parameter_and_conflict(client: FlaskClient) -> None:
    _seed(client)
    r = client.post("/sparql?using-graph-uri=http%3A%2F%2Fex%2Fg",
                    data="INSERT { GRAPH <http://ex/out> { ?s a <http://ex/T> } } "
                         "WHERE { ?s ?p ?o }", content_type=UPDATE)
    assert r.status_code == 204
    r = client.get("/sparql", query_string={"query": "SELECT ?s { GRAPH <http://ex/out> { ?s ?p ?o } }"})
    assert [b["s"]["value"] for b in r.json["results"]["bindings"]] == ["http://ex/b"]
    r = client.post("/sparql?using-named-graph-uri=http%3A%2F%2Fex%2Fg",
                    data="WITH <http://ex/g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
                    content_type=UPDATE)
    assert r.status_code == 400 and "WITH" in r.text


def test_load_is_refused_and_nothing_changes(client: FlaskClient) -> None:
    _seed(client)
    r = client.post("/sparql", data="CLEAR ALL ; LOAD <http://example.org/data.ttl>",
                    content_type=UPDATE)
    assert r.status_code == 501 and "LOAD" in r.text
    status = json.loads(client.get("/status").data)
    assert status["dataset"]["revisions"] == 1
