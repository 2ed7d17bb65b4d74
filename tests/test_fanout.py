"""Many subscribers at once (issue 31): continuous responses are held by the fan-out's event loop, not by threads.
The server has 16 request threads; these tests hold more subscribers than that and check that each gets every
window, that ``/status`` and uploads still answer meanwhile, that subscribers of one query share one feed, and
that a subscriber that leaves frees its place. Expected windows worked out by hand in each test."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest
import requests
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Message, Request

from conformance.server import RunningServer
from tests.test_continuous import element

pytestmark = pytest.mark.jvm  # windows complete in the Spark pipeline

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
TRIG = {"Content-Type": "application/trig"}
SUBSCRIBERS = 40  # more than the server's 16 request threads
NAMES = f"SELECT ?g WHERE {{ ?g <{PROV}> ?t }}"


@pytest.fixture(scope="module")
def server(spark_server: RunningServer) -> RunningServer:
    return spark_server


def load(server: RunningServer) -> dict[str, Any]:
    response = requests.get(f"{server.url}/status", params={"sections": "load"}, timeout=5)
    assert response.ok, response.text
    return response.json()["load"]  # type: ignore[no-any-return]


def wait_until(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


class EventReader(threading.Thread):
    """One SSE subscriber on a raw socket: the ``id:`` and ``data:`` of every window event it receives."""

    def __init__(self, server: RunningServer, path: str) -> None:
        super().__init__(daemon=True)
        host, port = server.url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode())
        self.received = b""
        self.events: list[tuple[int, str]] = []

    def run(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.received += chunk
                self.events = [(int(block.split("\nid: ")[1].split("\n")[0]), block)
                               for block in self.received.decode().split("\n\n") if "event: window" in block]
        except OSError:
            pass

    def close(self) -> None:
        """Leave as a client does: a FIN at once (a bare close waits for the reading thread's recv)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the server ended the response first
        self.sock.close()


def test_more_subscribers_than_threads_each_get_every_window_and_leave_cleanly(server: RunningServer) -> None:
    url = f"{server.url}/streams/many"
    assert requests.put(url, timeout=10).status_code == 201
    # windows of 1 s from 10:00:00: w0 {a, b}, w1 {c}; z at 3 completes both (anchored: a replay from w0 on)
    ref = "R2/2016-06-20T10:00:00Z/PT1S"
    path = f"/streams/many?WINDOWS={ref}&query={requests.utils.quote(NAMES)}"
    readers = [EventReader(server, path) for _ in range(SUBSCRIBERS)]
    for reader in readers:
        reader.start()
    wait_until(lambda: load(server)["subscribers"] >= SUBSCRIBERS)
    # every thread-holding design would stop here: the status and an upload still answer
    status = load(server)
    assert status["subscribers_per_sequence"] and sum(
        s["subscribers"] for s in status["subscribers_per_sequence"].values()) == SUBSCRIBERS
    body = "".join(element(n, s) for n, s in (("a", 0.2), ("b", 0.7), ("c", 1.5), ("z", 3)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    for reader in readers:
        reader.join(60)  # R2: the response ends after window 1
        assert [index for index, _ in reader.events] == [0, 1], reader.received[-500:]
        first, second = (block for _, block in reader.events)
        assert "http://ex/a" in first and "http://ex/b" in first and "http://ex/c" not in first
        assert "http://ex/c" in second and "http://ex/a" not in second
        reader.close()
    wait_until(lambda: load(server)["subscribers"] == 0)


def test_live_subscribers_of_one_query_share_one_feed_and_a_disconnect_frees_its_place(
        server: RunningServer) -> None:
    url = f"{server.url}/streams/shared"
    assert requests.put(url, timeout=10).status_code == 201
    # a live HEAD sequence of 1 s windows, registered once so that every subscriber reads the same sequence
    first = EventReader(server, f"/streams/shared?WINDOWS=R/HEAD/PT1S&query={requests.utils.quote(NAMES)}")
    first.start()
    wait_until(lambda: load(server)["subscribers"] >= 1)
    sequence = next(iter(load(server)["subscribers_per_sequence"]))
    path = f"/streams/shared?WINDOWS=R/HEAD/PT1S&sequence={sequence}&query={requests.utils.quote(NAMES)}"
    others = [EventReader(server, path) for _ in range(SUBSCRIBERS - 1)]
    for reader in others:
        reader.start()
    wait_until(lambda: load(server)["subscribers"] >= SUBSCRIBERS)
    fanout = load(server)["fanout"]
    assert fanout["feeds"] == 1, fanout  # one evaluation per window for all of them
    # leaving: half of them close their connection; the fan-out notices at once (not at its next keep-alive, 15 s)
    for reader in others[:20]:
        reader.close()
    wait_until(lambda: load(server)["subscribers"] == SUBSCRIBERS - 20, timeout=5)
    for reader in [first, *others[20:]]:
        reader.close()
    wait_until(lambda: load(server)["subscribers"] == 0)
    assert load(server)["fanout"]["feeds"] == 0


def test_websocket_subscribers_beyond_the_threads_get_their_windows(server: RunningServer) -> None:
    url = f"{server.url}/streams/wsmany"
    assert requests.put(url, timeout=10).status_code == 201
    host, port = server.url.removeprefix("http://").split(":")
    ref = "R1/2016-06-20T10:00:00Z/PT1S"  # w0 {a}; b at 2 completes it
    sockets = []
    for _ in range(SUBSCRIBERS):
        ws = WSConnection(ConnectionType.CLIENT)
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.sendall(ws.send(Request(host=f"{host}:{port}", target=f"/streams/wsmany?WINDOWS={ref}"
                                                                     f"&query={requests.utils.quote(NAMES)}")))
        sockets.append((ws, sock))
    messages: list[list[dict[str, Any]]] = [[] for _ in sockets]
    accepted = 0
    for (ws, sock), got in zip(sockets, messages, strict=True):
        while not got:  # the handshake and the first message: the response's headers
            ws.receive_data(sock.recv(65536))
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    accepted += 1
                elif isinstance(event, Message):
                    got.append(json.loads(event.data))
    assert accepted == SUBSCRIBERS and all("Window-Sequence" in got[0] for got in messages)
    body = "".join(element(n, s) for n, s in (("a", 0.5), ("b", 2)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    for (ws, sock), got in zip(sockets, messages, strict=True):
        while len(got) < 2:
            data = sock.recv(65536)
            assert data, got
            ws.receive_data(data)
            got.extend(json.loads(e.data) for e in ws.events() if isinstance(e, Message))
        window = got[1]
        assert window["Window-Index"] == "0" and "http://ex/a" in window["body"] and "http://ex/b" not in window["body"]
        sock.close()
    wait_until(lambda: load(server)["subscribers"] == 0)
