"""The HTTP surface's words (issue 12): misspelled parameters, error wording, window headers (Flask test client).

Expected messages and counts are worked out by hand from the request in each test."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
TRIG = "application/trig"
AVG = "SELECT (AVG(?v) AS ?avg) { ?g ?p ?t GRAPH ?g { ?o <http://ex/hr> ?v } }"


def element(minute: int, hr: int) -> str:
    return (f'<http://ex/e{minute}> <{PROV}> "2016-06-20T10:{minute:02d}:00Z"^^<{XSD_DT}> .\n'
            f"<http://ex/e{minute}> {{ <http://ex/o{minute}> <http://ex/hr> {hr} . }}\n")


@pytest.fixture
def hr(client: FlaskClient) -> FlaskClient:
    """Stream hr with readings 70, 72, 74 at 10:00, 10:02, 10:04 (the README's)."""
    assert client.put("/streams/hr").status_code == 201
    r = client.post("/streams/hr", data=element(0, 70) + element(2, 72) + element(4, 74), content_type=TRIG)
    assert r.status_code == 200, r.text
    return client


# -- item 7: a near miss of a parameter the endpoint reads is a 400 naming the expected one --------------------

@pytest.mark.parametrize(("known", "given", "expected"), [
    (["WINDOWS", "query"], ["WINDOW"], ("WINDOW", "WINDOWS")),  # one letter missing
    (["WINDOWS", "query"], ["windows"], ("windows", "WINDOWS")),  # another case
    (["WINDOWS", "query"], ["Window"], ("Window", "WINDOWS")),  # both
    (["graph", "default"], ["grpah"], ("grpah", "graph")),  # two letters swapped
    (["revision-id"], ["revision_id"], ("revision_id", "revision-id")),  # one letter replaced
    (["query"], ["queryy"], ("queryy", "query")),  # one letter too many
    (["query", "update"], ["output", "format", "results", "queries", "x"], None),  # SPARQLWrapper's extras: ignored
    (["from", "format"], ["from", "format"], None),  # known names are not misses of one another
    ([], ["WINDOW"], None),  # an endpoint reading nothing ignores everything
])
def test_near_miss(known: list[str], given: list[str], expected: tuple[str, str] | None) -> None:
    from protocol.parameters import near_miss

    assert near_miss(known, given) == expected


@pytest.mark.parametrize(("method", "path", "params", "body", "message"), [
    ("GET", "/streams/hr", {"WINDOW": "HEAD/-PT05M", "query": AVG}, None,
     "unknown parameter WINDOW: did you mean WINDOWS?"),
    ("GET", "/streams/hr", {"windows": "HEAD/-PT05M"}, None, "unknown parameter windows: did you mean WINDOWS?"),
    ("POST", "/streams/hr", {"punctuaton": "2016-06-20T10:10:00Z"}, None,
     "unknown parameter punctuaton: did you mean punctuation?"),
    ("PUT", "/streams/hr", {"latenes": "PT10S"}, None, "unknown parameter latenes: did you mean lateness?"),
    ("GET", "/streams", {"IRI": "urn:x"}, None, "unknown parameter IRI: did you mean iri?"),
    ("GET", "/streams/hr/windows", {"Ref": "R/HEAD/PT1M"}, None, "unknown parameter Ref: did you mean ref?"),
    ("GET", "/sparql", {"Query": "ASK {}"}, None, "unknown parameter Query: did you mean query?"),
    ("GET", "/sparql", {"query": "ASK {}", "revision_id": "0"}, None,
     "unknown parameter revision_id: did you mean revision-id?"),
    ("POST", "/sparql", None, {"quer": "ASK {}"}, "unknown parameter quer: did you mean query?"),  # a form field
    ("GET", "/store", {"grpah": "http://ex/g"}, None, "unknown parameter grpah: did you mean graph?"),
    ("PUT", "/rules/r", {"ouptut": "alerts"}, None, "unknown parameter ouptut: did you mean output?"),
])
def test_a_misspelled_parameter_is_a_400_naming_the_expected_one(
        hr: FlaskClient, method: str, path: str, params: dict[str, str] | None, body: dict[str, str] | None,
        message: str) -> None:
    headers = {"Content-Type": "application/sparql-query"} if path.startswith("/rules") else {}
    r = hr.open(path, method=method, query_string=params, data=body, headers=headers)
    assert r.status_code == 400, r.text
    assert r.text.strip() == message


def test_a_refused_misspelling_changes_nothing(hr: FlaskClient) -> None:
    assert hr.put("/streams/hr", query_string={"Lateness": "PT1H"}).status_code == 400
    assert hr.get("/streams/hr").json["lateness_us"] == 0
    assert hr.post("/streams/hr", query_string={"punctuation_": "2016-06-20T11:00:00Z"}).status_code == 400
    assert hr.get("/streams/hr").json["stream_time"] == "2016-06-20T10:04:00Z"


def test_unknown_parameters_that_are_no_near_miss_stay_ignored(hr: FlaskClient) -> None:
    r = hr.get("/sparql", query_string={"query": "ASK {}", "format": "json", "output": "json", "timeout": "5"})
    assert r.status_code == 200, r.text
    r = hr.get("/streams/hr", query_string={"WINDOWS": "HEAD~1/HEAD", "query": AVG, "callback": "f"},
               headers={"Accept": "text/csv"})
    assert r.status_code == 200 and r.text.split() == ["avg", "73"]  # (72 + 74) / 2
    assert hr.get("/status", query_string={"verbose": "1"}).status_code == 200


def test_every_endpoint_declares_the_parameters_it_reads(app: Flask) -> None:
    endpoints = {rule.endpoint for rule in app.url_map.iter_rules() if rule.endpoint != "static"}
    assert endpoints and all(hasattr(app.view_functions[e], "parameters") for e in endpoints), sorted(
        e for e in endpoints if not hasattr(app.view_functions[e], "parameters"))


# -- item 9: wording --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("params", "named"), [
    ({"punctuation": "yesterday"}, "punctuation='yesterday'"),
    ({"punctuation": "HEAD"}, "punctuation='HEAD'"),
    ({"punctuation": "2016-06-20T10:10:00"}, "punctuation='2016-06-20T10:10:00'"),  # no timezone
])
def test_punctuation_errors_call_it_a_punctuation_not_a_revision(hr: FlaskClient, params: dict[str, str],
                                                                  named: str) -> None:
    r = hr.post("/streams/hr", query_string=params)
    assert r.status_code == 400 and r.text.startswith(named), r.text
    assert "revision" not in r.text and "dateTime" in r.text


def test_timestamp_errors_call_it_a_timestamp(hr: FlaskClient) -> None:
    r = hr.post("/streams/hr", query_string={"timestamp": "2016-06-20T10:10:00"},
                data="<http://ex/s> <http://ex/p> 1 .", content_type="text/turtle")
    assert r.status_code == 400 and r.text.startswith("timestamp='2016-06-20T10:10:00'"), r.text
    assert "revision" not in r.text and "timezone" in r.text
    assert len(hr.get("/streams/hr").json) and hr.get("/streams/hr").json["elements"] == 3  # nothing stored


def test_a_lower_case_window_ref_is_told_once_to_use_upper_case(hr: FlaskClient) -> None:
    r = hr.get("/streams/hr", query_string={"WINDOWS": "r/head/pt05m"})
    assert r.status_code == 400
    assert r.text.strip() == "WINDOWS=r/head/pt05m: 'r', 'head', 'pt05m' must be upper case: R/HEAD/PT05M"


def test_a_bad_revision_in_a_window_ref_is_explained_once(hr: FlaskClient) -> None:
    r = hr.get("/streams/hr", query_string={"WINDOWS": "x/PT05M"})
    assert r.status_code == 400
    assert r.text.strip() == ("WINDOWS=x/PT05M: 'x' is not a revision (HEAD, HEAD~n, UUID, ordinal or xsd:dateTime "
                              "with timezone)")
    r = hr.get("/streams/hr", query_string={"WINDOWS": "2016-06-20T10:00:00/PT05M"})  # the detail says what
    assert r.status_code == 400 and r.text.strip() == (
        "WINDOWS=2016-06-20T10:00:00/PT05M: revision '2016-06-20T10:00:00' is a dateTime without a timezone; add 'Z' "
        "or an offset such as '+01:00' (percent-encoded as %2B in a URL)")


@pytest.mark.parametrize("name", ["-hr", "h%20r", "x" * 129])
def test_an_invalid_stream_name_on_put_is_a_400(client: FlaskClient, name: str) -> None:
    r = client.put(f"/streams/{name}")
    assert r.status_code == 400 and "is not a stream name" in r.text, r.text
    assert client.get("/streams").json == {"streams": []}


# -- item 8: Window-Elements on query responses over a window ---------------------------------------------------

@pytest.mark.parametrize(("ref", "count", "average"), [
    ("HEAD/-PT05M", 3, "72"),  # (09:59, 10:04]: all three
    ("HEAD~1/HEAD", 2, "73"),  # the last two
    ("2016-06-20T10:01:00Z/PT02M", 1, "72"),  # [10:01, 10:03): 10:02 only
])
def test_query_responses_over_a_window_carry_window_elements(hr: FlaskClient, ref: str, count: int,
                                                             average: str) -> None:
    r = hr.get("/streams/hr", query_string={"WINDOWS": ref, "query": AVG}, headers={"Accept": "text/csv"})
    assert r.status_code == 200, r.text
    assert r.text.split() == ["avg", average]
    assert r.headers["Window-Elements"] == str(count)


def test_element_records_page_through_the_index(hr: FlaskClient) -> None:
    # the fixture's three elements: e0 at 10:00, e2 at 10:02, e4 at 10:04 (ordinals 1, 2, 3)
    records = hr.get("/streams/hr/elements").get_json()
    assert (records["first_ordinal"], records["head"]) == (1, 3)
    assert [(r["ordinal"], r["time"], r["graph"]) for r in records["elements"]] == [
        (1, "2016-06-20T10:00:00Z", "<http://ex/e0>"), (2, "2016-06-20T10:02:00Z", "<http://ex/e2>"),
        (3, "2016-06-20T10:04:00Z", "<http://ex/e4>")]
    assert records["elements"][2]["revision_id"] == hr.get("/streams/hr").get_json()["head"]["revision_id"]
    assert all(r["committed_us"] > 0 for r in records["elements"])
    page = hr.get("/streams/hr/elements?from=2&to=2").get_json()["elements"]
    assert [r["ordinal"] for r in page] == [2]
    assert hr.get("/streams/hr/elements?from=two").status_code == 400


# -- GET /status?sections=… -----------------------------------------------------------------------------------

def test_status_gives_the_sections_asked_for(hr: FlaskClient) -> None:
    """A dashboard polling the pipeline asks for it alone, not for every rule's latency histogram."""
    whole = hr.get("/status").get_json()
    assert {"dataset", "streams", "pipeline", "rules", "process", "access"} <= set(whole)
    part = hr.get("/status", query_string={"sections": "streams, access"}).get_json()
    assert set(part) == {"streams", "access"}
    assert part["streams"]["hr"]["elements"] == 3 == whole["streams"]["hr"]["elements"]  # the three readings
    assert part["access"] == whole["access"]


def test_an_unknown_status_section_is_a_400_naming_the_sections(hr: FlaskClient) -> None:
    r = hr.get("/status", query_string={"sections": "pipeline,rulez"})
    assert r.status_code == 400
    assert "'rulez'" in r.text and "rules" in r.text and "pipeline" in r.text


def test_an_unknown_rule_field_is_a_400_naming_the_fields(hr: FlaskClient) -> None:
    r = hr.get("/rules", query_string={"fields": "firings,firing"})
    assert r.status_code == 400
    assert "'firing'" in r.text and "firings" in r.text and "outputs" in r.text
    assert hr.get("/rules", query_string={"fields": "firings"}).get_json() == []  # no rule yet
