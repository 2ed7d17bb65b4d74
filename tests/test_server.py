"""The real server (gunicorn on 127.0.0.1): chunked bodies, slow and stalled clients, response headers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from conformance.server import running_server, stalled_connections

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("server") / "data"
    with running_server(["--max-body-bytes", "2m", "--no-pipeline"], data_dir=data) as running:
        yield running.url
    assert Path(data, "store").exists()  # on disk, in the data directory


def _lines(n: int, start: int = 0) -> Iterator[bytes]:
    for i in range(start, start + n):
        yield b'<http://ex/s%d> <http://ex/p> "v%d" .\n' % (i, i)


def test_chunked_upload_is_parsed_as_it_streams(server: str) -> None:
    graph = server + "/store?graph=http%3A%2F%2Fex%2Fchunked"
    r = requests.put(graph, data=_lines(5000), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 201, r.text
    r = requests.get(server + "/sparql", params={
        "query": "SELECT (COUNT(*) AS ?n) { GRAPH <http://ex/chunked> { ?s ?p ?o } }"})
    assert r.json()["results"]["bindings"][0]["n"]["value"] == "5000"


def test_chunked_upload_over_the_limit_is_413_and_changes_nothing(server: str) -> None:
    graph = server + "/store?graph=http%3A%2F%2Fex%2Flimited"
    r = requests.put(graph, data=_lines(100_000), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 413 and "limit" in r.text
    assert requests.get(graph).status_code == 404


def test_broken_chunked_upload_keeps_the_previous_graph(server: str) -> None:
    graph = server + "/store?graph=http%3A%2F%2Fex%2Fbroken"
    assert requests.put(graph, data=b'<http://ex/s> <http://ex/p> "kept" .',
                        headers={"Content-Type": "application/n-triples"}).status_code == 201

    def body() -> Iterator[bytes]:
        yield from _lines(1000)
        yield b"<http://ex/s> <http://ex/p> broken"

    r = requests.put(graph, data=body(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 400 and "line 1001" in r.text
    assert requests.get(graph).text.strip() == '<http://ex/s> <http://ex/p> "kept" .'


def _element(name: str, second: int) -> bytes:
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:00:{second:02d}Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/{name}> <http://ex/v> {second} . }}\n').encode()


def _timed(method: str, url: str, **kwargs: object) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.request(method, url, timeout=5, **kwargs)  # type: ignore[arg-type]
    return response, time.monotonic() - started


def test_stalled_connections_do_not_starve_the_others(server: str) -> None:
    # 100 connections stall in their headers: more than the server's 16 threads. Each normal request must still
    # answer within a second, and the stalled ones are still open (the header deadline, 10 s, has not passed).
    assert requests.put(server + "/streams/stalls", timeout=5).status_code == 201
    with stalled_connections(server, 100) as stalled:
        r, took = _timed("GET", server + "/status")
        assert r.status_code == 200 and took < 1, took
        r, took = _timed("GET", server + "/sparql", params={"query": "ASK {}"})
        assert r.status_code == 200 and r.json()["boolean"] is True and took < 1, took
        # a chunked upload (a generator body) of three elements, then a one-shot window over them
        r, took = _timed("POST", server + "/streams/stalls", data=iter([_element("a", 0), _element("b", 1),
                                                                        _element("c", 2)]),
                         headers={"Content-Type": "application/trig"})
        assert r.status_code == 200 and r.json()["committed"] == 3 and took < 1, (r.text, took)
        r, took = _timed("GET", server + "/streams/stalls", params={
            "WINDOWS": "HEAD~1/HEAD", "query": "SELECT (SUM(?v) AS ?sum) { GRAPH ?g { ?s ?p ?v } }"},
            headers={"Accept": "text/csv"})
        assert r.status_code == 200 and r.text.split() == ["sum", "3"] and took < 1, (r.text, took)  # b 1 + c 2
        # a continuous response gets its headers at once (no pipeline here: its first window never completes)
        started = time.monotonic()
        with requests.get(server + "/streams/stalls", params={"WINDOWS": "R/HEAD/PT1S"}, stream=True,
                          timeout=5) as continuous:
            assert continuous.status_code == 200 and time.monotonic() - started < 1
        for sock in stalled:  # not answered, not closed: they only wait for the rest of their headers
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)


@pytest.mark.parametrize(("params", "accept", "content_type"), [
    ({}, "application/n-quads", "application/n-quads"),  # chunked documents
    ({"packaging": "lines"}, "", "application/n-quads"),
    ({"query": "SELECT * { ?s ?p ?o }"}, "text/csv", "text/csv"),
    ({}, "multipart/mixed", "multipart/mixed; boundary="),
    ({}, "text/event-stream", "text/event-stream; charset=utf-8"),
])
def test_a_continuous_response_sends_its_headers_at_once(server: str, params: dict[str, str], accept: str,
                                                         content_type: str) -> None:
    # no pipeline: the first window never completes, so headers that arrive were sent before any window
    url = server + "/streams/headers"
    requests.put(url, timeout=5)
    started = time.monotonic()
    with requests.get(url, params={"WINDOWS": "R/HEAD/PT1M", **params}, headers={"Accept": accept}, stream=True,
                      timeout=5) as r:
        took = time.monotonic() - started
        assert r.status_code == 200 and took < 2, took
        assert r.headers["Content-Type"].startswith(content_type)
        assert len(r.headers["Window-Sequence"]) == 16 and r.headers["Window-From"] == "0"


#: a query whose headers promise 1,000 bytes of body, of which 3 are sent
HALF_SENT = (b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/sparql-query\r\n"
             b"Content-Length: 1000\r\n\r\nASK")


def _answer(sock: socket.socket, seconds: float) -> tuple[bytes, float]:
    """Everything the server sends on ``sock`` until it closes it (within ``seconds``), and how long that took."""
    started = time.monotonic()
    sock.settimeout(seconds)
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    return answer, time.monotonic() - started


def test_half_sent_bodies_hold_no_thread(server: str) -> None:
    """The probe: 20 anonymous POST /sparql with Content-Length: 1000 and 3 bytes of body, more than the server's 16
    threads, held open. Their bodies are awaited in the event loop: every other request is still served at once."""
    with stalled_connections(server, 20, HALF_SENT) as stalled:
        time.sleep(0.3)  # all of them read by the server
        r, took = _timed("GET", server + "/status")
        assert r.status_code == 200 and took < 1, took
        r, took = _timed("POST", server + "/sparql", data="ASK {}",
                         headers={"Content-Type": "application/sparql-query"})
        assert r.status_code == 200 and r.json()["boolean"] is True and took < 1, took
        assert requests.put(server + "/streams/halfsent", timeout=5).status_code in (201, 204)
        r, took = _timed("POST", server + "/streams/halfsent", data=_element("h", 0),
                         headers={"Content-Type": "application/trig"})
        assert r.status_code == 200 and r.json()["committed"] == 1 and took < 1, (r.text, took)
        for sock in stalled:  # still waiting for their bodies, within the body timeout (30 s)
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)


@pytest.fixture(scope="module")
def impatient() -> Iterator[str]:
    """A server whose requests must send their headers within 1 s, and a body must not pause for 2 s."""
    with running_server(["--no-pipeline", "--header-timeout", "1", "--body-timeout", "2"]) as running:
        yield running.url


@pytest.mark.slow
def test_a_body_past_the_deadline_gets_a_408(impatient: str) -> None:
    with stalled_connections(impatient, 1, HALF_SENT) as [partial]:
        answer, took = _answer(partial, 6)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert answer.endswith(b"the request's body took longer than 2 s\n") and 1.9 < took < 4.5, (answer, took)


@pytest.mark.slow
def test_an_upload_that_stalls_is_ended_and_keeps_what_it_committed(impatient: str) -> None:
    url = impatient + "/streams/stalled-upload"
    assert requests.put(url, timeout=5).status_code == 201
    address = urlsplit(impatient)
    with socket.create_connection((address.hostname, address.port), timeout=8) as sock:
        sock.sendall(b"POST /streams/stalled-upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/trig\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for n in range(2):
            piece = _element(f"s{n}", n)
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        answer, took = _answer(sock, 8)  # nothing more is sent
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    # the first element was complete when the second began; the second never was (no element, no end followed it)
    assert b"stopped arriving" in answer and b"1 element(s) of it before that one were committed" in answer, answer
    assert 1.9 < took < 5, took
    assert requests.get(url, timeout=5).json()["elements"] == 1


@pytest.mark.slow
def test_headers_past_the_deadline_get_a_408_and_the_connection_is_closed(impatient: str) -> None:
    with stalled_connections(impatient, 1) as [partial], \
            stalled_connections(impatient, 1, b"") as [silent]:
        answer, took = _answer(partial, 5)
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert b"Connection: close" in answer and answer.endswith(b"the request's headers took longer than 1 s\n")
        assert 0.9 < took < 3, took  # the deadline (1 s), checked about once a second
        silent.settimeout(5)
        assert silent.recv(4096) == b""  # a connection that sent nothing is closed without an answer


def test_headers_sent_slowly_within_the_deadline_are_served(impatient: str) -> None:
    address = urlsplit(impatient)
    with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
        for request in range(2):  # two requests on one kept-alive connection, each sent in pieces
            for piece in (b"GET /sta", b"tus HTTP/1.1\r\nHo", b"st: x\r\n", b"\r\n"):
                sock.sendall(piece)
                time.sleep(0.15)
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(1)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n"), (request, head)
            length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                         .split(b":")[1])
            body = b""
            while len(body) < length:
                body += sock.recv(length - len(body))
            assert b'"dataset"' in body
        # two requests in one piece (pipelined): both answered
        sock.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\nGET /status HTTP/1.1\r\nHost: x\r\n"
                     b"Connection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.count(b"HTTP/1.1 200 OK\r\n") == 2, answer[:300]


@pytest.mark.slow
def test_a_long_upload_is_not_cut_by_the_header_deadline(impatient: str) -> None:
    # the deadline bounds the headers only: a body that trickles for 3 s (three times the deadline) is all stored
    url = impatient + "/streams/trickle"
    assert requests.put(url, timeout=5).status_code == 201

    def trickle() -> Iterator[bytes]:
        for second in range(4):
            yield _element(f"e{second}", second)
            time.sleep(1)

    r = requests.post(url, data=trickle(), headers={"Content-Type": "application/trig"}, timeout=30)
    assert r.status_code == 200 and r.json()["committed"] == 4, r.text


def test_a_query_whose_client_left_is_stopped(server: str) -> None:
    """The probe's abandoned query: a client asks for a large cartesian product (27 million rows, minutes of CPU to
    write) and disconnects. pyoxigraph evaluates as it writes, and the writing asks whether the client is there:
    the query stops, its CPU is released, and /status counts it."""
    triples = "".join(f"<http://ex/s{i}> <http://ex/p> {i} .\n" for i in range(300))
    graph = server + "/store?graph=http%3A%2F%2Fex%2Fcartesian"
    assert requests.put(graph, data=triples, headers={"Content-Type": "text/turtle"}).status_code == 201
    before = requests.get(server + "/status?sections=queries", timeout=5).json()["queries"]
    query = "SELECT * { GRAPH <http://ex/cartesian> { ?a ?p ?x . ?b ?p ?y . ?c ?p ?z } }"
    address = urlsplit(server)
    with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
        body = query.encode()
        sock.sendall(b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/sparql-query\r\n"
                     b"Accept: text/csv\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 10
        while requests.get(server + "/status?sections=queries", timeout=5).json()["queries"]["running"] == 0:
            assert time.monotonic() < deadline, "the query never started"
            time.sleep(0.05)
    deadline = time.monotonic() + 10
    while (queries := requests.get(server + "/status?sections=queries", timeout=5).json()["queries"])["running"]:
        assert time.monotonic() < deadline, f"the abandoned query is still running: {queries}"
        time.sleep(0.1)
    assert queries["stopped_client_gone"] == before["stopped_client_gone"] + 1
    cpu = requests.get(server + "/status?sections=process", timeout=5).json()["process"]["cpu_seconds"]
    time.sleep(1.0)
    idle = requests.get(server + "/status?sections=process", timeout=5).json()["process"]["cpu_seconds"] - cpu
    assert idle < 0.5, f"{idle:.2f} CPU-seconds in 1 s after the query stopped"
