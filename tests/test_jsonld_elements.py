"""JSON-LD stream uploads (issue 16, item 6) through the real server: each top-level named graph object (``@id`` +
``@graph``) is one element, its timestamp its ``prov:generatedAtTime``; a JSON array body is framed as it arrives;
refusals keep what came before. Expected values are worked out by hand in comments."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pyoxigraph
import pytest
import requests

from conformance.server import RunningServer, running_server

JSONLD = "application/ld+json"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
CONTEXT = {"prov": "http://www.w3.org/ns/prov#", "xsd": "http://www.w3.org/2001/XMLSchema#", "ex": "http://ex/"}


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:
        yield running


def item(name: str, stamp: str, hr: object) -> dict[str, object]:
    """One element as a JSON-LD named graph object: graph ex:NAME stamped STAMP, holding one heart-rate reading."""
    return {"@context": CONTEXT, "@id": f"ex:{name}",
            "prov:generatedAtTime": {"@value": stamp, "@type": "xsd:dateTime"},
            "@graph": [{"@id": f"ex:{name}-obs", "ex:hr": hr}]}


def make_stream(server: RunningServer, name: str) -> str:
    url = f"{server.url}/streams/{name}"
    assert requests.put(url).status_code == 201
    return url


def stream_quads(url: str) -> set[str]:
    """The stream's dataset (timestamp triples and element graphs) as N-Quads lines."""
    r = requests.get(url, headers={"Accept": "application/n-quads"})
    assert r.status_code == 200, r.text
    return {str(q) + " ." for q in pyoxigraph.parse(r.content, pyoxigraph.RdfFormat.N_QUADS)}


def test_array_of_named_graphs_is_one_element_each(server: RunningServer) -> None:
    url = make_stream(server, "jl-array")
    body = [item("e1", "2016-06-20T12:00:00+02:00", 70), item("e2", "2016-06-20T10:01:00Z", 71),
            item("e3", "2016-06-20T10:02:00.5Z", "high")]
    r = requests.post(url, data=json.dumps(body), headers={"Content-Type": JSONLD})
    assert r.status_code == 200, r.text
    # e1 at 12:00+02:00 = 10:00Z, then 10:01, then 10:02.5: three elements in time order
    assert r.json() == {"committed": 3, "first_ordinal": 1, "last_ordinal": 3, "head": 3,
                        "stream_time": "2016-06-20T10:02:00.5Z"}
    # Each timestamp literal as sent (the +02:00 offset kept); each reading in its element's graph.
    assert stream_quads(url) == {
        f'<http://ex/e1> <{PROV}> "2016-06-20T12:00:00+02:00"^^<{XSD_DT}> .',
        '<http://ex/e1-obs> <http://ex/hr> "70"^^<http://www.w3.org/2001/XMLSchema#integer> <http://ex/e1> .',
        f'<http://ex/e2> <{PROV}> "2016-06-20T10:01:00Z"^^<{XSD_DT}> .',
        '<http://ex/e2-obs> <http://ex/hr> "71"^^<http://www.w3.org/2001/XMLSchema#integer> <http://ex/e2> .',
        f'<http://ex/e3> <{PROV}> "2016-06-20T10:02:00.5Z"^^<{XSD_DT}> .',
        '<http://ex/e3-obs> <http://ex/hr> "high" <http://ex/e3> .',
    }
    records = requests.get(f"{url}/elements").json()["elements"]
    assert [(e["ordinal"], e["graph"], e["time"]) for e in records] == [
        (1, "<http://ex/e1>", "2016-06-20T10:00:00Z"), (2, "<http://ex/e2>", "2016-06-20T10:01:00Z"),
        (3, "<http://ex/e3>", "2016-06-20T10:02:00.5Z")]


def test_one_object_with_a_top_level_graph_of_named_graphs(server: RunningServer) -> None:
    url = make_stream(server, "jl-object")
    body = {"@context": CONTEXT, "@graph": [
        {"@id": "ex:a", "prov:generatedAtTime": {"@value": "2016-06-20T10:00:00Z", "@type": "xsd:dateTime"},
         "@graph": [{"@id": "ex:a-obs", "ex:hr": 60}]},
        {"@id": "ex:b", "@graph": [{"@id": "ex:b-obs", "ex:hr": 61}],  # the timestamp after the graph
         "prov:generatedAtTime": {"@value": "2016-06-20T10:05:00Z", "@type": "xsd:dateTime"}},
    ]}
    r = requests.post(url, data=json.dumps(body), headers={"Content-Type": JSONLD})
    assert r.status_code == 200, r.text
    assert r.json()["committed"] == 2 and r.json()["stream_time"] == "2016-06-20T10:05:00Z"
    assert f'<http://ex/b> <{PROV}> "2016-06-20T10:05:00Z"^^<{XSD_DT}> .' in stream_quads(url)


def test_elements_commit_while_the_array_is_still_arriving(server: RunningServer) -> None:
    url = make_stream(server, "jl-trickle")
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    with socket.create_connection((host, port)) as conn:
        conn.sendall(b"POST /streams/jl-trickle HTTP/1.1\r\nHost: x\r\nContent-Type: application/ld+json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")

        def send(text: str) -> None:
            data = text.encode()
            conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))

        send("[" + json.dumps(item("t1", "2016-06-20T10:00:00Z", 70)) + ",")
        send(json.dumps(item("t2", "2016-06-20T10:01:00Z", 71)) + ",")
        # t2 has begun, so t1 is complete: it is committed while the body is still open
        deadline = time.monotonic() + 10
        while requests.get(url).json()["elements"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests.get(url).json()["elements"] >= 1
        send(json.dumps(item("t3", "2016-06-20T10:02:00Z", 72)) + "]")
        conn.sendall(b"0\r\n\r\n")
        response = conn.recv(65536)
    assert response.startswith(b"HTTP/1.1 200"), response
    assert requests.get(url).json()["elements"] == 3


def test_a_bad_element_is_refused_and_the_ones_before_it_kept(server: RunningServer) -> None:
    url = make_stream(server, "jl-bad")
    good = [item("g1", "2016-06-20T10:00:00Z", 70), item("g2", "2016-06-20T10:01:00Z", 71)]
    bad = item("g3", "2016-06-20T10:02:00", 72)  # no timezone
    after = item("g4", "2016-06-20T10:03:00Z", 73)
    r = requests.post(url, data=json.dumps([*good, bad, after]), headers={"Content-Type": JSONLD})
    assert r.status_code == 400, r.text
    assert "element 3" in r.text and "without a timezone" in r.text
    assert r.headers["Elements-Committed"] == "2"
    assert "2 element(s) of it before that one were committed (ordinals 1–2)" in r.text
    assert {q for q in stream_quads(url) if "g3" in q or "g4" in q} == set()
    assert requests.get(url).json()["elements"] == 2
    # Out of order (10:01 is not after 10:01) is a conflict, as for TriG.
    r = requests.post(url, data=json.dumps([item("g5", "2016-06-20T10:01:00Z", 74)]),
                      headers={"Content-Type": JSONLD})
    assert r.status_code == 409 and "element 3" in r.text


def test_malformed_json_and_remote_contexts_are_refused(server: RunningServer) -> None:
    url = make_stream(server, "jl-syntax")
    first = json.dumps(item("s1", "2016-06-20T10:00:00Z", 70))
    second = json.dumps(item("s2", "2016-06-20T10:01:00Z", 71))
    r = requests.post(url, data=f'[{first}, {second}, {{"@id": "http://ex/s3" "@graph": []}}]',
                      headers={"Content-Type": JSONLD})
    assert r.status_code == 400, r.text
    # As for TriG, the element being read when the syntax error came (s2: its end is not known before the next
    # element begins) is not committed either: s1 is.
    assert r.headers["Elements-Committed"] == "1" and "byte" in r.text
    committed = requests.get(url).json()["elements"]
    assert committed == 1
    r = requests.post(url, data=json.dumps([{"@context": "https://w3id.org/ldes/context", "@id": "ex:x"}]),
                      headers={"Content-Type": JSONLD})
    assert r.status_code == 400
    assert "remote context" in r.text and "inline" in r.text
    assert requests.get(url).json()["elements"] == committed
