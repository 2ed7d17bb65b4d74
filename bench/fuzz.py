"""Fuzz the parsers (issue 6): WindowRefs, extended SPARQL and RDF bodies through the real HTTP app.

Every target is a property over one input: the parser (or the server) either accepts it or refuses it with a 4xx
and a message; nothing else (no other exception, no 5xx, no hang). Inputs come from hypothesis strategies: valid
texts built from the grammar (docs/streams.md, docs/extended-sparql.md) or taken from the test suite and the
examples, then mutated (characters inserted, deleted, replaced, slices duplicated), plus arbitrary text.

``tests/test_fuzz.py`` runs these properties with a few examples each as part of the suite; this module runs them
longer, counts inputs and failures per target, prints a table and writes ``bench/results/fuzz.json``::

    .venv/bin/python -m bench.fuzz                   # 200 inputs per target
    .venv/bin/python -m bench.fuzz --examples 3000   # the committed run
    .venv/bin/python -m bench.fuzz --target windowref --examples 10000
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import re
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench.fuzz_nesting import Isolated, check_rdf, check_sparql, rdf_inputs, sparql_inputs

ROOT = Path(__file__).resolve().parent.parent
SLOW_SECONDS = 2.0  # one parse, or one request, taking longer than this counts as a hang

# -- strategies: WindowRefs from the grammar ----------------------------------------------------------------

_two = st.integers(0, 99).map(lambda n: f"{n:02d}")


# Extreme values (offsets of ±24:00, durations past timedelta's range) found the failures recorded in the
# README; ``extreme=False`` leaves them out (tests/test_fuzz.py, whose xfail tests pin those failures).
_ZONES = ["Z", "+01:00", "-05:30", "+14:00", "%2B02:00", "", "+00:00"]
_EXTREME_ZONES = ["+24:00", "-24:00", "+23:59", "-23:59", "+99:00", "+00:60", "-00:00"]


@st.composite
def date_times(draw: st.DrawFn, extreme: bool = True) -> str:
    year = draw(st.integers(1, 9999))
    text = (f"{year:04d}-{draw(st.integers(1, 12)):02d}-{draw(st.integers(1, 28)):02d}"
            f"T{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}:{draw(st.integers(0, 59)):02d}")
    if draw(st.booleans()):
        text += "." + draw(st.text("0123456789", min_size=1, max_size=7))
    zone = draw(st.sampled_from(_ZONES) | (st.sampled_from(_EXTREME_ZONES) if extreme else st.nothing()))
    return text + zone


def revisions(extreme: bool = True) -> st.SearchStrategy[str]:
    big = 10**30 if extreme else 10**9
    return st.one_of(
        st.just("HEAD"),
        st.integers(0, 10**6).map(lambda n: f"HEAD~{n}") | st.integers(0, big).map(lambda n: f"HEAD~{n}"),
        st.uuids().map(str),
        st.integers(0, big).map(str),
        date_times(extreme),
    )


@st.composite
def durations(draw: st.DrawFn, signed: bool = True, extreme: bool = True) -> str:
    sign = draw(st.sampled_from(["", "-"])) if signed else ""
    huge = st.integers(10**8, 10**16) if extreme else st.nothing()
    days = draw(st.none() | st.integers(0, 400) | huge)
    hours = draw(st.none() | st.integers(0, 48) | huge)
    minutes = draw(st.none() | st.integers(0, 120))
    seconds = draw(st.none() | st.integers(0, 120).map(str) | st.decimals(0, 100, places=3).map(str))
    text = f"{sign}P" + (f"{days}D" if days is not None else "")
    time_part = "".join(f"{v}{u}" for v, u in ((hours, "H"), (minutes, "M"), (seconds, "S")) if v is not None)
    if time_part:
        text += "T" + time_part
    if draw(st.integers(0, 20)) == 0:  # years or months: refused, but grammatical
        text = text.replace("P", f"P{draw(st.integers(0, 3))}{draw(st.sampled_from('YM'))}", 1)
    return text


@st.composite
def window_refs(draw: st.DrawFn, extreme: bool = True) -> str:
    """A WindowRef from ``( 'R' Integer? '/' )? Revision ( '/' ( Revision | Duration ) ( '/' ( Duration |
    Integer ) )? )?`` — grammatical, though not always valid (zero widths, backwards ranges, R0)."""
    parts = []
    if draw(st.booleans()):
        parts.append(draw(st.sampled_from(["R", "R"]) | st.integers(0, 1000).map(lambda n: f"R{n}")))
    parts.append(draw(revisions(extreme)))
    if draw(st.integers(0, 4)):
        parts.append(draw(revisions(extreme) | durations(extreme=extreme)))
        if draw(st.booleans()):
            parts.append(draw(durations(signed=False, extreme=extreme) | st.integers(0, 10**4).map(str)))
    return "/".join(parts)


# -- strategies: mutation ----------------------------------------------------------------------------------

# characters that matter to the parsers (separators, quotes, brackets, escapes, digits, letters, Unicode)
_SPECIAL = "/~RHEADTPZ+-:.%0123456789 \t\n\r{}()<>[]\"'#@^_;,?!$\\*|=&\x00\x7f\u00e9\u2028\ufeff\U0001f600\ud800"
_INTERESTING = ["WINDOWS ", "REVISION ", "SERVICE ", "THEN()", "GRAPH ", "HEAD~", "R/", "{", "}", "\"\"\"", "'''",
                "<", ">", "PREFIX x: <http://x/>", "@prefix", ".", ";", "\\u0000", "\\U0010FFFF",
                "99999999999999999999",
                "SELECT * {", "_:b", "?x", "^^", "@en", "\n", " # ", "-", "PT", "P1Y", "HEAD/PT5M", "R0/"]
_chars = st.sampled_from(_SPECIAL) | st.characters()


@st.composite
def mutated(draw: st.DrawFn, seeds: st.SearchStrategy[str], max_edits: int = 4) -> str:
    """One seed with 0..``max_edits`` random edits."""
    text = draw(seeds)
    for _ in range(draw(st.integers(0, max_edits))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "duplicate", "token", "truncate", "swap"]))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        if op == "insert":
            text = text[:i] + draw(st.text(_chars, min_size=1, max_size=3)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "replace":
            text = text[:i] + draw(st.text(_chars, min_size=1, max_size=3)) + text[j:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        elif op == "token":
            text = text[:i] + draw(st.sampled_from(_INTERESTING)) + text[i:]
        elif op == "truncate":
            text = text[:i]
        elif op == "swap" and j - i >= 2:
            text = text[:i] + text[j - 1] + text[i + 1:j - 1] + text[i] + text[j:]
    return text


def windowref_inputs(extreme: bool = True) -> st.SearchStrategy[str]:
    return st.one_of(mutated(window_refs(extreme)), st.text(max_size=40), st.text(_chars, max_size=40))


# -- seeds: extended queries -------------------------------------------------------------------------------

_QUERY_WORDS = re.compile(r"\b(SELECT|CONSTRUCT|ASK|DESCRIBE)\b")


def query_seeds() -> list[str]:
    """The query texts of tests/test_extended.py (string constants holding a query form) and the example rules."""
    seeds: set[str] = set()
    tree = ast.parse((ROOT / "tests" / "test_extended.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _QUERY_WORDS.search(node.value):
            seeds.add(node.value)
    for path in sorted((ROOT / "examples" / "connected-patient" / "rules").glob("*.rq")):
        seeds.add(path.read_text(encoding="utf-8"))
    return sorted(seeds)


QUERY_SEEDS = query_seeds()
def query_inputs(extreme: bool = True) -> st.SearchStrategy[str]:
    """Mutated seeds, arbitrary text, and the WINDOWS construct around a grammar-built WindowRef."""
    built = window_refs(extreme).map(lambda ref: f"SELECT * WHERE {{ WINDOWS {ref} {{ ?g ?p ?o }} }}")
    return st.one_of(mutated(st.sampled_from(QUERY_SEEDS), max_edits=6), st.text(_chars, max_size=80),
                     mutated(built, max_edits=2), deep_texts())

@st.composite
def deep_texts(draw: st.DrawFn) -> str:
    """A query or update with brackets nested far deeper than anyone writes (issue 12: pyoxigraph's parser
    overflows its stack at a few thousand levels, which kills the server): groups, expressions, blank-node
    property lists, mixed, around the limit and far past it, sometimes with a character the tokenizer refuses."""
    depth = draw(st.sampled_from([1, 32, 63, 64, 65, 256, 1_000, 5_000, 20_000]))
    opener, closer = draw(st.sampled_from([("{ ", " }"), ("(", ")"), ("[ <http://p> ", " ]"), ("{ (", ") }")]))
    core = draw(st.sampled_from(["?s ?p ?o", "1", "true", "<http://o>", "?s ?p ` ?o"]))
    body = opener * depth + core + closer * depth
    return draw(st.sampled_from([f"SELECT * WHERE {{ {body} }}", f"ASK {{ FILTER({body}) }}",
                                 f"INSERT DATA {{ <http://s> <http://p> {body} }}", f"DELETE WHERE {{ {body} }}"]))


def check_deep_sparql(server: Server, text: str) -> str:
    """A deeply nested query or update to ``/sparql``: a 2xx, or a 4xx with a message, and the server lives on
    (a SIGSEGV here kills the fuzzer itself: the app runs in its process)."""
    field_name = "update" if text.startswith(("INSERT", "DELETE")) else "query"
    response = server.request("POST", "/sparql", data={field_name: text})
    return _check_status(f"POST /sparql {field_name}={text[:200]!r}… ({len(text)} characters)", response)


# queries for a stream's SPARQL endpoint: no SERVICE to other hosts (the fuzzer must not wait on the network)
STREAM_QUERIES = [
    "SELECT ?hr WHERE { ?g ?p ?t GRAPH ?g { ?o <http://ex/hr> ?hr } } ORDER BY ?t",
    "PREFIX prov: <http://www.w3.org/ns/prov#>\nSELECT (AVG(?hr) AS ?a) (THEN() AS ?then) WHERE {\n"
    "  ?g prov:generatedAtTime ?t . GRAPH ?g { ?o <http://ex/hr> ?hr } FILTER(?t < THEN()) }",
    "SELECT * WHERE { WINDOWS HEAD~1/HEAD { ?g ?p ?o } }",
    "ASK { REVISION HEAD { ?s ?p ?o } }",
    "CONSTRUCT { ?s ?p ?o } WHERE { GRAPH ?g { ?s ?p ?o } }",
    "DESCRIBE <http://ex/e1>",
]
STREAM_WINDOWS = ["HEAD", "HEAD~2/HEAD", "1/3", "HEAD/-PT05M", "R/HEAD~1/HEAD/1", "R2/1/PT01M/PT01M",
                  "2016-06-20T10:00:00Z/PT02M", "2016-06-20T10:00:00Z/2016-06-20T10:02:00Z", "HEAD/PT05M"]


# -- seeds: RDF bodies -------------------------------------------------------------------------------------

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"


def element_trig(name: str, minute: int, hr: int) -> str:
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/{name}/obs> <http://ex/hr> {hr} . }}\n')


def element_nquads(name: str, minute: int, hr: int) -> str:
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}/obs> <http://ex/hr> "{hr}"^^<http://www.w3.org/2001/XMLSchema#integer> '
            f'<http://ex/{name}> .\n')


BASE_ELEMENTS = "".join(element_trig(f"e{i}", i, 60 + i) for i in range(1, 4))  # 10:01..10:03, hr 61..63
TRIG_SEEDS = [
    "".join(element_trig(f"u{i}", 10 + i, 70 + i) for i in range(3)),
    "@prefix ex: <http://ex/> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
    "ex:u1 { ex:o ex:hr 80 ; ex:note \"a \\\"b\\\" c\"@en . _:b ex:p (1 2 3) . }\n"
    "ex:u1 prov:generatedAtTime \"2016-06-20T10:20:00Z\"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n"
    "GRAPH ex:u2 { ex:o ex:hr 81 . }\n"
    "ex:u2 prov:generatedAtTime \"2016-06-20T10:21:00+02:00\"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n",
    "{ <http://ex/d> <http://ex/p> 1 . }\n" + element_trig("u9", 30, 90),
]
NQUADS_SEEDS = ["".join(element_nquads(f"u{i}", 10 + i, 70 + i) for i in range(3))]
BASE_TURTLE = "@prefix ex: <http://ex/> .\nex:s ex:p 1 , 2 ; ex:q \"x\"@en .\n"
TURTLE_SEEDS = [
    "@prefix ex: <http://ex/> .\n@base <http://base/> .\nex:a ex:b <rel> ; ex:c [ ex:d \"\"\"long\nstring\"\"\" ] .\n"
    "ex:a ex:list ( 1 2.5 3e4 true ) ; ex:t \"2016-06-20T10:00:00Z\"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n",
    "PREFIX ex: <http://ex/>\nex:x a ex:Y ; ex:v -1.0 , \"\\u00e9\" , _:b1 .\n_:b1 ex:z 'single' .\n",
    "<http://ex/s> <http://ex/p> <http://ex/o> .\n",
]


# -- properties --------------------------------------------------------------------------------------------

class Failure(AssertionError):
    """A property violation (the input is in the message)."""


@contextmanager
def timed(what: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    if elapsed > SLOW_SECONDS:
        raise Failure(f"{what} took {elapsed:.2f} s (> {SLOW_SECONDS} s): a hang")


def check_window_ref(text: str) -> str:
    """``parse_window_ref`` returns a WindowRef whose ``str()`` re-parses to it, or raises a 4xx SparqlExtError."""
    from sparql_ext import SparqlExtError, WindowRef, parse_window_ref

    try:
        with timed(f"parse_window_ref({text!r})"):
            ref = parse_window_ref(text)
    except SparqlExtError as error:
        if not 400 <= error.status_hint < 500:
            raise Failure(f"parse_window_ref({text!r}): {type(error).__name__} with status "
                          f"{error.status_hint}") from error
        if not error.message.strip():
            raise Failure(f"parse_window_ref({text!r}): {type(error).__name__} with an empty message") from error
        return "refused"
    except Exception as error:  # noqa: BLE001 - any other exception is the finding
        raise Failure(f"parse_window_ref({text!r}) raised {type(error).__name__}: {error}") from error
    if not isinstance(ref, WindowRef):
        raise Failure(f"parse_window_ref({text!r}) returned {ref!r}")
    try:
        canonical = str(ref)
    except Exception as error:  # noqa: BLE001
        raise Failure(f"parse_window_ref({text!r}) = {ref!r}, whose str() raises {type(error).__name__}: "
                      f"{error}") from error
    try:
        again = parse_window_ref(canonical)
    except Exception as error:  # noqa: BLE001
        raise Failure(f"parse_window_ref({text!r}) = {canonical!r}, which does not re-parse: "
                      f"{type(error).__name__}: {error}") from error
    if again != ref:
        raise Failure(f"parse_window_ref({text!r}) = {ref!r}; its str() {canonical!r} re-parses to {again!r}")
    return "accepted"


def _check_query_error(what: str, text: str, error: Exception) -> None:
    from sparql_ext import QuerySyntaxError, SparqlExtError

    if not isinstance(error, SparqlExtError):
        raise Failure(f"{what}({text!r}) raised {type(error).__name__}: {error}") from error
    if not 400 <= error.status_hint < 500:
        raise Failure(f"{what}({text!r}): {type(error).__name__} with status {error.status_hint}: {error.message}")
    if not error.message.strip():
        raise Failure(f"{what}({text!r}): {type(error).__name__} with an empty message") from error
    if isinstance(error, QuerySyntaxError):
        lines = text.split("\n")
        if not (1 <= error.line <= len(lines) and 1 <= error.column <= len(lines[error.line - 1]) + 1):
            raise Failure(f"{what}({text!r}): line {error.line} column {error.column} is outside the text "
                          f"({len(lines)} lines): {error.message}")
        if not 0 <= error.offset <= len(text):
            raise Failure(f"{what}({text!r}): offset {error.offset} outside the text (length {len(text)})")


def _check_query_parser(what: str, parse: Callable[[str, str], object], text: str) -> str:
    """``parse`` returns, or raises a 4xx SparqlExtError (a QuerySyntaxError's position inside the text)."""
    try:
        with timed(f"{what}({text!r})"):
            parse(text, "http://base/")
    except Failure:
        raise
    except Exception as error:  # noqa: BLE001
        _check_query_error(what, text, error)
        return "refused"
    return "accepted"


def check_parse_extended(text: str) -> str:
    """``sparql_ext.parse_extended``: the parser property above."""
    from sparql_ext import parse_extended

    return _check_query_parser("parse_extended", parse_extended, text)


def check_checked_query(text: str) -> str:
    """``engine.evaluation.checked_query`` (parse_extended + pyoxigraph's check of every part): the same property."""
    from engine.syntax import checked_query

    return _check_query_parser("checked_query", checked_query, text)


# -- properties through the HTTP app -----------------------------------------------------------------------

class Server:
    """The real Flask app (in-memory store) behind a test client, with a few helpers."""

    def __init__(self, data_dir: Path) -> None:
        from concentrator.compose import http_app
        from protocol import ServerConfig

        # queries in this process (query_processes=0): a crash of pyoxigraph's would be this process's, and seen
        self.app = http_app(ServerConfig(data_dir, in_memory=True, max_body_bytes=1_000_000, query_processes=0))
        self.app.config["PROPAGATE_EXCEPTIONS"] = True  # an unhandled exception (a 500) surfaces with its traceback
        self.client = self.app.test_client()
        self.counter = 0
        self.queried = self.fresh_stream(BASE_ELEMENTS)
        self.client.put("/store?graph=http://ex/fixed", data=BASE_TURTLE, content_type="text/turtle")

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        what = f"{method} {url} {kwargs!r}"[:2000]
        try:
            with timed(what):
                response = self.client.open(url, method=method, **kwargs)
        except Failure:
            raise
        except Exception as error:  # noqa: BLE001 - unhandled in the app: a 500
            raise Failure(f"{what} raised {type(error).__name__}: {error}\n{traceback.format_exc(limit=-4)}") from error
        return response

    def fresh_stream(self, body: str) -> str:
        self.counter += 1
        url = f"/streams/f{self.counter}"
        assert self.client.put(url).status_code == 201
        r = self.client.post(url, data=body, content_type="application/trig")
        assert r.status_code == 200, r.get_data(as_text=True)
        return url

    def elements(self, url: str) -> list[tuple[str, str]]:
        """(graph, hr) of every element of a stream, in order (ordinals 1..)."""
        r = self.client.get(url, query_string={
            "query": "SELECT ?g ?hr WHERE { ?g ?p ?t OPTIONAL { GRAPH ?g { ?o <http://ex/hr> ?hr } } } ORDER BY ?t"},
            headers={"Accept": "application/sparql-results+json"})
        assert r.status_code == 200, r.get_data(as_text=True)
        rows = json.loads(r.get_data(as_text=True))["results"]["bindings"]
        return [(row["g"]["value"], row.get("hr", {}).get("value", "")) for row in rows]

    def graph(self, graph: str) -> set[str]:
        r = self.client.get("/store", query_string={"graph": graph}, headers={"Accept": "application/n-triples"})
        if r.status_code == 404:
            return set()
        assert r.status_code == 200, r.get_data(as_text=True)
        return set(r.get_data(as_text=True).splitlines())


def _check_status(what: str, response: Any, allow_503: bool = False) -> str:
    status = response.status_code
    text = response.get_data(as_text=True)
    if 200 <= status < 300:
        return "accepted"
    if allow_503 and status == 503:
        return "not complete (503)"
    if not 400 <= status < 500:
        raise Failure(f"{what}: HTTP {status}: {text[:2000]}")
    if not text.strip():
        raise Failure(f"{what}: HTTP {status} with an empty message")
    return "refused"


def check_stream_upload(server: Server, body: str, media: str) -> str:
    """A mutated TriG/N-Quads upload: 2xx or 4xx with a message; on refusal, the elements before it are unchanged
    and exactly ``Elements-Committed`` elements of the upload were added."""
    url = server.fresh_stream(BASE_ELEMENTS)
    before = server.elements(url)
    response = server.request("POST", url, data=body.encode("utf-8", "surrogatepass"), content_type=media)
    category = _check_status(f"POST {url} {media} {body!r}", response)
    after = server.elements(url)
    if after[:len(before)] != before:
        raise Failure(f"POST {url} {media} {body!r} (HTTP {response.status_code}) changed the elements before it: "
                      f"{before} -> {after[:len(before)]}")
    if response.status_code >= 400:
        committed = int(response.headers.get("Elements-Committed", "0"))
        if len(after) != len(before) + committed:
            raise Failure(f"POST {url} {media} {body!r} refused (HTTP {response.status_code}, Elements-Committed "
                          f"{committed}) but the stream went from {len(before)} to {len(after)} elements")
    server.client.delete(url)
    return category


def check_store_upload(server: Server, body: str, method: str) -> str:
    """Mutated Turtle to ``/store?graph=…`` (POST or PUT): 2xx or 4xx with a message; a refusal changes nothing."""
    graph = "http://ex/fuzzed"
    server.client.put(f"/store?graph={graph}", data=BASE_TURTLE, content_type="text/turtle")
    before, fixed = server.graph(graph), server.graph("http://ex/fixed")
    response = server.request(method, f"/store?graph={graph}", data=body.encode("utf-8", "surrogatepass"),
                              content_type="text/turtle")
    category = _check_status(f"{method} /store?graph={graph} {body!r}", response)
    if server.graph("http://ex/fixed") != fixed:
        raise Failure(f"{method} /store?graph={graph} {body!r} changed another graph")
    if response.status_code >= 400 and server.graph(graph) != before:
        raise Failure(f"{method} /store?graph={graph} {body!r} refused (HTTP {response.status_code}) but the graph "
                      f"changed: {sorted(before)} -> {sorted(server.graph(graph))}")
    return category


def check_stream_get(server: Server, windows: str, query: str | None) -> str:
    """GET a stream with a mutated ``WINDOWS=`` (and query): 2xx or 4xx with a message (503 only for a valid ref
    whose window is not complete), and the stream is unchanged."""
    from sparql_ext import parse_window_ref

    try:
        valid_ref = parse_window_ref(windows) is not None
    except Exception:  # noqa: BLE001 - a refusal, or a crash of the parser (the windowref target reports those)
        valid_ref = False
    params = {"WINDOWS": windows, "answer": "latest", "timeout": "0"}
    if query is not None:
        params["query"] = query
    before = server.elements(server.queried)
    # lone surrogates go out as the bytes of their (invalid) UTF-8 encoding, percent-encoded
    query_string = urlencode(params, encoding="utf-8", errors="surrogatepass")
    response = server.request("GET", server.queried, query_string=query_string,
                              headers={"Accept": "text/csv, */*;q=0.1"})
    category = _check_status(f"GET {server.queried} {params!r}", response, allow_503=valid_ref)
    if response.status_code == 503 and "complete" not in response.get_data(as_text=True):
        raise Failure(f"GET {server.queried} {params!r}: 503 not about an incomplete window: "
                      f"{response.get_data(as_text=True)[:500]}")
    if server.elements(server.queried) != before:
        raise Failure(f"GET {server.queried} {params!r} changed the stream")
    return category


# hypothesis inputs of the HTTP targets
trig_inputs = st.one_of(mutated(st.sampled_from(TRIG_SEEDS), max_edits=5), st.text(_chars, max_size=60))
nquads_inputs = mutated(st.sampled_from(NQUADS_SEEDS), max_edits=5)
turtle_inputs = st.one_of(mutated(st.sampled_from(TURTLE_SEEDS), max_edits=5), st.text(_chars, max_size=60))
def get_inputs(extreme: bool = True) -> st.SearchStrategy[tuple[str, str | None]]:
    return st.tuples(
        st.one_of(mutated(st.sampled_from(STREAM_WINDOWS)), mutated(window_refs(extreme), max_edits=2)),
        st.none() | st.sampled_from(STREAM_QUERIES) | mutated(st.sampled_from(STREAM_QUERIES), max_edits=3),
    )


def time_param_inputs(extreme: bool = True) -> st.SearchStrategy[tuple[str, str]]:
    """(parameter, value): ``punctuation=``/``timestamp=`` of a stream upload, ``revision-id=`` of /store, /sparql
    and a stream — instants and revisions from the grammar, mutated."""
    return st.tuples(st.sampled_from(["punctuation", "timestamp", "revision-id"]),
                     mutated(revisions(extreme) | st.just("now"), max_edits=2))


def check_time_param(server: Server, parameter: str, value: str) -> str:
    """An instant or revision parameter: 2xx or 4xx with a message (and a refused upload stores nothing)."""
    query_string = urlencode({parameter: value}, encoding="utf-8", errors="surrogatepass")
    if parameter == "revision-id":
        categories = set()
        for url, extra in (("/store", "&graph=http://ex/fixed"), ("/sparql", "&query=ASK%7B%7D"), (server.queried, "")):
            response = server.request("GET", url, query_string=query_string + extra)
            categories.add(_check_status(f"GET {url}?{query_string}{extra}", response))
        return "accepted" if categories == {"accepted"} else "refused"
    url = server.fresh_stream(BASE_ELEMENTS)
    before = server.elements(url)
    turtle = {"data": "<http://ex/a> <http://ex/hr> 1 .", "content_type": "text/turtle"}
    body = turtle if parameter == "timestamp" else {}
    response = server.request("POST", url, query_string=query_string, **body)
    category = _check_status(f"POST {url}?{query_string}", response)
    after = server.elements(url)
    if response.status_code >= 400 and after != before:
        raise Failure(f"POST {url}?{query_string} refused (HTTP {response.status_code}) but the stream changed")
    server.client.delete(url)
    return category


# -- the bench: run every target for N examples, counting --------------------------------------------------

@dataclass
class Target:
    name: str
    strategy: st.SearchStrategy[Any]
    check: Callable[..., str]  # check(server, *args) for HTTP targets, check(app, *args) isolated, check(text) else
    http: bool = False
    isolated: bool = False  # the app in a child process (bench.fuzz_nesting.Isolated): a crash there is a failure


TARGETS = [
    Target("windowref", windowref_inputs(), check_window_ref),
    Target("parse_extended", query_inputs(), check_parse_extended),
    Target("checked_query", query_inputs(), check_checked_query),
    Target("http.stream_upload.trig", trig_inputs, lambda s, b: check_stream_upload(s, b, "application/trig"), True),
    Target("http.stream_upload.nquads", nquads_inputs,
           lambda s, b: check_stream_upload(s, b, "application/n-quads"), True),
    Target("http.store_turtle", st.tuples(turtle_inputs, st.sampled_from(["POST", "PUT"])),
           lambda s, a: check_store_upload(s, *a), True),
    Target("http.stream_windows_query", get_inputs(), lambda s, a: check_stream_get(s, *a), True),
    Target("http.time_params", time_param_inputs(), lambda s, a: check_time_param(s, *a), True),
    Target("http.deep_sparql", deep_texts(), check_deep_sparql, True),
    # issue 30: nesting 0..30,000 deep through every entry point whose input pyoxigraph parses (bench.fuzz_nesting)
    Target("nesting.sparql", sparql_inputs(), check_sparql, isolated=True),
    Target("nesting.rdf", rdf_inputs(), check_rdf, isolated=True),
]


@dataclass
class Outcome:
    target: str
    inputs: int = 0
    failures: int = 0
    seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)  # accepted / refused / not complete (503)
    failure_kinds: dict[str, int] = field(default_factory=dict)  # last line of each failure (the exception)
    examples: list[str] = field(default_factory=list)  # the first few failures

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "inputs": self.inputs, "failures": self.failures,
                "seconds": round(self.seconds, 3),
                "outcomes": dict(sorted(self.outcomes.items())),
                "failure_kinds": dict(sorted(self.failure_kinds.items(), key=lambda kv: -kv[1])),
                "failure_examples": self.examples}


def run_target(target: Target, examples: int, server: Server | None, seed: int,
               isolated: Isolated | None = None) -> Outcome:
    """Run one target for ``examples`` inputs; a failure is recorded (not raised) so the run goes on."""
    outcome = Outcome(target.name)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(target.strategy)
    def run(value: Any) -> None:
        outcome.inputs += 1
        try:
            category = (target.check(isolated, value) if target.isolated else
                        target.check(server, value) if target.http else target.check(value))
            outcome.outcomes[category] = outcome.outcomes.get(category, 0) + 1
        except Exception as error:  # noqa: BLE001 - Failure or an error of the harness itself
            outcome.failures += 1
            lines = [line for line in str(error).splitlines() if line.strip()]
            kind = lines[-1] if lines else type(error).__name__
            if match := re.search(r"(?:raised|raises) (\w+: .*)$", kind):  # the exception, not the input
                kind = match[1]
            kind = kind[:200]
            outcome.failure_kinds[kind] = outcome.failure_kinds.get(kind, 0) + 1
            if len(outcome.examples) < 5:
                outcome.examples.append(f"{type(error).__name__}: {error}"[:3000])

    import random
    random.seed(seed)
    start = time.perf_counter()
    run()
    outcome.seconds = time.perf_counter() - start
    return outcome


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``<name>.png``: per target, how its inputs ended (accepted, refused with a 4xx, …) and its failures (a 5xx,
    a crash, an answer too slow: each one is a bug)."""
    from bench.harness import bar_plot

    groups = {target["target"]: {**target["outcomes"], "failures": target["failures"]}
              for target in document["targets"]}
    return [bar_plot(name, f"Fuzzing: {document['total_inputs']:,} inputs, {document['total_failures']} failures "
                     f"(seed {document['seed']})", groups, reference=None, unit="inputs")]


def main(argv: list[str] | None = None) -> int:
    from bench.harness import replot, write_json, write_plots

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200, help="inputs per target (default 200)")
    parser.add_argument("--target", action="append", help="run only these targets (repeatable; prefix match)")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--no-json", action="store_true", help="do not write bench/results/fuzz.json")
    parser.add_argument("--plot-only", action="store_true",
                        help="fuzz nothing: draw the plot of bench/results/fuzz.json again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, "fuzz")
        return 0

    targets = [t for t in TARGETS if not args.target or any(t.name.startswith(p) for p in args.target)]
    logging.getLogger("protocol").setLevel(logging.CRITICAL)  # 503s for incomplete windows are logged as errors
    outcomes = []
    isolated = Isolated() if any(t.isolated for t in targets) else None
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        server = Server(Path(tmp) / "data") if any(t.http for t in targets) else None
        for target in targets:
            outcome = run_target(target, args.examples, server, args.seed, isolated)
            outcomes.append(outcome)
            print(f"  {outcome.target}: {outcome.inputs} inputs, {outcome.failures} failures, "
                  f"{outcome.seconds:.1f} s {dict(sorted(outcome.outcomes.items()))}", flush=True)
    if isolated is not None:
        isolated.close()

    width = max(len("target"), *(len(o.target) for o in outcomes))
    header = f"{'target':<{width}}  {'inputs':>8}  {'failures':>8}  {'seconds':>8}"
    print(f"\nfuzz: {args.examples} examples requested per target\n{header}\n{'-' * len(header)}")
    for o in outcomes:
        print(f"{o.target:<{width}}  {o.inputs:>8}  {o.failures:>8}  {o.seconds:>8.1f}")
    total_inputs, total_failures = sum(o.inputs for o in outcomes), sum(o.failures for o in outcomes)
    print(f"{'total':<{width}}  {total_inputs:>8}  {total_failures:>8}  {sum(o.seconds for o in outcomes):>8.1f}")
    for o in outcomes:
        for kind, count in o.failure_kinds.items():
            print(f"FAILURE KIND {o.target}: {count} × {kind}")
    for o in outcomes:
        for example in o.examples[:2]:
            print(f"\nFAILURE {o.target}: {example[:1500]}")
    if not args.no_json:
        document = {
            "examples_per_target": args.examples, "seed": args.seed, "slow_seconds": SLOW_SECONDS,
            "total_inputs": total_inputs, "total_failures": total_failures,
            "targets": [o.to_dict() for o in outcomes],
        }
        path = write_json("fuzz", document)
        print(f"\nwrote {path}")
        write_plots(plots, document, "fuzz")
    return 1 if total_failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
