"""WebSockets at the stream IRIs (issue 16): an upload (one message per element, each answered with its ordinal)
and a continuous response (one message per window), each with a disconnect and a resume, on a real server
(gunicorn with the header-gate worker); and a registered RSP-QL query's results (issue 32), over a WebSocket and as
server-sent events, each resumed. Expected ordinals and windows are worked out by hand in each test."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from simple_websocket import ConnectionClosed
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from conformance.server import RunningServer, running_server
from conformance.websocket_client import Client

pytestmark = pytest.mark.slow

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
TRIG = {"Content-Type": "application/trig"}


def element(name: str, seconds: int) -> str:
    """Element <http://ex/NAME> at 10:00:00 + seconds."""
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:00:{seconds:02d}Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/{name}> <http://ex/v> {seconds} . }}\n')


def ws_url(server: RunningServer, path: str) -> str:
    return server.url.replace("http://", "ws://") + path


def answer(ws: Any) -> dict[str, Any]:
    text = ws.receive(timeout=60)
    assert text is not None, "no message within 60 s"
    return json.loads(text)  # type: ignore[no-any-return]


def graphs(server: RunningServer, stream: str) -> list[str]:
    response = requests.get(f"{server.url}/streams/{stream}/elements", timeout=10)
    return [record["graph"] for record in response.json()["elements"]]


def wait_until(condition: Callable[[], bool], timeout: float, what: Callable[[], object]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.1)


def handshake(url: str, headers: dict[str, str] | None = None) -> requests.Response:
    """A WebSocket opening handshake sent with requests: the HTTP answer when the server refuses it."""
    return requests.get(url, timeout=10, headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", **(headers or {})})


def test_upload_each_element_answered_with_its_ordinal_a_disconnect_and_a_resume() -> None:
    with running_server(["--no-pipeline"]) as server:
        assert requests.put(f"{server.url}/streams/hr", timeout=10).status_code == 201
        ws = Client.connect(ws_url(server, "/streams/hr"))
        assert answer(ws) == {"stream": "hr", "format": "application/trig", "head": 0}
        ws.send(element("a", 1))
        assert {k: v for k, v in answer(ws).items() if k != "head"} == {"ordinal": 1, "graph": "<http://ex/a>"}
        ws.send(element("b", 2))
        ws.send(element("c", 3))
        assert answer(ws)["ordinal"] == 2
        ws.sock.close()  # the connection drops: c was sent, its answer never read
        # the client resumes: it sends again what it has no answer for (c), then d. c is committed once, whether
        # the server had taken it before the drop (then it answers "duplicate") or not.
        ws = Client.connect(ws_url(server, "/streams/hr"))
        assert answer(ws)["head"] in (2, 3)
        ws.send(element("c", 3))
        again = answer(ws)
        assert again["ordinal"] == 3 and again["graph"] == "<http://ex/c>"
        resent_was_new = not again.get("duplicate", False)
        ws.send(element("d", 4))
        assert answer(ws)["ordinal"] == 4
        # a refused element (before the stream time) stops the upload as an HTTP upload stops: 1008, nothing of
        # it stored, the count committed on this connection said
        ws.send(element("late", 0))
        refused = answer(ws)
        assert refused["status"] == 409 and refused["committed"] == 1 + resent_was_new and refused["head"] == 4
        assert "not after the stream time" in refused["error"]
        wait_until(lambda: not ws.connected, 10, lambda: "the server did not close the WebSocket")
        assert ws.close_reason == 1008
        assert graphs(server, "hr") == ["<http://ex/a>", "<http://ex/b>", "<http://ex/c>", "<http://ex/d>"]


def test_websocket_requests_are_checked_before_the_handshake() -> None:
    with running_server(["--no-pipeline", "--token", "secret"]) as server:
        headers = {"Authorization": "Bearer secret"}
        assert requests.put(f"{server.url}/streams/hr", headers=headers, timeout=10).status_code == 201
        assert handshake(f"{server.url}/streams/nosuch", headers).status_code == 404
        assert handshake(f"{server.url}/streams/hr").status_code == 401  # an upload is a write: token needed
        assert handshake(f"{server.url}/streams/hr?format=text/csv", headers).status_code == 415
        assert handshake(f"{server.url}/streams/hr?WINDOWS=HEAD/-PT1S").status_code == 400  # one window: HTTP
        ws = Client.connect(ws_url(server, "/streams/hr"), headers=headers)
        assert answer(ws)["head"] == 0
        ws.send(element("a", 1))
        assert answer(ws)["ordinal"] == 1
        ws.close()
        with pytest.raises(ConnectionClosed):
            ws.send(element("b", 2))


@pytest.mark.jvm
def test_continuous_response_one_message_per_window_a_disconnect_and_a_resume(spark_server: RunningServer) -> None:
    server = spark_server  # shared by this test worker (tests/conftest.py): the stream is named after the test
    url = f"{server.url}/streams/ws-windows"
    assert requests.put(url, timeout=10).status_code == 201
    assert requests.post(url, data=element("a", 0), headers=TRIG, timeout=30).ok
    query = "SELECT ?g WHERE { GRAPH ?g { ?s ?p ?o } } ORDER BY ?g"
    ws = Client.connect(ws_url(server, "/streams/ws-windows?WINDOWS=R/HEAD/PT10S&format=text/csv&query=")
                        + requests.utils.quote(query))
    opening = answer(ws)
    sequence = opening["Window-Sequence"]
    assert opening["Window-From"] == "0" and opening["Content-Type"] == "text/csv"
    # t0 = HEAD = a (10:00:00): windows [0,10) {a, b}, [10,20) {c}, [20,30) {d}, [30,40) {e}
    body = element("b", 5) + element("c", 12) + element("d", 25)
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    first, second = answer(ws), answer(ws)
    assert (first["Window-Index"], first["Window-Start"], first["Window-End"]) == (
        "0", "2016-06-20T10:00:00Z", "2016-06-20T10:00:10Z")
    assert first["body"].split() == ["g", "http://ex/a", "http://ex/b"]
    assert (second["Window-Index"], second["body"].split()) == ("1", ["g", "http://ex/c"])
    ws.close()  # the dashboard goes away after window 1
    wait_until(lambda: requests.get(f"{server.url}/status", timeout=10).json()["continuous"] == [], 15,
               lambda: "the registration of the closed WebSocket is still listed")
    assert requests.post(url, data=element("e", 33) + element("f", 41), headers=TRIG, timeout=30).ok
    # windows 2 ([20,30) {d}) and 3 ([30,40) {e}) complete while it is away; it resumes after window 1
    ws = Client.connect(ws_url(server, f"/streams/ws-windows?WINDOWS=R/HEAD/PT10S&format=text/csv&after=1"
                                       f"&sequence={sequence}&query=") + requests.utils.quote(query))
    assert answer(ws)["Window-From"] == "2"
    resumed = [answer(ws), answer(ws)]
    assert [(w["Window-Index"], w["body"].split()) for w in resumed] == [
        ("2", ["g", "http://ex/d"]), ("3", ["g", "http://ex/e"])]
    assert requests.post(url, data=element("g", 55), headers=TRIG, timeout=30).ok  # live again: [40,50) {f}
    live = answer(ws)
    assert (live["Window-Index"], live["body"].split()) == ("4", ["g", "http://ex/f"])
    ws.close()


REGISTRATION = """PREFIX ex: <http://ex/>
REGISTER RSTREAM <http://ex/ws-out> AS
SELECT ?o ?v
FROM NAMED WINDOW ex:w ON ex:ws-queries [RANGE PT10S STEP PT10S]
WHERE { WINDOW ex:w { ?o ex:v ?v } }"""


@pytest.mark.jvm
def test_a_registered_querys_results_over_a_websocket_and_as_csv_events_resumed(spark_server: RunningServer) -> None:
    """GET /queries/NAME/results (docs/rsp-ql.md) at the same URL as a WebSocket and as server-sent events in CSV,
    each resumed after a window. From t0 10:00:00, 10-second tumbling windows: [0,10) {a, b}, [10,20) {c},
    [20,30) {d}, [30,40) {e}, [40,50) none (not reported: the default report policy skips empty windows),
    [50,60) {f}; each body is ?o ?v, the element and its second."""
    server = spark_server  # shared by this test worker: the stream and the query are named after the test
    url = f"{server.url}/streams/ws-queries"
    assert requests.put(url, params={"alias": "http://ex/ws-queries"}, timeout=10).status_code == 201
    registered = requests.put(f"{server.url}/queries/ws-query", params={"t0": "2016-06-20T10:00:00Z"}, timeout=30,
                              data=REGISTRATION, headers={"Content-Type": "application/sparql-query"})
    assert registered.status_code == 201, registered.text
    results = "/queries/ws-query/results?format=text/csv"
    ws = Client.connect(ws_url(server, results))
    opening = answer(ws)
    assert opening["Window-From"] == "0" and opening["Window-Sequence"] == registered.json()["windows"][0]["sequence"]
    assert requests.post(url, data=element("a", 1) + element("b", 5) + element("c", 12) + element("d", 25),
                         headers=TRIG, timeout=30).ok
    first, second = answer(ws), answer(ws)
    assert (first["Window-Index"], first["Window-Start"], first["Window-End"], first["Content-Type"]) == (
        "0", "2016-06-20T10:00:00Z", "2016-06-20T10:00:10Z", "text/csv")
    header, *rows = first["body"].split()
    assert (header, sorted(rows)) == ("o,v", ["http://ex/a,1", "http://ex/b,5"])
    assert (second["Window-Index"], second["body"].split()) == ("1", ["o,v", "http://ex/c,12"])
    ws.close()  # away after window 1
    wait_until(lambda: requests.get(f"{server.url}/status", timeout=10).json()["continuous"] == [], 15,
               lambda: "the registration of the closed WebSocket is still listed")
    assert requests.post(url, data=element("e", 33) + element("f", 55), headers=TRIG, timeout=30).ok
    # windows 2 {d} and 3 {e} complete while it is away, and [40,50) holds nothing; it resumes after window 1
    ws = Client.connect(ws_url(server, results + "&after=1"))
    assert answer(ws)["Window-From"] == "2"
    resumed = [answer(ws), answer(ws)]
    assert [(w["Window-Index"], w["body"].split()) for w in resumed] == [
        ("2", ["o,v", "http://ex/d,25"]), ("3", ["o,v", "http://ex/e,33"])]
    # live again: a punctuation at 10:01:00 completes [50,60) {f}
    assert requests.post(url, params={"punctuation": "2016-06-20T10:01:00Z"}, timeout=30).ok
    live = answer(ws)
    assert (live["Window-Index"], live["body"].split()) == ("5", ["o,v", "http://ex/f,55"])
    ws.close()
    # the same results as server-sent events, resumed as an EventSource resumes: its URL, and the last id received
    with requests.get(f"{server.url}{results}&after=0", stream=True, timeout=60,
                      headers={"Accept": "text/event-stream", "Last-Event-ID": "3"}) as events:
        assert events.status_code == 200 and events.headers["Window-From"] == "4"
        received: list[tuple[str, list[str]]] = []
        event: dict[str, list[str]] = {}
        for line in events.iter_lines(chunk_size=1, decode_unicode=True):
            if line and not line.startswith(":"):
                key, _, value = line.partition(": ")
                event.setdefault(key, []).append(value)
            elif not line and event.get("event") == ["window"]:
                received.append((event["id"][0], event["data"]))
                if event["id"] == ["5"]:
                    break
            if not line:
                event = {}
    assert received == [("5", ["o,v", "http://ex/f,55"])]  # window 4 is empty: not reported
    wait_until(lambda: requests.get(f"{server.url}/status", timeout=10).json()["continuous"] == [], 15,
               lambda: "the registration of the closed event stream is still listed")  # the server is shared


def test_the_client_gets_a_message_that_came_with_the_handshake_answer() -> None:
    """conformance/websocket_client.py: a server's first message sent in the same segment as its handshake answer
    is received at once (simple-websocket's own client holds it until the server's next ping, 25 s later)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        protocol = WSConnection(ConnectionType.SERVER)
        while not any(isinstance(event, Request) for event in protocol.events()):
            protocol.receive_data(connection.recv(4096))
        connection.sendall(protocol.send(AcceptConnection()) + protocol.send(TextMessage(data="hello")))
        time.sleep(3)
        connection.close()

    threading.Thread(target=serve, daemon=True).start()
    ws = Client.connect(f"ws://127.0.0.1:{listener.getsockname()[1]}/")
    assert ws.receive(timeout=2) == "hello"
    listener.close()
