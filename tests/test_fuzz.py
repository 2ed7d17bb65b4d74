"""Fuzzing the parsers (issue 6): WindowRefs, extended SPARQL and RDF bodies through the HTTP app.

Each property is the one ``bench/fuzz.py`` runs for thousands of inputs (see bench/README.md, ``bench.fuzz``):
an input is either accepted or refused with a 4xx and a non-empty message — no other exception, no 5xx, no hang
(each call is timed) — and a refused upload leaves the data that was there before unchanged. Here each target
runs a few dozen examples so the suite stays fast.
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
    Server,
    check_checked_query,
    check_parse_extended,
    check_store_upload,
    check_stream_get,
    check_stream_upload,
    check_window_ref,
    get_inputs,
    nquads_inputs,
    query_inputs,
    trig_inputs,
    turtle_inputs,
    window_refs,
    windowref_inputs,
)

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
@given(windowref_inputs)
def test_fuzz_window_ref(text: str) -> None:
    check_window_ref(text)


@FAST
@given(st.text(max_size=30))
def test_fuzz_window_ref_arbitrary_text(text: str) -> None:
    check_window_ref(text)


@FAST
@given(query_inputs)
def test_fuzz_parse_extended(text: str) -> None:
    check_parse_extended(text)


@FAST
@given(query_inputs)
def test_fuzz_checked_query(text: str) -> None:
    check_checked_query(text)


@HTTP
@given(trig_inputs)
def test_fuzz_stream_upload_trig(server: Server, body: str) -> None:
    check_stream_upload(server, body, "application/trig")


@HTTP
@given(nquads_inputs)
def test_fuzz_stream_upload_nquads(server: Server, body: str) -> None:
    check_stream_upload(server, body, "application/n-quads")


@HTTP
@given(turtle_inputs, st.sampled_from(["POST", "PUT"]))
def test_fuzz_store_turtle(server: Server, body: str, method: str) -> None:
    check_store_upload(server, body, method)


@HTTP
@given(get_inputs)
def test_fuzz_stream_windows_and_query(server: Server, params: tuple[str, str | None]) -> None:
    check_stream_get(server, *params)
