"""One request must not take the server down (issue 12, item 11; issue 30): a query nested 5,000 groups deep
overflowed pyoxigraph's parser stack and killed the server worker (SIGSEGV), and Spark and every upload with it.
Queries, updates and rules nested deeper than ``MAX_NESTING`` as pyoxigraph reads them are refused with a 400
before pyoxigraph sees them; so are RDF bodies nested deeper than ``store.limits`` allows, and RDF/XML whose
entities expand too far (413)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from conformance.server import RunningServer, running_server
from sparql_ext import parse_extended, split_update
from sparql_ext.errors import NestingTooDeep
from sparql_ext.lexer import MAX_NESTING


def nested(depth: int, core: str = "?s ?p ?o") -> str:
    return "{ " * depth + core + " }" * depth


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:
        yield running


def test_the_limit_is_exact() -> None:
    parse_extended(f"SELECT * WHERE {nested(MAX_NESTING)}")  # the WHERE group is the first of them
    with pytest.raises(NestingTooDeep) as refused:
        parse_extended(f"SELECT * WHERE {nested(MAX_NESTING + 1)}")
    # the first bracket past the limit ("{ " each): line 1, column len("SELECT * WHERE ") + 2·MAX_NESTING + 1
    assert (refused.value.line, refused.value.column) == (1, len("SELECT * WHERE ") + 2 * MAX_NESTING + 1)
    assert refused.value.status_hint == 400
    with pytest.raises(NestingTooDeep):
        split_update(f"INSERT DATA {{ <http://s> <http://p> {'(' * 300}1{')' * 300} }}")


@pytest.mark.parametrize("field, text", [
    ("query", f"SELECT * WHERE {nested(5_000)}"),
    ("query", f"SELECT * WHERE {nested(5_000, '?s ` ?o')}"),  # a character the tokenizer refuses, deep inside
    ("query", "ASK { FILTER(" + "(" * 5_000 + "1" + ")" * 5_000 + ") }"),
    ("update", f"DELETE WHERE {nested(5_000)}"),
], ids=["groups", "groups around a bad character", "parentheses", "update"])
def test_deep_requests_are_refused_and_the_server_lives(server: RunningServer, field: str, text: str) -> None:
    response = requests.post(f"{server.url}/sparql", data={field: text}, timeout=30)
    assert response.status_code == 400, response.text[:300]
    assert f"nested more than {MAX_NESTING} deep" in response.text
    assert requests.get(f"{server.url}/status", timeout=10).status_code == 200  # the worker is still there
    assert server.process.poll() is None


def test_a_deep_rule_is_refused(server: RunningServer) -> None:
    assert requests.put(f"{server.url}/streams/hr", timeout=10).status_code == 201
    rule = (f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{server.url}/streams/hr?WINDOWS=R/HEAD/PT1M> "
            f"{nested(3_000)} }}")
    response = requests.put(f"{server.url}/rules/deep", data=rule, params={"output": "out"},
                            headers={"Content-Type": "application/sparql-query"}, timeout=30)
    assert response.status_code == 400 and "nested more than" in response.text
    assert requests.get(f"{server.url}/status", timeout=10).status_code == 200


def test_a_deep_query_to_a_stream_iri_is_refused(server: RunningServer) -> None:
    requests.put(f"{server.url}/streams/deep", timeout=10)
    response = requests.post(f"{server.url}/streams/deep", data=f"SELECT * WHERE {nested(5_000)}", timeout=30,
                             headers={"Content-Type": "application/sparql-query"})
    assert response.status_code == 400 and "nested more than" in response.text
    assert requests.get(f"{server.url}/status", timeout=10).status_code == 200


# -- issue 30: every parser pyoxigraph is handed text by, as it reads that text -------------------------------------
#
# The hostile inputs of the probe go through the real app (Flask's test client), in a child process: a SIGSEGV there
# (the crash these limits prevent) is a failed test with the input named, not a dead test worker. Inputs at a limit
# are shallow enough for this process.

DEEP_SPARQL = "SELECT * WHERE { FILTER(1 <" + "(" * 5_000 + ")" * 5_000 + ">0) }"  # '<' is also less-than
FORKED_SPARQL = 'SELECT * WHERE { FILTER(1 <(#> """\n' + "(" * 6_000 + "1" + ")" * 6_000 + '\n""") }'
NOT_SPARQL = "ASK { FILTER(" + "!" * 12_000 + "true) }"
DEEP_JSONLD = '{"@id":"http://ex/s","http://ex/p":' + '{"http://ex/p":' * 5_000 + '{"@id":"http://ex/o"}' + "}" * 5_001


def triple_terms(depth: int) -> str:
    """``depth`` triple terms ``<<( <s> <p> … )>>``, each inside the one before."""
    return "<<( <http://ex/s> <http://ex/p> " * depth + "<http://ex/o>" + " )>>" * depth


def element(name: str, minute: int, body: str = "<http://ex/o> <http://ex/hr> 70 .") -> str:
    return (f'<http://ex/{name}> <http://www.w3.org/ns/prov#generatedAtTime> "2016-06-20T10:{minute:02d}:00Z"'
            f'^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n<http://ex/{name}> {{ {body} }}\n')


def billion_laughs() -> str:
    """The probe's body: 647 bytes whose entities expand to ≈ 290 MB (e7: ten references to e6, …, e0: 26 bytes)."""
    entities = ['<!ENTITY e0 "' + "a" * 26 + '">'] + [f'<!ENTITY e{i} "' + f"&e{i - 1};" * 10 + '">'
                                                       for i in range(1, 8)]
    return ('<?xml version="1.0"?>\n<!DOCTYPE rdf:RDF [\n' + "\n".join(entities) + '\n]>\n<rdf:RDF xmlns:rdf="http://'
            'www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:e="http://e/"><rdf:Description rdf:about="http://e/s"><e:p>'
            "&e7;</e:p></rdf:Description></rdf:RDF>")


RULE = "CONSTRUCT { ?s ?p ?o } WHERE { SERVICE <http://localhost/streams/hr?WINDOWS=R/HEAD/PT1M> { ?s ?p ?o %s } }"
GRAPH = "/store?graph=http://ex/g"
HOSTILE: dict[str, tuple[str, str, dict[str, Any]]] = {  # name -> (method, url, request options)
    "sparql body": ("POST", "/sparql", {"data": DEEP_SPARQL, "content_type": "application/sparql-query"}),
    "sparql form": ("POST", "/sparql", {"data": {"query": DEEP_SPARQL}}),
    "sparql form update": ("POST", "/sparql", {"data": {"update": DEEP_SPARQL.replace(
        "SELECT * WHERE", "INSERT { <http://ex/s> <http://ex/p> 1 } WHERE")}}),
    "sparql comment fork": ("POST", "/sparql", {"data": {"query": FORKED_SPARQL}}),
    "sparql ! chain": ("POST", "/sparql", {"data": {"query": NOT_SPARQL}}),
    "stream query": ("GET", "/streams/hr", {"query_string": {"query": DEEP_SPARQL}}),
    "rule": ("PUT", "/rules/deep?output=out", {"data": RULE % ("FILTER(1 <" + "(" * 5_000 + ")" * 5_000 + ">0)"),
                                               "content_type": "application/sparql-query"}),
    "store JSON-LD": ("PUT", GRAPH, {"data": DEEP_JSONLD, "content_type": "application/ld+json"}),
    "store Turtle triple terms": ("PUT", GRAPH, {"data": f"<http://ex/s> <http://ex/p> {triple_terms(20_000)} .",
                                                 "content_type": "text/turtle"}),
    "store TriG triple terms": ("PUT", GRAPH, {"data": f"<http://ex/s> <http://ex/p> {triple_terms(20_000)} .",
                                               "content_type": "application/trig"}),
    "store RDF/XML billion laughs": ("PUT", GRAPH, {"data": billion_laughs(), "content_type": "application/rdf+xml"}),
    "upload JSON-LD": ("POST", "/streams/hr", {"data": DEEP_JSONLD, "content_type": "application/ld+json"}),
    "upload TriG triple terms": ("POST", "/streams/hr", {"data": element("e3", 3) + element("e4", 4) + element(
        "e5", 5, f"<http://ex/s> <http://ex/p> {triple_terms(20_000)} ."), "content_type": "application/trig"}),
    "upload N-Quads triple terms": ("POST", "/streams/hr", {
        "data": f"<http://ex/s> <http://ex/p> {triple_terms(20_000)} <http://ex/e6> .\n",
        "content_type": "application/n-quads"}),
}


def _child() -> None:
    """In a child process: the app, the data the hostile requests must leave alone, then each request of HOSTILE
    (its name on stdin) and what the data looks like after it, one JSON line each."""
    import json
    import sys
    import tempfile

    from concentrator.compose import http_app
    from protocol import ServerConfig

    app = http_app(ServerConfig(Path(tempfile.mkdtemp()) / "data", in_memory=True))
    client = app.test_client()
    assert client.put(GRAPH, data="<http://ex/s> <http://ex/p> 1 .", content_type="text/turtle").status_code == 201
    assert client.put("/streams/hr").status_code == 201
    assert client.post("/streams/hr", data=element("e1", 1) + element("e2", 2),
                       content_type="application/trig").status_code == 200

    def data() -> dict[str, Any]:
        graph = client.get(GRAPH, headers={"Accept": "application/n-triples"}).get_data(as_text=True)
        return {"graph": graph, "elements": client.get("/streams/hr/elements").get_json()["elements"]}

    for name in sys.stdin.read().split("\n"):
        method, url, options = HOSTILE[name]
        response = client.open(url, method=method, **options)
        print(json.dumps({"name": name, "status": response.status_code, "text": response.get_data(as_text=True),
                          "committed": response.headers.get("Elements-Committed"), **data()}), flush=True)


@pytest.fixture(scope="module")
def hostile() -> dict[str, dict[str, Any]]:
    """What the app answered to each hostile request, in a child process (crashing is a result too)."""
    import json
    import os
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)  # this checkout's packages, whatever is installed
    done = subprocess.run([sys.executable, __file__, "child"], input="\n".join(HOSTILE), capture_output=True,
                          text=True, timeout=300, cwd=root, env={**os.environ, "PYTHONPATH": root})
    answers = {line["name"]: line for line in map(json.loads, done.stdout.splitlines())}
    missing = [name for name in HOSTILE if name not in answers]
    assert not missing, (f"the app's process ended with status {done.returncode} at {missing[0]!r} (-11: SIGSEGV)",
                         done.stderr[-2000:])
    return answers


@pytest.mark.parametrize("name", [name for name in HOSTILE if HOSTILE[name][1] != GRAPH and "upload" not in name])
def test_deep_sparql_is_refused_where_pyoxigraph_would_overflow(hostile: dict[str, dict[str, Any]], name: str) -> None:
    answer = hostile[name]
    assert answer["status"] == 400, answer["text"][:300]
    assert f"nested more than {MAX_NESTING} deep" in answer["text"], answer["text"][:300]
    assert answer["graph"] == "<http://ex/s> <http://ex/p> \"1\"^^<http://www.w3.org/2001/XMLSchema#integer> .\n"


@pytest.mark.parametrize("name, limit", [
    ("store JSON-LD", "JSON objects and arrays nested more than 128 deep"),
    ("store Turtle triple terms", "Turtle brackets ( [ { << nested more than 128 deep"),
    ("store TriG triple terms", "Turtle brackets ( [ { << nested more than 128 deep"),
    ("store RDF/XML billion laughs", "more than 1,048,576 bytes beyond its own size"),
])
def test_a_deep_graph_store_body_is_refused_and_the_graph_kept(hostile: dict[str, dict[str, Any]], name: str,
                                                               limit: str) -> None:
    assert len(billion_laughs().encode()) == 647
    answer = hostile[name]
    assert answer["status"] == (413 if "laughs" in name else 400), answer["text"][:300]
    assert limit in answer["text"], answer["text"][:300]
    assert answer["graph"] == "<http://ex/s> <http://ex/p> \"1\"^^<http://www.w3.org/2001/XMLSchema#integer> .\n"


@pytest.mark.parametrize("name, limit, committed", [
    ("upload JSON-LD", "JSON objects and arrays nested more than 128 deep", "0"),
    ("upload TriG triple terms", "Turtle brackets ( [ { << nested more than 128 deep", "2"),  # e3, e4: before it
    ("upload N-Quads triple terms", "N-Triples / N-Quads triple terms nested more than 128 deep", "0"),
])
def test_a_deep_upload_keeps_what_came_before(hostile: dict[str, dict[str, Any]], name: str, limit: str,
                                              committed: str) -> None:
    answer = hostile[name]
    assert answer["status"] == 400 and limit in answer["text"], answer["text"][:300]
    assert answer["committed"] == committed
    assert [e["graph"] for e in answer["elements"]][:2] == ["<http://ex/e1>", "<http://ex/e2>"]


# -- at the limit, and one past it --------------------------------------------------------------------------------

@pytest.fixture
def app(tmp_path: Path) -> FlaskClient:
    from concentrator.compose import http_app
    from protocol import ServerConfig

    return http_app(ServerConfig(tmp_path / "data", in_memory=True)).test_client()


def _select(app: FlaskClient, query: str) -> tuple[int, str]:
    response = app.post("/sparql", data={"query": query}, headers={"Accept": "text/csv"})
    return response.status_code, response.get_data(as_text=True)


def test_sparql_at_the_limit_is_answered_and_one_past_refused(app: FlaskClient) -> None:
    # '{' and 'BIND(' are two levels: 62 parentheses more are the 64th
    bind = "SELECT ?x WHERE {{ BIND({}1 + 1{} AS ?x) }}"
    assert _select(app, bind.format("(" * 62, ")" * 62)) == (200, "x\r\n2\r\n")
    status, text = _select(app, bind.format("(" * 63, ")" * 63))
    assert status == 400 and text.startswith(f"Syntax error at line 1 column {len('SELECT ?x WHERE { BIND(') + 63}:")
    # 62 '!' after '{' and 'FILTER(': pyoxigraph recurses once per '!'; an even count of them is true
    assert _select(app, "ASK { FILTER(" + "!" * 62 + "true) }") == (200, "true")
    assert f"more than {MAX_NESTING} deep" in _select(app, "ASK { FILTER(" + "!" * 63 + "true) }")[1]
    # inside what may be an IRI: '<' then 62 parentheses are read as code too
    at_limit = _select(app, "ASK { FILTER(1 <" + "(" * 62 + ")" * 62 + "> 0) }")
    assert at_limit[0] == 400 and "nested more than" not in at_limit[1]  # pyoxigraph's own syntax error
    past = _select(app, "ASK { FILTER(1 <" + "(" * 63 + ")" * 63 + "> 0) }")
    assert past[0] == 400 and "line 1 column 79: brackets ({, (, [ or <<) and ! are nested more than 64" in past[1]


def _put(app: FlaskClient, body: str, media: str) -> tuple[int, str]:
    response = app.put(GRAPH, data=body, content_type=media)
    return response.status_code, response.get_data(as_text=True)


def _triples(app: FlaskClient) -> list[str]:
    return app.get(GRAPH, headers={"Accept": "application/n-triples"}).get_data(as_text=True).splitlines()


def test_turtle_triple_terms_at_the_limit_are_stored_and_one_past_refused(app: FlaskClient) -> None:
    # a triple term is two levels ('<<' and '('): 64 of them are the limit's 128
    assert _put(app, f"<http://ex/s> <http://ex/p> {triple_terms(64)} .", "text/turtle")[0] == 201
    [stored] = _triples(app)
    assert stored.count("<<(") == 64 and stored.endswith("<http://ex/o> " + ")>> " * 64 + ".")
    status, text = _put(app, f"<http://ex/s> <http://ex/p> {triple_terms(65)} .", "text/turtle")
    where = len("<http://ex/s> <http://ex/p> ") + len("<<( <http://ex/s> <http://ex/p> ") * 64 + 1
    assert (status, text) == (400, f"Turtle brackets ( [ {{ << nested more than 128 deep at byte {where:,}: this "
                                   "server refuses deeper documents\n")
    assert len(_triples(app)) == 1  # the graph as it was


def test_jsonld_at_the_limit_is_stored_and_one_past_refused(app: FlaskClient) -> None:
    def nested(objects: int) -> str:  # ``objects`` objects, each the value of the one around it
        return '{"@id":"http://ex/s","http://ex/p":' + '{"http://ex/p":' * (objects - 2) + '{"@id":"http://ex/o"}' + \
            "}" * (objects - 1)
    assert _put(app, nested(128), "application/ld+json")[0] == 201
    assert len(_triples(app)) == 127  # one per object but the innermost, which only names <http://ex/o>
    status, text = _put(app, nested(129), "application/ld+json")
    assert status == 400 and "JSON objects and arrays nested more than 128 deep" in text
    assert len(_triples(app)) == 127


RDF = 'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://ex/"'


def test_rdfxml_at_the_limit_is_stored_and_one_past_refused(app: FlaskClient) -> None:
    def nested(pairs: int, innermost: str = "") -> str:  # rdf:RDF, a description, then (property, description) pairs
        return (f'<rdf:RDF {RDF}><rdf:Description rdf:about="http://ex/s">' + "<ex:p><rdf:Description>" * pairs
                + innermost + "</rdf:Description></ex:p>" * pairs + "</rdf:Description></rdf:RDF>")
    assert _put(app, nested(127), "application/rdf+xml")[0] == 201  # 2 + 2 × 127 = 256 elements deep
    assert len(_triples(app)) == 127
    status, text = _put(app, nested(127, "<ex:q>x</ex:q>"), "application/rdf+xml")  # one element deeper
    assert status == 400 and "RDF/XML elements nested more than 256 deep" in text
    assert len(_triples(app)) == 127


def test_rdfxml_entities_expand_up_to_the_limit_and_not_past_it(app: FlaskClient) -> None:
    def document(references: int, size: int = 1 << 16) -> str:
        return (f'<!DOCTYPE rdf:RDF [<!ENTITY xsd "http://www.w3.org/2001/XMLSchema#"><!ENTITY big "{"a" * size}">]>'
                f'<rdf:RDF {RDF}><rdf:Description rdf:about="http://ex/s"><ex:p rdf:datatype="&xsd;string">'
                + "&big;" * references + "</ex:p></rdf:Description></rdf:RDF>")
    # the document is ≈ 64 KiB (the entity's value), so ≈ 1 MiB + 64 KiB may be expanded: the declarations' 64 KiB
    # and 33 bytes, then 16 references of 64 KiB and one of 33 bytes fit
    assert _put(app, document(16), "application/rdf+xml")[0] == 201
    [stored] = _triples(app)
    assert stored == f'<http://ex/s> <http://ex/p> "{"a" * (16 << 16)}" .'  # xsd:string, written without it
    status, text = _put(app, document(17), "application/rdf+xml")
    assert status == 413 and "more than 1,048,576 bytes beyond its own size" in text
    for declaration, kind in (('<!ENTITY x SYSTEM "file:///etc/hostname">', "an external entity (SYSTEM or PUBLIC)"),
                              ('<!ENTITY % x "y">', "a parameter entity (%)")):
        status, text = _put(app, f'<!DOCTYPE rdf:RDF [{declaration}]><rdf:RDF {RDF}/>', "application/rdf+xml")
        assert status == 400 and f"the DTD declares {kind}" in text
    assert _triples(app) == [stored]


@pytest.mark.parametrize("media_type, document, where", [  # where: the byte (from 1) of the 129th / 257th opening
    ("text/turtle", b'<s> <p> "a ( "' + b"( [ <<( " * 50 + b"<o> " + b")>> ] ) " * 50 + b".", 14 + 32 * 8 + 1),
    ("application/n-quads", b"<s> <p> " + b"<<( <s> <p> " * 65 + b"<o> " + b")>> " * 65 + b".\n", 8 + 64 * 12 + 1),
    ("application/ld+json", b'{"a": "{[{[", "b": ' + b'[{"c": ' * 64 + b"1" + b"}]" * 64 + b"}", 19 + 63 * 7 + 2),
    ("application/rdf+xml", b"<r>" + b"<a><b x='>'>" * 128 + b"</b></a>" * 128 + b"</r>", 3 + 127 * 12 + 4),
])
def test_a_document_in_any_chunks_is_refused_at_the_same_byte(media_type: str, document: bytes, where: int) -> None:
    """A stream upload arrives in chunks of any size (a token cut between two, small ones held until their
    brackets could reach the limit): the refusal names the same byte, the first opening past the limit; the
    document's start alone (deep to the limit exactly) is accepted."""
    from store.errors import NestedTooDeep
    from store.limits import check_nesting, nesting_scanner

    for size in (1, 2, 3, 7, 100, 4096, len(document)):
        scanner = nesting_scanner(media_type)
        with pytest.raises(NestedTooDeep) as refused:
            for start in range(0, len(document), size):
                scanner.feed(document[start:start + size])
        assert refused.value.offset + 1 == where, size
        scanner = nesting_scanner(media_type)
        for start in range(0, where - 1, size):
            scanner.feed(document[start:min(start + size, where - 1)])
    with pytest.raises(NestedTooDeep):
        check_nesting(document, media_type)


def test_pyoxigraph_reads_no_unicode_escape_outside_strings() -> None:
    """The SPARQL scanner reads the text as it is: pyoxigraph would read '\\u0028' as '(' with spargebra's
    ``standard-unicode-escaping`` feature, which this build lacks (were it on, the scanner would have to unescape)."""
    from pyoxigraph import Store

    with pytest.raises(SyntaxError):
        Store().query("SELECT * WHERE { FILTER(\\u0028 1 \\u0029) }")


if __name__ == "__main__" and sys.argv[1:] == ["child"]:
    _child()
