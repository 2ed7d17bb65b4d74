"""Access on every route (issue 30): walk the app's route table and send each method the hostile requests a probe of
a server with ``--token`` sent without a token. None of them changes anything; every route that changes the server
answers 401; the routes that read are listed here, independently of the code's own declarations.

Also the findings one by one, as the probe gave them: an update form whose key is percent-encoded, an update after
70 KB of form padding, a bulk rule registration, a punctuation to year 10000 with a form Content-Type, and 2,000
window sequences registered by anonymous reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from concentrator.compose import http_app
from protocol import ServerConfig
from protocol.services import services_of

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
FORM = "application/x-www-form-urlencoded"
INSERT = "INSERT DATA { <urn:evil:s> <urn:evil:p> 1 }"
RULE = (f"CONSTRUCT {{ GRAPH ?g {{ ?s ?p ?o }} ?g <{PROV}> ?t }} WHERE {{ "
        f"SERVICE <http://localhost/streams/hr?WINDOWS=R/HEAD/PT01M> {{ GRAPH ?g {{ ?s ?p ?o }} ?g <{PROV}> ?t }} }}")

#: (route, method) pairs that only read, whatever their parameters (docs/access.md)
READS = {
    ("/", "GET"), ("/console", "GET"), ("/console/<name>", "GET"), ("/status", "GET"), ("/metrics", "GET"),
    ("/sparql", "GET"), ("/store", "GET"), ("/store/<path:subpath>", "GET"), ("/streams", "GET"),
    ("/streams/<name>", "GET"), ("/streams/<name>/elements", "GET"), ("/streams/<name>/windows", "GET"),
    ("/streams/<name>/windows/<revision_id>", "GET"), ("/streams/<name>/windows/<revision_id>", "POST"),
    ("/streams/<name>/ldes", "GET"), ("/streams/<name>/ldes/<start>", "GET"),
    ("/streams/<name>/publications", "GET"), ("/streams/<name>/publications/<publication>", "GET"),
    ("/rules", "GET"), ("/rules/<name>", "GET"), ("/store/revisions", "GET"),
    ("/queries", "GET"), ("/queries/<name>", "GET"), ("/queries/<name>/results", "GET"),
}
#: WebSocket routes that only read (a registered query's results); the others' handshake may be an upload
WEBSOCKET_READS = {"/queries/<name>/results"}
#: routes whose POST reads or writes by what it carries: a query reads, an update or an upload writes
MIXED = {("/sparql", "POST"), ("/streams/<name>", "POST")}


def element(minute: int, value: int, year: int = 2016) -> str:
    return (f'<http://ex/e{year}{minute}> <{PROV}> "{year}-06-20T10:{minute:02d}:00Z"^^<{XSD_DT}> .\n'
            f"<http://ex/e{year}{minute}> {{ <http://ex/o{minute}> <http://ex/hr> {value} . }}\n")


#: what a hostile client sends: (name, extra query string, Content-Type, body)
HOSTILE: list[tuple[str, str, str | None, str]] = [
    ("plain", "", None, ""),
    ("form update", "", FORM, "update=" + INSERT),
    ("form update, key percent-encoded", "", FORM, "%75pdate=" + INSERT),
    ("form update after 70 KB of padding", "", FORM, "pad=" + "x" * 70_000 + "&update=" + INSERT),
    ("SPARQL Update body", "", "application/sparql-update", INSERT),
    ("TriG element", "", "application/trig", element(9, 99)),
    ("Turtle graph", "", "text/turtle", "<urn:evil:s> <urn:evil:p> 2 ."),
    ("JSON rules", "", "application/json", json.dumps({"rules": [{"name": "evil", "query": RULE, "output": "hr"}]})),
    ("punctuation to year 10000, form Content-Type", "punctuation=9999-12-31T23:59:59-14:00", FORM, ""),
    ("punctuation, no body", "punctuation=2016-06-20T11:00:00Z", None, ""),
]


@pytest.fixture
def server(tmp_path: Path) -> Flask:
    """A server with a write token, holding a graph, a stream with two elements and a rule."""
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True, token=TOKEN))
    c = app.test_client()
    assert c.put("/store?graph=urn:g", data="<urn:s> <urn:p> 1 .", headers={**AUTH, "Content-Type": "text/turtle"}) \
        .status_code == 201
    assert c.put("/streams/hr", headers=AUTH).status_code == 201
    assert c.post("/streams/hr", data=element(0, 70) + element(2, 72),
                  headers={**AUTH, "Content-Type": "application/trig"}).status_code == 200
    r = c.put("/rules/r?output=out", data=RULE, headers={**AUTH, "Content-Type": "application/sparql-query"})
    assert r.status_code == 201, r.text
    return app


def state(app: Flask) -> Any:
    """Everything a write could change: the dataset (revision and quads), every stream (configuration, elements,
    stream time), every rule. Window sequences are left out: reads may register them (bounded, tested below)."""
    parts = services_of(app)
    with parts.dataset.reading() as store:
        quads = sorted(str(quad) for quad in store)
    streams = {name: (repr(stream.config), stream.head(), stream.stream_time, len(stream))
               for name in parts.streams.names() if (stream := parts.streams.get(name))}
    rules = [(rule.name, rule.text, rule.output) for rule in parts.rules.rules()]
    return parts.dataset.head, quads, streams, rules


def url_of(rule: str) -> str:
    """A concrete URL for a route of the table: its arguments filled with things the server has."""
    filled = {"<name>": "r" if rule.startswith("/rules") else ("x" if rule.startswith("/console") else "hr"),
              "<path:subpath>": "g", "<start>": "2016-06-20T10:00:00Z", "<revision_id>": "x",
              "<publication>": "p"}
    for argument, value in filled.items():
        rule = rule.replace(argument, value)
    return rule


def test_every_route_refuses_anonymous_writes_and_changes_nothing(server: Flask) -> None:
    c = server.test_client()
    before = state(server)
    walked = set()
    for rule in server.url_map.iter_rules():
        websocket = bool(getattr(rule, "websocket", False))
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            walked.add((rule.rule, method))
            for name, query, content_type, body in HOSTILE:
                url = url_of(rule.rule) + (f"?{query}" if query else "")
                headers = {"Upgrade": "websocket", "Connection": "Upgrade"} if websocket else {}
                r = c.open(url, method=method, data=body, content_type=content_type, headers=headers)
                where = f"{method} {rule.rule}{' (WebSocket)' if websocket else ''} with {name}: {r.status_code}"
                assert state(server) == before, f"{where} changed the server"
                if websocket and rule.rule not in WEBSOCKET_READS:
                    assert r.status_code == 401, where  # an upload WebSocket: the handshake needs the token
                elif not websocket and (rule.rule, method) not in READS | MIXED:
                    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), where
    assert READS | MIXED <= walked, "a read route listed here is no longer in the app"
    assert ("/rules", "PUT") in walked and ("/sparql", "POST") in walked


@pytest.mark.parametrize("body", [
    "%75pdate=" + INSERT,  # the key percent-encoded
    "pad=" + "x" * 70_000 + "&update=" + INSERT,  # the update after 64 KiB
    "query=ASK%7B%7D&update=" + INSERT,
], ids=["encoded key", "after padding", "beside a query"])
def test_an_update_form_needs_the_token_however_it_is_written(server: Flask, body: str) -> None:
    c = server.test_client()
    r = c.post("/sparql", data=body, content_type=FORM)
    assert r.status_code == 401 and "SPARQL Update" in r.text
    assert not c.post("/sparql", data={"query": "ASK { <urn:evil:s> ?p ?o }"},
                      headers={"Accept": "application/sparql-results+json"}).get_json()["boolean"]
    if body.startswith("%75"):
        assert c.post("/sparql", data=body, content_type=FORM, headers=AUTH).status_code == 204  # with the token
        assert c.post("/sparql", data={"query": "ASK { <urn:evil:s> ?p ?o }"},
                      headers={"Accept": "application/sparql-results+json"}).get_json()["boolean"]


def test_bulk_rules_need_the_token_and_replace_nothing(server: Flask) -> None:
    c = server.test_client()
    evil = {"rules": [{"name": "r", "query": RULE, "output": "hr"}, {"name": "new", "query": RULE, "output": "hr"}]}
    r = c.put("/rules", json=evil)
    assert r.status_code == 401
    assert [(rule["name"], rule["output"]) for rule in c.get("/rules").get_json()] == [("r", "out")]


def test_a_form_punctuation_needs_the_token_and_stream_time_stays(server: Flask) -> None:
    c = server.test_client()
    r = c.post("/streams/hr?punctuation=9999-12-31T23:59:59-14:00", content_type=FORM)
    assert r.status_code == 401
    described = c.get("/streams/hr").get_json()
    assert described["stream_time"] == "2016-06-20T10:02:00Z" and described["elements"] == 2
    r = c.post("/streams/hr", data=element(4, 74), headers={**AUTH, "Content-Type": "application/trig"})
    assert r.status_code == 200  # later elements are still accepted


def test_a_query_posted_to_a_stream_stays_a_read(server: Flask) -> None:
    c = server.test_client()
    for data, content_type in (("query=SELECT%20*%20%7B%20GRAPH%20?g%20%7B%20?s%20?p%20?o%20%7D%20%7D", FORM),
                               ("SELECT * { GRAPH ?g { ?s ?p ?o } }", "application/sparql-query")):
        r = c.post("/streams/hr", data=data, content_type=content_type,
                   headers={"Accept": "application/sparql-results+json"})
        assert r.status_code == 200 and len(r.get_json()["results"]["bindings"]) == 2


def test_rules_writing_into_a_protected_stream_need_its_token(tmp_path: Path) -> None:
    """On a server without a token, a stream with its own write token: a rule that would write into it (new or
    replacing one), or deleting the rule that does, needs that token."""
    c = http_app(ServerConfig(tmp_path / "data", in_memory=True)).test_client()
    assert c.put("/streams/hr").status_code == 201
    assert c.put("/streams/alerts?write-token=k").status_code == 201
    query = {"Content-Type": "application/sparql-query"}
    assert c.put("/rules/r?output=alerts", data=RULE, headers=query).status_code == 401
    assert c.put("/rules", json={"rules": [{"name": "r", "query": RULE, "output": "alerts"}]}).status_code == 401
    assert c.get("/rules").get_json() == []
    assert c.put("/rules/r?output=alerts", data=RULE, headers={**query, "Authorization": "Bearer k"}) \
        .status_code == 201
    assert c.put("/rules/r?output=other", data=RULE, headers=query).status_code == 401  # it wrote into alerts
    assert c.delete("/rules/r").status_code == 401
    assert [rule["output"] for rule in c.get("/rules").get_json()] == ["alerts"]
    assert c.delete("/rules/r", headers={"Authorization": "Bearer k"}).status_code == 204


def test_reads_register_a_bounded_number_of_window_sequences(tmp_path: Path) -> None:
    """The probe registered 2,000 durable sequences anonymously with ``answer=latest&timeout=0``: a client's reads
    may hold ``sequences_per_client`` of them; past it 429, nothing registered; the write token is not bounded."""
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True, token=TOKEN, sequences_per_client=5))
    c: FlaskClient = app.test_client()
    assert c.put("/streams/hr", headers=AUTH).status_code == 201
    assert c.post("/streams/hr", data=element(0, 70), headers={**AUTH, "Content-Type": "application/trig"}) \
        .status_code == 200
    codes = [c.get(f"/streams/hr?WINDOWS=R/HEAD/PT{i}S&answer=latest&timeout=0").status_code for i in range(1, 21)]
    assert codes[:5] == [503] * 5, codes  # registered; no window complete yet
    assert set(codes[5:]) == {429}, codes
    windows = services_of(app).streams.get("hr").windows
    assert len(windows.sequences()) == 5 and windows.held_by("127.0.0.1") == 5
    r = c.get("/streams/hr?WINDOWS=R/HEAD/PT1S&answer=latest&timeout=0")  # one it registered: reused, no 429
    assert r.status_code == 503
    r = c.get("/streams/hr?WINDOWS=R/HEAD/PT99S&answer=latest&timeout=0")
    assert r.status_code == 429 and "--sequences-per-client" in r.text and "Retry-After" in r.headers
    r = c.get("/streams/hr?WINDOWS=R/HEAD/PT99S&answer=latest&timeout=0", headers=AUTH)
    assert r.status_code == 503 and len(windows.sequences()) == 6
