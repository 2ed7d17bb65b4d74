"""Real SPARQL engines (Jena ARQ, Comunica) as clients of a throwaway HTTP SPARQL endpoint.

The endpoint is a small ``http.server`` on 127.0.0.1 that answers SPARQL queries (GET
``?query=``, POST ``application/sparql-query``, form POST) over a fixed pyoxigraph store, answers
a GET without query with a Turtle service description (what Comunica needs to identify it as an
endpoint, see conformance/clients.py), and records every request it gets.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote_plus

import pyoxigraph as ox
import pytest

from conformance.clients import (
    ClientFailed,
    run_comunica,
    run_jena,
    skip_reason_comunica,
    skip_reason_jena,
    solutions_from_json,
)

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

EX = "http://example.org/"
XSD_INTEGER = "http://www.w3.org/2001/XMLSchema#integer"

EXPECTED = [
    {
        "s": "<http://example.org/s>",
        "p": "<http://example.org/p>",
        "o": '"5"^^<http://www.w3.org/2001/XMLSchema#integer>',
    },
    {"s": "<http://example.org/s>", "p": "<http://example.org/q>", "o": '"a"'},
    {"s": "<http://example.org/s>", "p": "<http://example.org/r>", "o": "_:"},
]

# stream IRIs with a query string; the second has a "+" in a timezone offset
WINDOWS = ["HEAD/-PT05M", "2016-06-20T10:00:00+02:00/PT05M"]

RDF_TYPES = ("text/turtle", "application/n-triples", "application/n-quads", "application/trig", "*/*")
SD_TURTLE = "@prefix sd: <http://www.w3.org/ns/sparql-service-description#> .\n[] a sd:Service ; sd:endpoint <{}> .\n"


@dataclass
class Request:
    method: str
    path: str  # path and query string, raw as received
    headers: dict[str, str]  # lower-case names
    body: str


def _store() -> ox.Store:
    store = ox.Store()
    s = ox.NamedNode(EX + "s")
    store.add(ox.Quad(s, ox.NamedNode(EX + "p"), ox.Literal("5", datatype=ox.NamedNode(XSD_INTEGER))))
    store.add(ox.Quad(s, ox.NamedNode(EX + "q"), ox.Literal("a")))
    store.add(ox.Quad(s, ox.NamedNode(EX + "r"), ox.BlankNode("b")))
    return store


def _query_parameter(query_string: str) -> str | None:
    """The ``query`` parameter of a raw query string, also after a second ``?`` (Comunica)."""
    match = re.search(r"(?:^|[&?])query=([^&]*)", query_string)
    return unquote_plus(match.group(1)) if match else None


class SparqlEndpoint:
    """A SPARQL endpoint on a free port of 127.0.0.1, serving every path."""

    def __init__(self) -> None:
        self.store = _store()
        self.requests: list[Request] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # Jena's "Upgrade: h2c" is ignored

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _record(self, body: str) -> None:
                headers = {name.lower(): value for name, value in self.headers.items()}
                endpoint.requests.append(Request(self.command, self.path, headers, body))

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _evaluate(self, query: str) -> None:
                try:
                    results = endpoint.store.query(query)
                    if not isinstance(results, ox.QuerySolutions):
                        raise ValueError("only SELECT queries are supported")
                    data = results.serialize(format=ox.QueryResultsFormat.JSON)
                except (SyntaxError, ValueError, OSError) as exc:
                    self._send(400, "text/plain; charset=utf-8", str(exc).encode())
                    return
                self._send(200, "application/sparql-results+json", data)

            def do_GET(self) -> None:  # noqa: N802
                self._record("")
                query = _query_parameter(self.path.partition("?")[2])
                if query is not None:
                    self._evaluate(query)
                    return
                accept = self.headers.get("Accept", "*/*")
                if not any(media_type in accept for media_type in RDF_TYPES):
                    self._send(406, "text/plain", b"no query: GET with an RDF Accept for the service description")
                    return
                # the endpoint IRI is the request IRI itself, query string included
                description = SD_TURTLE.format(f"http://{self.headers['Host']}{self.path}")
                self._send(200, "text/turtle; charset=utf-8", description.encode())

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8")
                self._record(body)
                content_type = (self.headers.get("Content-Type") or "").partition(";")[0].strip().lower()
                if content_type == "application/sparql-query":
                    self._evaluate(body)
                elif content_type == "application/x-www-form-urlencoded":
                    queries = parse_qs(body).get("query")
                    if queries:
                        self._evaluate(queries[0])
                    else:
                        self._send(400, "text/plain", b"form without query")
                else:
                    self._send(415, "text/plain", b"unsupported content type")

        return Handler

    def __enter__(self) -> SparqlEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def endpoint() -> Iterator[SparqlEndpoint]:
    with SparqlEndpoint() as server:
        yield server


def _by_predicate(solutions: list[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(solutions, key=lambda solution: solution.get("p", ""))


def _service_query(iri: str) -> str:
    return f"SELECT * WHERE {{ SERVICE <{iri}> {{ ?s ?p ?o }} }}\n"


Runner = Callable[[str], list[dict[str, str]]]


def _engine(name: str) -> Runner:
    reason = skip_reason_jena() if name == "jena" else skip_reason_comunica()
    if reason is not None:
        pytest.skip(reason)
    return run_jena if name == "jena" else run_comunica


@pytest.mark.parametrize("windows", WINDOWS)
def test_jena_service_to_iri_with_query_string(endpoint: SparqlEndpoint, windows: str) -> None:
    run = _engine("jena")
    path = f"/streams/s?WINDOWS={windows}"
    solutions = run(_service_query(endpoint.url(path)))
    assert _by_predicate(solutions) == EXPECTED
    # one GET: the IRI's query string verbatim ("+" raw), then "&query="
    [request] = endpoint.requests
    assert request.method == "GET"
    assert request.path.startswith(path + "&query=")
    assert request.headers["accept"].startswith("application/sparql-results+json")


@pytest.mark.parametrize("windows", WINDOWS)
def test_comunica_service_to_iri_with_query_string(endpoint: SparqlEndpoint, windows: str) -> None:
    run = _engine("comunica")
    path = f"/streams/s?WINDOWS={windows}"
    solutions = run(_service_query(endpoint.url(path)))
    assert _by_predicate(solutions) == EXPECTED
    # identification GET of the IRI itself (RDF Accept), then GETs of sd:endpoint + "?query="
    first, *queries = endpoint.requests
    assert (first.method, first.path) == ("GET", path)
    assert "text/turtle" in first.headers["accept"]
    assert queries
    for request in queries:
        assert request.method == "GET"
        assert request.path.startswith(path + "?query=")


def test_solutions_from_json_normalises_terms() -> None:
    document = {
        "head": {"vars": ["a", "b", "c", "d", "e", "f"]},
        "results": {
            "bindings": [
                {
                    "a": {"type": "uri", "value": "http://x"},
                    "b": {"type": "literal", "value": "5", "datatype": XSD_INTEGER},
                    "c": {"type": "literal", "value": "a", "datatype": "http://www.w3.org/2001/XMLSchema#string"},
                    "d": {"type": "bnode", "value": "b0"},
                    "e": {"type": "literal", "value": 'x"\n', "xml:lang": "en"},
                },
                {"f": {"type": "typed-literal", "value": "1", "datatype": XSD_INTEGER}},
            ]
        },
    }
    assert solutions_from_json(document) == [
        {"a": "<http://x>", "b": f'"5"^^<{XSD_INTEGER}>', "c": '"a"', "d": "_:", "e": '"x\\"\\n"@en'},
        {"f": f'"1"^^<{XSD_INTEGER}>'},
    ]


@pytest.mark.parametrize("name", ["jena", "comunica"])
def test_client_failure_carries_stderr(endpoint: SparqlEndpoint, name: str) -> None:
    run = _engine(name)
    with pytest.raises(ClientFailed) as info:
        run(f"SELECT * WHERE {{ SERVICE <{endpoint.url('/x')}> {{ ?s ?p ?o }} ")  # syntax error: no "}"
    assert info.value.engine == name
    assert info.value.stderr
    assert endpoint.requests == []
