"""The window pipeline on a real Spark standalone cluster (a master and two workers on 127.0.0.1, started with
pyspark's ``bin/spark-class``), by configuration alone: ``serve --spark-master spark://…``.

The CSRBench replay (the 14 continuous responses of ``conformance.csrbench``) runs once in local mode and once
through the cluster. The cluster's responses are judged by the same oracle (windows from
``sparql_ext.windowing``, answers from pyoxigraph, worked out independently of the server), and the window
revisions it materialized must equal local mode's, window for window.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from conformance.csrbench import DEFAULT_CSRBENCH, Benchmark, ServerRun, judge_ours, server_run
from conformance.spark_cluster import StandaloneCluster, standalone_cluster

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (DEFAULT_CSRBENCH / "data").exists(), reason="CSRBench data not found")]


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return Benchmark()


@pytest.fixture(scope="module")
def runs(bench: Benchmark) -> Iterator[tuple[ServerRun, ServerRun, StandaloneCluster]]:
    """(local mode, cluster) runs of the same replay; the local one runs while the cluster starts."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        local = pool.submit(server_run, bench)
        with standalone_cluster(workers=2, cores=1, memory="1g") as cluster:
            clustered = server_run(bench, ["--spark-master", cluster.master_url])
            yield local.result(timeout=300), clustered, cluster


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
    for path in executors:
        assert "Finished task" in (path / "stderr").read_text("utf-8", errors="replace"), path
