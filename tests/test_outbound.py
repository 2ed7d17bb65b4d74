"""Where SERVICE may reach (issue 30), with the probe's requests: a redirect off the allowlist is not followed (every
hop is checked), a remote error body is never passed on to the client, a chain of SERVICE calls is bounded
(``Concentrator-Service-Hops``), a SERVICE back to this server under its loopback names is evaluated in-process
whatever ``Host`` the client sent, and pyoxigraph never gets a SERVICE to call by itself (a query our tokenizer
cannot read, an update).

A small HTTP server in a thread plays the remote endpoints; it records every request it gets."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from concentrator.compose import http_app
from conformance.server import free_port
from protocol import ServerConfig

QUERY = {"Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"}
ONE_ROW = b'{"head":{"vars":["x"]},"results":{"bindings":[{"x":{"type":"literal","value":"remote"}}]}}'
SECRET = b"INTERNAL-ONLY: db password hunter2"


class Remote(http.server.ThreadingHTTPServer):
    """Answers by path: /results (one row), /redirect-to/<port><path> (307 to 127.0.0.1:<port>), /error (500 with
    an internal body); ``seen`` lists (port, path, hops header) of every request."""

    seen: list[tuple[int, str, str | None]]


class Handler(http.server.BaseHTTPRequestHandler):
    server: Remote

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.server.server_address[1], self.path,
                                 self.headers.get("Concentrator-Service-Hops")))
        if self.path.startswith("/redirect-to/"):
            port, _, rest = self.path[len("/redirect-to/"):].partition("/")
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{port}/{rest}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, status = (ONE_ROW, 200) if self.path == "/results" else (SECRET, 500)
        self.send_response(status)
        self.send_header("Content-Type", "application/sparql-results+json" if status == 200 else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def remote() -> Remote:
    server = Remote(("127.0.0.1", 0), Handler)
    server.seen = []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def remotes() -> Iterator[tuple[Remote, Remote]]:
    """Two endpoints: the first on the allowlist, the second (an internal service) not."""
    allowed, internal = remote(), remote()
    yield allowed, internal
    for server in (allowed, internal):
        server.shutdown()
        server.server_close()


def client(tmp_path: Path, allowed: Remote, **options: object) -> FlaskClient:
    allow = (f"127.0.0.1:{allowed.server_address[1]}",)
    return http_app(ServerConfig(tmp_path / "data", in_memory=True, service_allow=allow,  # type: ignore[arg-type]
                                   **options)).test_client()


def test_a_redirect_off_the_allowlist_is_not_followed(tmp_path: Path, remotes: tuple[Remote, Remote]) -> None:
    allowed, internal = remotes
    c = client(tmp_path, allowed)
    a, i = allowed.server_address[1], internal.server_address[1]
    r = c.post("/sparql", data=f"SELECT * {{ SERVICE <http://127.0.0.1:{a}/redirect-to/{i}/secret> {{ ?x ?p ?o }} }}",
               headers=QUERY)
    assert r.status_code == 403 and f"127.0.0.1:{i} is not on this server's SERVICE allowlist" in r.text
    assert internal.seen == []  # the internal service was never asked
    assert SECRET.decode() not in r.text


def test_a_redirect_on_the_allowlist_is_followed(tmp_path: Path, remotes: tuple[Remote, Remote]) -> None:
    allowed, _ = remotes
    a = allowed.server_address[1]
    c = client(tmp_path, allowed)
    r = c.post("/sparql", data=f"SELECT ?x {{ SERVICE <http://127.0.0.1:{a}/redirect-to/{a}/results> {{ ?x ?p ?o }} }}",
               headers=QUERY)
    assert r.status_code == 200, r.text
    assert [b["x"]["value"] for b in r.get_json()["results"]["bindings"]] == ["remote"]
    assert [path for _, path, _ in allowed.seen] == [f"/redirect-to/{a}/results", "/results"]


def test_a_remote_error_body_is_never_echoed(tmp_path: Path, remotes: tuple[Remote, Remote]) -> None:
    allowed, _ = remotes
    c = client(tmp_path, allowed)
    r = c.post("/sparql", data=f"SELECT * {{ SERVICE <http://127.0.0.1:{allowed.server_address[1]}/error> "
                               "{ ?x ?p ?o } }", headers=QUERY)
    assert r.status_code == 502 and "answered HTTP 500" in r.text
    assert "hunter2" not in r.text and "INTERNAL" not in r.text


def test_a_service_chain_is_bounded_by_the_hops_header(tmp_path: Path, remotes: tuple[Remote, Remote]) -> None:
    allowed, _ = remotes
    c = client(tmp_path, allowed)
    query = f"SELECT * {{ SERVICE <http://127.0.0.1:{allowed.server_address[1]}/results> {{ ?x ?p ?o }} }}"
    assert c.post("/sparql", data=query, headers=QUERY).status_code == 200
    assert c.post("/sparql", data=query, headers={**QUERY, "Concentrator-Service-Hops": "2"}).status_code == 200
    assert [hops for _, _, hops in allowed.seen] == ["1", "3"]  # each call announces one more hop
    r = c.post("/sparql", data=query, headers={**QUERY, "Concentrator-Service-Hops": "4"})
    assert r.status_code == 508 and "the limit is 4" in r.text
    assert len(allowed.seen) == 2  # refused before calling
    assert c.post("/sparql", data=query, headers={**QUERY, "Concentrator-Service-Hops": "x"}).status_code == 400


def test_this_server_under_its_loopback_names_is_in_process_whatever_the_host(tmp_path: Path) -> None:
    """The probe nested SERVICE calls back to the server 20 deep, alternating localhost and 127.0.0.1 with a forged
    Host: nothing listens at the port here, so any call over HTTP would fail; in-process, the answer is the data."""
    port = free_port()
    c = http_app(ServerConfig(tmp_path / "data", in_memory=True,
                                base_urls=(f"http://127.0.0.1:{port}", f"http://localhost:{port}"))).test_client()
    assert c.put("/store?default", data="<urn:s> <urn:p> 1 .", headers={"Content-Type": "text/turtle"}) \
        .status_code == 204  # the default graph always exists
    inner = "?s <urn:p> ?o"
    for depth in range(20):
        host = "localhost" if depth % 2 else "127.0.0.1"
        inner = f"SERVICE <http://{host}:{port}/sparql> {{ {inner} }}"
    r = c.post("/sparql", data=f"SELECT ?o {{ {inner} }}", headers={**QUERY, "Host": "evil.example"})
    assert r.status_code == 200, r.text
    assert [b["o"]["value"] for b in r.get_json()["results"]["bindings"]] == ["1"]


def test_pyoxigraph_is_never_handed_a_service(tmp_path: Path, remotes: tuple[Remote, Remote]) -> None:
    """pyoxigraph calls a SERVICE by itself over HTTP, past the allowlist: an update with SERVICE is refused, and a
    query our tokenizer cannot read is not passed on when it names SERVICE."""
    allowed, internal = remotes
    c = client(tmp_path, allowed)
    i = internal.server_address[1]
    update = f"INSERT {{ <urn:a> <urn:b> ?o }} WHERE {{ SERVICE <http://127.0.0.1:{i}/results> {{ ?s ?p ?o }} }}"
    r = c.post("/sparql", data=update, headers={"Content-Type": "application/sparql-update"})
    assert r.status_code == 501 and "SERVICE in an update (line 1 column" in r.text
    r = c.post("/sparql", data=f"SELECT * {{ SERVICE <http://127.0.0.1:{i}/results> {{ ?s ?p ?o }} }} `",
               headers=QUERY)
    assert r.status_code == 400
    assert internal.seen == []
