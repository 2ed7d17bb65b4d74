"""Run the W3C SPARQL 1.1 ``service/`` and ``construct/`` query manifests through ``ExtendedEvaluator``.

Why here and not at ``/sparql``: these suites test query *evaluation*, and the code that evaluates
``SERVICE`` is ``engine.evaluation.ExtendedEvaluator`` (pyoxigraph has no hook for it).  Each test's
default dataset (``qt:data``) and named graphs (``qt:graphData``, named by their file IRI) go into a
fresh in-memory ``RevisionedDataset``; the query runs with the query file's IRI as base.

``qt:serviceData`` endpoints are real servers (``python -m concentrator serve --no-pipeline``), one
per endpoint of the test, loaded with the Graph Store Protocol.  SERVICE really goes over HTTP:
the evaluator's session sends a request for an endpoint IRI to the server standing for it, and an
endpoint the test does not list is unreachable (a ``ConnectionError``).  service03 sends a nested
SERVICE to the example1 server, so the servers reach other endpoints through an HTTP proxy of this
module (``http_proxy`` in their environment) with the same routes; it answers 502 for the others.

Usage: ``python -m conformance.w3c_query`` (prints one row per test and totals per suite).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import pyoxigraph
import requests
from pyoxigraph import BlankNode, DefaultGraph, NamedNode, QueryBoolean, QueryResultsFormat, QuerySolutions, RdfFormat
from rdflib import Graph, Namespace
from rdflib.collection import Collection
from rdflib.compare import isomorphic
from rdflib.namespace import RDF
from rdflib.term import Node

from conformance import server, w3c
from conformance.w3c import MF, ManifestError, TestResult, format_table, snippet, tests_dir
from engine.context import EvaluationContext, QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.results import ConstructedTriples
from sparql_ext import QuerySyntaxError
from store import RevisionedDataset
from store.streams import StreamCatalog

QT = Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-query#")
SUITES: tuple[tuple[str, str], ...] = (("service", "service/manifest.ttl"), ("construct", "construct/manifest.ttl"))
RDF_FORMATS = {".ttl": RdfFormat.TURTLE, ".nt": RdfFormat.N_TRIPLES, ".rdf": RdfFormat.RDF_XML}
# Test name → why it is not run.  None: every test of both suites can run here (conformance/README.md).
SKIP: dict[str, str] = {}
# Test name → the evaluator defect it shows (run and reported as FAIL; tests/ marks it xfail, strict, so
# that the fix is noticed).  Mirror every entry in conformance/README.md.
KNOWN_DEFECTS: dict[str, str] = {}


@dataclass(frozen=True)
class QueryTest:
    """One manifest entry: an evaluation test (query, data, endpoints, result) or a syntax test."""

    suite: str
    name: str
    label: str
    kind: str  # "eval", "positive-syntax" or "negative-syntax"
    query: Path
    data: tuple[Path, ...] = ()
    graph_data: tuple[Path, ...] = ()
    service_data: tuple[tuple[str, Path], ...] = ()  # (endpoint IRI, data file)
    result: Path | None = None


# --------------------------------------------------------------------------- manifests


def load_tests(directory: Path | None = None) -> list[QueryTest]:
    """Both manifests' tests, each manifest in ``mf:entries`` order."""
    root = directory or tests_dir()
    return [test for suite, relative in SUITES for test in load_manifest(root / relative, suite)]


def load_manifest(path: Path, suite: str) -> list[QueryTest]:
    """Parse one manifest with rdflib (file IRIs resolve against the manifest's own IRI)."""
    if not path.is_file():
        raise FileNotFoundError(f"W3C manifest not found: {path} (set {w3c.TESTS_DIR_ENV})")
    graph = Graph().parse(path, format="turtle", publicID=path.resolve().as_uri())
    return [_parse_test(graph, node, suite) for entries in graph.objects(None, MF.entries)
            for node in Collection(graph, entries)]


def _parse_test(graph: Graph, node: Node, suite: str) -> QueryTest:
    name, label = str(node).rsplit("#", 1)[-1], str(graph.value(node, MF.name) or "")
    kind = {MF.QueryEvaluationTest: "eval", MF.PositiveSyntaxTest11: "positive-syntax",
            MF.NegativeSyntaxTest11: "negative-syntax"}.get(graph.value(node, RDF.type))  # type: ignore[call-overload]
    action = graph.value(node, MF.action)
    if kind is None or action is None:
        raise ManifestError(f"{name}: unsupported test type {graph.value(node, RDF.type)} or no mf:action")
    if kind != "eval":
        return QueryTest(suite, name, label, kind, _path(action))
    result = graph.value(node, MF.result)
    services = tuple((str(graph.value(s, QT.endpoint)), _path(graph.value(s, QT.data)))
                     for s in graph.objects(action, QT.serviceData))
    return QueryTest(suite, name, label, kind, _path(graph.value(action, QT.query)),
                     tuple(_path(d) for d in graph.objects(action, QT.data)),
                     tuple(_path(d) for d in graph.objects(action, QT.graphData)),
                     tuple(sorted(services)), _path(result) if result is not None else None)


def _path(node: Node | None) -> Path:
    if node is None or not str(node).startswith("file://"):
        raise ManifestError(f"expected a file IRI, got {node}")
    return Path(url2pathname(urlparse(str(node)).path))


# --------------------------------------------------------------------------- endpoints


class RoutedSession(requests.Session):
    """The evaluator's HTTP client: a request to an endpoint IRI of the test goes to the server standing
    for it; any other IRI is unreachable, as ``invalid.endpoint.org`` is for service06/07."""

    def __init__(self, routes: dict[str, str]) -> None:
        super().__init__()
        self.trust_env = False  # never the proxy of our servers' environment
        self.routes = routes

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        address, _, query = str(url).partition("?")
        if address not in self.routes:
            raise requests.ConnectionError(f"{url}: not an endpoint of this test (unreachable)")
        return super().request(method, self.routes[address] + (f"?{query}" if query else ""), *args, **kwargs)


def _proxy_handler(routes: dict[str, str]) -> type[BaseHTTPRequestHandler]:
    class Proxy(BaseHTTPRequestHandler):
        """An HTTP forward proxy with the same routes (``self.path`` is the absolute endpoint IRI)."""

        def do_POST(self) -> None:  # the evaluator only POSTs (application/sparql-query)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "accept")}
            try:
                with RoutedSession(routes) as session:
                    answer = session.post(self.path, data=body, headers=headers, timeout=w3c.REQUEST_TIMEOUT)
                status, ctype, content = answer.status_code, answer.headers.get("Content-Type", ""), answer.content
            except requests.RequestException as error:
                status, ctype, content = 502, "text/plain", str(error).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass

    return Proxy


class Endpoints:
    """``count`` servers (started once, reused: a test needs at most two) and the routes to them."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.routes: dict[str, str] = {}  # endpoint IRI → {server}/sparql, for the current test
        self.urls: list[str] = []
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Endpoints:
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), _proxy_handler(self.routes))
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        self._stack.callback(proxy.server_close)
        self._stack.callback(proxy.shutdown)
        try:
            with _environment(http_proxy=f"http://127.0.0.1:{proxy.server_port}", no_proxy="127.0.0.1,localhost"):
                for _ in range(self.count):  # Popen inherits the proxy settings; our readiness checks bypass it
                    running = server.running_server(["--no-pipeline", "--service-allow", "*"])
                    self.urls.append(self._stack.enter_context(running).url)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def prepare(self, test: QueryTest) -> None:
        """Empty every server (``DROP SILENT ALL``), load each endpoint's data, route only its IRIs."""
        if len(test.service_data) > self.count:
            raise w3c.SetupError(f"{len(test.service_data)} endpoints, only {self.count} servers")
        self.routes.clear()
        with requests.Session() as session:
            for url in self.urls:
                w3c._reset_store(session, url)
            for url, (endpoint, data) in zip(self.urls, test.service_data, strict=False):
                response = session.put(f"{url}/store?default", data=data.read_bytes(),
                                       headers={"Content-Type": "text/turtle"}, timeout=w3c.REQUEST_TIMEOUT)
                if not response.ok:
                    raise w3c.SetupError(f"PUT {data.name} → {response.status_code} {snippet(response.text)}")
                self.routes[endpoint] = f"{url}/sparql"


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set ``values`` (lower- and upper-case names) in os.environ for a while: ``running_server`` takes no
    environment, and the servers' ``requests`` read their proxy from it."""
    saved = {key: os.environ.get(key) for name in values for key in (name, name.upper())}
    os.environ.update({key: values[key.lower()] for key in saved})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value


# --------------------------------------------------------------------------- running


def run(endpoints: Endpoints, tests: Sequence[QueryTest] | None = None) -> list[TestResult]:
    """Run every test (or ``tests``) with the given endpoint servers."""
    return [run_test(endpoints, test) for test in (load_tests() if tests is None else tests)]


def run_test(endpoints: Endpoints, test: QueryTest) -> TestResult:
    """Load the test's data, evaluate its query with ``ExtendedEvaluator``, compare with its result."""
    if test.name in SKIP:
        return TestResult(test.suite, test.name, False, SKIP[test.name], skipped=True)
    try:
        endpoints.prepare(test)
    except (w3c.SetupError, OSError) as error:
        return TestResult(test.suite, test.name, False, f"setup: {error}")
    text = test.query.read_text("utf-8")
    with tempfile.TemporaryDirectory(prefix="w3c-query-") as tmp, RoutedSession(endpoints.routes) as session:
        dataset = RevisionedDataset(Path(tmp) / "dataset", in_memory=True)
        catalog = StreamCatalog(Path(tmp) / "streams", in_memory=True)
        try:
            for path, graph in [*((p, DefaultGraph()) for p in test.data),
                                *((p, NamedNode(p.as_uri())) for p in test.graph_data)]:
                dataset.add(dataset.stage(path.read_bytes(), RDF_FORMATS[path.suffix], base_iri=path.as_uri(),
                                          to_graph=graph))
            # the evaluator has no HTTP address of its own: every SERVICE IRI of these tests is remote
            evaluator = ExtendedEvaluator(EvaluationContext.for_requests(
                dataset, catalog, [], session, http_timeout=w3c.REQUEST_TIMEOUT))
            result = evaluator.query(text, QueryTarget(base_iri=test.query.as_uri()))
            problem = None if test.kind == "positive-syntax" else (
                "expected a syntax error" if test.kind == "negative-syntax" else compare(result, test.result))
        except QuerySyntaxError as error:
            problem = None if test.kind == "negative-syntax" else f"syntax error: {error}"
        except Exception as error:  # any evaluation failure fails the test, with its reason
            problem = f"{type(error).__name__}: {error}"
        finally:
            catalog.close()
            dataset.close()
    return TestResult(test.suite, test.name, problem is None, problem or "")


# --------------------------------------------------------------------------- results


def compare(result: Any, expected: Path | None) -> str | None:
    """What differs between the evaluator's result and the expected .srx / .srj / RDF file, or None."""
    if expected is None:
        return "the manifest gives no mf:result"
    if expected.suffix in RDF_FORMATS:
        want = Graph().parse(expected, format="turtle" if expected.suffix == ".ttl" else None,
                             publicID=expected.as_uri())
        if not isinstance(result, ConstructedTriples):
            return f"expected a graph, got {type(result).__name__}"
        buffer = io.BytesIO()
        pyoxigraph.serialize(result, buffer, RdfFormat.N_TRIPLES)
        got = Graph().parse(data=buffer.getvalue().decode("utf-8"), format="nt")
        return None if isomorphic(want, got) else f"graph differs: got {snippet(buffer.getvalue().decode())}"
    fmt = QueryResultsFormat.JSON if expected.suffix == ".srj" else QueryResultsFormat.XML
    want_results = pyoxigraph.parse_query_results(path=expected, format=fmt)
    if isinstance(want_results, QueryBoolean) or isinstance(result, QueryBoolean):
        same = type(result) is type(want_results) and bool(result) == bool(want_results)
        return None if same else f"expected {want_results}, got {result}"
    if not isinstance(result, QuerySolutions):
        return f"expected solutions, got {type(result).__name__}"
    want_vars, got_vars = ({v.value for v in r.variables} for r in (want_results, result))
    want, got = _rows(want_results), _rows(result)
    if want_vars != got_vars:
        return f"variables {sorted(got_vars)}, expected {sorted(want_vars)}"
    if len(want) == len(got) and _match(want, got, {}, frozenset()):
        return None
    return f"solutions differ: expected {_show(want)}, got {_show(got)}"


def _rows(solutions: QuerySolutions) -> list[dict[str, Any]]:
    names = [v.value for v in solutions.variables]
    return [{n: s[n] for n in names if s[n] is not None} for s in solutions]


def _match(want: list[dict[str, Any]], got: list[dict[str, Any]], bnodes: dict[str, str],
           used: frozenset[int]) -> bool:
    """Whether ``got`` is ``want`` as a multiset, blank nodes renamed by one bijection (backtracking)."""
    if not want:
        return True
    for index, row in enumerate(got):
        if index not in used and row.keys() == want[0].keys():
            mapping: dict[str, str] | None = dict(bnodes)
            for name, term in want[0].items():
                mapping = _unify(term, row[name], mapping)
            if mapping is not None and _match(want[1:], got, mapping, used | {index}):
                return True
    return False


def _unify(want: Any, got: Any, bnodes: dict[str, str] | None) -> dict[str, str] | None:
    if bnodes is None or not (isinstance(want, BlankNode) and isinstance(got, BlankNode)):
        return bnodes if bnodes is not None and want == got else None
    if want.value in bnodes:
        return bnodes if bnodes[want.value] == got.value else None
    return None if got.value in bnodes.values() else {**bnodes, want.value: got.value}


def _show(rows: list[dict[str, Any]]) -> str:
    return snippet("; ".join(" ".join(f"?{k}={v}" for k, v in sorted(r.items())) for r in rows) or "(none)")


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: start the endpoint servers, run all tests, print the table; exit status 1 if one failed."""
    argparse.ArgumentParser(prog="python -m conformance.w3c_query", description=__doc__).parse_args(argv)
    try:
        tests = load_tests()
        with Endpoints(max([len(t.service_data) for t in tests] + [1])) as endpoints:
            results = run(endpoints, tests)
    except (RuntimeError, TimeoutError, FileNotFoundError, ManifestError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(format_table(results))
    return 1 if any(not r.passed and not r.skipped for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
