"""A CSRBench oracle in Python: are C-SPARQL's and CQELS's answers correct evaluations?

The idea is the CSRBench oracle's (Dell'Aglio et al., "On Correctness in RDF Stream Processor
Benchmarking", ISWC 2013; ``conformance/suites/csrbench/README.md``): replay the stream
``data/data_NN.ttl`` (one element per file, timestamp NN s), evaluate each of the 7 queries of
``resources/srbench-queries.properties`` window by window under a system's configuration (report
policy + stream operator), and accept the system's answer when it equals one of the outputs that
configuration admits. The answers are what the engines produced, not gold answers.

What is ours and what is the oracle's:

- **Windows** come from ``sparql_ext.windowing`` (the reference window semantics): query N's
  ``window.size`` α and ``window.slide`` β become the WindowRef ``R/<t0>/PT{α}S/PT{β}S``.
- **Evaluation**: pyoxigraph, each element a named graph, the query's WHERE over the union of the
  window's element graphs as default graph (as ``conformance/csrbench_expected.py`` does for q1-3).
- **Reports**: ``sparql_ext.reporting``. C-SPARQL's configuration (``csparql.properties``: window
  close, non-empty content, empty relations output, Rstream) is ``window-close,non-empty-content`` +
  ``rstream``; CQELS's (``cqels.properties``: content change, non-empty content, no empty relations,
  Istream) is ``content-change,non-empty-content,non-empty`` + ``istream`` over one scope per element
  arrival (see ``sparql_ext.reporting`` for the mapping of the oracle's switches).
- **Alternatives** (the oracle's idea: t0 is not fixed by the engine): the registration time t0 runs
  over 0, 1, …, α seconds (the oracle's range, step ``system.timeunit`` = 1 s; elements are 1 s
  apart, so finer steps give no other windows). The engine sees the elements from t0 on.

  * window close: the windows are ``R/<t0>/PT{α}S/PT{β}S`` (the first window starts at t0: the
    oracle's and RSP-QL's choice) **or** the same grid extended back to the windows already open at
    t0 (anchor t0 − (⌈α/β⌉−1)·β: C-SPARQL starts a 5 s window every second from the start, so its
    first windows are partial). The two differ only when α > β (query 5).
  * content change: at the arrival of each element (time t ≥ t0), the scope is the oldest window of
    ``R/<t0>/PT{α}S/PT{β}S`` that holds t, with the elements arrived so far (the oracle's
    ``Windower`` does the same; it skips an element *at* t0, which we do not).
- **Comparison**: an answer file is a sequence of relations; each relation is compared as a
  multiset of solutions, in order, and the whole sequence must be equal (the oracle accepts a
  contiguous sub-sequence; we ask for all of it). Timestamps are ignored for the verdict, like the
  oracle's ``TimestampedRelation.equals``; the table shows how far the engine's timestamps are from
  our report times. Numeric literals compare by value (C-SPARQL returns ``"43"^^xsd:integer`` for
  the data's ``"43"^^xsd:double``; the oracle compares ``doubleValue()`` too).

Usage: ``.venv/bin/python -m conformance.csrbench [--csrbench DIR]`` prints the table.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import requests

from concentrator.client import _parts
from conformance.csrbench_expected import normalize_query, read_properties, split_select
from conformance.server import running_server
from sparql_ext import ListIndex, Reporter, parse_report, parse_window_ref, resolve, window, windows

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSRBENCH = REPO_ROOT / "conformance" / "suites" / "csrbench"
QUERIES = tuple(str(n) for n in range(1, 8))
SECOND = 1_000_000  # µs
XSD = "http://www.w3.org/2001/XMLSchema#"
NUMERIC = {XSD + name for name in (
    "integer", "decimal", "double", "float", "int", "long", "short", "byte", "nonNegativeInteger",
    "positiveInteger", "negativeInteger", "nonPositiveInteger", "unsignedInt", "unsignedLong")}

Term = tuple[str, ...] | tuple[str, float]
Solution = tuple[tuple[str, Term], ...]  # sorted (variable, term) pairs
Relation = Counter[Solution]


@dataclass(frozen=True)
class Configuration:
    """A system's configuration in the oracle's terms, as our report spec."""

    name: str  # csparql | cqels
    properties: str
    window_close: bool  # True: the query's windows; False: one scope per element arrival
    report: str
    operator: str


CONFIGURATIONS = (
    Configuration("csparql", "csparql.properties", True, "window-close,non-empty-content", "rstream"),
    Configuration("cqels", "cqels.properties", False, "content-change,non-empty-content,non-empty", "istream"),
)


@dataclass(frozen=True)
class Report:
    """One relation: its time (µs; ours: the window end or arrival time; the engine's: its label)."""

    time: int
    solutions: Relation


@dataclass(frozen=True)
class Alternative:
    """One output our evaluation admits: t0, which windows, and the reports."""

    t0: int  # s (the first one giving these reports)
    grid: str  # "from t0" or "open at t0" (window close), "arrivals" (content change)
    window_ref: str
    reports: tuple[Report, ...]
    origins: list[tuple[int, str]] = field(default_factory=list, compare=False)  # every (t0, grid) giving them


@dataclass
class Verdict:
    query: str
    configuration: str
    answer: tuple[Report, ...]
    alternatives: list[Alternative]
    matches: list[Alternative] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return bool(self.matches)

    def closest(self) -> tuple[Alternative, int]:
        """The alternative agreeing with the answer on the longest prefix, and that prefix's length."""
        def prefix(alternative: Alternative) -> int:
            n = 0
            for ours, theirs in zip(alternative.reports, self.answer, strict=False):
                if ours.solutions != theirs.solutions:
                    break
                n += 1
            return n
        best = max(self.alternatives, key=prefix)
        return best, prefix(best)


class Benchmark:
    """The CSRBench stream loaded in pyoxigraph, the queries, and the engines' answers."""

    def __init__(self, root: Path = DEFAULT_CSRBENCH) -> None:
        self.root = root
        self.properties = read_properties(root / "resources" / "srbench-queries.properties")
        self.store = ox.Store()
        self.times: list[int] = []  # µs, element n (0-based) is data file n in time order
        self.graphs: list[ox.NamedNode] = []
        for path in sorted(root.glob("data/data_*.ttl"), key=lambda p: int(p.stem.split("_")[1])):
            second = int(path.stem.split("_")[1])
            graph = ox.NamedNode(f"urn:csrbench:data_{second:02d}")
            self.store.bulk_load(path=str(path), format=ox.RdfFormat.TURTLE, to_graph=graph)
            self.times.append(second * SECOND)
            self.graphs.append(graph)
        self._cache: dict[tuple[str, tuple[int, ...]], Relation] = {}
        self._predicate_cache: dict[str, list[ox.NamedNode]] = {}

    @cached_property
    def shared_triples(self) -> int:
        """Triples in more than one element, plus blank nodes: both 0 makes ``union_query`` exact."""
        seen = Counter((q.subject, q.predicate, q.object) for q in self.store)
        blanks = sum(isinstance(q.subject, ox.BlankNode) or isinstance(q.object, ox.BlankNode) for q in self.store)
        return sum(count > 1 for count in seen.values()) + blanks

    @cached_property
    def max_time(self) -> int:
        return max(self.times)

    def query(self, number: str) -> tuple[str, int, int]:
        """(query text, size α in s, slide β in s) of query N."""
        prefix = f"srb.query{number}."
        size_ms, slide_ms = int(self.properties[prefix + "window.size"]), int(self.properties[prefix + "window.slide"])
        assert size_ms % 1000 == 0 and slide_ms % 1000 == 0, (number, size_ms, slide_ms)
        assert int(self.properties[prefix + "window.firstt0"]) == 0
        return normalize_query(self.properties[prefix + "booleanquery"]), size_ms // 1000, slide_ms // 1000

    def evaluate(self, query: str, members: Iterable[int]) -> Relation:
        """Solutions of the query over the union of the given elements (0-based), as a multiset."""
        key = (query, tuple(members))
        if key not in self._cache:
            # A copy holding the triples whose predicate the query names: the same solutions (no pattern can
            # match another triple), ten times faster than default_graph= over the whole elements for query 6.
            predicates = self._predicates(query)
            window = ox.Store()
            window.extend(ox.Quad(q.subject, q.predicate, q.object, ox.DefaultGraph())
                          for n in key[1] for p in predicates
                          for q in self.store.quads_for_pattern(None, p, None, self.graphs[n]))
            result = window.query(query)
            variables = [variable.value for variable in result.variables]
            self._cache[key] = Counter(
                tuple(sorted((name, term_key(row[name])) for name in variables if row[name] is not None))
                for row in result)
        return self._cache[key]

    def _predicates(self, query: str) -> list[ox.NamedNode]:
        if query not in self._predicate_cache:
            _, patterns, _, _ = basic_graph_pattern(query)
            assert all(p.startswith("<") for _, p, _ in patterns), f"a variable predicate: {query}"
            self._predicate_cache[query] = [ox.NamedNode(p[1:-1]) for p in dict.fromkeys(p for _, p, _ in patterns)]
        return self._predicate_cache[query]

    def answer(self, engine: str, number: str) -> tuple[Report, ...]:
        data = json.loads((self.root / "resources" / "answers" / f"{engine}-answer-{number}.json").read_text())
        return tuple(
            Report(relation["timestamp"] * 1000, Counter(
                tuple(sorted((name, json_term_key(term)) for name, term in binding["binding"].items()))
                for binding in relation["results"]["bindings"]))
            for relation in data["relations"])


def term_key(term: ox.NamedNode | ox.BlankNode | ox.Literal) -> Term:
    if isinstance(term, ox.NamedNode):
        return ("iri", term.value)
    if isinstance(term, ox.BlankNode):
        return ("bnode",)  # none are projected by the 7 queries; all blank nodes compare equal
    return literal_key(term.value, term.datatype.value, term.language)


def json_term_key(term: dict[str, str]) -> Term:
    if term["type"] == "uri":
        return ("iri", term["value"])
    if term["type"] == "bnode":
        return ("bnode",)
    lang = term.get("xml:lang")
    return literal_key(term["value"], term.get("datatype", XSD + ("string" if lang is None else "langString")), lang)


def literal_key(value: str, datatype: str, language: str | None) -> Term:
    if datatype in NUMERIC:
        return ("number", round(float(value), 9))
    return ("literal", value, datatype, language or "")


def anchor_ref(t0: int, size: int, slide: int) -> str:
    """``R/<t0 as xsd:dateTime>/PT{size}S[/PT{slide}S]`` (t0 in s, may be negative)."""
    at = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=t0)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"R/{at}/PT{size}S" + ("" if size == slide else f"/PT{slide}S")


def tagged(relation: Relation) -> list[Hashable]:
    """A multiset as a set: the i-th copy of a solution is (solution, i), so set difference (Istream,
    Dstream) is multiset difference."""
    return [(solution, i) for solution, count in relation.items() for i in range(1, count + 1)]


def untagged(emitted: frozenset) -> Relation:  # type: ignore[type-arg]
    return Counter(solution for solution, _ in emitted)


def alternatives(bench: Benchmark, number: str, configuration: Configuration,
                 t0s: Iterable[int] | None = None) -> list[Alternative]:
    """The outputs the oracle admits, for t0 in ``t0s`` (default: 0 … α s)."""
    query, size, slide = bench.query(number)
    spec = parse_report(configuration.report, configuration.operator)
    found: list[Alternative] = []
    seen: dict[tuple[tuple[int, frozenset[tuple[Solution, int]]], ...], Alternative] = {}
    for t0 in range(0, size + 1) if t0s is None else t0s:
        seen_times = [t for t in bench.times if t >= t0 * SECOND]  # the engine registered at t0
        offset = len(bench.times) - len(seen_times)  # element n of the index is bench element offset+n-1
        index = ListIndex.of_times(seen_times)
        if configuration.window_close:
            grids = [("from t0", t0)]
            back = -(-size // slide) - 1
            if back:
                grids.append(("open at t0", t0 - back * slide))
        else:
            grids = [("arrivals", t0)]
        for grid, anchor in grids:
            ref = anchor_ref(anchor, size, slide)
            window_spec = resolve(parse_window_ref(ref), index)
            reporter = Reporter(spec)
            reports: list[Report] = []
            if configuration.window_close:
                watermark = bench.max_time + (size + slide) * SECOND
                scopes = [(w.end, w.elements) for w in windows(window_spec, index, watermark)]
            else:
                scopes = []
                for arrived in range(1, index.head() + 1):
                    prefix = ListIndex.of_times(seen_times[:arrived])  # the stream as of this arrival
                    at = seen_times[arrived - 1]
                    k = max(0, -(-(at - window_spec.origin - size * SECOND + 1) // (slide * SECOND)))
                    scope = window(window_spec, k, prefix)  # the oldest window holding t
                    assert scope is not None and scope.start <= at < scope.end, (ref, k, at)
                    scopes.append((at, scope.elements))
            for end, members in scopes:
                relation = bench.evaluate(query, [offset + ordinal - 1 for ordinal in members])
                emitted = reporter.on_window(end, tagged(relation), len(members))
                if emitted is not None:
                    reports.append(Report(end, untagged(emitted)))
            key = tuple((r.time, frozenset(r.solutions.items())) for r in reports)
            if key not in seen:
                seen[key] = Alternative(t0, grid, ref, tuple(reports))
                found.append(seen[key])
            seen[key].origins.append((t0, grid))
    return found


# -- our concentrator's outputs ------------------------------------------------------------------------------------

OUR_T0 = 0  # our windows are anchored at 1970-01-01T00:00:00Z: t0 is fixed, not a choice of the oracle's
STREAM = "csrbench"


def basic_graph_pattern(query: str) -> tuple[str, list[tuple[str, str, str]], list[str], str]:
    """(head, triple patterns, FILTERs, rest) of a SELECT whose WHERE is a basic graph pattern with FILTERs (all 7
    queries). The WHERE is read as Turtle (variables as IRIs; ``[…]`` blank nodes become variables ``?_bN``);
    each term is written back in SPARQL (full IRIs)."""
    head, body, rest = split_select(query)
    filters: list[str] = []
    while (match := re.search(r"\bFILTER\s*\(", body, re.IGNORECASE)) is not None:
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            i += 1
        filters.append(body[match.start():i].strip())
        body = body[:match.start()] + " " + body[i:]
    prologue = "".join(f"@prefix {name}: <{iri}> .\n"
                       for name, iri in re.findall(r"PREFIX\s+([\w-]*):\s*<([^>]*)>", head, re.IGNORECASE))
    turtle = prologue + re.sub(r"\?(\w+)", r"<urn:csrbench:variable:\1>", body)
    blanks: dict[str, str] = {}

    def term(node: ox.NamedNode | ox.BlankNode | ox.Literal) -> str:
        if isinstance(node, ox.NamedNode) and node.value.startswith("urn:csrbench:variable:"):
            return "?" + node.value.removeprefix("urn:csrbench:variable:")
        if isinstance(node, ox.BlankNode):
            return blanks.setdefault(node.value, f"?_b{len(blanks) + 1}")
        return str(node)

    patterns = [(term(t.subject), term(t.predicate), term(t.object))
                for t in ox.parse(turtle.encode(), format=ox.RdfFormat.TURTLE)]
    return head, patterns, filters, rest


def union_query(query: str) -> str:
    """The query with each triple pattern of its WHERE in its own ``GRAPH ?_gN { … }``.

    CSRBench evaluates a query over the merge of the window's elements as default graph; our window dataset has
    the elements as named graphs (its default graph holds their timestamps). Matching each triple pattern in any
    element graph is that merge's evaluation as long as no triple is in two elements (a solution would count
    twice) and no blank node is shared: both hold for the CSRBench data (``Benchmark.shared_triples``).

    >>> print(union_query("PREFIX e: <http://e/> SELECT ?s WHERE { ?s e:p [ e:q ?v ] . FILTER(?v > 1) }"))
    ... # doctest: +NORMALIZE_WHITESPACE
    PREFIX e: <http://e/> SELECT ?s WHERE { GRAPH ?_g1 { ?_b1 <http://e/q> ?v }
    GRAPH ?_g2 { ?s <http://e/p> ?_b1 } FILTER(?v > 1) }
    """
    head, patterns, filters, rest = basic_graph_pattern(query)
    graphs = [f"GRAPH ?_g{n} {{ {s} {p} {o} }}" for n, (s, p, o) in enumerate(patterns, start=1)]
    return f"{head}WHERE {{ {' '.join(graphs + filters)} }}{rest}"


def our_ref(bench: Benchmark, number: str) -> str:
    """Query N's window sequence anchored at 0, ``Rn`` with n the windows that start up to the last element."""
    _, size, slide = bench.query(number)
    count = bench.max_time // (slide * SECOND) + 1
    return f"R{count}/" + anchor_ref(OUR_T0, size, slide).removeprefix("R/")


def end_of_stream(bench: Benchmark) -> int:
    """The punctuation (µs) that closes every query's last window."""
    ends = []
    for number in QUERIES:
        _, size, slide = bench.query(number)
        ends.append((bench.max_time // (slide * SECOND)) * slide * SECOND + size * SECOND)
    return max(ends)


def stamp(micros: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def micros_of(text: str) -> int:
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@dataclass
class Response:
    """One continuous response of our server: query N under a configuration, read as multipart in a thread."""

    number: str
    configuration: Configuration
    params: dict[str, str]
    reports: list[Report] = field(default_factory=list)
    error: str | None = None
    ended: threading.Event = field(default_factory=threading.Event)

    def read(self, url: str) -> None:
        try:
            with requests.get(url, params=self.params, stream=True, timeout=(30, None)) as response:
                if not response.ok:
                    self.error = f"{response.status_code}: {response.text.strip()}"
                    return
                boundary = response.headers["Content-Type"].split("boundary=", 1)[1].strip('"')
                for headers, body in _parts(response.iter_content(chunk_size=None), boundary.encode()):
                    if "Window-Index" not in headers:
                        self.error = body.decode("utf-8", "replace")  # the server's closing notice
                        continue
                    at = headers.get("Arrival-Time") or headers["Window-End"]  # content change: the arrival
                    self.reports.append(Report(micros_of(at), Counter(
                        tuple(sorted((name, json_term_key(term)) for name, term in binding.items()))
                        for binding in json.loads(body)["results"]["bindings"])))
        except Exception as error:  # noqa: BLE001 - reported in the table
            self.error = repr(error)
        finally:
            self.ended.set()


@dataclass
class ServerRun:
    """What one replay through our server produced: the 14 responses and the window revisions it materialized."""

    responses: dict[tuple[str, str], Response]
    windows: list[dict[str, Any]]  # GET /streams/csrbench/windows → "sequences", as listed at the end
    extra: Any = None  # what ``after_replay`` returned


def our_outputs(bench: Benchmark, timeout: float = 120, server_url: str | None = None,
                stream: str = STREAM) -> dict[tuple[str, str], Response]:
    """Start our server (Spark pipeline) or use the one at ``server_url`` (started with ``--threads 40`` or more),
    open the 14 continuous responses on ``stream``, replay the stream, punctuate its end, and collect the reported
    relations."""
    if server_url is not None:
        return replay_on(server_url, bench, stream, timeout).responses
    return server_run(bench, timeout=timeout).responses


def server_run(bench: Benchmark, server_args: Sequence[str] = (), timeout: float = 120,
               before_replay: Callable[[str], None] | None = None,
               after_replay: Callable[[str], Any] | None = None) -> ServerRun:
    """``our_outputs`` with extra server arguments (e.g. ``--spark-master spark://…``), also returning the window
    revisions the pipeline materialized. The hooks get the server's URL: ``before_replay`` runs once the stream
    exists (e.g. to register rules), ``after_replay`` once every response ended (its result is ``extra``)."""
    with running_server(["--threads", "40", *server_args]) as server:
        try:
            return replay_on(server.url, bench, STREAM, timeout, before_replay, after_replay)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{server.log_tail()}") from None


def replay_on(base: str, bench: Benchmark, stream: str, timeout: float = 120,
              before_replay: Callable[[str], None] | None = None,
              after_replay: Callable[[str], Any] | None = None) -> ServerRun:
    """``server_run``'s replay on a running server at ``base``, on a new stream named ``stream``."""
    url = f"{base}/streams/{stream}"
    created = requests.put(url, timeout=30)
    assert created.status_code == 201, created.text
    if before_replay is not None:
        before_replay(base)
    open_before = len(requests.get(base + "/status", timeout=30).json()["continuous"])
    responses = {}
    for number in QUERIES:
        query = union_query(bench.query(number)[0])
        for configuration in CONFIGURATIONS:
            responses[(number, configuration.name)] = Response(number, configuration, {
                "WINDOWS": our_ref(bench, number), "query": query, "report": configuration.report,
                "operator": configuration.operator, "packaging": "multipart",
                "format": "application/sparql-results+json"})
    for response in responses.values():
        threading.Thread(target=response.read, args=(url,), daemon=True).start()
    deadline = time.monotonic() + timeout
    while len(requests.get(base + "/status", timeout=30).json()["continuous"]) < open_before + len(responses):
        failed = [r.error for r in responses.values() if r.error]
        if failed or time.monotonic() > deadline:
            raise RuntimeError(f"responses not registered: {failed}")
        time.sleep(0.1)
    for second, path in sorted((int(p.stem.split("_")[1]), p) for p in bench.root.glob("data/data_*.ttl")):
        posted = requests.post(url, data=path.read_bytes(), headers={"Content-Type": "text/turtle"}, params={
            "graph": f"http://csrbench/element/{second:02d}", "timestamp": stamp(second * SECOND)}, timeout=60)
        assert posted.status_code == 200, posted.text
    punctuated = requests.post(url, params={"punctuation": stamp(end_of_stream(bench))}, timeout=60)
    assert punctuated.status_code == 200, punctuated.text
    for response in responses.values():
        if not response.ended.wait(max(0.0, deadline - time.monotonic())):
            response.error = f"did not end in {timeout:g} s ({len(response.reports)} reports)"
    windows = requests.get(url + "/windows", timeout=60).json()["sequences"]
    extra = None if after_replay is None else after_replay(base)
    return ServerRun(responses, windows, extra)


@dataclass
class OurVerdict:
    """Our output for query N under a configuration, judged against the outputs the oracle admits with t0 = 0."""

    query: str
    configuration: str
    reports: tuple[Report, ...]
    admitted: list[Alternative]
    error: str | None = None

    @cached_property
    def matches(self) -> list[Alternative]:
        return [a for a in self.admitted if [r.solutions for r in a.reports] == [r.solutions for r in self.reports]]

    @property
    def correct(self) -> bool:
        return self.error is None and bool(self.matches)

    def detail(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        if self.correct:
            deltas = {(ours.time - theirs.time) // 1000
                      for ours, theirs in zip(self.reports, self.matches[0].reports, strict=True)}
            times = "report times = the oracle's" if deltas <= {0} else f"report time − oracle's: {sorted(deltas)} ms"
            return f"{len(self.reports)} reports; {times}"
        best = max(self.admitted, key=lambda a: prefix_length(a.reports, self.reports))
        n = prefix_length(best.reports, self.reports)
        oracle = best.reports[n] if n < len(best.reports) else None
        ours = self.reports[n] if n < len(self.reports) else None
        def shown(report: Report | None) -> str:
            return "none" if report is None else f"@{report.time // 1000} ms {describe(report.solutions)}"
        return (f"report {n + 1}: ours {shown(ours)} vs oracle {shown(oracle)}"
                f" ({len(self.reports)} reports vs {len(best.reports)})")


def prefix_length(reference: Iterable[Report], reports: Iterable[Report]) -> int:
    n = 0
    for a, b in zip(reference, reports, strict=False):
        if a.solutions != b.solutions:
            break
        n += 1
    return n


def judge_ours(bench: Benchmark, response: Response) -> OurVerdict:
    # our windows are the grid from t0 (the ref is anchored at t0 = 0): not the grid extended back to the windows
    # open at t0, which the oracle also admits for an engine that registered at t0
    admitted = [a for a in alternatives(bench, response.number, response.configuration, [OUR_T0])
                if any(grid != "open at t0" for _, grid in a.origins)]
    return OurVerdict(response.number, response.configuration.name, tuple(response.reports), admitted,
                      response.error)


def judge(bench: Benchmark, number: str, configuration: Configuration) -> Verdict:
    answer = bench.answer(configuration.name, number)
    verdict = Verdict(number, configuration.name, answer, alternatives(bench, number, configuration))
    verdict.matches = [a for a in verdict.alternatives
                       if [r.solutions for r in a.reports] == [r.solutions for r in answer]]
    return verdict


def describe(relation: Relation, limit: int = 2) -> str:
    def solution(s: Solution) -> str:
        return "{" + ", ".join(f"{name}={short(term)}" for name, term in s) + "}"
    items = sorted(relation.elements(), key=repr)
    text = ", ".join(solution(s) for s in items[:limit])
    return f"{sum(relation.values())} [{text}{', …' if len(items) > limit else ''}]"


def short(term: Term) -> str:
    if term[0] == "iri":
        return str(term[1]).rsplit("/", 1)[-1]
    if term[0] == "number":
        return f"{term[1]:g}"
    return str(term[1:])


def first_difference(verdict: Verdict) -> str:
    best, n = verdict.closest()
    ours = best.reports[n] if n < len(best.reports) else None
    theirs = verdict.answer[n] if n < len(verdict.answer) else None
    where = f"report {n + 1} (t0={best.t0} s, {best.grid})"
    return (f"{where}: ours {'none' if ours is None else f'@{ours.time // 1000} ms ' + describe(ours.solutions)}"
            f" vs engine {'none' if theirs is None else f'@{theirs.time // 1000} ms ' + describe(theirs.solutions)}"
            f" ({len(best.reports)} reports vs {len(verdict.answer)})")


def timestamp_offsets(verdict: Verdict) -> str:
    alternative = verdict.matches[0]
    deltas = [(theirs.time - ours.time) // 1000 for ours, theirs in zip(alternative.reports, verdict.answer,
                                                                      strict=True)]
    if not deltas:
        return "no reports"
    low, high = min(deltas), max(deltas)
    return f"engine time − ours: {low} ms" if low == high else f"engine time − ours: {low}…{high} ms"


def merged_by_second(reports: Iterable[Report]) -> list[Relation]:
    """Relations merged per application second (CQELS emits one relation per triple, not per element)."""
    merged: dict[int, Relation] = {}
    for report in reports:
        merged.setdefault(report.time // SECOND, Counter()).update(report.solutions)
    return [merged[second] for second in sorted(merged)]


def table(bench: Benchmark) -> tuple[list[Verdict], str]:
    verdicts = [judge(bench, number, configuration) for number in QUERIES for configuration in CONFIGURATIONS]
    lines = ["query | configuration | correct | matching alternatives / first difference",
             "---|---|---|---"]
    for verdict in verdicts:
        if verdict.correct:
            t0s = sorted({origin for a in verdict.matches for origin in a.origins})
            names = ", ".join(f"{t}" + (" (open at t0)" if g == "open at t0" else "") for t, g in t0s)
            detail = f"t0 ∈ {{{names}}} s; {len(verdict.answer)} reports; {timestamp_offsets(verdict)}"
        else:
            detail = first_difference(verdict)
            if verdict.configuration == "cqels":
                merged = merged_by_second(verdict.answer)
                if any([r.solutions for r in a.reports] == merged for a in verdict.alternatives):
                    detail += "; equal once the engine's relations are merged per element (second)"
        lines.append(f"q{verdict.query} | {verdict.configuration} | {'yes' if verdict.correct else 'NO'} | {detail}")
    lines += ["", "C-SPARQL vs CQELS (answer files):", "query | solutions C-SPARQL / CQELS | same solutions |"
              " relations C-SPARQL / CQELS | Istream of C-SPARQL's relations = all of CQELS's solutions",
              "---|---|---|---|---"]
    for number in QUERIES:
        csparql, cqels = bench.answer("csparql", number), bench.answer("cqels", number)
        total_cs = sum((r.solutions for r in csparql), Counter())
        total_cq = sum((r.solutions for r in cqels), Counter())
        previous: Relation = Counter()
        istream: Relation = Counter()
        for report in csparql:
            istream.update(report.solutions - previous)
            previous = report.solutions
        lines.append(
            f"q{number} | {sum(total_cs.values())} ({len(total_cs)} distinct) / {sum(total_cq.values())}"
            f" ({len(total_cq)} distinct) | {'yes' if set(total_cs) == set(total_cq) else 'no'}"
            f" (as sets) | {len(csparql)} / {len(cqels)}"
            f" | {'yes' if istream == total_cq else f'no ({sum(istream.values())} vs {sum(total_cq.values())})'}")
    return verdicts, "\n".join(lines)


def our_table(bench: Benchmark, responses: dict[tuple[str, str], Response],
              engines: list[Verdict]) -> tuple[list[OurVerdict], str]:
    """Our outputs judged (t0 = 0), next to the engines' verdicts."""
    engine = {(v.query, v.configuration): v for v in engines}
    verdicts = [judge_ours(bench, responses[(number, c.name)]) for number in QUERIES for c in CONFIGURATIONS]
    lines = ["Our concentrator (continuous responses, t0 = 0) and the engines' answer files:",
             "query | configuration | ours correct | engine answer correct | ours: reports / first difference",
             "---|---|---|---|---"]
    for verdict in verdicts:
        theirs = engine[(verdict.query, verdict.configuration)].correct
        lines.append(f"q{verdict.query} | {verdict.configuration} | {'yes' if verdict.correct else 'NO'} | "
                     f"{'yes' if theirs else 'no'} | {verdict.detail()}")
    correct = sum(v.correct for v in verdicts)
    lines.append(f"ours: {correct} of {len(verdicts)} correct; engines: {sum(v.correct for v in engines)} of "
                 f"{len(engines)}")
    return verdicts, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csrbench", type=Path, default=DEFAULT_CSRBENCH)
    parser.add_argument("--engines-only", action="store_true", help="judge the answer files only (no server)")
    args = parser.parse_args()
    bench = Benchmark(args.csrbench)
    engines, text = table(bench)
    if not args.engines_only:
        assert bench.shared_triples == 0, "union_query is exact only without shared triples / blank nodes"
        _, ours = our_table(bench, our_outputs(bench), engines)
        print(ours + "\n")
        print("The engines' answer files in detail:")
    print(text)


__all__ = ["Benchmark", "CONFIGURATIONS", "Configuration", "OurVerdict", "ServerRun", "judge", "judge_ours",
           "our_outputs", "our_table", "replay_on", "server_run", "table"]

if __name__ == "__main__":
    main()
