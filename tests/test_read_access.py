"""Issue 36, "Read access" and the bearer-token answers of RFC 6750: with ``--read-token`` every read needs a token
(the read token or the write token), unless the server or the stream is public; ``/status`` and the console's static
files stay open; a token the server does not know is 401 ``invalid_token``, a known one without the right 403
``insufficient_scope``; every write still needs the write token, and a refused write changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask

from concentrator import cli
from concentrator.compose import http_app
from conformance.server import running_server
from conformance.websocket_client import Client
from protocol import ServerConfig
from protocol.services import services_of

WRITE, READ = "w-token", "r-token"
AS_WRITER = {"Authorization": f"Bearer {WRITE}"}
AS_READER = {"Authorization": f"Bearer {READ}"}
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
TTL = {"Content-Type": "text/turtle"}
#: routes that show nothing of the data and stay open (docs/access.md)
OPEN = {"/status", "/", "/console", "/console/<name>"}


def element(minute: int) -> str:
    return (f'<http://ex/e{minute}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"^^<{XSD_DT}> .\n'
            f"<http://ex/e{minute}> {{ <http://ex/o> <http://ex/hr> {70 + minute} . }}\n")


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    """A server with a write token and a read token, holding a graph, a stream (with an element and a sensor's own
    write token), a public stream and a rule."""
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True, query_processes=0, token=WRITE,
                                read_tokens=(READ,)))
    c = app.test_client()
    assert c.put("/store?graph=urn:g", data="<urn:s> <urn:p> 1 .", headers={**TTL, **AS_WRITER}).status_code == 201
    assert c.put("/streams/hr?write-token=sensor", headers=AS_WRITER).status_code == 201
    assert c.put("/streams/open?public=true", headers=AS_WRITER).status_code == 201
    for name in ("hr", "open"):
        assert c.post(f"/streams/{name}", data=element(0),
                      headers={"Content-Type": "application/trig", **AS_WRITER}).status_code == 200
    rule = ("CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <http://localhost/streams/hr?WINDOWS=R/HEAD/PT01M> "
            "{ GRAPH ?g { ?s ?p ?o } } }")
    assert c.put("/rules/r?output=out", data=rule,
                 headers={"Content-Type": "application/sparql-query", **AS_WRITER}).status_code == 201
    return app


def url_of(rule: str) -> str:
    filled = {"<name>": "r" if rule.startswith("/rules") else "hr", "<path:subpath>": "g",
              "<start>": "2016-06-20T10:00:00Z", "<revision_id>": "x", "<publication>": "p"}
    for argument, value in filled.items():
        rule = rule.replace(argument, value)
    return rule


def test_every_read_needs_a_token(app: Flask) -> None:
    """Walk the route table: every GET of every route but the open ones answers 401 without a token and something
    else with the read token or the write token (new routes are covered by default)."""
    c = app.test_client()
    walked = 0
    for rule in app.url_map.iter_rules():
        if "GET" not in (rule.methods or set()) or rule.rule in OPEN:
            continue
        websocket = {"Upgrade": "websocket", "Connection": "Upgrade"} if getattr(rule, "websocket", False) else {}
        url = url_of(rule.rule) + ("?WINDOWS=R/HEAD/PT01M" if websocket else "")
        r = c.get(url, headers=websocket)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer"), (rule.rule, r.status_code)
        if not websocket:
            for token in (AS_READER, AS_WRITER):
                assert c.get(url, headers=token).status_code not in (401, 403), (rule.rule, token)
        walked += 1
    assert walked >= 15
    for url in ("/sparql?query=ASK%7B%7D", "/streams/hr?WINDOWS=HEAD", "/streams/hr/ldes", "/metrics", "/rules",
                "/streams", "/store?graph=urn:g", "/streams/hr/elements"):
        assert c.get(url).status_code == 401, url
    query = c.post("/sparql", data="ASK {}", headers={"Content-Type": "application/sparql-query"})
    assert query.status_code == 401  # a query posted is a read too


def test_status_the_console_and_options_stay_open(app: Flask) -> None:
    c = app.test_client()
    status = c.get("/status")
    assert status.status_code == 200
    assert status.get_json()["access"] == {"token_required": True, "read_only": False, "read_token_required": True}
    for url in ("/", "/console", "/console/console.js"):
        assert c.get(url).status_code == 200, url
    assert c.options("/sparql").status_code == 200


def test_a_public_stream_is_read_without_a_token(app: Flask) -> None:
    c = app.test_client()
    described = c.get("/streams/open").get_json()
    assert described["public"] is True and described["elements"] == 1
    assert c.get("/streams/open/elements").status_code == 200
    assert c.get("/streams/open/ldes").status_code == 200
    r = c.get("/streams/open", query_string={"query": "SELECT * { GRAPH ?g { ?s ?p ?o } }"},
              headers={"Accept": "application/sparql-results+json"})
    assert r.status_code == 200 and len(r.get_json()["results"]["bindings"]) == 1
    assert c.get("/streams/hr").status_code == 401  # the other stream is not
    assert c.get("/sparql?query=ASK%7B%7D").status_code == 401  # nor the dataset
    r = c.post("/streams/open", data=element(1), headers={"Content-Type": "application/trig"})
    assert r.status_code == 401  # public reads, not writes
    assert c.patch("/streams/open?public=false", headers=AS_WRITER).status_code in (200, 204)
    assert c.get("/streams/open").status_code == 401


def test_a_public_server_reads_without_a_token(tmp_path: Path) -> None:
    c = http_app(ServerConfig(tmp_path / "data", in_memory=True, query_processes=0, token=WRITE,
                              public=True)).test_client()
    assert c.get("/sparql?query=ASK%7B%7D").status_code == 200
    assert c.get("/status").get_json()["access"]["read_token_required"] is False


def test_bearer_answers_follow_rfc_6750(app: Flask) -> None:
    c = app.test_client()
    unknown = c.get("/sparql?query=ASK%7B%7D", headers={"Authorization": "Bearer guessed"})
    assert unknown.status_code == 401
    assert 'error="invalid_token"' in unknown.headers["WWW-Authenticate"]
    sensor = c.get("/streams/hr", headers={"Authorization": "Bearer sensor"})  # a stream's write token reads nothing
    assert sensor.status_code == 403 and 'error="insufficient_scope"' in sensor.headers["WWW-Authenticate"]
    write = c.put("/store?graph=urn:h", data="<urn:s> <urn:p> 2 .", headers={**TTL, "Authorization": "Bearer guessed"})
    assert write.status_code == 401 and 'error="invalid_token"' in write.headers["WWW-Authenticate"]


def state(app: Flask) -> Any:
    parts = services_of(app)
    with parts.dataset.reading() as store:
        quads = sorted(str(quad) for quad in store)
    streams = {name: (repr(stream.config), stream.head()) for name in parts.streams.names()
               if (stream := parts.streams.get(name))}
    return parts.dataset.head, quads, streams, [(r.name, r.text, r.output) for r in parts.rules.rules()]


def test_the_read_token_writes_nothing(app: Flask) -> None:
    c = app.test_client()
    before = state(app)
    writes: list[tuple[str, str, dict[str, Any]]] = [
        ("PUT", "/store?graph=urn:g", {"data": "<urn:x> <urn:y> 3 .", "headers": TTL}),
        ("POST", "/store?graph=urn:g", {"data": "<urn:x> <urn:y> 3 .", "headers": TTL}),
        ("DELETE", "/store?graph=urn:g", {}),
        ("POST", "/sparql", {"data": "CLEAR ALL", "headers": {"Content-Type": "application/sparql-update"}}),
        ("POST", "/sparql", {"data": {"update": "CLEAR ALL"}}),
        ("POST", "/streams/hr", {"data": element(5), "headers": {"Content-Type": "application/trig"}}),
        ("PUT", "/streams/hr?public=true", {}),
        ("DELETE", "/streams/hr", {}),
        ("PUT", "/rules/r?output=out", {"data": "CONSTRUCT {} {}",
                                        "headers": {"Content-Type": "application/sparql-query"}}),
        ("DELETE", "/rules/r", {}),
    ]
    for method, url, request in writes:
        headers = {**request.pop("headers", {}), **AS_READER}
        r = c.open(url, method=method, headers=headers, **request)
        assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["WWW-Authenticate"], (method, url)
        assert state(app) == before, f"{method} {url} with the read token changed the server"


@pytest.mark.parametrize(("arguments", "message"), [
    (["--host", "0.0.0.0", "--token", "w"], "give a read token"),
    (["--token", "w", "--read-token", "r", "--public"], "give one of them"),
])
def test_serve_refuses_open_reads_off_loopback(arguments: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["serve", "--data", str(tmp_path), "--no-pipeline", *arguments]) == 2
    assert message in capsys.readouterr().err


# -- RFC 6750 §2.3: access_token= on WebSocket handshakes only ------------------------------------------------------

WEBSOCKET = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


def test_access_token_is_not_taken_from_plain_requests(app: Flask) -> None:
    """A URL is logged and shared: outside a WebSocket handshake, access_token= is no token (401, saying where it is
    taken), and no parameter either (not a near miss of one: with the header, the same request answers 200)."""
    c = app.test_client()
    for url in (f"/sparql?query=ASK%7B%7D&access_token={READ}", f"/streams/hr?access_token={WRITE}",
                f"/streams/hr?WINDOWS=HEAD&%61ccess_token={READ}"):
        r = c.get(url)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == 'Bearer realm="concentrator"', url
        assert "access_token= is taken from WebSocket handshakes only" in r.text, url
        assert c.get(url, headers=AS_READER).status_code == 200, url
    write = c.post(f"/streams/hr?access_token={WRITE}", data=element(1), headers={"Content-Type": "application/trig"})
    assert write.status_code == 401  # nor as a write token
    assert c.get("/streams/hr", headers=AS_READER).get_json()["elements"] == 1


def test_a_websocket_handshake_takes_access_token_only_without_authorization(app: Flask) -> None:
    """The access check's answers to handshakes that carry access_token=: an unknown token 401 invalid_token, a
    stream's write token (which reads nothing) 403, and with an Authorization header the header's token alone."""
    c = app.test_client()
    url = "/streams/hr?WINDOWS=R/HEAD/PT01M&access_token="
    unknown = c.get(url + "guessed", headers=WEBSOCKET)
    assert unknown.status_code == 401 and 'error="invalid_token"' in unknown.headers["WWW-Authenticate"]
    sensor = c.get(url + "sensor", headers=WEBSOCKET)
    assert sensor.status_code == 403 and 'error="insufficient_scope"' in sensor.headers["WWW-Authenticate"]
    both = c.get(url + READ, headers={**WEBSOCKET, "Authorization": "Bearer guessed"})
    assert both.status_code == 401 and 'error="invalid_token"' in both.headers["WWW-Authenticate"]
    missing = c.get("/streams/hr?WINDOWS=R/HEAD/PT01M", headers=WEBSOCKET)
    assert missing.status_code == 401 and "access_token=<token>" in missing.text


@pytest.mark.slow
def test_a_websocket_handshake_with_access_token_is_accepted_and_the_token_is_logged_nowhere() -> None:
    """On the real server (gunicorn, its access log on): a browser's WebSocket, which cannot send Authorization,
    follows a windowed IRI with access_token=<read token>; without it the handshake is 401. Neither /status (its
    continuous responses) nor the server's log shows the token, accepted or refused."""
    reader, wrong = "reader-7f3a9c", "guessed-51d2e8"
    with running_server(["--no-pipeline", "--token", WRITE, "--read-token", reader]) as server:
        assert requests.put(f"{server.url}/streams/hr", headers=AS_WRITER, timeout=10).status_code == 201
        ws_url = server.url.replace("http://", "ws://") + "/streams/hr?WINDOWS=R/HEAD/PT01M"
        refused = requests.get(f"{server.url}/streams/hr?WINDOWS=R/HEAD/PT01M", headers=WEBSOCKET, timeout=10)
        assert refused.status_code == 401
        wrong_token = requests.get(f"{server.url}/streams/hr?WINDOWS=R/HEAD/PT01M&access_token={wrong}",
                                   headers=WEBSOCKET, timeout=10)
        assert wrong_token.status_code == 401 and 'error="invalid_token"' in wrong_token.headers["WWW-Authenticate"]
        ws = Client.connect(f"{ws_url}&access_token={reader}")
        try:
            opening = json.loads(ws.receive(timeout=30))
            assert opening["Window-From"] == "0"  # a new sequence of 1-minute windows: the first is window 0
            assert opening["Window-Sequence"]
            status = requests.get(f"{server.url}/status", timeout=10)
            listed = status.json()["continuous"]
            assert [(r["stream"], r["ref"], r["packaging"]) for r in listed] == [("hr", "R/HEAD/PT1M", "websocket")]
            assert reader not in status.text and "access_token" not in status.text
        finally:
            ws.close()
        log = server.log_path.read_text(errors="replace")
    assert "GET /streams/hr?WINDOWS=R/HEAD/PT01M " in log  # the access log names the handshakes, without the token
    assert reader not in log and wrong not in log and "access_token" not in log
