"""CSRBench replayed through the real server and the Spark pipeline (queries 1-3).

Each ``data/data_NN.ttl`` is one element stamped NN seconds after t0 = 1970-01-01T00:00:00Z. The
expected windows and answers in ``conformance/csrbench_expected.json`` were derived independently
(rdflib, not pyoxigraph; hand-checked windows listed in docs/csrbench.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import requests

from conformance.clients import solutions_from_json
from conformance.server import REPO_ROOT, RunningServer

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

DATA = REPO_ROOT / "conformance" / "suites" / "csrbench" / "data"
EXPECTED = json.loads((REPO_ROOT / "conformance" / "csrbench_expected.json").read_text())
END_OF_STREAM = "1970-01-01T00:00:40Z"  # punctuation: closes q1's last window [30 s, 40 s)


@pytest.fixture(scope="module")
def replayed(spark_server: RunningServer) -> Iterator[tuple[RunningServer, str]]:
    """The CSRBench stream replayed on the shared server of this test worker (tests/conftest.py)."""
    server = spark_server
    url = server.url + "/streams/csrbench"
    assert requests.put(url).status_code == 201
    for number in sorted(EXPECTED["queries"]):  # register the sequences before the replay
        r = requests.get(url, params={"WINDOWS": EXPECTED["queries"][number]["window_ref"], "timeout": "0",
                                     "answer": "latest"},
                         headers={"Accept": "application/n-quads"})
        assert r.status_code == 503, r.text  # registered; no window complete yet
    for path in sorted(DATA.glob("data_*.ttl")):
        second = int(path.stem.split("_")[1])
        r = requests.post(url, data=path.read_bytes(), headers={"Content-Type": "text/turtle"}, params={
            "graph": f"http://csrbench/element/{second:02d}", "timestamp": f"1970-01-01T00:00:{second:02d}Z"})
        assert r.status_code == 200, r.text
    assert requests.post(url, params={"punctuation": END_OF_STREAM}).status_code == 200
    yield server, url


def _windows(url: str, ref: str, count: int, timeout: float = 120) -> list[dict]:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        listing = requests.get(url + "/windows", params={"ref": ref}).json()["sequences"]
        windows = listing[0]["windows"] if listing else []
        if len(windows) >= count or time.monotonic() > deadline:
            return windows  # type: ignore[no-any-return]
        time.sleep(0.5)


def _key(solution: dict[str, str]) -> list[tuple[str, str]]:
    return sorted(solution.items())


@pytest.mark.parametrize("number", ["1", "2", "3"])
def test_csrbench_windows_and_answers(replayed: tuple[RunningServer, str], number: str) -> None:
    server, url = replayed
    query = EXPECTED["queries"][number]
    expected = query["windows"]
    windows = _windows(url, query["window_ref"], len(expected))
    assert len(windows) >= len(expected), server.log_tail()
    for want, got in zip(expected, windows, strict=False):
        assert got["index"] == want["index"]
        assert got["start"] == f"1970-01-01T00:00:{want['start_s']:02d}Z"
        assert got["end"] == f"1970-01-01T00:00:{want['end_s']:02d}Z"
        # Element ordinals: the replay uploads data_00 as ordinal 1, data_NN as NN + 1.
        ordinals = [o for first, last in got["elements"] for o in range(first, last + 1)]
        assert ordinals == [n + 1 for n in want["elements"]], (want["index"], got)
        r = requests.post(f"{url}/windows/{got['revision_id']}", data=query["per_element_query"],
                          headers={"Content-Type": "application/sparql-query",
                                   "Accept": "application/sparql-results+json"})
        assert r.status_code == 200, r.text
        answers = sorted(solutions_from_json(r.json()), key=_key)
        assert answers == sorted(want["answers"], key=_key), want["index"]
    # Windows after the last listed one exist only because of the end-of-stream punctuation: empty.
    assert all(w["count"] == 0 for w in windows[len(expected):])
