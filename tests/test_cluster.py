"""The window pipeline on a real Spark standalone cluster (a master and two workers on 127.0.0.1, started with
pyspark's ``bin/spark-class``), by configuration alone: ``serve --spark-master spark://…``.

The CSRBench replay (the 14 continuous responses of ``conformance.csrbench``) runs once in local mode and once
through the cluster. The cluster's responses are judged by the same oracle (windows from
``sparql_ext.windowing``, answers from pyoxigraph, worked out independently of the server), and the window
revisions it materialized must equal local mode's, window for window. A rule over q1's 10 s windows joins each
window with static data: on the cluster it is evaluated in the executors (``--rules-on auto``), which read each window
from the element log's files (the driver moves no window content), locally in the driver, and both give the counts
worked out from the data files (one element per second, 34 in all); a second rule does the same through
``SERVICE ?var`` (the windowed IRI found in the static data), with the same outputs in both places.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
import requests

from conformance.csrbench import STREAM, Benchmark, ServerRun, judge_ours, replay_on, server_run
from conformance.server import RunningServer
from conformance.spark_cluster import StandaloneCluster, standalone_cluster

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return Benchmark()


@pytest.fixture(scope="module")
def runs(bench: Benchmark, spark_server: RunningServer) -> Iterator[tuple[ServerRun, ServerRun, StandaloneCluster]]:
    """(local mode, cluster) runs of the same replay; the local one runs while the cluster starts, on the shared
    local-mode server of this test worker (tests/conftest.py), with a stream, rule and output of its own."""
    names = {"stream": "cluster-local", "rule": "cluster-count", "output": "cluster-counts"}
    with ThreadPoolExecutor(max_workers=1) as pool:
        local = pool.submit(replay_on, spark_server.url, bench, names["stream"], 120,
                            partial(register_rule, **names), partial(rule_outputs, **names))
        with standalone_cluster(workers=2, cores=1, memory="1g") as cluster:
            clustered = server_run(bench, ["--spark-master", cluster.master_url], before_replay=register_rule,
                                   after_replay=rule_outputs)
            yield local.result(timeout=300), clustered, cluster


EX = "urn:x-test:"
Q1 = "R/1970-01-01T00:00:00Z/PT10S"
RULE = f"""PREFIX ex: <{EX}>
CONSTRUCT {{ ?w ex:elements ?n ; ex:label ?label }}
WHERE {{
  ?w ex:label ?label .
  SERVICE <{{base}}/streams/{{stream}}?WINDOWS={Q1}> {{
    SELECT (COUNT(DISTINCT ?g) AS ?n) WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}
  }}
}}"""


#: The same count through SERVICE ?var: the windowed IRI is in the static data (the connected-patient rule's shape);
#: the driver resolves it at each firing, the executor reads the window.
FEED_RULE = f"""PREFIX ex: <{EX}>
CONSTRUCT {{ ?w ex:elements ?n ; ex:label ?label }}
WHERE {{
  ?w ex:label ?label ; ex:feed ?feed .
  SERVICE ?feed {{ SELECT (COUNT(DISTINCT ?g) AS ?n) WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }} }}
}}"""


def register_rule(base: str, stream: str = STREAM, rule: str = "count", output: str = "counts") -> None:
    """Static data (a label and the windowed IRI, broadcast to the executors) and two rules counting the elements of
    q1's windows: ``rule`` through a SERVICE to the IRI, ``rule``-feed through SERVICE ?var."""
    windowed = f"{base}/streams/{stream}?WINDOWS={Q1}"
    r = requests.post(base + "/sparql", data=f'INSERT DATA {{ <{EX}q1> <{EX}label> "q1 windows" ; '
                                             f"<{EX}feed> <{windowed}> }}",
                      headers={"Content-Type": "application/sparql-update"}, timeout=30)
    assert r.status_code == 204, r.text
    for name, out, text in ((rule, output, RULE.replace("{base}", base).replace("{stream}", stream)),
                            (f"{rule}-feed", f"{output}-feed", FEED_RULE)):
        r = requests.put(f"{base}/rules/{name}", params={"output": out}, data=text,
                         headers={"Content-Type": "application/sparql-query"}, timeout=30)
        assert r.status_code == 201, r.text


def rule_outputs(base: str, stream: str = STREAM, rule: str = "count", output: str = "counts", timeout: float = 120
                 ) -> dict[str, Any]:
    """Per rule (``rule`` and ``rule``-feed), its outputs (element time, count, label) in time order once it fired on
    every window of q1, and its status; and the server's ``/status`` → ``executors``."""
    found: dict[str, Any] = {}
    for name, out in ((rule, output), (f"{rule}-feed", f"{output}-feed")):
        deadline = time.monotonic() + timeout
        while True:
            listing = requests.get(f"{base}/streams/{stream}/windows", params={"ref": Q1}, timeout=30).json()
            status = requests.get(f"{base}/rules/{name}", headers={"Accept": "application/json"}, timeout=30).json()
            if status["firings"] >= len(listing["sequences"][0]["windows"]) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        query = (f"PREFIX ex: <{EX}> SELECT ?t ?n ?label WHERE {{ ?g <http://www.w3.org/ns/prov#generatedAtTime> ?t "
                 "GRAPH ?g { ?w ex:elements ?n ; ex:label ?label } } ORDER BY ?t")
        r = requests.post(f"{base}/streams/{out}", data=query, timeout=30, headers={
            "Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"})
        assert r.status_code == 200, r.text
        rows = [(b["t"]["value"], int(b["n"]["value"]), b["label"]["value"]) for b in r.json()["results"]["bindings"]]
        found[name.removeprefix(rule) or "constant"] = (rows, status)
    found["executors"] = requests.get(f"{base}/status", timeout=30).json()["executors"]
    return found


def _revisions(run: ServerRun) -> dict[str, list[tuple[Any, ...]]]:
    """Window revisions by sequence ref, without what differs between runs (revision UUIDs, commit times)."""
    return {sequence["ref"]: [(w["index"], w["start"], w["end"], w["count"], [tuple(r) for r in w["elements"]])
                              for w in sequence["windows"]]
            for sequence in run.windows}


def test_cluster_answers_are_correct(bench: Benchmark, runs: tuple[ServerRun, ServerRun, StandaloneCluster]) -> None:
    _, clustered, cluster = runs
    verdicts = [judge_ours(bench, response) for response in clustered.responses.values()]
    wrong = [f"q{v.query} {v.configuration}: {v.detail()}" for v in verdicts if not v.correct]
    assert not wrong, "\n".join(wrong) + "\n" + cluster.log_tail()
    assert len(verdicts) == 14


def test_cluster_window_revisions_equal_local_mode(runs: tuple[ServerRun, ServerRun, StandaloneCluster]) -> None:
    local, clustered, _ = runs
    expected = _revisions(local)
    # 7 queries over 5 distinct window sizes/slides: every sequence materialized windows up to the punctuation
    assert len(expected) >= 5 and all(expected.values())
    assert _revisions(clustered) == expected


def test_the_work_ran_on_both_workers(runs: tuple[ServerRun, ServerRun, StandaloneCluster]) -> None:
    """Not a local fallback: each worker launched an executor for the server's application, and each ran tasks."""
    _, _, cluster = runs
    apps = cluster.state()["completedapps"] + cluster.state()["activeapps"]
    assert [app["name"] for app in apps] == ["rdf-stream-concentrator"]
    executors = cluster.executor_dirs()
    workers = {path.parent.parent.name for path in executors}
    assert workers == {"worker-1", "worker-2"}, executors
    ran: set[str] = set()
    for path in executors:
        log = (path / "stderr").read_text("utf-8", errors="replace")
        if "Finished task" in log:
            ran.add(path.parent.parent.name)
            continue
        # else only an executor that never started: the master may launch one as the application ends (seen once
        # under the full suite's load), its log then the launch command and nothing after it
        assert log.split("=" * 40, 1)[-1].strip() == "", (path, log[-2000:])
    assert ran == {"worker-1", "worker-2"}, executors


def test_rule_runs_in_the_executors_with_the_same_outputs(runs: tuple[ServerRun, ServerRun, StandaloneCluster]
                                                         ) -> None:
    local, clustered, _ = runs
    local_rows, local_status = local.extra["constant"]
    rows, status = clustered.extra["constant"]
    executors = clustered.extra["executors"]
    # one element per second from 0 s to 33 s: windows [0,10) [10,20) [20,30) hold 10, [30,40) holds 4; the windows
    # after that (up to the end-of-stream punctuation) are empty
    counts = [n for _, n, _ in rows]
    assert counts[:4] == [10, 10, 10, 4] and not any(counts[4:]), rows
    assert [t for t, _, _ in rows][:4] == [f"1970-01-01T00:00:{s}Z" for s in (10, 20, 30, 40)]
    assert {label for _, _, label in rows} == {"q1 windows"}  # the static data reached the executors
    assert rows == local_rows
    assert status["placement"] == "executors" and status["executor_firings"] == status["firings"] == len(rows)
    assert local_status["placement"].startswith("driver") and local_status["executor_firings"] == 0
    # the executors read each window from the element log's files (the master is on this machine): the driver
    # moved none of the windows' content
    assert executors["reads_log"] and executors["windows"] >= len(rows) and executors["content_bytes"] == 0
    # through SERVICE ?var: the same outputs, locally and in the cluster's executors
    feed_rows, feed_status = clustered.extra["-feed"]
    local_feed_rows, local_feed_status = local.extra["-feed"]
    assert feed_rows == local_feed_rows == rows
    assert feed_status["placement"] == "executors" and feed_status["executor_firings"] == feed_status["firings"]
    assert local_feed_status["placement"].startswith("driver") and local_feed_status["executor_firings"] == 0
