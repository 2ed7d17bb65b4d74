"""Fuzzing nesting (issue 30): every entry point whose input pyoxigraph parses, with nesting drawn from 0 to ≈ 30,000
levels in every shape its parsers recurse on, run through the real app (``bench.fuzz`` registers these targets).

The app runs in a child process (``Isolated``: Flask's test client over an in-memory store, as ``bench.fuzz.Server``):
pyoxigraph overflowing its stack there is a SIGSEGV of the child, reported as a failure naming the input, and a fresh
child serves the next input; the fuzzer itself lives on. Properties, per input: the process lives; an HTTP answer is a
2xx, or a 4xx with a message; an input nested past twice its syntax's limit is refused; a refused write leaves the
graph and the stream it targets as they were.
"""

from __future__ import annotations

import multiprocessing
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

SECONDS = 60.0  # one input taking longer than this is a hang (a 30,000-level body is parsed in well under a second)
GRAPH = "/store?graph=http://ex/g"
STREAM = "/streams/s"
DEPTHS = st.one_of(st.integers(0, 140), st.integers(0, 30_000), st.sampled_from(
    [63, 64, 65, 127, 128, 129, 255, 256, 257, 2_188, 3_229, 3_437, 4_669, 4_670, 9_343, 10_070, 13_760, 18_057,
     30_000]))


class Crash(Exception):
    """The app's process died on an input."""


class Failure(Exception):
    """A property violation (the input is in the message)."""


def _element(name: str, body: str) -> str:
    return (f'<http://ex/{name}> <http://www.w3.org/ns/prov#generatedAtTime> "2016-06-20T10:00:00Z"'
            f'^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n<http://ex/{name}> {{ {body} }}\n')


def _serve(connection: Connection) -> None:
    """The child: the app, a graph and a stream of one element, then one request after another."""
    import io

    from pyoxigraph import QueryResultsFormat, RdfFormat, parse_query_results

    from concentrator.compose import http_app
    from connectors.ldes_pages import load
    from connectors.messages import MessageSettings, element_of_message
    from protocol import ServerConfig
    from sparql_ext.errors import ConcentratorError
    from store.limits import check_nesting

    # queries in this process (query_processes=0): a parser that crashed would crash it, which is what is watched
    app = http_app(ServerConfig(Path(tempfile.mkdtemp(prefix="fuzz-nesting-")) / "data", in_memory=True,
                                  framing_processes=0, query_processes=0))
    client = app.test_client()
    client.put(GRAPH, data="<http://ex/s> <http://ex/p> 1 .", content_type="text/turtle")
    client.put(STREAM)
    client.post(STREAM, data=_element("e0", "<http://ex/o> <http://ex/hr> 1 ."), content_type="application/trig")
    settings = MessageSettings("http://www.w3.org/ns/prov#generatedAtTime")
    connection.send("ready")
    while True:
        kind, args = connection.recv()
        try:
            if kind == "http":
                method, url, options = args
                response = client.open(url, method=method, **options)
                answer: Any = (response.status_code, response.get_data(as_text=True)[:300])
            elif kind == "state":
                graph = client.get(GRAPH, headers={"Accept": "application/n-triples"}).get_data(as_text=True)
                answer = (graph, client.get(f"{STREAM}/elements").get_json()["elements"][:1])
            elif kind == "message":
                element_of_message(args[0], args[1], "fuzz", settings)
                answer = (200, "")
            elif kind == "ldes":
                load(args[0], RdfFormat.from_media_type(args[1]) or RdfFormat.TURTLE, "http://ex/page")
                answer = (200, "")
            else:  # a SERVICE's results, read as engine.evaluation reads them
                check_nesting(args[0], QueryResultsFormat.JSON.media_type)
                list(parse_query_results(io.BytesIO(args[0]), QueryResultsFormat.JSON))  # type: ignore[arg-type]
                answer = (200, "")
        except ConcentratorError as error:
            answer = (error.status_hint, error.message[:300])
        except (SyntaxError, ValueError) as error:  # pyoxigraph's own refusal of what is not deep
            answer = (400, str(error)[:300])
        except Exception as error:  # noqa: BLE001 - the property decides
            answer = (500, f"{type(error).__name__}: {error}"[:300])
        connection.send(answer)


class Isolated:
    """The app in a child process; ``call`` raises ``Crash`` when the child dies on an input (a new one is started)."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # a clean interpreter: no fork of the fuzzer's threads
        self._connection, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs,), daemon=True)
        self._process.start()
        theirs.close()
        if self._connection.recv() != "ready":
            raise RuntimeError("the app's process did not start")

    def call(self, kind: str, *args: Any) -> Any:
        try:
            self._connection.send((kind, args))
            if not self._connection.poll(SECONDS):
                raise Crash(f"no answer within {SECONDS:.0f} s")
            return self._connection.recv()
        except (EOFError, OSError, Crash) as error:
            self._process.join(5)
            code = self._process.exitcode
            self._process.kill()
            self._start()
            raise Crash(f"the app's process died (exit status {code}{': SIGSEGV' if code == -11 else ''})"
                        if not isinstance(error, Crash) else str(error)) from None

    def close(self) -> None:
        self._process.kill()


# -- inputs: (entry point, how deep by construction, the request) ---------------------------------------------

_SHAPES = {  # name -> (opening, core, closing, levels each): the text nests ``depth`` times
    "parentheses": ("(", "1", ")", 1), "groups": ("{ ", "?s ?p ?o", " }", 1),
    "blank nodes": ("[ <http://p> ", "[]", " ]", 1), "not": ("!", "true", "", 1), "negation": ("-(", "1", ")", 1),
    "inverse paths": ("^(", "<http://p>", ")", 1), "paths": ("(", "<http://p>", ")", 1),
    "triple terms": ("<<( <http://s> <http://p> ", "<http://o>", " )>>", 2),
    "IRI-like": ("(", "", ")", 1), "comment fork": ("(", "1", ")", 1),
}


@st.composite
def sparql_inputs(draw: st.DrawFn) -> tuple[str, int, tuple[str, str, dict[str, Any]]]:
    """A query, update or rule nested ``depth`` times in one of ``_SHAPES`` (or a mix of them), sent to one of
    ``/sparql`` (GET, form, body, update), a stream's SPARQL endpoint, a rule's registration."""
    depth, shape = draw(DEPTHS), draw(st.sampled_from(sorted(_SHAPES) + ["mixed"]))
    if shape == "mixed":
        kinds = draw(st.lists(st.sampled_from(["(", "{ ", "[ <http://p> ", "!("]), min_size=1, max_size=8))
        opening = "".join(kinds[i % len(kinds)] for i in range(depth))
        closing = "".join({"(": ")", "{ ": " }", "[ <http://p> ": " ]", "!(": ")"}[kinds[i % len(kinds)]]
                          for i in reversed(range(depth)))
        nested, levels = f"{opening}1{closing}", depth + opening.count("!")
    else:
        opening, core, closing, each = _SHAPES[shape]
        nested, levels = opening * depth + core + closing * depth, depth * each
    pattern = {
        "parentheses": f"FILTER({nested})", "not": f"FILTER({nested})", "negation": f"FILTER({nested})",
        "groups": nested, "blank nodes": f"?s <http://p> {nested}", "inverse paths": f"?s {nested} ?o",
        "paths": f"?s {nested} ?o", "triple terms": f"?s ?p {nested}", "mixed": f"FILTER({nested})",
        "IRI-like": f"FILTER(1 <{nested}> 0)", "comment fork": f'FILTER(1 <(#> """\n{nested}\n""")',
    }[shape]
    query = f"SELECT * WHERE {{ {pattern} }}"
    entry = draw(st.sampled_from(["sparql get", "sparql form", "sparql body", "update", "stream query", "rule"]))
    requests: dict[str, tuple[str, str, dict[str, Any]]] = {
        "sparql get": ("GET", "/sparql", {"query_string": {"query": query}}),
        "sparql form": ("POST", "/sparql", {"data": {"query": query}}),
        "sparql body": ("POST", "/sparql", {"data": query, "content_type": "application/sparql-query"}),
        "update": ("POST", "/sparql", {"data": {"update": f"INSERT {{ <http://ex/s> <http://ex/q> 1 }} WHERE "
                                                          f"{{ {pattern} }}"}}),
        "stream query": ("GET", STREAM, {"query_string": {"query": query}}),
        "rule": ("PUT", "/rules/fuzzed?output=fuzzed-out", {
            "data": f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <http://localhost{STREAM}?WINDOWS=R/HEAD/PT1M> "
                    f"{{ ?s ?p ?o {pattern} }} }}", "content_type": "application/sparql-query"}),
    }
    return entry, levels, requests[entry]


def _turtle_shapes(depth: int, line_based: bool) -> dict[str, tuple[str, int]]:
    shapes = {"triple terms": ("<<( <http://s> <http://p> " * depth + "<http://o>" + " )>>" * depth, 2)}
    if not line_based:
        shapes |= {"reified": ("<< <http://s> <http://p> " * depth + "<http://o>" + " >>" * depth, 1),
                   "collections": ("( " * depth + ")" * depth, 1),
                   "blank nodes": ("[ <http://p> " * depth + "[]" + " ]" * depth, 1)}
    return {name: (f"<http://ex/s> <http://ex/p> {text}", each) for name, (text, each) in shapes.items()}


def _jsonld(depth: int, shape: str) -> str:
    return {
        "objects": '{"@id":"http://ex/s","http://ex/p":' + '{"http://ex/p":' * depth + '"x"' + "}" * (depth + 1),
        "arrays": '{"@id":"http://ex/s","http://ex/p":' + "[" * depth + '"x"' + "]" * depth + "}",
        "lists": '{"@id":"http://ex/s","http://ex/p":' + '{"@list":[' * depth + '"x"' + "]}" * depth + "}",
        "contexts": '{"@id":"http://ex/s","http://ex/p":' + '{"@context":{"a":"http://ex/a"},"a":' * depth + '"x"'
                    + "}" * (depth + 1),
    }[shape]


_RDF = 'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:e="http://ex/"'


def _rdfxml(depth: int, shape: str, bomb: tuple[int, int, int]) -> tuple[str, int]:
    if shape == "entities":  # ``levels`` entities of ``fanout`` references to the one before, the first ``base`` long
        levels, fanout, base = bomb
        entities = [f'<!ENTITY e0 "{"a" * base}">'] + [f'<!ENTITY e{i} "' + f"&e{i - 1};" * fanout + '">'
                                                       for i in range(1, levels + 1)]
        return (f'<!DOCTYPE rdf:RDF [{"".join(entities)}]><rdf:RDF {_RDF}><rdf:Description rdf:about="http://ex/s">'
                f"<e:p>&e{levels};</e:p></rdf:Description></rdf:RDF>", 0)
    if shape in ("external", "parameter"):
        declaration = '<!ENTITY x SYSTEM "file:///etc/hostname">' if shape == "external" else '<!ENTITY % x "y">'
        return f"<!DOCTYPE rdf:RDF [{declaration}]><rdf:RDF {_RDF}/>", 0
    inner = {"descriptions": ("<e:p><rdf:Description>", "</rdf:Description></e:p>", 2),
             "literal": ("<e:x>", "</e:x>", 1), "resources": ('<e:p rdf:parseType="Resource">', "</e:p>", 1)}[shape]
    start = '<e:p rdf:parseType="Literal">' if shape == "literal" else ""
    end = "</e:p>" if shape == "literal" else ""
    return (f'<rdf:RDF {_RDF}><rdf:Description rdf:about="http://ex/s">{start}' + inner[0] * depth + inner[1] * depth
            + f"{end}</rdf:Description></rdf:RDF>", depth * inner[2])


_FORMATS = {"text/turtle": (128, False), "application/trig": (128, False), "application/n-triples": (128, True),
            "application/n-quads": (128, True), "application/ld+json": (128, False),
            "application/rdf+xml": (256, False)}


@st.composite
def rdf_inputs(draw: st.DrawFn) -> tuple[str, str, int, int, bytes]:
    """(entry point, media type, levels by construction, the syntax's limit, the body) for a Graph Store write, a
    stream upload, an MQTT message, an LDES page or a SERVICE's results, nested in each shape its parser may
    recurse on."""
    depth = draw(DEPTHS)
    entry = draw(st.sampled_from(["store put", "store post", "upload", "message", "ldes", "results"]))
    if entry == "results":  # SPARQL JSON results with a triple term, or an unread member, nested
        term = '{"type":"uri","value":"http://ex/o"}'
        triple = ('{"type":"triple","value":{"subject":{"type":"uri","value":"http://ex/s"},'
                  '"predicate":{"type":"uri","value":"http://ex/p"},"object":')
        nested_value, nested_junk = draw(st.booleans()), draw(st.sampled_from(["", "arrays", "objects"]))
        value = triple * depth + term + "}}" * depth if nested_value else term
        junk = {"": '"x"', "arrays": "[" * depth + "]" * depth, "objects": '{"a":' * depth + "1" + "}" * depth}
        body = f'{{"head":{{"vars":["x"]}},"junk":{junk[nested_junk]},"results":{{"bindings":[{{"x":{value}}}]}}}}'
        levels = max(2 * depth if nested_value else 0, depth if nested_junk else 0)
        return entry, "application/sparql-results+json", levels, 128, body.encode()
    media = draw(st.sampled_from(sorted(_FORMATS) if entry not in ("upload", "message") else
                                 ["text/turtle", "application/trig", "application/n-triples", "application/n-quads",
                                  "application/ld+json"]))
    limit, line_based = _FORMATS[media]
    if media == "application/ld+json":
        text, levels = _jsonld(depth, draw(st.sampled_from(["objects", "arrays", "lists", "contexts"]))), depth
    elif media == "application/rdf+xml":
        bomb = (draw(st.integers(1, 10)), draw(st.integers(2, 10)), draw(st.integers(1, 64)))
        text, levels = _rdfxml(depth, draw(st.sampled_from(
            ["descriptions", "literal", "resources", "entities", "external", "parameter"])), bomb)
    else:
        statement, each = draw(st.sampled_from(sorted(_turtle_shapes(depth, line_based).values())))
        text, levels = f"{statement} .\n", depth * each
        if media == "application/trig":
            text = _element("e1", statement + " .")
        elif media == "application/n-quads":
            text = f"{statement} <http://ex/e1> .\n"
    return entry, media, levels, limit, text.encode()


def check_sparql(app: Isolated, value: tuple[str, int, tuple[str, str, dict[str, Any]]]) -> str:
    """The process lives; a 2xx or a 4xx with a message; nested past twice the limit: refused; a refused update
    leaves the graph as it was."""
    entry, levels, (method, url, options) = value
    before = app.call("state") if entry == "update" else None
    try:
        status, text = app.call("http", method, url, options)
    except Crash as crash:
        raise Failure(f"{entry} {method} {url}, {levels} levels: {crash}: {str(options)[:300]}") from None
    return _judge(f"{entry} {method} {url}, {levels} levels", status, text, levels, 64, app, before)


def check_rdf(app: Isolated, value: tuple[str, str, int, int, bytes]) -> str:
    """As ``check_sparql``, for RDF through every path that reads it; a refused write changes nothing."""
    entry, media, levels, limit, body = value
    what = f"{entry} {media}, {levels} levels ({len(body):,} bytes)"
    request = {"store put": ("PUT", GRAPH), "store post": ("POST", GRAPH), "upload": ("POST", STREAM)}.get(entry)
    before = app.call("state") if request is not None else None
    try:
        if request is not None:
            status, text = app.call("http", *request, {"data": body, "content_type": media})
        else:
            status, text = app.call(entry, body, media)
    except Crash as crash:
        raise Failure(f"{what}: {crash}: {body[:300]!r}") from None
    if entry == "ldes" and status == 502:  # a page the follower refuses is its source's failure
        status = 400
    return _judge(what, status, text, levels, limit, app, before)


def _judge(what: str, status: int, text: str, levels: int, limit: int, app: Isolated, before: Any) -> str:
    if not (200 <= status < 300 or (400 <= status < 500 and text.strip())):
        raise Failure(f"{what}: HTTP {status}: {text}")
    if levels > 2 * limit and status < 400:
        raise Failure(f"{what}: accepted, past twice the limit of {limit}")
    if before is not None and status >= 400 and app.call("state") != before:
        raise Failure(f"{what}: refused (HTTP {status}) but the data changed")
    return "accepted" if status < 300 else f"refused ({status})"
