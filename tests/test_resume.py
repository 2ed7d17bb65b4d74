"""Resuming continuous responses and uploads (issue 6): ``after=`` / ``from=`` / ``Last-Event-ID`` over HTTP, the
stream operator's previous window on resume, and the Python client's ``resume=True`` across a SIGKILL of the
whole server (gunicorn, its worker, Spark) and a restart on the same data directory and port. Real server, real
Spark; the expected windows are worked out by hand in each test."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import requests

from conformance.server import RunningServer

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
TRIG = {"Content-Type": "application/trig"}
NAMES = f"SELECT ?g WHERE {{ ?g <{PROV}> ?t }}"  # the window's elements, by graph name


def element(name: str, seconds: float) -> str:
    """Element <http://ex/NAME> at 10:00:00 + seconds (ms precision)."""
    stamp = f"2016-06-20T10:00:{int(seconds):02d}.{round(seconds % 1 * 1000):03d}Z"
    return (f'<http://ex/{name}> <{PROV}> "{stamp}"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/{name}> <http://ex/v> 1 . }}\n')


def names(document: bytes) -> list[str]:
    """The sorted element names of a SPARQL JSON result binding ?g."""
    return sorted(b["g"]["value"].removeprefix("http://ex/") for b in json.loads(document)["results"]["bindings"])


def multipart(response: requests.Response) -> list[tuple[dict[str, str], bytes]]:
    boundary = response.headers["Content-Type"].split("boundary=")[1].encode()
    parts = []
    for raw in response.content.split(b"--" + boundary)[1:]:
        if raw.startswith(b"--"):
            break
        head, _, content = raw.strip(b"\r\n").partition(b"\r\n\r\n")
        parts.append((dict(line.split(": ", 1) for line in head.decode().split("\r\n")), content))
    return parts


def windows_of(response: requests.Response) -> list[tuple[int, list[str]]]:
    assert response.status_code == 200, response.text
    return [(int(headers["Window-Index"]), names(content)) for headers, content in multipart(response)]


def wait_windows(server: RunningServer, stream: str, ref: str, count: int, timeout: float = 240) -> None:
    """Until the stream's window log holds ``count`` windows of ``ref``."""
    deadline = time.monotonic() + timeout
    while True:
        listing = requests.get(f"{server.url}/streams/{stream}/windows", params={"ref": ref}, timeout=10).json()
        held = sum(len(sequence["windows"]) for sequence in listing["sequences"])
        if held >= count:
            return
        assert time.monotonic() < deadline, (held, server.log_tail())
        time.sleep(0.2)


def register(server: RunningServer, stream: str, ref: str) -> None:
    """Create the stream and register the ref's sequence (answer=latest&timeout=0 registers without waiting)."""
    assert requests.put(f"{server.url}/streams/{stream}", timeout=10).status_code == 201
    r = requests.get(f"{server.url}/streams/{stream}", params={"WINDOWS": ref, "answer": "latest", "timeout": "0"},
                     timeout=10)
    assert r.status_code == 503, r.text


@pytest.fixture(scope="module")
def server(spark_server: RunningServer) -> RunningServer:
    """The shared server of this test worker (tests/conftest.py): this module's streams are named resume-*."""
    return spark_server


# Tumbling 1 s windows anchored at 10:00:00, R5 = windows 0…4: a 0, b 0.5 | c 1.2 | d 2.5 | e 3.1 | f 4.2;
# z at 5.5 completes window 4 ([4, 5)) and lies in window 5, which R5 does not have.
REPLAY_REF = "R5/2016-06-20T10:00:00Z/PT1S"
REPLAY = (("a", 0), ("b", 0.5), ("c", 1.2), ("d", 2.5), ("e", 3.1), ("f", 4.2), ("z", 5.5))


@pytest.fixture(scope="module")
def replay_url(server: RunningServer) -> str:
    register(server, "resume-replay", REPLAY_REF)
    assert requests.post(f"{server.url}/streams/resume-replay", data="".join(element(n, s) for n, s in REPLAY),
                         headers=TRIG, timeout=30).ok
    wait_windows(server, "resume-replay", REPLAY_REF, 5)
    return f"{server.url}/streams/resume-replay"


def ask(url: str, headers: dict[str, str] | None = None, **params: str) -> requests.Response:
    return requests.get(url, params={"WINDOWS": REPLAY_REF, "query": NAMES, "packaging": "multipart", **params},
                        headers=headers or {}, timeout=60)


def test_after_replays_the_following_windows(replay_url: str) -> None:
    whole = ask(replay_url)  # anchored in the past: the whole sequence, from window 0
    assert windows_of(whole) == [(0, ["a", "b"]), (1, ["c"]), (2, ["d"]), (3, ["e"]), (4, ["f"])]
    assert whole.headers["Window-From"] == "0"
    resumed = ask(replay_url, after="2", sequence=whole.headers["Window-Sequence"])
    assert windows_of(resumed) == [(3, ["e"]), (4, ["f"])]  # exactly the windows after 2, from the log
    assert resumed.headers["Window-From"] == "3"
    assert windows_of(ask(replay_url, **{"from": "4"})) == [(4, ["f"])]
    # chunked documents: one per window, the same windows
    chunked = requests.get(replay_url, params={"WINDOWS": REPLAY_REF, "after": "3"},
                           headers={"Accept": "application/n-quads"}, timeout=60)
    assert chunked.ok and "<http://ex/f>" in chunked.text and "<http://ex/e>" not in chunked.text
    # past the last window of R5: nothing to send, 204 (which also stops an EventSource reconnecting)
    assert ask(replay_url, after="4").status_code == 204


def test_last_event_id_resumes_an_event_stream(replay_url: str) -> None:
    # EventSource reconnects to the URL it was opened with (here after=0) and adds Last-Event-ID: the header wins.
    r = requests.get(replay_url, params={"WINDOWS": REPLAY_REF, "after": "0"},
                     headers={"Accept": "text/event-stream", "Last-Event-ID": "2"}, timeout=60)
    assert r.ok and r.headers["Content-Type"].startswith("text/event-stream")
    events = [block.splitlines() for block in r.text.split("\n\n") if block.startswith("event: window")]
    assert [event[1] for event in events] == ["id: 3", "id: 4"]
    assert [sorted({line.split(" ")[1] for line in event[2:] if f"<{PROV}>" in line}) for event in events] == [
        ["<http://ex/e>"], ["<http://ex/f>"]]  # each event: its window's N-Quads, a data: line each


def test_bad_resume_points_are_400s(replay_url: str) -> None:
    for params, headers, fragment in (
            ({"after": "-1"}, {}, "after='-1'"), ({"after": "two"}, {}, "after='two'"),
            ({"after": "1.5"}, {}, "after='1.5'"), ({"from": ""}, {}, "from=''"),
            ({"after": "1", "from": "2"}, {}, "give one"),
            ({"sequence": "0123456789abcdef", "after": "1"}, {}, "sequence='0123456789abcdef'"),
            ({"packaging": "event-stream"}, {"Last-Event-ID": "x1"}, "Last-Event-ID='x1'"),
            ({"after": "1", "report": "content-change"}, {}, "content-change response cannot be resumed"),
            ({"after": "1", "report": "periodic:PT2S"}, {}, "periodic")):
        r = ask(replay_url, headers, **params)
        assert r.status_code == 400 and fragment in r.text, (params, r.status_code, r.text)


def test_a_resume_point_beyond_the_log_waits(server: RunningServer, replay_url: str) -> None:
    with requests.get(replay_url, params={"WINDOWS": "R/2016-06-20T10:00:00Z/PT1S", "after": "50",
                                          "packaging": "multipart"}, stream=True, timeout=(10, 2)) as r:
        assert r.status_code == 200 and r.headers["Window-From"] == "51"
        chunks = r.iter_content(chunk_size=None)
        assert next(chunks).startswith(b"--window-")  # the opening delimiter, then nothing: the response waits
        with pytest.raises(requests.exceptions.ConnectionError):  # (a read timeout)
            next(chunks)


def test_istream_and_dstream_resumed_equal_the_uninterrupted_response(server: RunningServer) -> None:
    # Windows of 2 s sliding by 1 s from 10:00:00: w0 [0,2) {a,b}, w1 [1,3) {b,c}, w2 [2,4) {c,d}, w3 [3,5) {d};
    # z at 6 completes them all.
    ref = "R4/2016-06-20T10:00:00Z/PT2S/PT1S"
    url = f"{server.url}/streams/resume-operators"
    register(server, "resume-operators", ref)
    body = "".join(element(n, s) for n, s in (("a", 0.5), ("b", 1.5), ("c", 2.5), ("d", 3.5), ("z", 6)))
    assert requests.post(url, data=body, headers=TRIG, timeout=30).ok
    wait_windows(server, "resume-operators", ref, 4)

    def get(operator: str, **params: str) -> list[tuple[int, list[str]]]:
        return windows_of(requests.get(url, params={"WINDOWS": ref, "query": NAMES, "packaging": "multipart",
                                                    "operator": operator, **params}, timeout=60))

    # IStream: what entered since the previous window; DStream: what left it
    assert get("istream") == [(0, ["a", "b"]), (1, ["c"]), (2, ["d"]), (3, [])]
    assert get("dstream") == [(0, []), (1, ["a"]), (2, ["b"]), (3, ["c"])]
    # resumed after window 1: the previous window of w2 is w1, evaluated again and not sent — so the parts are the
    # uninterrupted ones from w2 on (unseeded, w2 would be {c, d} for IStream and {} for DStream)
    assert get("istream", after="1") == [(2, ["d"]), (3, [])]
    assert get("dstream", after="1") == [(2, ["b"]), (3, ["c"])]
    # from=2 starts as a new response would: no previous window
    assert get("istream", **{"from": "2"}) == [(2, ["c", "d"]), (3, [])]  # w3 {d} adds nothing to w2 {c, d}


class GatedSession(requests.Session):
    """A session whose GETs after the first wait for ``gate``: the test decides when the client reconnects."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gets = 0

    def get(self, url: str | bytes, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.gets += 1
        if self.gets > 1:
            self.gate.wait(600)
        return super().get(url, **kwargs)


def post(url: str, *elements: tuple[str, float]) -> None:
    assert requests.post(url, data="".join(element(n, s) for n, s in elements), headers=TRIG, timeout=30).ok


def numbered(n: int) -> str:
    return element(f"u{n}", 1 + n * 0.5)  # after the stream's first element, "before" at 10:00:00


def test_last_event_id_wins_and_only_for_event_streams() -> None:
    from delivery.feeds import Start
    from protocol.resume import requested_start

    # EventSource repeats the URL it was opened with (after=0) and adds the id of the last event it got
    assert requested_start({"after": "0"}, "2", "event-stream") == Start(3, True, "Last-Event-ID: 2")
    assert requested_start({"after": "0"}, "2", "multipart") == Start(1, True, "after=0")
    assert requested_start({"from": "4"}, None, "chunked") == Start(4, False, "from=4")
    assert requested_start({}, None, "chunked") is None


def test_upload_resume_does_not_guess() -> None:
    from concentrator.client import ClientError, _drop_committed

    pending = [numbered(0).encode(), numbered(1).encode(), numbered(2).encode()]
    with pytest.raises(ClientError, match="one element per item"):
        _drop_committed(pending, 2, "<http://ex/u2>")  # HEAD moved by 2 but its graph is the third item's
    with pytest.raises(ClientError):
        _drop_committed(pending, 4, "<http://ex/u3>")  # more than was in flight: another writer
    _drop_committed(pending, 2, "<http://ex/u1>")
    assert pending == [numbered(2).encode()]  # only the uncommitted item is sent again
