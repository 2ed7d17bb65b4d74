"""Run the W3C SPARQL 1.1 Protocol and Graph Store Protocol manifests against a server.

The manifests (``protocol/manifest.ttl``, ``graph-store-protocol/manifest-direct.ttl`` and
``manifest-indirect.ttl``) describe each test as an ordered list of HTTP requests, each with the
response it expects (status, result format, ASK boolean, headers, RDF body, Location).  This
module parses them with rdflib, replays the requests against a running server and checks the
responses.  Manifest paths are mapped onto our HTTP surface: ``/sparql/…`` → ``/sparql…`` and
``/gsp…`` → ``/store…``.

Usage: ``python -m conformance.w3c [--base-url URL]`` (without a URL a server is started).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import quote, urljoin, urlparse
from urllib.request import url2pathname

import requests
from rdflib import Graph, Literal, Namespace, URIRef
from rdflib.collection import Collection
from rdflib.compare import isomorphic
from rdflib.namespace import RDF, RDFS
from rdflib.term import Node

from conformance import server  # noqa: E402

REPO_ROOT = server.REPO_ROOT
DEFAULT_TESTS_DIR = REPO_ROOT / "conformance" / "suites" / "w3c-rdf-tests" / "sparql" / "sparql11"
TESTS_DIR_ENV = "W3C_TESTS_DIR"
REQUEST_TIMEOUT = 30.0
STARTUP_TIMEOUT = 60.0

MF = Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#")
HT = Namespace("http://www.w3.org/2011/http#")
HTS = Namespace("http://www.w3.org/2011/http-statusCodes#")
CNT = Namespace("http://www.w3.org/2011/content#")
UT = Namespace("http://www.w3.org/2009/sparql/tests/test-update#")

# (suite, manifest path relative to the tests directory, rdf:type of its tests)
MANIFESTS: tuple[tuple[str, str, URIRef], ...] = (
    ("protocol", "protocol/manifest.ttl", MF.ProtocolTest),
    ("gsp", "graph-store-protocol/manifest-direct.ttl", MF.GraphStoreProtocolTest),
    ("gsp", "graph-store-protocol/manifest-indirect.ttl", MF.GraphStoreProtocolTest),
)

# Test name (local name of the test IRI) → why it is not run.  Mirror every entry in README.md.
SKIP: dict[str, str] = {}

SPARQL_RESULTS = "http://www.w3.org/2005/sparql-results#"
JSON_RESULTS = "application/sparql-results+json"
XML_RESULTS = "application/sparql-results+xml"
TABULAR_TYPES = {JSON_RESULTS, XML_RESULTS, "text/csv", "text/tab-separated-values"}
# Media type → rdflib parser name, for RDF response bodies.
RDF_PARSERS = {
    "text/turtle": "turtle",
    "application/x-turtle": "turtle",
    "application/n-triples": "nt",
    "application/rdf+xml": "xml",
    "application/ld+json": "json-ld",
    "text/n3": "n3",
    "application/trig": "trig",
    "application/n-quads": "nquads",
}
# What mf:expectedFormat "RDF" allows: RDF/XML, Turtle, N-Triples, RDFa (RDFa is not parsed).
RDF_RESULT_TYPES = {
    "application/rdf+xml",
    "text/turtle",
    "application/x-turtle",
    "application/n-triples",
}
RDFA_TYPES = {"text/html", "application/xhtml+xml"}


class ManifestError(ValueError):
    """A manifest uses a construct this runner does not understand."""


class SetupError(RuntimeError):
    """Preparing the store for a test (clearing it, loading ut:graphData) failed."""


@dataclass(frozen=True)
class StatusSpec:
    """An acceptable response status: one code (hts:OK) or a class (hts:StatusCode2xx)."""

    label: str
    low: int
    high: int

    def matches(self, code: int) -> bool:
        """True if ``code`` is acceptable."""
        return self.low <= code <= self.high


@dataclass(frozen=True)
class ExpectedResponse:
    """What one request's response must look like (the ``ht:resp`` of a request)."""

    statuses: tuple[StatusSpec, ...] = ()
    format: str | None = None
    boolean: bool | None = None
    headers: tuple[tuple[str, str], ...] = ()
    body: str | None = None
    location_var: str | None = None


@dataclass(frozen=True)
class HttpRequest:
    """One ``ht:Request`` as written in the manifest (path not yet mapped to our server)."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: str | None
    encoding: str
    expected: ExpectedResponse


@dataclass(frozen=True)
class GraphData:
    """A ``ut:graphData`` file to load into the named graph ``iri`` before the test."""

    path: Path
    iri: str


@dataclass(frozen=True)
class ManifestTest:
    """One test of a manifest: its requests, in order, and the data to load first."""

    suite: str
    name: str
    label: str
    requests: tuple[HttpRequest, ...]
    graph_data: tuple[GraphData, ...] = ()


@dataclass(frozen=True)
class TestResult:
    """The outcome of one test; skipped tests count neither as passed nor as failed."""

    __test__ = False  # not a pytest test class

    suite: str
    name: str
    passed: bool
    reason: str = ""
    skipped: bool = False

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP``."""
        return "SKIP" if self.skipped else "PASS" if self.passed else "FAIL"


# --------------------------------------------------------------------------- manifests


def tests_dir() -> Path:
    """The ``sparql11`` directory of the W3C tests (``$W3C_TESTS_DIR`` overrides)."""
    override = os.environ.get(TESTS_DIR_ENV)
    return Path(override) if override else DEFAULT_TESTS_DIR


def load_tests(directory: Path | None = None) -> list[ManifestTest]:
    """Parse all manifests, protocol tests first; each manifest in ``mf:entries`` order."""
    root = directory or tests_dir()
    tests: list[ManifestTest] = []
    for suite, relative, test_type in MANIFESTS:
        tests.extend(load_manifest(root / relative, suite, test_type))
    return tests


def load_manifest(path: Path, suite: str, test_type: URIRef) -> list[ManifestTest]:
    """The tests of one manifest file: its entries, then typed tests the list leaves out."""
    if not path.is_file():
        raise FileNotFoundError(f"W3C manifest not found: {path} (set {TESTS_DIR_ENV})")
    graph = Graph()
    graph.parse(path, format="turtle", publicID=path.resolve().as_uri())
    nodes: list[Node] = []
    for entries in graph.objects(None, MF.entries):
        nodes.extend(Collection(graph, entries))
    typed = sorted(set(graph.subjects(RDF.type, test_type)) - set(nodes), key=str)
    return [_parse_test(graph, node, suite) for node in [*nodes, *typed]]


def _parse_test(graph: Graph, node: Node, suite: str) -> ManifestTest:
    action = _required(graph, node, MF.action)
    requests_list = _required(graph, action, HT.requests)
    return ManifestTest(
        suite=suite,
        name=str(node).rsplit("#", 1)[-1],
        label=str(graph.value(node, MF.name) or ""),
        requests=tuple(_parse_request(graph, r) for r in Collection(graph, requests_list)),
        graph_data=tuple(_parse_graph_data(graph, g) for g in graph.objects(node, UT.graphData)),
    )


def _parse_graph_data(graph: Graph, node: Node) -> GraphData:
    file_uri = str(_required(graph, node, UT.graph))
    label = graph.value(node, RDFS.label)
    if label is None:
        raise ManifestError(f"ut:graphData {file_uri} has no rdfs:label (graph name)")
    return GraphData(Path(url2pathname(urlparse(file_uri).path)), str(label))


def _parse_request(graph: Graph, node: Node) -> HttpRequest:
    body, encoding = _parse_body(graph, graph.value(node, HT.body))
    resp = graph.value(node, HT.resp)
    return HttpRequest(
        method=str(_required(graph, node, HT.methodName)).upper(),
        path=str(_required(graph, node, HT.absolutePath)),
        headers=_parse_headers(graph, graph.value(node, HT.headers)),
        body=body,
        encoding=encoding,
        expected=_parse_response(graph, resp) if resp is not None else ExpectedResponse(),
    )


def _parse_response(graph: Graph, node: Node) -> ExpectedResponse:
    boolean = graph.value(node, MF.expectedBoolean)
    fmt = graph.value(node, MF.expectedFormat)
    location = graph.value(node, MF.expectedLocation)
    statuses = sorted(graph.objects(node, MF.expectedStatus), key=str)
    return ExpectedResponse(
        statuses=tuple(status_spec(s) for s in statuses),
        format=str(fmt) if fmt is not None else None,
        boolean=bool(boolean.toPython()) if isinstance(boolean, Literal) else None,
        headers=_parse_headers(graph, graph.value(node, HT.headers)),
        body=_parse_body(graph, graph.value(node, HT.body))[0],
        location_var=str(location) if location is not None else None,
    )


def _parse_headers(graph: Graph, node: Node | None) -> tuple[tuple[str, str], ...]:
    if node is None:
        return ()
    return tuple(
        (str(_required(graph, h, HT.fieldName)), str(_required(graph, h, HT.fieldValue)))
        for h in Collection(graph, node)
    )


def _parse_body(graph: Graph, node: Node | None) -> tuple[str | None, str]:
    if node is None:
        return None, "UTF-8"
    encoding = graph.value(node, CNT.characterEncoding)
    return str(_required(graph, node, CNT.chars)), str(encoding or "UTF-8")


def _required(graph: Graph, node: Node, prop: URIRef) -> Node:
    value = graph.value(node, prop)
    if value is None:
        raise ManifestError(f"{node} has no {prop}")
    return value


def _camel(name: str) -> str:
    return "".join(word.capitalize() for word in name.split("_"))


# hts local name → code, from http.HTTPStatus plus the spellings the hts vocabulary uses.
HTS_CODES: dict[str, int] = {_camel(s.name): int(s) for s in HTTPStatus} | {
    "OK": 200,
    "RequestURITooLong": 414,
    "RequestedRangeNotSatisfiable": 416,
    "HTTPVersionNotSupported": 505,
}


def status_spec(node: Node) -> StatusSpec:
    """Map an ``hts:`` term (or a literal number) to the codes it allows.

    >>> status_spec(HTS.StatusCode4xx)
    StatusSpec(label='StatusCode4xx', low=400, high=499)
    >>> status_spec(HTS.NoContent)
    StatusSpec(label='NoContent', low=204, high=204)
    """
    if isinstance(node, Literal):
        code = int(node)
        return StatusSpec(str(code), code, code)
    local = str(node).rsplit("#", 1)[-1]
    klass = re.fullmatch(r"StatusCode([1-5])xx", local)
    if klass:
        low = int(klass.group(1)) * 100
        return StatusSpec(local, low, low + 99)
    if local not in HTS_CODES:
        raise ManifestError(f"unknown status code term {node}")
    return StatusSpec(local, HTS_CODES[local], HTS_CODES[local])


# --------------------------------------------------------------------------- running


def map_path(path: str) -> str:
    """Map a manifest ``ht:absolutePath`` onto our server, keeping the query string as is.

    >>> map_path("/sparql/?query=ASK%20%7B%7D")
    '/sparql?query=ASK%20%7B%7D'
    >>> map_path("/gsp?graph=http%3A%2F%2Fwww.example%2Fgsp")
    '/store?graph=http%3A%2F%2Fwww.example%2Fgsp'
    >>> map_path("/gsp/person/1.ttl")
    '/store/person/1.ttl'
    """
    for prefix, target in (("/sparql", "/sparql"), ("/gsp", "/store")):
        rest = path[len(prefix) :]
        if path.startswith(prefix) and (rest == "" or rest[0] in "/?"):
            if prefix == "/sparql" and rest.startswith("/") and rest[1:2] in ("", "?"):
                rest = rest[1:]
            return target + rest
    raise ManifestError(f"path {path!r} is neither under /sparql nor under /gsp")


def run(base_url: str, tests: Sequence[ManifestTest] | None = None) -> list[TestResult]:
    """Run every manifest test (or ``tests``) against the server at ``base_url``."""
    return [run_test(base_url, test) for test in (load_tests() if tests is None else tests)]


def run_test(base_url: str, test: ManifestTest) -> TestResult:
    """Clear the store, load the test's data, send its requests and check each response."""
    if test.name in SKIP:
        return TestResult(test.suite, test.name, False, SKIP[test.name], skipped=True)
    base = base_url.rstrip("/")
    with requests.Session() as session:
        try:
            _reset_store(session, base)
            for data in test.graph_data:
                _load_graph(session, base, data)
        except (SetupError, OSError, requests.RequestException) as exc:
            return TestResult(test.suite, test.name, False, f"setup: {exc}")
        variables: dict[str, str] = {}
        for number, request in enumerate(test.requests, 1):
            problem = _run_request(session, base, request, variables)
            if problem is not None:
                where = f"request {number} ({request.method} {request.path})"
                return TestResult(test.suite, test.name, False, f"{where}: {problem}")
    return TestResult(test.suite, test.name, True)


def _reset_store(session: requests.Session, base: str) -> None:
    headers = {"Content-Type": "application/sparql-update"}
    response = _send(session, "POST", base + "/sparql", headers, b"DROP SILENT ALL")
    if not response.ok:
        raise SetupError(f"DROP SILENT ALL → {response.status_code} {snippet(response.text)}")


def _load_graph(session: requests.Session, base: str, data: GraphData) -> None:
    url = f"{base}/store?graph={quote(data.iri, safe='')}"
    headers = {"Content-Type": "application/n-triples"}
    response = _send(session, "PUT", url, headers, data.path.read_bytes())
    if not response.ok:
        raise SetupError(
            f"PUT {data.path.name} into <{data.iri}> → {response.status_code} "
            f"{snippet(response.text)}"
        )


def _send(
    session: requests.Session, method: str, url: str, headers: dict[str, str], body: bytes | None
) -> requests.Response:
    """Send exactly this request: no default headers, URL not re-encoded, no redirects."""
    prepared = requests.Request(method, url, headers=headers, data=body).prepare()
    prepared.url = url
    return session.send(prepared, allow_redirects=False, timeout=REQUEST_TIMEOUT)


def _substitute(text: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        text = text.replace(name, value)
    return text


def _run_request(
    session: requests.Session, base: str, request: HttpRequest, variables: dict[str, str]
) -> str | None:
    """Send one manifest request; a description of what is wrong with the response, or None."""
    url = base + map_path(_substitute(request.path, variables))
    body = None
    if request.body is not None:
        body = _substitute(request.body, variables).encode(request.encoding)
    try:
        response = _send(session, request.method, url, dict(request.headers), body)
    except requests.RequestException as exc:
        return f"no response: {exc}"
    return check_response(response, request.expected, url, variables)


def check_response(
    response: requests.Response, expected: ExpectedResponse, url: str, variables: dict[str, str]
) -> str | None:
    """Check ``response`` against ``expected``; records ``$LOCATION$``-style variables."""
    statuses = expected.statuses
    if statuses and not any(s.matches(response.status_code) for s in statuses):
        wanted = " or ".join(s.label for s in statuses)
        return f"expected status {wanted}, got {response.status_code} {snippet(response.text)}"
    if expected.location_var is not None:
        location = response.headers.get("Location")
        if not location:
            return "expected a Location header, got none"
        variables[expected.location_var] = urljoin(url, location)
    for name, value in expected.headers:
        problem = _check_header(response, name, value)
        if problem is not None:
            return problem
    problem = _check_format(response, expected)
    if problem is None and expected.body is not None:
        problem = _check_rdf_body(response, expected, url, variables)
    return problem


def media_type(value: str | None) -> tuple[str, dict[str, str]]:
    """Split a Content-Type value into a lower-cased media type and its parameters.

    >>> media_type("text/turtle; charset=UTF-8")
    ('text/turtle', {'charset': 'utf-8'})
    """
    parts = (value or "").split(";")
    params: dict[str, str] = {}
    for part in parts[1:]:
        key, _, val = part.partition("=")
        params[key.strip().lower()] = val.strip().strip('"').lower()
    return parts[0].strip().lower(), params


def _check_header(response: requests.Response, name: str, value: str) -> str | None:
    actual = response.headers.get(name)
    if actual is None:
        return f"expected header {name}: {value}, got none"
    if name.lower() != "content-type":
        same = actual.strip() == value.strip()
        return None if same else f"{name}: expected {value}, got {actual}"
    (want_type, want), (got_type, got) = media_type(value), media_type(actual)
    charset_clash = "charset" in want and "charset" in got and want["charset"] != got["charset"]
    if want_type != got_type or charset_clash:
        return f"expected Content-Type {value}, got {actual}"
    return None


def _check_format(response: requests.Response, expected: ExpectedResponse) -> str | None:
    ctype = media_type(response.headers.get("Content-Type"))[0]
    if expected.format == "boolean" or expected.boolean is not None:
        value, problem = parse_boolean(ctype, response.content)
        if problem is None and expected.boolean is not None and value != expected.boolean:
            problem = f"expected boolean {str(expected.boolean).lower()}, got {value}"
        return problem
    if expected.format == "tabular":
        return _check_tabular(ctype, response.content)
    if expected.format == "RDF":
        if ctype in RDFA_TYPES:
            return None
        if ctype not in RDF_RESULT_TYPES:
            return f"expected RDF/XML, Turtle, N-Triples or RDFa, got Content-Type {ctype!r}"
        try:
            parse_rdf(response.text, ctype, response.url or "")
        except Exception as exc:  # rdflib raises many kinds of parse errors
            return f"unparsable {ctype} body: {exc}"
    return None


def parse_boolean(ctype: str, content: bytes) -> tuple[bool | None, str | None]:
    """The ASK result of a SPARQL results document: (value, None) or (None, problem)."""
    try:
        if ctype == JSON_RESULTS:
            value = json.loads(content).get("boolean")
            if isinstance(value, bool):
                return value, None
        elif ctype == XML_RESULTS:
            element = ET.fromstring(content).find(f"{{{SPARQL_RESULTS}}}boolean")
            text = (element.text or "").strip() if element is not None else ""
            if text in ("true", "false"):
                return text == "true", None
        else:
            return None, f"expected a boolean result (XML or JSON), got Content-Type {ctype!r}"
    except (ValueError, AttributeError, ET.ParseError) as exc:
        return None, f"unparsable {ctype} body: {exc}"
    return None, f"no boolean in {ctype} body {snippet(content.decode('utf-8', 'replace'))}"


def _check_tabular(ctype: str, content: bytes) -> str | None:
    if ctype not in TABULAR_TYPES:
        return f"expected XML, JSON, CSV or TSV results, got Content-Type {ctype!r}"
    try:
        if ctype == JSON_RESULTS:
            document = json.loads(content)
            ok = "vars" in document.get("head", {}) and "bindings" in document.get("results", {})
        elif ctype == XML_RESULTS:
            ok = ET.fromstring(content).find(f"{{{SPARQL_RESULTS}}}results") is not None
        else:
            ok = bool(content.strip())
    except (ValueError, AttributeError, ET.ParseError) as exc:
        return f"unparsable {ctype} body: {exc}"
    return None if ok else f"no result table in {ctype} body {snippet(content.decode())}"


def parse_rdf(text: str, ctype: str, base: str) -> Graph:
    """Parse an RDF document of media type ``ctype``, resolving relative IRIs against ``base``."""
    if ctype not in RDF_PARSERS:
        raise ValueError(f"no RDF parser for Content-Type {ctype!r}")
    graph = Graph()
    graph.parse(data=text, format=RDF_PARSERS[ctype], publicID=base)
    return graph


def _check_rdf_body(
    response: requests.Response, expected: ExpectedResponse, url: str, variables: dict[str, str]
) -> str | None:
    want_type = dict(expected.headers).get("content-type", "text/turtle")
    ctype = media_type(response.headers.get("Content-Type"))[0]
    try:
        want = parse_rdf(_substitute(expected.body or "", variables), media_type(want_type)[0], url)
    except Exception as exc:  # rdflib raises many kinds of parse errors
        return f"cannot parse the manifest's expected body: {exc}"
    try:
        got = parse_rdf(response.content.decode("utf-8"), ctype, url)
    except Exception as exc:  # rdflib raises many kinds of parse errors
        return f"unparsable {ctype!r} body: {exc} {snippet(response.text)}"
    if isomorphic(want, got):
        return None
    return f"graph differs from expected ({len(want)} triples), got {len(got)}: " + snippet(
        got.serialize(format="nt")
    )


def snippet(text: str, limit: int = 300) -> str:
    """``text`` on one line, cut to ``limit`` characters, for failure reasons."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")


# --------------------------------------------------------------------------- reporting


def format_table(results: Sequence[TestResult]) -> str:
    """One row per test (suite, name, PASS/FAIL/SKIP, reason), then totals per suite."""
    header = ("suite", "test", "result", "reason")
    rows = [(r.suite, r.name, r.status, " ".join(r.reason.split())) for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    lines = [
        "  ".join([*(row[i].ljust(widths[i]) for i in range(3)), row[3]]).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths) + "  ------")
    lines.append("")
    lines.extend(_totals(results))
    return "\n".join(lines)


def _totals(results: Sequence[TestResult]) -> list[str]:
    counts: Counter[tuple[str, str]] = Counter((r.suite, r.status) for r in results)
    lines = []
    for suite in dict.fromkeys(r.suite for r in results):
        passed, failed, skipped = (counts[suite, s] for s in ("PASS", "FAIL", "SKIP"))
        line = f"{suite}: {passed}/{passed + failed} passed"
        lines.append(line + (f", {skipped} skipped" if skipped else ""))
    return lines


# --------------------------------------------------------------------------- server


@contextlib.contextmanager
def running_server(timeout: float = STARTUP_TIMEOUT) -> Iterator[str]:
    """Start ``python -m concentrator serve`` on a fresh data directory (no Spark: these suites read and write the
    dataset only); yield its base URL."""
    with server.running_server(["--no-pipeline"], timeout=timeout) as running:
        yield running.url


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: run all tests, print the table; exit status 1 if a test failed."""
    parser = argparse.ArgumentParser(prog="python -m conformance.w3c", description=__doc__)
    parser.add_argument("--base-url", help="a running server (default: start one)")
    args = parser.parse_args(argv)
    try:
        if args.base_url:
            results = run(args.base_url)
        else:
            with running_server() as base_url:
                results = run(base_url)
    except (RuntimeError, TimeoutError, FileNotFoundError, ManifestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_table(results))
    return 1 if any(not r.passed and not r.skipped for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
