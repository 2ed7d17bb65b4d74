"""GET /metrics (issue 17): the Prometheus text format, parsed with the Prometheus client's own parser, carrying the
same numbers as /status; and the counts behind it (statements, upload errors, latency histograms, when stream time
reached a window's end). Expected values are worked out by hand from what each test uploads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from pyoxigraph import DefaultGraph, RdfFormat, parse, serialize

from conformance.server import RunningServer, running_server
from sparql_ext.histogram import Histogram
from store.elements import ParsedElement
from store.framing import statements_in_block
from store.stream import Stream
from store.stream_config import StreamConfig

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
EPOCH_10H = 1466416800  # 2016-06-20T10:00:00Z in seconds since the epoch


def reading(name: str, minute: int, second: int, value: int) -> str:
    """Element <http://ex/NAME>: one heart-rate observation (2 statements) and its timestamp triple."""
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:{second:02d}Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/o-{name}> <http://ex/hr> {value} ; <http://ex/unit> "bpm" . }}\n')


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, by name and labels, read with prometheus_client's parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


# -- the pure parts --------------------------------------------------------------------------------------------


def test_histogram_buckets_are_cumulative_and_a_bound_holds_its_equal() -> None:
    histogram = Histogram((0.01, 0.1, 1.0))
    for seconds in (0.004, 0.01, 0.05, 0.7, 3.0):
        histogram.observe(seconds)
    # 0.004 and 0.01 (le: equal counts) ≤ 0.01; 0.05 ≤ 0.1; 0.7 ≤ 1; 3.0 only in +Inf
    assert histogram.to_json() == {"buckets": [[0.01, 2], [0.1, 3], [1.0, 4], ["+Inf", 5]], "count": 5,
                                   "sum": 3.764}


def test_histogram_refuses_bounds_that_do_not_increase() -> None:
    with pytest.raises(ValueError, match="increase"):
        Histogram((1.0, 0.5))


@pytest.mark.parametrize(("trig", "expected"), [
    ('<http://g> { <http://s> <http://p> "x , y .\\n z" , "c"@en ; <http://q> 1 , 2.5 ; <http://r> <http://o> . }', 5),
    ('<http://g> { <http://s> <http://p> "a ; b" . <http://t> <http://p> "\\" , \\"" . }', 2),
    ('<http://g> { _:b <http://p> [ <http://q> "nested" ] . }', 2),
    ('<http://g> { <http://s> <http://p> <<( <http://a> <http://b> "q ; ." )>> . }', 1),
])
def test_statements_in_a_canonical_block_are_counted_without_parsing(trig: str, expected: int) -> None:
    block = serialize(parse(trig.encode(), RdfFormat.TRIG, rename_blank_nodes=False), format=RdfFormat.TRIG)
    assert block is not None
    assert statements_in_block(block) == expected


def test_reached_at_is_the_commit_of_the_first_record_at_or_after_a_time(tmp_path: Path) -> None:
    """Stream time reaches 10:01 with the element at 10:01:30 and 10:03 with the punctuation at 10:03: when each of
    them was committed (the start of a window's latency)."""
    stream = Stream.create(tmp_path / "hr", StreamConfig("hr"))
    try:
        commits = {}
        for name, minute, second in (("a", 0, 10), ("b", 1, 30)):
            framed = parse(reading(name, minute, second, 70).encode(), RdfFormat.TRIG)
            quads = [q for q in framed if not isinstance(q.graph_name, DefaultGraph)]
            element = ParsedElement(quads[0].graph_name, [q for q in quads if q.graph_name == quads[0].graph_name],
                                    (EPOCH_10H + 60 * minute + second) * 1_000_000)
            ordinal = stream.accept(element, 0)
            stream.flush()
            assert ordinal is not None
            record = stream.record(ordinal)
            assert record is not None
            commits[name] = record.commit
        stream.punctuate((EPOCH_10H + 180) * 1_000_000)
        stream.flush()
        assert stream.reached_at((EPOCH_10H + 60) * 1_000_000) == commits["b"]
        assert stream.reached_at((EPOCH_10H + 10) * 1_000_000) == commits["a"]
        punctuated = stream.reached_at((EPOCH_10H + 150) * 1_000_000)
        assert punctuated is not None and punctuated >= commits["b"]
        assert stream.reached_at((EPOCH_10H + 181) * 1_000_000) is None
    finally:
        stream.close()


# -- a real server without Spark: streams, uploads, continuous subscribers, the process ---------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:
        yield running


def scrape(server: RunningServer) -> tuple[dict[tuple[str, frozenset[tuple[str, str]]], float], dict[str, Any]]:
    """/metrics and /status taken while the streams stood still (the same ingest counters before and after)."""
    for _ in range(50):
        before = requests.get(f"{server.url}/status", timeout=10).json()
        metrics = requests.get(f"{server.url}/metrics", timeout=10)
        assert metrics.status_code == 200
        assert metrics.headers["Content-Type"].startswith("text/plain; version=")
        status = requests.get(f"{server.url}/status", timeout=10).json()
        if all(before["streams"][n]["ingest"] == s["ingest"] for n, s in status["streams"].items()):
            return samples(metrics.text), status
        time.sleep(0.1)
    raise AssertionError("the streams kept changing while /metrics was scraped")


def test_metrics_match_status_for_streams_uploads_and_subscribers(server: RunningServer) -> None:
    url = f"{server.url}/streams/hr"
    assert requests.put(url, timeout=10).status_code == 201
    body = "".join(reading(f"e{i}", 0, 10 * i, 70 + i) for i in range(3))  # 10:00:00, :10, :20
    assert requests.post(url, data=body, headers={"Content-Type": "application/trig"}, timeout=10).json()[
        "committed"] == 3
    # one element as Turtle (the whole body): 3 statements + its timestamp triple
    turtle = '<http://ex/o9> <http://ex/hr> 99 ; <http://ex/unit> "bpm" ; <http://ex/note> "a , b ; c ." .'
    answer = requests.post(url, params={"graph": "http://ex/e9", "timestamp": "2016-06-20T10:00:30Z"},
                           data=turtle, headers={"Content-Type": "text/turtle"}, timeout=10)
    assert answer.status_code == 200, answer.text
    # refused: out of order (10:00:05 is before stream time 10:00:30), and a body that is not TriG
    late = requests.post(url, data=reading("late", 0, 5, 1), headers={"Content-Type": "application/trig"}, timeout=10)
    assert late.status_code == 409, late.text
    broken = requests.post(url, data="<http://ex/x> {", headers={"Content-Type": "application/trig"}, timeout=10)
    assert broken.status_code == 400, broken.text
    # a continuous subscriber (no Spark: its windows never complete, but it is registered while it reads)
    opened = threading.Event()
    stop = threading.Event()

    def follow() -> None:
        with requests.get(url, params={"WINDOWS": "R/HEAD/PT01M"}, headers={"Accept": "text/event-stream"},
                          stream=True, timeout=30) as response:
            opened.set()
            try:
                for _ in response.iter_content(chunk_size=None):
                    if stop.is_set():
                        return
            except requests.RequestException:
                assert stop.is_set()  # the server stopped after the test: keep-alives come every 15 s only

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert opened.wait(10)
    try:
        deadline = time.monotonic() + 10
        while not requests.get(f"{server.url}/status", timeout=10).json()["continuous"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        found, status = scrape(server)
    finally:
        stop.set()
    hr = status["streams"]["hr"]
    # by hand: 4 elements; 3 × (2 + 1) + (3 + 1) = 13 statements; refused: one 409, one 400
    assert value(found, "concentrator_stream_elements_ingested_total", stream="hr") == 4 == hr["ingest"]["elements"]
    assert value(found, "concentrator_stream_statements_ingested_total", stream="hr") == 13 == \
        hr["ingest"]["statements"]
    assert value(found, "concentrator_stream_upload_errors_total", stream="hr", status="409") == 1
    assert value(found, "concentrator_stream_upload_errors_total", stream="hr", status="400") == 1
    assert hr["ingest"]["upload_errors"] == {"409": 1, "400": 1}
    assert value(found, "concentrator_stream_elements", stream="hr") == 4 == hr["elements"]
    assert value(found, "concentrator_stream_head_ordinal", stream="hr") == 4 == hr["head"]
    assert value(found, "concentrator_stream_timestamp_seconds", stream="hr") == EPOCH_10H + 30
    assert hr["stream_time"] == "2016-06-20T10:00:30Z"
    assert value(found, "concentrator_stream_written_bytes_total", stream="hr") == hr["ingest"]["bytes_written"] > 0
    # Prometheus conventions (issue 34): no precomputed rate, no label that grows with clients (a sequence per one)
    assert not [name for name in found if "rate_per_second" in name[0]]
    assert value(found, "concentrator_continuous_subscribers", stream="hr") == 1 == len(status["continuous"])
    assert value(found, "concentrator_pipeline_up") == 0  # --no-pipeline
    assert value(found, "concentrator_dataset_revisions") == status["dataset"]["revisions"]
    # the process: the same reading for both, taken a moment apart
    resident = value(found, "process_resident_memory_bytes")
    assert resident > 10_000_000
    assert abs(resident - status["process"]["resident_memory_bytes"]) < 0.2 * resident


@pytest.mark.slow
def test_metrics_is_a_read_open_without_the_write_token(tmp_path: Path) -> None:
    with running_server(["--no-pipeline", "--token", "s3cret"]) as secured:
        assert requests.get(f"{secured.url}/metrics", timeout=10).status_code == 200
        assert requests.get(f"{secured.url}/status", timeout=10).json()["access"] == {
            "token_required": True, "read_only": False, "read_token_required": False}


# -- with Spark: window latency, rule latency, pipeline batches and lag ---------------------------------------------

RULE = """PREFIX prov: <http://www.w3.org/ns/prov#>
CONSTRUCT { GRAPH ?e { ?e <http://ex/avg> ?avg } }
WHERE {
  SERVICE <streams/hr?WINDOWS=R/HEAD/PT01M> {
    SELECT (AVG(?v) AS ?avg) WHERE { GRAPH ?g { ?o <http://ex/hr> ?v } } }
  BIND (IRI(CONCAT('urn:avg:', STRUUID())) AS ?e)
}"""


def settled(server: RunningServer, ready: Any, timeout: float = 120) -> dict[str, Any]:
    """/status once ``ready(status)`` holds and the pipeline applied no further batch for a second."""
    deadline = time.monotonic() + timeout
    previous: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        status = requests.get(f"{server.url}/status", timeout=10).json()
        if ready(status) and previous is not None and previous["pipeline"]["batches"] == status["pipeline"]["batches"]:
            return status
        previous = status if ready(status) else None
        time.sleep(1)
    raise AssertionError(f"not ready in {timeout} s: {requests.get(f'{server.url}/status', timeout=10).text}")


@pytest.mark.jvm
def test_metrics_match_status_for_windows_rules_and_the_pipeline(spark_server: RunningServer) -> None:
    spark = spark_server  # the shared server of this test worker (tests/conftest.py)
    url = f"{spark.url}/streams/metrics-hr"
    assert requests.put(url, timeout=10).status_code == 201
    registered = requests.put(f"{spark.url}/rules/metrics-avg", params={"output": "metrics-averages"},
                              data=RULE.replace("streams/hr", "streams/metrics-hr"),
                              headers={"Content-Type": "application/sparql-query"}, timeout=30)
    assert registered.status_code == 201, registered.text
    # windows of 1 minute from the first element (10:00:00): [10:00, 10:01) holds 70 and 80 and completes with
    # the element at 10:01:10; [10:01, 10:02) holds 90 and completes with the one at 10:02:05
    for name, minute, second, hr in (("a", 0, 0, 70), ("b", 0, 30, 80), ("c", 1, 10, 90), ("d", 2, 5, 100)):
        answer = requests.post(url, data=reading(name, minute, second, hr),
                               headers={"Content-Type": "application/trig"}, timeout=10)
        assert answer.status_code == 200, answer.text
    status = settled(spark, lambda s: s["rules"].get("metrics-avg", {}).get("firings", 0) >= 2
                     and s["pipeline"].get("streams", {}).get("metrics-hr", {}).get("lag_elements") == 0)
    for _ in range(10):  # a consistent snapshot: no batch between the status and the scrape (a busy machine
        found = samples(requests.get(f"{spark.url}/metrics", timeout=10).text)  # may run a late, empty one)
        again = requests.get(f"{spark.url}/status", timeout=10).json()
        if again["pipeline"]["batches"] == status["pipeline"]["batches"]:
            break
        status = again
    assert again["pipeline"]["batches"] == status["pipeline"]["batches"], "batches kept running while scraping"

    rule = status["rules"]["metrics-avg"]
    assert rule["firings"] == 2 and rule["outputs"] == 2 and rule["failures"] == 0
    assert value(found, "concentrator_rule_firings_total", rule="metrics-avg") == 2
    assert value(found, "concentrator_rule_outputs_total", rule="metrics-avg") == 2
    assert value(found, "concentrator_rule_latency_seconds_count", rule="metrics-avg") == 2 == \
        rule["latency_seconds"]["count"]
    assert value(found, "concentrator_rule_latency_seconds_sum", rule="metrics-avg") == pytest.approx(
        rule["latency_seconds"]["sum"], abs=1e-6)
    assert value(found, "concentrator_rule_last_latency_seconds", rule="metrics-avg") == pytest.approx(
        rule["last_latency_ms"] / 1000)

    pipeline = status["pipeline"]
    hr = pipeline["streams"]["metrics-hr"]
    # both windows of hr's sequence were observed once: from the commit of the completing element to theirs
    latency = hr["window_latency_seconds"]
    assert latency["count"] == 2
    assert value(found, "concentrator_window_latency_seconds_count", stream="metrics-hr") == 2
    assert value(found, "concentrator_window_latency_seconds_bucket", stream="metrics-hr", le="+Inf") == 2
    assert value(found, "concentrator_window_latency_seconds_sum", stream="metrics-hr") == pytest.approx(
        latency["sum"], abs=1e-6)
    assert 0 < latency["sum"] < 120
    assert value(found, "concentrator_pipeline_batches_total") == pipeline["batches"] > 0
    assert value(found, "concentrator_pipeline_batch_seconds_count") == pipeline["batches"]
    assert value(found, "concentrator_pipeline_windows_emitted_total") == pipeline["windows_emitted"] >= 2
    assert value(found, "concentrator_pipeline_lag_elements", stream="metrics-hr") == 0
    assert value(found, "concentrator_pipeline_lag_seconds", stream="metrics-hr") == 0
    assert value(found, "concentrator_pipeline_up") == 1
    (sequence, registered), = status["streams"]["metrics-hr"]["sequences"].items()
    assert registered["windows_emitted"] == 2
    assert value(found, "concentrator_stream_windows_emitted_total", stream="metrics-hr") == 2 == \
        status["streams"]["metrics-hr"]["windows_emitted"]
    assert sequence not in str(found)
    # the rule's outputs are elements of their own stream
    assert value(found, "concentrator_stream_elements_ingested_total", stream="metrics-averages") == 2
