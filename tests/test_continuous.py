"""Continuous responses (issue 5): a repeating windowed IRI answered with one result per window, on a real
server with the Spark pipeline. Expected windows worked out by hand in each test."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import requests

from conformance.server import REPO_ROOT, RunningServer, stalled_connections

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
TRIG = {"Content-Type": "application/trig"}


def element(name: str, seconds: float) -> str:
    """Element <http://ex/NAME> at 10:00:00 + seconds (ms precision)."""
    stamp = f"2016-06-20T10:00:{int(seconds):02d}.{round(seconds % 1 * 1000):03d}Z"
    return (f'<http://ex/{name}> <{PROV}> "{stamp}"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/{name}> <http://ex/v> 1 . }}\n')


@pytest.fixture(scope="module")
def server(spark_server: RunningServer) -> RunningServer:
    return spark_server


def registrations(server: RunningServer) -> list[dict[str, Any]]:
    return requests.get(f"{server.url}/status", timeout=10).json()["continuous"]  # type: ignore[no-any-return]


def wait_registered(server: RunningServer, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(registrations(server)) < count:
        assert time.monotonic() < deadline, registrations(server)
        time.sleep(0.1)


class Reader(threading.Thread):
    """Reads a continuous response in the background: its HTTP chunks, in order."""

    def __init__(self, url: str, params: dict[str, str], headers: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.params, self.headers = url, params, headers or {}
        self.chunks: list[bytes] = []
        self.response: requests.Response | None = None
        self.answered = threading.Event()  # the response's status and headers have arrived
        self.ended = threading.Event()

    def run(self) -> None:
        with requests.get(self.url, params=self.params, headers=self.headers, stream=True, timeout=120) as response:
            self.response = response
            self.answered.set()
            for chunk in response.raw.read_chunked():
                self.chunks.append(chunk)
        self.ended.set()

    def body(self) -> bytes:
        return b"".join(self.chunks)


def graphs_of_nquads(document: bytes) -> set[str]:
    return {line.split(" ")[0] for line in document.decode().splitlines() if f"<{PROV}>" in line}


def test_chunked_documents_and_r3_ends_after_three_windows(server: RunningServer) -> None:
    url = f"{server.url}/streams/chunks"
    assert requests.put(url, timeout=10).status_code == 201
    reader = Reader(url, {"WINDOWS": "R3/HEAD/PT1S"}, {"Accept": "application/n-quads"})
    reader.start()
    wait_registered(server, 1)
    # t0 = the first element (10:00:00): windows [0,1) {a,b}, [1,2) {c}, [2,3) {d}; [3,4) {e} is not sent (R3)
    body = "".join(element(n, s) for n, s in (("a", 0), ("b", 0.5), ("c", 1.2), ("d", 2.5), ("e", 3.1), ("f", 4)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    assert reader.ended.wait(60), reader.chunks
    assert [graphs_of_nquads(chunk) for chunk in reader.chunks] == [
        {"<http://ex/a>", "<http://ex/b>"}, {"<http://ex/c>"}, {"<http://ex/d>"}]  # one document per chunk
    assert reader.response is not None and reader.response.headers["Content-Type"] == "application/n-quads"
    assert registrations(server) == []  # R3 ended: the registration is gone


def test_a_later_head_subscriber_gets_its_own_t0_and_its_own_three_windows(server: RunningServer) -> None:
    # HEAD resolves when each request registers (issue 12, item 3). The first subscriber registers at HEAD = a
    # (10:00:00): windows [0,1) {a,b}, [1,2) {c}, [2,3) {d}. The second registers once d (10:00:02.5) is HEAD:
    # t0 = 2.5 s, windows [2.5,3.5) {d,e}, [3.5,4.5) {f}, [4.5,5.5) {g} - three of its own, not the first one's tail.
    url = f"{server.url}/streams/heads"
    assert requests.put(url, timeout=10).status_code == 201
    assert requests.post(url, data=element("a", 0), headers=TRIG, timeout=30).ok
    first = Reader(url, {"WINDOWS": "R3/HEAD/PT1S"}, {"Accept": "application/n-quads"})
    first.start()
    wait_registered(server, 1)
    body = "".join(element(n, s) for n, s in (("b", 0.5), ("c", 1.2), ("d", 2.5)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    second = Reader(url, {"WINDOWS": "R3/HEAD/PT1S"}, {"Accept": "application/n-quads"})
    second.start()
    wait_registered(server, 2)
    body = "".join(element(n, s) for n, s in (("e", 3.1), ("f", 4), ("g", 5), ("h", 6)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    assert first.ended.wait(60) and second.ended.wait(60), (first.chunks, second.chunks)
    assert [graphs_of_nquads(chunk) for chunk in first.chunks] == [
        {"<http://ex/a>", "<http://ex/b>"}, {"<http://ex/c>"}, {"<http://ex/d>"}]
    assert [graphs_of_nquads(chunk) for chunk in second.chunks] == [
        {"<http://ex/d>", "<http://ex/e>"}, {"<http://ex/f>"}, {"<http://ex/g>"}]
    assert first.response is not None and second.response is not None
    assert first.response.headers["Window-Sequence"] != second.response.headers["Window-Sequence"]


def test_a_continuous_response_answers_at_once_and_runs_while_100_connections_stall(server: RunningServer) -> None:
    # Issue 12: the headers come before the first window (none can complete before the upload below), and 100
    # connections stalled in their headers (more than the server's 16 threads) starve neither this response nor
    # the upload. Tumbling 1 s windows from t0 = a (10:00:00): [0,1) {a}, [1,2) {b}; c at 2.5 s completes them.
    url = f"{server.url}/streams/stalls"
    assert requests.put(url, timeout=10).status_code == 201
    with stalled_connections(server.url, 100):
        reader = Reader(url, {"WINDOWS": "R2/HEAD/PT1S"}, {"Accept": "application/n-quads"})
        reader.start()
        assert reader.answered.wait(2) and reader.response is not None
        assert reader.response.headers["Window-From"] == "0" and reader.response.headers["Window-Sequence"]
        assert reader.chunks == []
        started = time.monotonic()
        r = requests.post(url, data=element("a", 0) + element("b", 1.5) + element("c", 2.5), headers=TRIG, timeout=5)
        assert r.ok and r.json()["committed"] == 3 and time.monotonic() - started < 1, r.text
        assert reader.ended.wait(60), reader.chunks
    assert [graphs_of_nquads(chunk) for chunk in reader.chunks] == [{"<http://ex/a>"}, {"<http://ex/b>"}]
    # answer=latest: one response over the latest complete window, window 1 {b} (window 2 [2,3) is not complete)
    r = requests.get(url, params={"WINDOWS": "R2/HEAD/PT1S", "answer": "latest", "query": "ASK { ?s ?p ?o }"},
                     timeout=10)
    assert r.status_code == 200 and r.json()["boolean"] is True
    assert (r.headers["Window-Index"], r.headers["Window-Elements"]) == ("1", "1")


def test_rn_of_backward_windows_sends_n_windows(server: RunningServer) -> None:
    # Repeating backward windows are numbered from 1: (t0 + k·1 s − 1 s, t0 + k·1 s], k = 1, 2, … With t0 = the
    # first element (a, 10:00:00): window 1 = (0 s, 1 s] {b}, window 2 = (1 s, 2 s] {c}; R2 ends after those two.
    url = f"{server.url}/streams/backward"
    assert requests.put(url, timeout=10).status_code == 201
    reader = Reader(url, {"WINDOWS": "R2/HEAD/-PT1S"}, {"Accept": "application/n-quads"})
    reader.start()
    wait_registered(server, 1)
    body = "".join(element(n, s) for n, s in (("a", 0), ("b", 0.5), ("c", 1.2), ("d", 2.5), ("e", 3.1)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    assert reader.ended.wait(60), reader.chunks
    assert [graphs_of_nquads(chunk) for chunk in reader.chunks] == [{"<http://ex/b>"}, {"<http://ex/c>"}]


def _multipart_parts(body: bytes, content_type: str) -> list[tuple[dict[str, str], bytes]]:
    boundary = content_type.split("boundary=")[1].encode()
    parts = []
    for raw in body.split(b"--" + boundary)[1:]:
        if raw.startswith(b"--"):
            break
        head, _, content = raw.strip(b"\r\n").partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        parts.append((headers, content))
    return parts


def test_rstream_istream_dstream_over_multipart(server: RunningServer) -> None:
    url = f"{server.url}/streams/operators"
    assert requests.put(url, timeout=10).status_code == 201
    query = f"SELECT ?g WHERE {{ ?g <{PROV}> ?t }}"
    readers = {operator: Reader(url, {"WINDOWS": "R2/HEAD/PT2S/PT1S", "query": query, "operator": operator},
                                {"Accept": "multipart/mixed"})
               for operator in ("rstream", "istream", "dstream")}
    for reader in readers.values():
        reader.start()
    wait_registered(server, 3)
    # t0 = a's time (0.5 s): window 0 = [0.5, 2.5) = {a, b}; window 1 = [1.5, 3.5) = {b, c}
    body = element("a", 0.5) + element("b", 1.5) + element("c", 2.5) + element("z", 5)
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    got = {}
    for operator, reader in readers.items():
        assert reader.ended.wait(60), (operator, reader.chunks)
        assert reader.response is not None
        parts = _multipart_parts(reader.body(), reader.response.headers["Content-Type"])
        assert [headers["Window-Index"] for headers, _ in parts] == ["0", "1"]
        assert all(headers["Content-Type"] == "application/sparql-results+json" for headers, _ in parts)
        got[operator] = [sorted(b["g"]["value"][len("http://ex/"):] for b in json.loads(content)["results"]["bindings"])
                         for _, content in parts]
    assert got == {"rstream": [["a", "b"], ["b", "c"]],  # each window's content
                   "istream": [["a", "b"], ["c"]],  # what is new since the previous window
                   "dstream": [[], ["a"]]}  # what left it


def test_event_stream_and_disconnect_frees_the_registration(server: RunningServer) -> None:
    url = f"{server.url}/streams/events"
    assert requests.put(url, timeout=10).status_code == 201
    response = requests.get(url, params={"WINDOWS": "R/HEAD/PT1S"}, headers={"Accept": "text/event-stream"},
                            stream=True, timeout=60)
    wait_registered(server, 1)
    [registration] = registrations(server)
    assert (registration["stream"], registration["ref"], registration["packaging"]) == (
        "events", "R/HEAD/PT1S", "event-stream")
    assert requests.post(url, data=element("a", 0) + element("b", 1.5), headers=TRIG, timeout=30).ok
    lines: list[str] = []
    for line in response.iter_lines(decode_unicode=True):
        lines.append(line)
        if line == "" and any(item.startswith("data: ") for item in lines):
            break  # the first event is complete
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert "event: window" in lines and "id: 0" in lines
    assert any(item.startswith("data: <http://ex/a>") for item in lines)  # N-Quads, a line per data field
    response.close()  # the client goes away
    deadline = time.monotonic() + 10
    while registrations(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert registrations(server) == []


def test_lines_packaging_and_bad_parameters(server: RunningServer) -> None:
    url = f"{server.url}/streams/lines"
    assert requests.put(url, timeout=10).status_code == 201
    reader = Reader(url, {"WINDOWS": "R2/HEAD/PT1S", "packaging": "lines"})
    reader.start()
    wait_registered(server, 1)
    assert requests.post(url, data=element("a", 0) + element("b", 1) + element("c", 2), headers=TRIG,
                         timeout=30).ok
    assert reader.ended.wait(60)
    assert graphs_of_nquads(reader.body()) == {"<http://ex/a>", "<http://ex/b>"}  # one N-Quads stream
    for params, fragment in (({"packaging": "pigeon"}, "packaging='pigeon'"),
                             ({"answer": "sometimes"}, "answer='sometimes'"),
                             ({"query": "SELECT * {}", "packaging": "lines"}, "packaging=lines"),
                             ({"report": "whenever"}, "whenever")):
        r = requests.get(url, params={"WINDOWS": "R/HEAD/PT1S", **params}, timeout=10)
        assert r.status_code == 400 and fragment in r.text, (params, r.text)
    assert registrations(server) == []


def test_answer_latest_is_one_response(server: RunningServer) -> None:
    url = f"{server.url}/streams/latest"
    assert requests.put(url, timeout=10).status_code == 201
    r = requests.get(url, params={"WINDOWS": "R/HEAD/PT1S", "answer": "latest", "timeout": "0"}, timeout=10)
    assert r.status_code == 503  # registered; no window complete yet (as for SERVICE callers, issue 3)


def test_python_client_and_tail(server: RunningServer) -> None:
    from concentrator.client import upload, windows

    url = f"{server.url}/streams/client"
    assert requests.put(url, timeout=10).status_code == 201
    tail = subprocess.Popen([sys.executable, "-m", "concentrator", "tail", url, "R2/HEAD/PT1S", "--format",
                             "application/n-quads"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got: list[Any] = []
    query = f"SELECT ?g {{ ?g <{PROV}> ?t }}"
    reader = threading.Thread(target=lambda: got.extend(windows(url, "R2/HEAD/PT1S", query=query)), daemon=True)
    reader.start()
    wait_registered(server, 2)
    answer = upload(url, (element(n, s) for n, s in (("a", 0), ("b", 0.4), ("c", 1.1), ("d", 2.3))))
    assert answer["committed"] == 4
    reader.join(60)
    assert [(w.index, w.start, w.end) for w in got] == [
        (0, "2016-06-20T10:00:00Z", "2016-06-20T10:00:01Z"), (1, "2016-06-20T10:00:01Z", "2016-06-20T10:00:02Z")]
    assert [sorted(b["g"]["value"] for b in w.json()["results"]["bindings"]) for w in got] == [
        ["http://ex/a", "http://ex/b"], ["http://ex/c"]]
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    text = out.decode()
    assert text.count("# window ") == 2 and "# window 1 [2016-06-20T10:00:01Z, 2016-06-20T10:00:02Z)" in text
    assert "<http://ex/c>" in text and "<http://ex/d>" not in text


def test_content_change_evaluates_at_each_arrival(server: RunningServer) -> None:
    # report=content-change: the query runs at every element arrival, over the oldest window holding the
    # element with the elements arrived so far (CSRBench's content-change policy; docs/continuous.md).
    url = f"{server.url}/streams/arrivals"
    assert requests.put(url, timeout=10).status_code == 201
    ref = "R2/2016-06-20T10:00:00Z/PT2S"  # windows [0, 2) and [2, 4) s; anchored in the past: every element
    names = f"SELECT ?g WHERE {{ ?g <{PROV}> ?t }}"
    values = "SELECT ?v WHERE { GRAPH ?g { ?s <http://ex/v> ?v } }"  # every element gives one solution v = 1
    cases = {
        "names": (names, "content-change,non-empty", "istream"),
        "values": (values, "content-change,non-empty", "istream"),
        "distinct": (values.replace("SELECT", "SELECT DISTINCT"), "content-change", "rstream"),
    }
    readers = {name: Reader(url, {"WINDOWS": ref, "query": query, "report": report, "operator": operator,
                                  "packaging": "multipart"})
               for name, (query, report, operator) in cases.items()}
    for reader in readers.values():
        reader.start()
    wait_registered(server, 3)
    # a 0, b 0.5, c 1 arrive in window 0; d 2.5, e 3 in window 1; z 5 is after window 1: R2 ends there.
    body = "".join(element(n, s) for n, s in (("a", 0), ("b", 0.5), ("c", 1), ("d", 2.5), ("e", 3), ("z", 5)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    got = {}
    for name, reader in readers.items():
        assert reader.ended.wait(60), (name, reader.chunks)
        assert reader.response is not None and reader.response.ok, reader.body()
        parts = _multipart_parts(reader.body(), reader.response.headers["Content-Type"])
        got[name] = [(headers["Window-Index"], headers["Arrival-Time"][17:-1],
                      sorted(value["value"].removeprefix("http://ex/")
                             for binding in json.loads(content)["results"]["bindings"] for value in binding.values()))
                     for headers, content in parts]
    # IStream: at each arrival the scope grows by the element, so what is new is that element's name; at d the
    # scope restarts with window 1 = {d}, and d is new again.
    assert got["names"] == [("0", "00", ["a"]), ("0", "00.5", ["b"]), ("0", "01", ["c"]),
                            ("1", "02.5", ["d"]), ("1", "03", ["e"])]
    # Bags: scopes give 1, 1 1, 1 1 1, then (window 1) 1, 1 1. IStream is bag difference: one new 1 at a, b, c
    # and e; at d, {1} − {1, 1, 1} is empty, and non-empty drops it.
    assert got["values"] == [("0", "00", ["1"]), ("0", "00.5", ["1"]), ("0", "01", ["1"]), ("1", "03", ["1"])]
    # RStream + content-change alone: the DISTINCT result is {1} at every arrival; only the first is a change.
    assert got["distinct"] == [("0", "00", ["1"])]
    assert registrations(server) == []


def test_non_empty_content_skips_windows_without_elements(server: RunningServer) -> None:
    # Tumbling 1 s windows from 10:00:00: [0,1) {a}, [1,2) no element, [2,3) {c}; z at 4 s completes them.
    url = f"{server.url}/streams/gaps"
    assert requests.put(url, timeout=10).status_code == 201
    query = f"SELECT ?g WHERE {{ ?g <{PROV}> ?t }}"
    readers = {report: Reader(url, {"WINDOWS": "R3/2016-06-20T10:00:00Z/PT1S", "query": query, "report": report,
                                    "operator": "dstream", "packaging": "multipart"})
               for report in ("window-close", "window-close,non-empty-content")}
    for reader in readers.values():
        reader.start()
    wait_registered(server, 2)
    assert requests.post(url, data=element("a", 0) + element("c", 2) + element("z", 4), headers=TRIG,
                         timeout=30).ok
    got = {}
    for report, reader in readers.items():
        assert reader.ended.wait(60), (report, reader.chunks)
        assert reader.response is not None and reader.response.ok, reader.body()
        parts = _multipart_parts(reader.body(), reader.response.headers["Content-Type"])
        got[report] = [(headers["Window-Index"], sorted(b["g"]["value"][len("http://ex/"):]
                                                        for b in json.loads(content)["results"]["bindings"]))
                       for headers, content in parts]
    # DStream: what left since the previous window. Without non-empty-content the empty window 1 is evaluated
    # (a left) and window 2 loses nothing; with it, window 1 is skipped and window 2's previous window is 0.
    assert got == {"window-close": [("0", []), ("1", ["a"]), ("2", [])],
                   "window-close,non-empty-content": [("0", []), ("2", ["a"])]}
