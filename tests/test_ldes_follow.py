"""A stream following a Linked Data Event Stream (issue 16, item 5), through real servers on 127.0.0.1: a static LDES
written by hand from the specification (several pages in four formats, relations, a retention policy, a compacted
page answering 410, a 429 and a 503 to back off from, ETags and 304), and this server's own LDES — stream A published,
stream B following it on another server: the same elements, in order, exactly once, across a restart and a crash of
B. Expected elements are worked out by hand from the fixtures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from pyoxigraph import BlankNode, RdfFormat, parse

from conformance.server import RunningServer, kill_tree, running_server

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
SOSA = "http://www.w3.org/ns/sosa/"
XSD = "http://www.w3.org/2001/XMLSchema#"
OBS = "http://fixture.example/obs/"
PREFIXES = """@prefix ldes: <https://w3id.org/ldes#> .
@prefix tree: <https://w3id.org/tree#> .
@prefix sosa: <http://www.w3.org/ns/sosa/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
"""

# The view: the event stream (timestamp path sosa:resultTime), a retention policy, one member, and relations to
# page1 ([00:00, 01:00): a lower and an upper bound) and page2 (from 01:00). Relative IRIs, as LDES recommends.
ROOT = PREFIXES + """
<http://fixture.example/sensors#stream> a ldes:EventStream ;
    ldes:timestampPath sosa:resultTime ;
    tree:view <> ;
    tree:member <http://fixture.example/obs/0> .
<> a tree:Node ;
    ldes:retentionPolicy [ a ldes:DurationAgoPolicy ; tree:value "P1D"^^xsd:duration ] ;
    tree:relation [ a tree:GreaterThanOrEqualToRelation ; tree:node <page1> ; tree:path sosa:resultTime ;
                    tree:value "2024-01-01T00:00:00Z"^^xsd:dateTime ] ,
                  [ a tree:LessThanRelation ; tree:node <page1> ; tree:path sosa:resultTime ;
                    tree:value "2024-01-01T01:00:00Z"^^xsd:dateTime ] ,
                  [ a tree:GreaterThanOrEqualToRelation ; tree:node <page2> ; tree:path sosa:resultTime ;
                    tree:value "2024-01-01T01:00:00Z"^^xsd:dateTime ] .
<http://fixture.example/obs/0> a sosa:Observation ;
    sosa:resultTime "2023-12-31T23:59:00Z"^^xsd:dateTime ;
    sosa:hasSimpleResult "19.0 °C" .
"""

# page1 (TriG, immutable by ldes:immutable): obs/1 described in the default graph (with a blank node, a timestamp
# with an offset: 01:10+01:00 is 00:10Z) and obs/2 as a named graph, listed out of time order.
PAGE1 = PREFIXES + """
<page1> a tree:Node ; ldes:immutable true .
<http://fixture.example/sensors#stream> tree:member <http://fixture.example/obs/2>, <http://fixture.example/obs/1> .
<http://fixture.example/obs/1> a sosa:Observation ;
    sosa:resultTime "2024-01-01T01:10:00+01:00"^^xsd:dateTime ;
    sosa:hasSimpleResult "21.5 °C" ;
    sosa:madeBySensor [ rdfs:label "t1" ] .
<http://fixture.example/obs/2> sosa:resultTime "2024-01-01T00:20:00Z"^^xsd:dateTime .
<http://fixture.example/obs/2> {
    <http://fixture.example/obs/2> a sosa:Observation ; sosa:hasSimpleResult "22.50"^^xsd:decimal .
}
"""

# page2 (N-Quads, immutable by Cache-Control): obs/3, obs/4 (a named graph); relations to page3 (gone: 410) and
# page4, both from 02:00.
PAGE2 = """<{base}/page2> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <https://w3id.org/tree#Node> .
<http://fixture.example/sensors#stream> <https://w3id.org/tree#member> <http://fixture.example/obs/3> .
<http://fixture.example/sensors#stream> <https://w3id.org/tree#member> <http://fixture.example/obs/4> .
<http://fixture.example/obs/3> <http://www.w3.org/ns/sosa/resultTime> "2024-01-01T01:05:00Z"^^<{xsd}dateTime> .
<http://fixture.example/obs/3> <http://www.w3.org/ns/sosa/hasSimpleResult> "tiède"@fr .
<http://fixture.example/obs/4> <http://www.w3.org/ns/sosa/resultTime> "2024-01-01T01:30:00Z"^^<{xsd}dateTime> .
<http://fixture.example/obs/4> <http://www.w3.org/ns/sosa/hasSimpleResult> "23" <http://fixture.example/obs/4> .
<{base}/page2> <https://w3id.org/tree#relation> _:r3 .
_:r3 <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <https://w3id.org/tree#GreaterThanOrEqualToRelation> .
_:r3 <https://w3id.org/tree#node> <{base}/page3> .
_:r3 <https://w3id.org/tree#path> <http://www.w3.org/ns/sosa/resultTime> .
_:r3 <https://w3id.org/tree#value> "2024-01-01T02:00:00Z"^^<{xsd}dateTime> .
<{base}/page2> <https://w3id.org/tree#relation> _:r4 .
_:r4 <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <https://w3id.org/tree#GreaterThanOrEqualToRelation> .
_:r4 <https://w3id.org/tree#node> <{base}/page4> .
_:r4 <https://w3id.org/tree#path> <http://www.w3.org/ns/sosa/resultTime> .
_:r4 <https://w3id.org/tree#value> "2024-01-01T02:00:00Z"^^<{xsd}dateTime> .
"""


def page4(*members: tuple[str, str]) -> str:
    """page4 (JSON-LD with an inline context, open: no ldes:immutable) holding members (name, resultTime)."""
    items = ",".join(
        f'{{"@id": "{OBS}{name}", "@type": "sosa:Observation", "sosa:hasSimpleResult": "{name} reading", '
        f'"sosa:resultTime": {{"@value": "{at}", "@type": "xsd:dateTime"}}}}' for name, at in members)
    ids = ",".join(f'{{"@id": "{OBS}{name}"}}' for name, _ in members)
    return ('{"@context": {"tree": "https://w3id.org/tree#", "sosa": "http://www.w3.org/ns/sosa/", '
            '"xsd": "http://www.w3.org/2001/XMLSchema#"}, "@graph": ['
            f'{{"@id": "http://fixture.example/sensors#stream", "tree:member": [{ids}]}}, {items}]}}')


@dataclass
class Fixture:
    """The hand-written LDES, served by ``http.server``: path → (status, media type, body, headers); scripted
    failures answered first; every request logged (path, If-None-Match, monotonic time)."""

    pages: dict[str, tuple[int, str, str, dict[str, str]]] = field(default_factory=dict)
    failures: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    log: list[tuple[str, str | None, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fixture = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                tag = self.headers.get("If-None-Match")
                with fixture.lock:
                    fixture.log.append((self.path, tag, time.monotonic()))
                    failures = fixture.failures.get(self.path)
                    failure = failures.pop(0) if failures else None
                    page = fixture.pages.get(self.path)
                if failure is not None:
                    self._send(failure[0], "text/plain", b"try later\n", failure[1])
                elif page is None:
                    self._send(404, "text/plain", b"no such page\n", {})
                elif tag is not None and tag == page[3].get("ETag"):
                    self._send(304, None, b"", page[3])
                else:
                    self._send(page[0], page[1], page[2].encode(), page[3])

            def _send(self, status: int, media: str | None, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                if media is not None:
                    self.send_header("Content-Type", media)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def requests_for(self, path: str, since: float = 0.0) -> list[tuple[str | None, float]]:
        with self.lock:
            return [(tag, at) for p, tag, at in self.log if p == path and at >= since]


@pytest.fixture
def fixture() -> Iterator[tuple[Fixture, str]]:
    served = Fixture()
    server = ThreadingHTTPServer(("127.0.0.1", 0), served.handler())
    base = f"http://127.0.0.1:{server.server_address[1]}"
    served.pages = {
        "/sensors": (200, "text/turtle", ROOT, {"ETag": '"root-1"'}),
        "/page1": (200, "application/trig", PAGE1, {}),
        "/page2": (200, "application/n-quads", PAGE2.format(base=base, xsd=XSD),
                   {"Cache-Control": "public, max-age=604800, immutable"}),
        "/page3": (410, "text/plain", "compacted\n", {}),
        "/page4": (200, "application/ld+json", page4(("5", "2024-01-01T02:30:00Z")), {"ETag": '"page4-1"'}),
    }
    served.failures = {"/page1": [(503, {})], "/page4": [(429, {"Retry-After": "1"})]}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, base
    finally:
        server.shutdown()
        server.server_close()


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def elements(url: str) -> list[dict[str, object]]:
    r = requests.get(f"{url}/elements")
    assert r.status_code == 200, r.text
    return list(r.json()["elements"])


def graphs(url: str) -> list[str]:
    return [str(e["graph"]) for e in elements(url)]


def dataset(url: str) -> set[str]:
    """A stream's dataset as N-Quads lines, each blank node named after the graph it is in (each element of these
    tests has at most one): blank node labels are a document's own, so the follower's are not the source's."""
    r = requests.get(url, headers={"Accept": "application/n-quads"})
    assert r.status_code == 200, r.text
    found = set()
    for quad in parse(r.content, RdfFormat.N_QUADS, rename_blank_nodes=False):
        line = str(quad)
        for term in (quad.subject, quad.object):
            if isinstance(term, BlankNode):
                line = line.replace(str(term), f"_:in-{quad.graph_name.value}")
        found.add(line)
    return found


def follower(server: RunningServer, name: str) -> dict[str, object]:
    status = requests.get(f"{server.url}/status").json()
    return dict(status["connectors"]["ldes"].get(name, {}))


def expected_fixture_elements(*extra: str) -> set[str]:
    """Worked out by hand: each member's timestamp literal (as published) in a prov:generatedAtTime triple, its
    description in the default graph moved into its graph (sosa:resultTime included: it is not the stream's
    timestamp predicate), and its named graph."""
    def stamp(name: str, at: str) -> str:
        return f'<{OBS}{name}> <{PROV}> "{at}"^^<{XSD}dateTime>'

    def triple(name: str, predicate: str, value: str) -> str:
        return f"<{OBS}{name}> <{predicate}> {value} <{OBS}{name}>"

    observation = f"<{SOSA}Observation>"
    rdf_type = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
    found = {
        stamp("0", "2023-12-31T23:59:00Z"), triple("0", rdf_type, observation),
        triple("0", f"{SOSA}resultTime", f'"2023-12-31T23:59:00Z"^^<{XSD}dateTime>'),
        triple("0", f"{SOSA}hasSimpleResult", '"19.0 °C"'),
        stamp("1", "2024-01-01T01:10:00+01:00"), triple("1", rdf_type, observation),
        triple("1", f"{SOSA}resultTime", f'"2024-01-01T01:10:00+01:00"^^<{XSD}dateTime>'),
        triple("1", f"{SOSA}hasSimpleResult", '"21.5 °C"'), triple("1", f"{SOSA}madeBySensor", f"_:in-{OBS}1"),
        f'_:in-{OBS}1 <http://www.w3.org/2000/01/rdf-schema#label> "t1" <{OBS}1>',
        stamp("2", "2024-01-01T00:20:00Z"), triple("2", rdf_type, observation),
        triple("2", f"{SOSA}resultTime", f'"2024-01-01T00:20:00Z"^^<{XSD}dateTime>'),
        triple("2", f"{SOSA}hasSimpleResult", f'"22.50"^^<{XSD}decimal>'),
        stamp("3", "2024-01-01T01:05:00Z"),
        triple("3", f"{SOSA}resultTime", f'"2024-01-01T01:05:00Z"^^<{XSD}dateTime>'),
        triple("3", f"{SOSA}hasSimpleResult", '"tiède"@fr'),
        stamp("4", "2024-01-01T01:30:00Z"),
        triple("4", f"{SOSA}resultTime", f'"2024-01-01T01:30:00Z"^^<{XSD}dateTime>'),
        triple("4", f"{SOSA}hasSimpleResult", '"23"'),
    }
    for name, at in [("5", "2024-01-01T02:30:00Z"), *[(n, a) for n, a in (x.split("@") for x in extra)]]:
        found |= {stamp(name, at), triple(name, rdf_type, observation),
                  triple(name, f"{SOSA}resultTime", f'"{at}"^^<{XSD}dateTime>'),
                  triple(name, f"{SOSA}hasSimpleResult", f'"{name} reading"')}
    return found


@pytest.mark.slow
def test_follow_a_hand_written_ldes_across_a_restart(fixture: tuple[Fixture, str], tmp_path: Path) -> None:
    served, base = fixture
    data = tmp_path / "b"
    allow = ["--no-pipeline", "--service-allow", base.removeprefix("http://")]
    with running_server(allow, data_dir=data) as server:
        url = f"{server.url}/streams/b"
        r = requests.put(url, params={"ldes-source": "http://192.0.2.1/ldes"})  # a host the operator did not allow
        assert r.status_code == 403 and "--service-allow" in r.text
        r = requests.put(url, params={"ldes-source": "ftp://127.0.0.1/ldes"})
        assert r.status_code == 400 and "http(s) URL" in r.text
        r = requests.put(url, params={"ldes-source": f"{base}/sensors", "ldes-poll": "PT0.3S"})
        assert r.status_code in (201, 204), r.text
        wait_for(lambda: len(elements(url)) >= 6, what="the six members of the fixture")
        # obs/0 (root), obs/1 and obs/2 (page1, sorted by time), obs/3, obs/4 (page2), obs/5 (page4): in time order
        assert graphs(url) == [f"<{OBS}{n}>" for n in "012345"]
        assert dataset(url) == expected_fixture_elements()
        # page1 was retried after its 503; page4 after its 429, not before Retry-After (1 s)
        assert len(served.requests_for("/page1")) == 2
        (_, refused), (_, retried), *_ = served.requests_for("/page4")
        assert retried - refused >= 0.95
        # the open page is polled with its ETag: 304
        wait_for(lambda: any(tag == '"page4-1"' for tag, _ in served.requests_for("/page4")), what="a poll")
        status = follower(server, "b")
        assert status["error"] is None and status["members_emitted"] == 6 and status["gone"] >= 1
        assert "DurationAgoPolicy" in str(status["retention_policy"])
        # a new member on the open page
        served.pages["/page4"] = (200, "application/ld+json", page4(("5", "2024-01-01T02:30:00Z"),
                                                                     ("6", "2024-01-01T02:45:00Z")),
                                  {"ETag": '"page4-2"'})
        wait_for(lambda: len(elements(url)) >= 7, what="obs/6")
    # B is stopped; the open page gains obs/7; B restarts and resumes from its pending pages
    served.pages["/page4"] = (200, "application/ld+json", page4(
        ("5", "2024-01-01T02:30:00Z"), ("6", "2024-01-01T02:45:00Z"), ("7", "2024-01-01T03:00:00Z")),
        {"ETag": '"page4-3"'})
    restarted = time.monotonic()
    with running_server(allow, data_dir=data) as server:
        url = f"{server.url}/streams/b"
        wait_for(lambda: len(elements(url)) >= 8, what="obs/7 after the restart")
        time.sleep(1.0)  # a few more polls: nothing may come twice
        assert graphs(url) == [f"<{OBS}{n}>" for n in "01234567"]
        assert dataset(url) == expected_fixture_elements("6@2024-01-01T02:45:00Z", "7@2024-01-01T03:00:00Z")
        assert served.requests_for("/page1", restarted) == [] and served.requests_for("/page2", restarted) == []
        assert any(tag == '"page4-2"' for tag, _ in served.requests_for("/page4", restarted))
        assert follower(server, "b")["error"] is None


def reading(name: str, second: int) -> str:
    """An element of stream A at 10:00 + SECOND s: a reading, a literal with a language tag, a blank node (its own:
    a follower reads blank nodes as each page's, so one shared by elements on two pages would become two)."""
    minutes, seconds = divmod(second, 60)
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minutes:02d}:{seconds:02d}Z"^^<{XSD}dateTime> .\n'
            f'<http://ex/{name}> {{ <http://ex/{name}/obs> <http://ex/hr> {60 + second % 50} ; '
            f'<http://ex/note> "n{second}"@en ; <http://ex/by> _:s{second} . }}\n')


def upload(url: str, names_and_seconds: list[tuple[str, int]]) -> None:
    r = requests.post(url, data="".join(reading(n, s) for n, s in names_and_seconds),
                      headers={"Content-Type": "application/trig"})
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_a_stream_follows_another_servers_stream_exactly_once(tmp_path: Path) -> None:
    with running_server(["--no-pipeline"]) as a:
        source = f"{a.url}/streams/a"
        assert requests.put(source, params={"ldes-page": "PT5S"}).status_code == 201
        upload(source, [(f"e{i}", i) for i in range(0, 600, 2)])  # 300 elements, 120 pages of 5 s
        allow = ["--no-pipeline", "--service-allow", a.url.removeprefix("http://")]
        data = tmp_path / "b"
        with running_server(allow, data_dir=data) as b:
            copy = f"{b.url}/streams/b"
            r = requests.put(copy, params={"ldes-source": f"{source}/ldes", "ldes-poll": "PT0.2S"})
            assert r.status_code == 201, r.text
            wait_for(lambda: len(elements(copy)) >= 40, what="B to start catching up")
            kill_tree(b.process.pid)  # a crash in the middle of catching up
            b.process.wait()
        upload(source, [(f"e{i}", i) for i in range(600, 700, 2)])  # 50 more while B is down
        with running_server(allow, data_dir=data) as b:
            copy = f"{b.url}/streams/b"
            wait_for(lambda: len(elements(copy)) >= 350, timeout=60, what="B to catch up after the crash")
            upload(source, [("live", 800)])  # and one while B follows
            wait_for(lambda: len(elements(copy)) >= 351, what="the live element")
            time.sleep(1.0)
            expected = [f"<http://ex/e{i}>" for i in range(0, 700, 2)] + ["<http://ex/live>"]
            assert graphs(copy) == expected  # the same elements, in order, exactly once
            assert [e["time"] for e in elements(copy)] == [e["time"] for e in elements(source)]
            assert dataset(copy) == dataset(source)  # every quad, every literal as uploaded
            assert follower(b, "b")["error"] is None
