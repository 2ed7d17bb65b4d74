"""Dydra's Graph Store behaviours (issue 36): PATCH with a SPARQL Update, N-Quads and TriG for one graph, the whole
store, the listing of the revisions, revision ranges and Dydra's pseudo-graph names. Expected values are worked out
by hand from GSP §5.7, the SPARQL 1.1 Update semantics and Dydra's documented behaviour (a range reads the union of
the states of its revisions); every refused write is checked to change nothing (no quad, no revision)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient
from pyoxigraph import DefaultGraph, NamedNode, RdfFormat, parse

from concentrator.compose import http_app
from protocol import ServerConfig
from sparql_ext.graph_patch import retarget_update
from sparql_ext.revision import RevisionRange, parse_revision_range

G, H = "http://ex/g", "http://ex/h"
GRAPH_G = "/store?graph=" + quote(G, safe="")
GRAPH_H = "/store?graph=" + quote(H, safe="")
NQ, TRIG, TTL = "application/n-quads", "application/trig", "text/turtle"
UPDATE = "application/sparql-update"
TOKEN = "w-token"


def quads(body: bytes, fmt: RdfFormat = RdfFormat.N_QUADS) -> set[str]:
    return {str(q) for q in parse(body, fmt)}


def state(client: FlaskClient) -> set[str]:
    """The whole dataset at HEAD, as N-Quads lines."""
    answer = client.get("/store", headers={"Accept": NQ})
    assert answer.status_code == 200, answer.text
    return quads(answer.data)


def revisions(client: FlaskClient) -> int:
    count: int = client.get("/status").json["dataset"]["revisions"]
    return count


def objects(body: bytes, fmt: RdfFormat = RdfFormat.TURTLE) -> set[str]:
    return {q.object.value for q in parse(body, fmt)}


@pytest.fixture
def seeded(client: FlaskClient) -> FlaskClient:
    """<g> holds "a", <h> holds "x", the default graph holds "d": three revisions."""
    for target, value in ((GRAPH_G, "a"), (GRAPH_H, "x"), ("/store?default", "d")):
        answer = client.put(target, data=f'<http://ex/s> <http://ex/p> "{value}" .', content_type=TTL)
        created = target != "/store?default"  # the default graph always exists
        assert answer.status_code == (201 if created else 204), answer.text
    return client


# -- PATCH ----------------------------------------------------------------------------------------------------------

def test_patch_applies_an_update_to_the_target_graph_as_one_revision(seeded: FlaskClient) -> None:
    answer = seeded.patch(GRAPH_G, content_type=UPDATE, data=(
        'PREFIX : <http://ex/> DELETE DATA { :s :p "a" } ; INSERT DATA { :s :p "b" . :t :p "c" }'))
    assert answer.status_code == 204 and answer.headers["Revision-Ordinal"] == "4"
    assert revisions(seeded) == 4  # two operations, one transaction
    assert state(seeded) == {
        '<http://ex/s> <http://ex/p> "b" <http://ex/g>', '<http://ex/t> <http://ex/p> "c" <http://ex/g>',
        '<http://ex/s> <http://ex/p> "x" <http://ex/h>', '<http://ex/s> <http://ex/p> "d"'}


def test_patch_reads_and_writes_the_target_graph_where_the_update_names_none(seeded: FlaskClient) -> None:
    # WHERE { ?s ?p ?o } sees <g>'s "a" only (not the default graph's "d"), and the template writes into <g>
    answer = seeded.patch(GRAPH_G, content_type=UPDATE,
                          data='DELETE { ?s ?p ?o } INSERT { ?s ?p "a2" } WHERE { ?s ?p ?o }')
    assert answer.status_code == 204
    answer = seeded.patch(GRAPH_G, content_type=UPDATE, data='DELETE WHERE { ?s ?p "nothing" }')
    assert answer.status_code == 204
    assert state(seeded) == {'<http://ex/s> <http://ex/p> "a2" <http://ex/g>',
                             '<http://ex/s> <http://ex/p> "x" <http://ex/h>', '<http://ex/s> <http://ex/p> "d"'}


def test_patch_creating_its_graph_is_201(client: FlaskClient) -> None:
    answer = client.patch(GRAPH_G, content_type=UPDATE, data='INSERT DATA { <http://ex/s> <http://ex/p> "1" }')
    assert answer.status_code == 201 and answer.headers["Revision-Ordinal"] == "1"
    assert state(client) == {'<http://ex/s> <http://ex/p> "1" <http://ex/g>'}


@pytest.mark.parametrize(("target", "update", "status", "named"), [
    (GRAPH_G, 'INSERT DATA { GRAPH <http://ex/h> { <http://ex/s> <http://ex/p> "y" } }', 400, "<http://ex/h>"),
    (GRAPH_G, 'INSERT { GRAPH ?g { <http://ex/s> <http://ex/p> "y" } } WHERE { GRAPH ?g { } }', 400, "GRAPH ?g"),
    (GRAPH_G, "CLEAR ALL", 400, "CLEAR"),
    # the second operation is refused: the first is not applied either
    (GRAPH_G, 'INSERT DATA { <http://ex/s> <http://ex/p> "y" } ; DROP GRAPH <http://ex/h>', 400, "DROP"),
    ("/store?default", 'INSERT DATA { GRAPH <http://ex/g> { <http://ex/s> <http://ex/p> "y" } }', 400,
     "<http://ex/g>"),
    (GRAPH_G, 'INSERT DATA { <http://ex/s> <http://ex/p> "y" ', 400, "line 1"),
])
def test_a_refused_patch_changes_nothing(seeded: FlaskClient, target: str, update: str, status: int,
                                         named: str) -> None:
    before = state(seeded)
    answer = seeded.patch(target, content_type=UPDATE, data=update)
    assert answer.status_code == status and named in answer.text, answer.text
    assert state(seeded) == before and revisions(seeded) == 3


def test_patch_takes_only_a_sparql_update(seeded: FlaskClient) -> None:
    answer = seeded.patch(GRAPH_G, content_type=NQ, data='<http://ex/s> <http://ex/p> "y" .')
    assert answer.status_code == 415 and UPDATE in answer.text
    assert revisions(seeded) == 3


def test_patch_on_the_whole_store_runs_the_update_as_it_is(seeded: FlaskClient) -> None:
    answer = seeded.patch("/store", content_type=UPDATE,
                          data='INSERT { GRAPH <http://ex/k> { ?s ?p "k" } } '
                               'WHERE { GRAPH <http://ex/h> { ?s ?p ?o } }')
    assert answer.status_code == 204
    assert '<http://ex/s> <http://ex/p> "k" <http://ex/k>' in state(seeded)


def test_post_with_method_override_is_a_patch(seeded: FlaskClient) -> None:
    answer = seeded.post(GRAPH_G, content_type=UPDATE, headers={"X-HTTP-Method-Override": "PATCH"},
                         data='DELETE DATA { <http://ex/s> <http://ex/p> "a" }')
    assert answer.status_code == 204
    assert '<http://ex/s> <http://ex/p> "a" <http://ex/g>' not in state(seeded)
    answer = seeded.post(GRAPH_G, content_type=TTL, headers={"X-HTTP-Method-Override": "DELETE"},
                         data='<http://ex/s> <http://ex/p> "z" .')
    assert answer.status_code == 400 and "X-HTTP-Method-Override" in answer.text
    assert revisions(seeded) == 4


def test_patch_and_the_whole_store_writes_need_the_write_token(tmp_path: Path) -> None:
    client = http_app(ServerConfig(tmp_path / "data", in_memory=True, token=TOKEN)).test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert client.put(GRAPH_G, data='<http://ex/s> <http://ex/p> "a" .', content_type=TTL,
                      headers=auth).status_code == 201
    before = state(client)
    refused = [
        client.patch(GRAPH_G, content_type=UPDATE, data='INSERT DATA { <http://ex/s> <http://ex/p> "b" }'),
        client.post(GRAPH_G, content_type=UPDATE, headers={"X-HTTP-Method-Override": "PATCH"},
                    data='INSERT DATA { <http://ex/s> <http://ex/p> "b" }'),
        client.delete("/store"),
        client.delete("/store?graph=urn:dydra:named"),
        client.put("/store", content_type=NQ, data=""),
    ]
    assert [r.status_code for r in refused] == [401] * 5
    assert state(client) == before and revisions(client) == 1
    assert client.delete("/store", headers=auth).status_code == 204
    assert state(client) == set()


# -- N-Quads and TriG for one graph ---------------------------------------------------------------------------------

def test_one_graph_as_n_quads_and_trig_names_the_graph(seeded: FlaskClient) -> None:
    answer = seeded.get(GRAPH_G, headers={"Accept": NQ})
    assert answer.status_code == 200 and answer.mimetype == NQ
    assert quads(answer.data) == {'<http://ex/s> <http://ex/p> "a" <http://ex/g>'}
    answer = seeded.get(GRAPH_G, headers={"Accept": TRIG})
    assert answer.status_code == 200 and quads(answer.data, RdfFormat.TRIG) == {
        '<http://ex/s> <http://ex/p> "a" <http://ex/g>'}
    assert seeded.get(GRAPH_G).mimetype == TTL  # no Accept: Turtle, as before


def test_a_missing_graph_asked_as_n_quads_is_404(client: FlaskClient) -> None:
    answer = client.get(GRAPH_G, headers={"Accept": NQ})
    assert answer.status_code == 404 and "<http://ex/g> does not exist" in answer.text


def test_quads_sent_to_one_graph_keep_its_own_and_take_the_default_graphs(seeded: FlaskClient) -> None:
    body = '<http://ex/s> <http://ex/p> "b" .\n<http://ex/s> <http://ex/p> "c" <http://ex/g> .\n'
    assert seeded.put(GRAPH_G, data=body, content_type=NQ).status_code == 204
    trig = '<http://ex/g> { <http://ex/s> <http://ex/p> "e" } <http://ex/s> <http://ex/p> "f" .'
    assert seeded.post(GRAPH_G, data=trig, content_type=TRIG).status_code == 204
    answer = seeded.get(GRAPH_G, headers={"Accept": NQ})
    assert quads(answer.data) == {f'<http://ex/s> <http://ex/p> "{v}" <http://ex/g>' for v in "bcef"}


@pytest.mark.parametrize(("method", "content_type", "body"), [
    ("put", NQ, '<http://ex/s> <http://ex/p> "b" .\n<http://ex/s> <http://ex/p> "y" <http://ex/h> .\n'),
    ("post", TRIG, '<http://ex/g> { <http://ex/s> <http://ex/p> "b" }\n'
                   '<http://ex/h> { <http://ex/s> <http://ex/p> "y" }'),
])
def test_quads_of_another_graph_refuse_the_write(seeded: FlaskClient, method: str, content_type: str,
                                                 body: str) -> None:
    before = state(seeded)
    answer = getattr(seeded, method)(GRAPH_G, data=body, content_type=content_type)
    assert answer.status_code == 400
    assert "a quad names graph <http://ex/h>" in answer.text and "writes graph <http://ex/g>" in answer.text
    assert state(seeded) == before and revisions(seeded) == 3


def test_literals_come_back_as_they_were_sent(client: FlaskClient) -> None:
    # lexical forms pyoxigraph keeps as they are: escapes, a language tag in lower case, a dateTime's offset
    lines = ['<http://ex/s> <http://ex/p> "tab\\there \\"quoted\\" caf\u00e9\\nline" <http://ex/g> .',
             '<http://ex/s> <http://ex/p> "hallo"@de-at <http://ex/g> .',
             '<http://ex/s> <http://ex/p> "2020-06-01T12:00:00+02:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
             ' <http://ex/g> .']
    assert client.put(GRAPH_G, data="\n".join(lines) + "\n", content_type=NQ).status_code == 201
    expected = {line.removesuffix(" .") for line in lines}
    assert quads(client.get(GRAPH_G, headers={"Accept": NQ}).data) == expected
    assert quads(client.get(f"{GRAPH_G}&revision-id=*--*", headers={"Accept": NQ}).data) == expected
    jsonld = client.get("/store", headers={"Accept": "application/ld+json"})
    assert quads(jsonld.data, RdfFormat.JSON_LD) == expected


# -- the whole store ------------------------------------------------------------------------------------------------

def test_the_whole_store_in_json_ld(seeded: FlaskClient) -> None:
    answer = seeded.get("/store", headers={"Accept": "application/ld+json"})
    assert answer.status_code == 200 and answer.mimetype == "application/ld+json"
    assert quads(answer.data, RdfFormat.JSON_LD) == state(seeded) == {
        '<http://ex/s> <http://ex/p> "a" <http://ex/g>', '<http://ex/s> <http://ex/p> "x" <http://ex/h>',
        '<http://ex/s> <http://ex/p> "d"'}


def test_put_replaces_and_delete_empties_the_whole_store_each_one_revision(seeded: FlaskClient) -> None:
    answer = seeded.put("/store", content_type=NQ, data='<http://ex/s> <http://ex/p> "n" <http://ex/k> .\n')
    assert answer.status_code == 204 and answer.headers["Revision-Ordinal"] == "4"
    assert state(seeded) == {'<http://ex/s> <http://ex/p> "n" <http://ex/k>'}
    answer = seeded.delete("/store")
    assert answer.status_code == 204 and answer.headers["Revision-Ordinal"] == "5"
    assert state(seeded) == set() and seeded.get(GRAPH_G).status_code == 404
    listed = seeded.get("/store/revisions").json
    assert [(r["operation"], r["inserted"], r["deleted"]) for r in listed[3:]] == [("gsp-put", 1, 3),
                                                                                   ("gsp-delete", 0, 1)]
    # the state before the DELETE is still readable
    assert quads(seeded.get("/store?revision-id=4", headers={"Accept": NQ}).data) == {
        '<http://ex/s> <http://ex/p> "n" <http://ex/k>'}


# -- revisions: the listing and ranges ------------------------------------------------------------------------------

def test_the_listing_of_the_revisions(seeded: FlaskClient) -> None:
    answer = seeded.get("/store/revisions")
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    listed = answer.json
    assert [(r["ordinal"], r["operation"], r["inserted"], r["deleted"], r["readable"]) for r in listed] == [
        (1, "gsp-put", 1, 0, True), (2, "gsp-put", 1, 0, True), (3, "gsp-put", 1, 0, True)]
    put = seeded.put(GRAPH_G, data='<http://ex/s> <http://ex/p> "a2" .', content_type=TTL)
    assert seeded.get("/store/revisions").json[-1]["uuid"] == put.headers["Revision-Id"]
    text = seeded.get("/store/revisions", headers={"Accept": "text/plain"})
    assert text.mimetype == "text/plain"
    assert text.text.splitlines() == [r["uuid"] for r in seeded.get("/store/revisions").json]
    refused = seeded.put("/store/revisions", data="<http://ex/s> <http://ex/p> 1 .", content_type=TTL)
    assert refused.status_code == 405 and refused.headers["Allow"] == "GET, HEAD" and revisions(seeded) == 4


def test_the_listing_says_which_states_retention_dropped(tmp_path: Path) -> None:
    client = http_app(ServerConfig(tmp_path / "data", in_memory=True, retention=1)).test_client()
    for value in "abc":
        client.put(GRAPH_G, data=f'<http://ex/s> <http://ex/p> "{value}" .', content_type=TTL)
    # retention 1 keeps HEAD~1…HEAD readable: revisions 2 and 3
    assert [r["readable"] for r in client.get("/store/revisions").json] == [False, True, True]
    assert client.get("/store?revision-id=1--3").status_code == 410
    assert objects(client.get(f"{GRAPH_G}&revision-id=*--*").data) == {"b", "c"}


def test_a_revision_range_reads_the_union_of_its_states(client: FlaskClient) -> None:
    for value in ("one", "two", "three"):  # revisions 1, 2, 3: each replaces the last
        client.put(GRAPH_G, data=f'<http://ex/s> <http://ex/p> "{value}" .', content_type=TTL)
    client.put(GRAPH_H, data='<http://ex/s> <http://ex/p> "h" .', content_type=TTL)  # revision 4

    def read(designator: str) -> set[str]:
        answer = client.get(f"{GRAPH_G}&revision-id={quote(designator)}")
        assert answer.status_code == 200, answer.text
        return objects(answer.data)

    assert read("1--2") == {"one", "two"}
    assert read("*--*") == {"one", "two", "three"}
    assert read("2--HEAD") == {"two", "three"}
    assert read("HEAD~2--HEAD~2") == {"two"}
    answer = client.get("/store?revision-id=3--4", headers={"Accept": NQ})
    assert answer.headers["Revision-Range"] == "3--4"
    assert quads(answer.data) == {'<http://ex/s> <http://ex/p> "three" <http://ex/g>',
                                  '<http://ex/s> <http://ex/p> "h" <http://ex/h>'}
    assert client.get(f"{GRAPH_H}&revision-id=1--3").status_code == 404  # <h> has no quad in revisions 1…3
    backwards = client.get(f"{GRAPH_G}&revision-id=3--1")
    assert backwards.status_code == 400 and "before it starts" in backwards.text
    malformed = client.get(f"{GRAPH_G}&revision-id=1--HEAD~x")
    assert malformed.status_code == 400 and "revision range '1--HEAD~x'" in malformed.text
    query = client.get("/sparql", query_string={"query": "ASK {}", "revision-id": "1--2"})
    assert query.status_code == 400 and "revision range" in query.text


def test_revision_ranges_parse() -> None:
    assert parse_revision_range("*--*") == RevisionRange(None, None)
    assert parse_revision_range("2016-06-20T10:00:00-05:00--HEAD") == RevisionRange("2016-06-20T10:00:00-05:00", "HEAD")
    assert parse_revision_range("2016-06-20T10:00:00Z") is None


# -- pseudo-graphs --------------------------------------------------------------------------------------------------

def test_dydra_names_of_the_default_graph_and_the_whole_store(seeded: FlaskClient) -> None:
    answer = seeded.get("/store?graph=urn:dydra:default", headers={"Accept": NQ})
    assert quads(answer.data) == {'<http://ex/s> <http://ex/p> "d"'}
    answer = seeded.get("/store?graph=urn:dydra:all", headers={"Accept": NQ})
    assert quads(answer.data) == state(seeded)
    assert seeded.put("/store?graph=urn:dydra:default", data='<http://ex/s> <http://ex/p> "d2" .',
                      content_type=TTL).status_code == 204
    assert '<http://ex/s> <http://ex/p> "d2"' in state(seeded)


def test_urn_dydra_named_is_the_named_graphs_alone(seeded: FlaskClient) -> None:
    answer = seeded.get("/store?graph=urn:dydra:named", headers={"Accept": NQ})
    assert answer.status_code == 200
    assert quads(answer.data) == {'<http://ex/s> <http://ex/p> "a" <http://ex/g>',
                                  '<http://ex/s> <http://ex/p> "x" <http://ex/h>'}
    past = seeded.get("/store?graph=urn:dydra:named&revision-id=1", headers={"Accept": NQ})
    assert quads(past.data) == {'<http://ex/s> <http://ex/p> "a" <http://ex/g>'}
    refused = seeded.put("/store?graph=urn:dydra:named", data="<http://ex/s> <http://ex/p> 1 .", content_type=TTL)
    assert refused.status_code == 405 and refused.headers["Allow"] == "GET, HEAD, DELETE" and revisions(seeded) == 3
    dropped = seeded.delete("/store?graph=urn:dydra:named")
    assert dropped.status_code == 204 and dropped.headers["Revision-Ordinal"] == "4"
    assert state(seeded) == {'<http://ex/s> <http://ex/p> "d"'}


def test_urn_dydra_timemap_is_the_datasets_timemap_as_rdf(seeded: FlaskClient) -> None:
    answer = seeded.get("/store?graph=urn:dydra:timemap", headers={"Accept": NQ})
    assert answer.status_code == 200
    tb, ore = "http://www.mementoweb.org/terms/tb/", "http://www.openarchives.org/ore/terms/"
    graph = list(parse(answer.data, RdfFormat.N_QUADS))
    assert all(q.graph_name == DefaultGraph() for q in graph)
    typed = {(q.subject.value, q.object.value) for q in graph if q.predicate.value.endswith("#type")}
    assert ("http://localhost/store", tb + "TimeGate") in typed
    assert ("http://localhost/store?graph=urn:dydra:timemap", ore + "ResourceMap") in typed
    assert any(q.predicate == NamedNode(tb + "timeGateFor") for q in graph)
    dated = {q.subject.value: q.object.value for q in graph if q.predicate.value.endswith("#mementoDatetime")}
    listed = seeded.get("/store/revisions").json
    assert dated == {f"http://localhost/store?revision-id={r['uuid']}":
                     r["committed_at"].replace("+00:00", "Z") for r in listed}
    assert seeded.delete("/store?graph=urn:dydra:timemap").status_code == 405 and revisions(seeded) == 3


def test_urn_dydra_service_description(client: FlaskClient) -> None:
    answer = client.get("/store?graph=urn:dydra:service-description", headers={"Accept": NQ})
    assert answer.status_code == 200
    sd = "http://www.w3.org/ns/sparql-service-description#"
    graph = list(parse(answer.data, RdfFormat.N_QUADS))
    assert any(q.predicate.value.endswith("#type") and q.object.value == sd + "Service" for q in graph)
    assert any(q.predicate.value == sd + "endpoint" and q.object.value == "http://localhost/sparql" for q in graph)


# -- the rewriting of a PATCH (pure) --------------------------------------------------------------------------------

@pytest.mark.parametrize(("update", "expected"), [
    ("INSERT DATA { <s> <p> 1 }", "INSERT DATA { GRAPH <http://ex/g> { <s> <p> 1 } }"),
    ("DELETE DATA { GRAPH <http://ex/g> { <s> <p> 1 } . <s> <p> 2 }",
     "DELETE DATA { GRAPH <http://ex/g> { <s> <p> 1 } . GRAPH <http://ex/g> { <s> <p> 2 } }"),
    ("DELETE { ?s <p> ?o } WHERE { ?s <p> ?o }", "WITH <http://ex/g> DELETE { ?s <p> ?o } WHERE { ?s <p> ?o }"),
    ("WITH <http://ex/g> DELETE { ?s <p> ?o } WHERE { ?s <p> ?o }",
     "WITH <http://ex/g> DELETE { ?s <p> ?o } WHERE { ?s <p> ?o }"),
    ("DELETE WHERE { ?s <p> ?o }", "WITH <http://ex/g> DELETE  { ?s <p> ?o } WHERE { ?s <p> ?o }"),
])
def test_retarget_update(update: str, expected: str) -> None:
    assert retarget_update(update, G, "http://x/") == expected
