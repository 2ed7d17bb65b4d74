"""Resuming across a SIGKILL of the whole server (gunicorn, its worker, Spark) and a restart on the same data
directory and port: a continuous response's subscriber (the Python client's ``resume=True``) and an upload. Each test
starts its own server; they are apart from ``test_resume.py`` (whose tests share their worker's server) so that
another test worker runs them beside it (``make test``'s files are spread over workers whole). The expected windows are
worked out by hand in each test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from test_resume import NAMES, PROV, GatedSession, names, numbered, post, wait_windows

from concentrator.client import Window, upload, windows
from conformance.server import free_port, kill_tree, running_server

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast


@pytest.mark.slow
def test_subscriber_resumes_across_a_server_crash_without_gap_or_duplicate(tmp_path: Path) -> None:
    # Sliding 2 s windows by 1 s, t0 = the first element (a, 10:00:00): window k = [k, k+2) s. Elements
    # a 0, b 0.5, c 1.2, d 2.4, e 3.3, f 4.1, g 5.2, h 6.3, i 7.5:
    # w0 {a,b,c}, w1 {c,d}, w2 {d,e}, w3 {e,f}, w4 {f,g}, w5 {g,h}; IStream: {a,b,c}, {d}, {e}, {f}, {g}, {h}.
    ref, data, port = "R6/HEAD/PT2S/PT1S", tmp_path / "data", free_port()
    session = GatedSession()
    got: list[Window] = []
    failure: list[BaseException] = []

    def subscribe(url: str) -> None:
        try:
            for window in windows(url, ref, query=NAMES, operator="istream", session=session, resume=True):
                got.append(window)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            failure.append(error)

    with running_server(data_dir=data, port=port) as server:
        url = f"{server.url}/streams/live"
        assert requests.put(url, timeout=10).status_code == 201
        subscriber = threading.Thread(target=subscribe, args=(url,), daemon=True)
        subscriber.start()
        deadline = time.monotonic() + 30
        while not requests.get(f"{server.url}/status", timeout=10).json()["continuous"]:
            assert time.monotonic() < deadline and not failure, failure
            time.sleep(0.1)
        post(url, ("a", 0), ("b", 0.5), ("c", 1.2), ("d", 2.4), ("e", 3.3), ("f", 4.1))  # w0, w1, w2 complete
        deadline = time.monotonic() + 240  # Spark's first batches are slow on a loaded machine
        while len(got) < 3:
            assert time.monotonic() < deadline and not failure, (got, failure, server.log_tail())
            time.sleep(0.1)
        kill_tree(server.process.pid)  # the whole server, Spark included, mid-response
        server.process.wait(10)
    with running_server(data_dir=data, port=port) as server:  # same data, same port; the client waits at the gate
        post(url, ("g", 5.2), ("h", 6.3))  # w3 and w4 complete while the client is away
        wait_windows(server, "live", ref, 5)
        session.gate.set()  # the client reconnects with after=2: w3, w4 replayed from the log
        deadline = time.monotonic() + 60
        while len(got) < 5:
            assert time.monotonic() < deadline and not failure, (got, failure, server.log_tail())
            time.sleep(0.1)
        post(url, ("i", 7.5))  # w5 completes live; R6 ends the response
        subscriber.join(240)
    assert not subscriber.is_alive() and not failure, failure
    assert [(w.index, names(w.body)) for w in got] == [
        (0, ["a", "b", "c"]), (1, ["d"]), (2, ["e"]), (3, ["f"]), (4, ["g"]), (5, ["h"])]
    assert session.gets >= 2  # it did reconnect


@pytest.mark.slow
def test_upload_resumes_across_a_server_crash_with_each_element_once(tmp_path: Path) -> None:
    data, port, total = tmp_path / "data", free_port(), 80
    answer: list[dict[str, Any]] = []
    failure: list[BaseException] = []
    progress = threading.Event()

    def items() -> Iterator[str]:
        for n in range(total):
            if n == 20:
                progress.set()
            yield numbered(n)
            time.sleep(0.05)

    def send(url: str) -> None:
        try:
            answer.append(upload(url, items(), resume=True, give_up=120))
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            failure.append(error)

    # the element log alone carries an upload's resume: no window pipeline (Spark) is needed to show it
    with running_server(["--no-pipeline"], data_dir=data, port=port) as server:
        url = f"{server.url}/streams/up"
        assert requests.put(url, timeout=10).status_code == 201
        post(url, ("before", 0))  # an element of an earlier upload: the resumed one counts from HEAD 1
        sender = threading.Thread(target=send, args=(url,), daemon=True)
        sender.start()
        assert progress.wait(30), failure
        kill_tree(server.process.pid)  # mid-upload: some elements committed, some in flight
        server.process.wait(10)
    with running_server(["--no-pipeline"], data_dir=data, port=port) as server:
        sender.join(120)
        assert not sender.is_alive() and not failure, (failure, server.log_tail())
        quads = requests.get(url, headers={"Accept": "application/n-quads"}, timeout=30).text
        described = requests.get(url, timeout=10).json()
    graphs = [line.split(" ")[0] for line in quads.splitlines() if f"<{PROV}>" in line]
    expected = ["<http://ex/before>"] + [f"<http://ex/u{n}>" for n in range(total)]
    assert sorted(graphs) == sorted(expected) and len(graphs) == len(set(graphs))  # each element exactly once
    assert described["elements"] == total + 1 and described["head"]["graph"] == f"<http://ex/u{total - 1}>"
    assert answer[0]["committed"] == total and answer[0]["first_ordinal"] == 2
    assert answer[0]["last_ordinal"] == total + 1
