"""Fuzzing the parsers (issue 6): WindowRefs, extended SPARQL and RDF bodies through the HTTP app.

Each property is the one ``bench/fuzz.py`` runs for thousands of inputs (see bench/README.md, ``bench.fuzz``):
an input is either accepted or refused with a 4xx and a non-empty message — no other exception, no 5xx, no hang
(each call is timed) — and a refused upload leaves the data that was there before unchanged. Here each target
runs 100-300 examples so the suite stays fast.

The fuzzing found two classes of 500s, now fixed (400s naming the part): durations past ``timedelta``'s range
and timezone offsets beyond ±14:00; their minimal reproductions stay below as regression tests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import (
    QUERY_SEEDS,
    TARGETS,
    Server,
    check_checked_query,
    check_deep_sparql,
    check_parse_extended,
    check_store_upload,
    check_stream_get,
    check_stream_upload,
    check_time_param,
    check_window_ref,
    deep_texts,
    get_inputs,
    nquads_inputs,
    query_inputs,
    run_target,
    time_param_inputs,
    trig_inputs,
    turtle_inputs,
    window_refs,
    windowref_inputs,
)
from bench.fuzz_nesting import Isolated

FAST = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
HTTP = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    logging.getLogger("protocol").setLevel(logging.CRITICAL)  # 503s of incomplete windows are logged as errors
    yield Server(Path(tmp_path_factory.mktemp("fuzz")) / "data")


# -- the seeds themselves are what the strategies claim ----------------------------------------------------

def test_query_seeds_come_from_the_tests_and_the_rules() -> None:
    assert len(QUERY_SEEDS) >= 20
    assert any("WINDOWS" in q for q in QUERY_SEEDS) and any("THEN()" in q for q in QUERY_SEEDS)
    assert any(q.startswith("# output: alerts") for q in QUERY_SEEDS)  # examples/connected-patient/rules/*.rq
    for text in QUERY_SEEDS:
        check_parse_extended(text)


@settings(max_examples=200, deadline=2000)
@given(window_refs())
def test_grammatical_window_refs_parse_or_are_refused(text: str) -> None:
    check_window_ref(text)


@pytest.mark.parametrize("text", ["HEAD", "HEAD~9/HEAD", "R/HEAD/-PT05M/PT01M", "R5/HEAD/PT05M/10",
                                  "2016-06-20T10:00:00Z/2016-06-20T10:05:00Z", "R/2016-06-20T10:00:00Z/PT05M/PT01M"])
def test_design_examples_are_accepted(text: str) -> None:
    assert check_window_ref(text) == "accepted"


@pytest.mark.parametrize("text", ["HEAD~", "PT05M/HEAD", "HEAD/PT5M/PT1M/PT1M", "R0/HEAD", "HEAD/PT", "", "R/"])
def test_design_invalid_forms_are_refused(text: str) -> None:
    assert check_window_ref(text) == "refused"


# -- the properties ----------------------------------------------------------------------------------------

@FAST
@given(windowref_inputs())
def test_fuzz_window_ref(text: str) -> None:
    check_window_ref(text)


@FAST
@given(st.text(max_size=30))
def test_fuzz_window_ref_arbitrary_text(text: str) -> None:
    check_window_ref(text)


@pytest.mark.slow
@FAST
@given(query_inputs())
def test_fuzz_parse_extended(text: str) -> None:
    check_parse_extended(text)


@pytest.mark.slow
@FAST
@given(query_inputs())
def test_fuzz_checked_query(text: str) -> None:
    check_checked_query(text)


@pytest.mark.slow
@HTTP
@given(trig_inputs)
def test_fuzz_stream_upload_trig(server: Server, body: str) -> None:
    check_stream_upload(server, body, "application/trig")


@pytest.mark.slow
@HTTP
@given(nquads_inputs)
def test_fuzz_stream_upload_nquads(server: Server, body: str) -> None:
    check_stream_upload(server, body, "application/n-quads")


@pytest.mark.slow
@HTTP
@given(turtle_inputs, st.sampled_from(["POST", "PUT"]))
def test_fuzz_store_turtle(server: Server, body: str, method: str) -> None:
    check_store_upload(server, body, method)


@HTTP
@given(get_inputs())
def test_fuzz_stream_windows_and_query(server: Server, params: tuple[str, str | None]) -> None:
    check_stream_get(server, *params)


@HTTP
@given(time_param_inputs())
def test_fuzz_time_parameters(server: Server, params: tuple[str, str]) -> None:
    check_time_param(server, *params)


@pytest.mark.slow
@HTTP
@given(deep_texts())
def test_fuzz_deeply_nested_queries_and_updates(server: Server, text: str) -> None:
    check_deep_sparql(server, text)


@pytest.fixture(scope="module")
def isolated() -> Iterator[Isolated]:
    app = Isolated()
    yield app
    app.close()


@pytest.mark.parametrize("name", ["nesting.sparql", "nesting.rdf"])
def test_fuzz_nesting_through_every_parser(isolated: Isolated, name: str) -> None:
    """Issue 30: inputs nested 0..30,000 deep at every entry point, the app in a child process (a crash is a
    failure, not the end of the test worker): lives, refuses what is too deep, changes nothing it refused."""
    [target] = [t for t in TARGETS if t.name == name]
    outcome = run_target(target, 40, None, seed=30, isolated=isolated)
    assert (outcome.inputs, outcome.failures) == (40, 0), outcome.examples


# -- failures the fuzzer found, fixed: regression tests ------------------------



@pytest.mark.parametrize("text", ["HEAD/P1000000000D", "HEAD/P99999999999D", "HEAD/PT99999999999999H",
                                  "R/HEAD/PT1M/P99999999999D"])
def test_xfail_huge_duration_window_ref(text: str) -> None:
    check_window_ref(text)


def test_xfail_huge_duration_parse_extended() -> None:
    check_parse_extended("SELECT * { WINDOWS HEAD/P1000000000D { ?s ?p ?o } }")


def test_xfail_huge_duration_checked_query() -> None:
    check_checked_query("SELECT * { WINDOWS HEAD/P1000000000D { ?s ?p ?o } }")


def test_xfail_huge_duration_http(server: Server) -> None:
    check_stream_get(server, "HEAD/P1000000000D", None)  # GET /streams/NAME?WINDOWS=HEAD/P1000000000D -> 500


@pytest.mark.parametrize("text", ["2016-06-20T10:00:00+24:00/PT1M", "2016-06-20T10:00:00-24:00",
                                  "R/1/2016-06-20T10:00:00+99:00"])
def test_xfail_offset_24h_window_ref(text: str) -> None:
    check_window_ref(text)  # parses, but str() raises ValueError


def test_xfail_offset_24h_windows_http(server: Server) -> None:
    check_stream_get(server, "2016-06-20T10:00:00+24:00/PT1M", None)


@pytest.mark.parametrize("parameter", ["punctuation", "timestamp", "revision-id"])
def test_xfail_offset_24h_parameters_http(server: Server, parameter: str) -> None:
    # POST /streams/NAME?punctuation=2016-06-20T10:00:00%2B24:00, ?timestamp=… (Turtle upload),
    # GET /store?graph=…&revision-id=…, /sparql?query=ASK{}&revision-id=…, /streams/NAME?revision-id=… -> 500
    check_time_param(server, parameter, "2016-06-20T10:00:00+24:00")
