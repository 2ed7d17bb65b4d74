"""Access (issue 6): write tokens, read-only mode, rate limit, the SERVICE allowlist, and refusing to serve other
machines without a token. A refused write writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import flask
import pytest
from flask.testing import FlaskClient

from concentrator.compose import http_app
from conformance.server import REPO_ROOT, free_port
from protocol import ServerConfig
from protocol.access import RateLimiter, need_of, parsed_request

TTL = {"Content-Type": "text/turtle"}
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(("method", "path", "content_type", "body", "write"), [
    ("GET", "/store", "", "", False),
    ("POST", "/sparql", "application/sparql-query", "ASK {}", False),
    ("POST", "/sparql", "application/x-www-form-urlencoded", "query=ASK%7B%7D", False),
    ("POST", "/sparql", "application/x-www-form-urlencoded", "update=CLEAR%20ALL", True),
    ("POST", "/sparql", "application/x-www-form-urlencoded", "%75pdate=CLEAR%20ALL", True),  # the key decoded
    ("POST", "/sparql", "application/x-www-form-urlencoded", "pad=" + "x" * 70_000 + "&update=CLEAR%20ALL", True),
    ("POST", "/sparql", "application/sparql-update", "CLEAR ALL", True),
    ("POST", "/sparql", "text/plain", "CLEAR ALL", True),  # not a query: deny by default
    ("PUT", "/store", "text/turtle", "", True),
    ("DELETE", "/store", "", "", True),
    ("POST", "/streams/hr", "application/trig", "", True),  # upload
    ("POST", "/streams/hr?punctuation=2016-06-20T10:00:00Z", "application/x-www-form-urlencoded", "", True),
    ("POST", "/streams/hr", "application/sparql-query", "ASK {}", False),  # a query on the stream
    ("POST", "/streams/hr?WINDOWS=HEAD", "application/trig", "", False),  # a windowed IRI is never appended to
    ("PUT", "/streams/hr", "", "", True),
    ("PUT", "/rules/r", "application/sparql-query", "", True),
    ("PUT", "/rules", "application/json", "{}", True),
    ("DELETE", "/rules/r", "", "", True),
    ("OPTIONS", "/store", "", "", False),
])
def test_what_is_a_write(tmp_path: Path, method: str, path: str, content_type: str, body: str, write: bool) -> None:
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True))
    with app.test_request_context(path, method=method, data=body, content_type=content_type or None):
        assert need_of(app, parsed_request(), flask.request.url_rule).write is write


def client(tmp_path: Path, **options: object) -> FlaskClient:
    return http_app(ServerConfig(tmp_path / "data", in_memory=True, **options)).test_client()  # type: ignore[arg-type]


def test_writes_need_the_token_and_a_refused_write_writes_nothing(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    body = "<http://ex/s> <http://ex/p> 1 ."
    r = c.put("/store?graph=http://ex/g", data=body, headers=TTL)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer") and "Bearer" in r.text
    r = c.put("/store?graph=http://ex/g", data=body, headers={**TTL, "Authorization": "Bearer wrong"})
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"]  # RFC 6750 §3.1
    assert c.get("/store?graph=http://ex/g").status_code == 404  # nothing was written
    for request in ({"data": "INSERT DATA { <urn:a> <urn:b> 1 }",
                     "headers": {"Content-Type": "application/sparql-update"}},
                    {"data": {"update": "INSERT DATA { <urn:a> <urn:b> 1 }"}}):
        assert c.post("/sparql", **request).status_code == 401  # type: ignore[arg-type]
    assert c.put("/streams/hr").status_code == 401
    assert c.put("/rules/r?output=o", data="CONSTRUCT {} {}",
                 headers={"Content-Type": "application/sparql-query"}).status_code == 401
    ask = c.post("/sparql", data="ASK { ?s ?p ?o }", headers={"Content-Type": "application/sparql-query",
                                                               "Accept": "application/sparql-results+json"})
    assert ask.status_code == 200 and ask.get_json()["boolean"] is False  # reads need no token; nothing written
    assert c.put("/store?graph=http://ex/g", data=body, headers={**TTL, **AUTH}).status_code == 201
    assert c.put("/streams/hr", headers=AUTH).status_code == 201
    upload = '<http://ex/e> <http://www.w3.org/ns/prov#generatedAtTime> "2016-06-20T10:00:00Z"^^' \
             '<http://www.w3.org/2001/XMLSchema#dateTime> .\n<http://ex/e> { <http://ex/a> <http://ex/b> 1 . }\n'
    assert c.post("/streams/hr", data=upload, headers={"Content-Type": "application/trig"}).status_code == 401
    assert c.get("/streams/hr").get_json()["elements"] == 0
    assert c.post("/streams/hr", data=upload, headers={"Content-Type": "application/trig", **AUTH}).status_code == 200
    query = c.post("/streams/hr", data="SELECT * { GRAPH ?g { ?s ?p ?o } }", headers={
        "Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"})
    assert query.status_code == 200 and len(query.get_json()["results"]["bindings"]) == 1  # a query is a read


def test_read_only_refuses_every_write(tmp_path: Path) -> None:
    c = client(tmp_path, read_only=True)
    r = c.put("/store?graph=http://ex/g", data="<http://ex/s> <http://ex/p> 1 .", headers=TTL)
    assert r.status_code == 403 and "read-only" in r.text
    assert c.post("/sparql", data="INSERT DATA { <urn:a> <urn:b> 1 }",
                  headers={"Content-Type": "application/sparql-update"}).status_code == 403
    assert c.put("/streams/hr").status_code == 403
    assert c.get("/store").status_code == 200 and c.get("/status").status_code == 200


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    c = client(tmp_path, rate_limit=2.0)
    codes = [c.get("/status").status_code for _ in range(3)]
    assert codes[:2] == [200, 200] and codes[2] == 429
    r = c.get("/status")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1 and "the limit is 2 per second" in r.text
    bucket = RateLimiter(2.0)
    assert [bucket.allow("a", now=0.0), bucket.allow("a", now=0.0)] == [None, None]
    assert bucket.allow("a", now=0.0) == pytest.approx(0.5) and bucket.allow("b", now=0.0) is None
    assert bucket.allow("a", now=0.6) is None  # refilled at 2 per second


def test_service_allowlist_in_queries_and_rule_registration(tmp_path: Path) -> None:
    c = client(tmp_path, service_allow=("127.0.0.1:8080",))
    r = c.post("/sparql", data="SELECT * { SERVICE <http://10.1.2.3:22/sparql> { ?s ?p ?o } }",
               headers={"Content-Type": "application/sparql-query"})
    assert r.status_code == 403 and "10.1.2.3:22 is not on this server's SERVICE allowlist" in r.text
    assert c.put("/streams/hr").status_code == 201
    rule = ("CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <http://localhost/streams/hr?WINDOWS=R/HEAD/PT01M> "
            "{ ?s ?p ?o } SERVICE <http://internal.example:9200/_search> { ?s ?p ?o } }")
    r = c.put("/rules/probe?output=out", data=rule, headers={"Content-Type": "application/sparql-query"})
    assert r.status_code == 403 and "internal.example:9200" in r.text
    assert c.get("/rules").get_json() == []  # refused at registration: nothing registered
    assert c.get("/streams/out").status_code == 404  # and no output stream created


def test_serving_other_machines_needs_a_token() -> None:
    done = subprocess.run([sys.executable, "-m", "concentrator", "serve", "--host", "0.0.0.0", "--port",
                           str(free_port()), "--no-pipeline"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "give a write token" in done.stderr


UPLOAD = ('<http://ex/e{n}> <http://www.w3.org/ns/prov#generatedAtTime> "2016-06-20T10:0{n}:00Z"^^'
          '<http://www.w3.org/2001/XMLSchema#dateTime> .\n<http://ex/e{n}> {{ <http://ex/a> <http://ex/b> {n} . }}\n')
TRIG = {"Content-Type": "application/trig"}


def test_per_stream_write_tokens(tmp_path: Path) -> None:
    c = client(tmp_path, token=TOKEN)
    assert c.put("/streams/hr?write-token=sensor-7", headers=AUTH).status_code == 201
    assert c.put("/streams/bp", headers=AUTH).status_code == 201
    sensor = {"Authorization": "Bearer sensor-7"}
    assert c.post("/streams/hr", data=UPLOAD.format(n=1), headers={**TRIG, **sensor}).status_code == 200
    r = c.post("/streams/bp", data=UPLOAD.format(n=1), headers={**TRIG, **sensor})
    assert r.status_code == 403  # the sensor's token writes its own stream only
    assert c.put("/store?graph=http://ex/g", data="<http://ex/s> <http://ex/p> 1 .",
                 headers={**TTL, **sensor}).status_code == 403
    described = c.get("/streams/hr").get_json()
    assert described["write_token"] is True and "sensor-7" not in str(described)
    assert c.put("/streams/hr", headers=AUTH).status_code == 204  # reconfigured: the token stays
    assert c.post("/streams/hr", data=UPLOAD.format(n=2), headers={**TRIG, **sensor}).status_code == 200
    assert [c.get(f"/streams/{name}").get_json()["elements"] for name in ("hr", "bp")] == [2, 0]


def test_a_stream_token_protects_its_stream_on_an_open_server(tmp_path: Path) -> None:
    c = client(tmp_path)  # no server token: writes are open, except to a stream that has its own token
    assert c.put("/streams/hr?write-token=k").status_code == 201
    assert c.post("/streams/hr", data=UPLOAD.format(n=1), headers=TRIG).status_code == 401
    assert c.post("/streams/hr", data=UPLOAD.format(n=1), headers={**TRIG, "Authorization": "Bearer no"}).status_code \
        == 401  # a token this server does not know (RFC 6750 §3.1)
    assert c.delete("/streams/hr").status_code == 401
    assert c.get("/streams/hr").get_json()["elements"] == 0
    assert c.post("/streams/hr", data=UPLOAD.format(n=1),
                  headers={**TRIG, "Authorization": "Bearer k"}).status_code == 200
    assert c.put("/streams/other").status_code == 201  # other writes stay open
