"""Graph Store Protocol over HTTP (Flask test client), with revision-id reads."""

from __future__ import annotations

from urllib.parse import quote

from flask.testing import FlaskClient
from pyoxigraph import RdfFormat, parse

from protocol.services import services_of

GRAPH = "/store?graph=" + quote("http://ex/g", safe="")
TTL = "text/turtle"


def _objects(body: bytes) -> set[str]:
    return {t.object.value for t in parse(body, RdfFormat.TURTLE)}


def _put(client: FlaskClient, value: str) -> dict[str, str]:
    r = client.put(GRAPH, data=f'<http://ex/s> <http://ex/p> "{value}" .', content_type=TTL)
    assert r.status_code in (201, 204), r.text
    return {"ordinal": r.headers["Revision-Ordinal"], "uuid": r.headers["Revision-Id"]}


def test_three_puts_then_revision_reads(client: FlaskClient) -> None:
    revisions = [_put(client, v) for v in ("one", "two", "three")]
    assert [r["ordinal"] for r in revisions] == ["1", "2", "3"]

    def get(revision: str) -> set[str]:
        r = client.get(f"{GRAPH}&revision-id={quote(revision)}", headers={"Accept": TTL})
        assert r.status_code == 200, r.text
        return _objects(r.data)

    assert get("HEAD") == {"three"}
    assert get("HEAD~1") == {"two"}
    assert get("HEAD~2") == {"one"}
    assert get("2") == {"two"}
    assert get(revisions[0]["uuid"]) == {"one"}
    committed = client.get("/status").json["dataset"]["head"]["committed_at"]
    assert get(committed) == {"three"}
    # the instant between the first and second commit selects the first
    status = client.get(f"{GRAPH}&revision-id=1").headers["Revision-Ordinal"]
    assert status == "1"


def test_revision_by_datetime_between_commits(client: FlaskClient, app) -> None:  # type: ignore[no-untyped-def]
    for value in ("one", "two"):
        _put(client, value)
    dataset = services_of(app).dataset
    first, second = dataset.revision(1).committed_at, dataset.revision(2).committed_at
    between = first + (second - first) / 2
    r = client.get(f"{GRAPH}&revision-id={quote(between.isoformat())}")
    assert r.status_code == 200 and _objects(r.data) == {"one"}


def test_graph_did_not_exist_before_its_first_put(client: FlaskClient) -> None:
    _put(client, "one")
    r = client.get(f"{GRAPH}&revision-id=HEAD~1")
    assert r.status_code == 404 and "at revision 0" in r.text


def test_malformed_put_leaves_the_graph_intact(client: FlaskClient) -> None:
    _put(client, "kept")
    r = client.put(GRAPH, data='<http://ex/s> <http://ex/p> "broken .', content_type=TTL)
    assert r.status_code == 400
    assert "not valid Turtle" in r.text and "line 1" in r.text
    assert _objects(client.get(GRAPH).data) == {"kept"}
    assert client.get("/status").json["dataset"]["revisions"] == 1


def test_truncated_body_leaves_the_graph_intact(client: FlaskClient) -> None:
    _put(client, "kept")
    body = b"".join(b'<http://ex/s%d> <http://ex/p> "v" .\n' % i for i in range(1000))[:-20]
    r = client.post(GRAPH, data=body, content_type=TTL)
    assert r.status_code == 400
    assert _objects(client.get(GRAPH).data) == {"kept"}


def test_bad_revision_id_is_a_400_naming_it(client: FlaskClient) -> None:
    _put(client, "one")
    for bad in ("HEAD~x", "yesterday", "2016-06-20T10:00:00"):
        r = client.get(f"{GRAPH}&revision-id={quote(bad)}")
        assert r.status_code == 400 and bad in r.text, (bad, r.text)
    r = client.get(f"{GRAPH}&revision-id=42")
    assert r.status_code == 400 and "'42' does not exist" in r.text


def test_status_codes(client: FlaskClient) -> None:
    assert client.get(GRAPH).status_code == 404
    assert client.delete(GRAPH).status_code == 404
    assert client.put(GRAPH, data="", content_type=TTL).status_code == 201  # empty graph created
    assert client.get(GRAPH).status_code == 200
    assert client.put(GRAPH, data="", content_type=TTL).status_code == 204
    assert client.delete(GRAPH).status_code == 204
    assert client.get(GRAPH).status_code == 404
    assert client.get("/store?default&graph=http://ex/g").status_code == 400
    assert client.get("/store?graph=not%20an%20iri").status_code == 400


def test_unsupported_or_missing_media_type(client: FlaskClient) -> None:
    r = client.put(GRAPH, data="<a> <b> <c> .", content_type="application/x-unknown")
    assert r.status_code == 415 and "text/turtle" in r.text
    r = client.put(GRAPH, data="<a> <b> <c> .")
    assert r.status_code == 400 and "Content-Type" in r.text
    r = client.put(GRAPH, data=b"<a> <b> <c> .", content_type="text/turtle; charset=latin-1")
    assert r.status_code == 415


def test_body_over_the_limit_is_413_and_changes_nothing(client: FlaskClient) -> None:
    body = b"".join(b'<http://ex/s%d> <http://ex/p> "v" .\n' % i for i in range(40_000))
    r = client.post(GRAPH, data=body, content_type=TTL)  # > the 1 MB limit of the fixture
    assert r.status_code == 413
    assert client.get(GRAPH).status_code == 404


def test_post_to_store_creates_a_graph_with_location(client: FlaskClient) -> None:
    r = client.post("/store", data="<http://ex/s> <http://ex/p> 1 .", content_type=TTL)
    assert r.status_code == 201
    location = r.headers["Location"]
    r = client.get("/store?graph=" + quote(location, safe=""))
    assert r.status_code == 200 and "<http://ex/s>" in r.text


def test_dataset_post_and_get_in_quad_formats(client: FlaskClient) -> None:
    body = '<http://ex/s> <http://ex/p> "1" <http://ex/g1> .\n<http://ex/s> <http://ex/p> "2" .\n'
    r = client.post("/store", data=body, content_type="application/n-quads")
    assert r.status_code == 204
    r = client.get("/store", headers={"Accept": "application/n-quads"})
    assert r.status_code == 200
    assert {str(q) for q in parse(r.data, RdfFormat.N_QUADS)} == {
        str(q) for q in parse(body.encode(), RdfFormat.N_QUADS)}
    assert client.get("/store", headers={"Accept": "text/turtle"}).status_code == 406


def test_direct_identification(client: FlaskClient) -> None:
    r = client.put("/store/person/1.ttl", data="<http://ex/s> <http://ex/p> 1 .",
                   content_type=TTL)
    assert r.status_code == 201
    r = client.get("/sparql", query_string={
        "query": "ASK { GRAPH <http://localhost/store/person/1.ttl> { ?s ?p 1 } }"})
    assert r.json["boolean"] is True


def test_graph_formats_by_accept(client: FlaskClient) -> None:
    _put(client, "x")
    for accept, fmt in [("application/n-triples", RdfFormat.N_TRIPLES),
                        ("application/rdf+xml", RdfFormat.RDF_XML),
                        ("application/ld+json", RdfFormat.JSON_LD),
                        ("text/turtle", RdfFormat.TURTLE)]:
        r = client.get(GRAPH, headers={"Accept": accept})
        assert r.status_code == 200 and r.mimetype == accept
        assert {t.object.value for t in parse(r.data, fmt)} == {"x"}
