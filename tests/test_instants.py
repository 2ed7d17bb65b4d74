"""Instants at the edge of what the server keeps (issue 30), with the probe's value 9999-12-31T23:59:59-14:00 (year
10000 in UTC): refused with a 400 as an element's timestamp, a punctuation and a ``revision-id``, and the stream, its
TimeMap and its LDES stay as they were. And ``revision-id`` sent as a POST form field is honoured, not ignored."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from concentrator.compose import http_app
from protocol import ServerConfig

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
TRIG = {"Content-Type": "application/trig"}
FAR = "9999-12-31T23:59:59-14:00"
RANGE = "outside the instants this server keeps: from 0001-01-02T00:00:00Z to 9999-12-30T23:59:59.999999Z"


def element(name: str, stamp: str, value: int) -> str:
    return (f'<http://ex/{name}> <{PROV}> "{stamp}"^^<{XSD_DT}> .\n'
            f"<http://ex/{name}> {{ <http://ex/o> <http://ex/v> {value} . }}\n")


@pytest.fixture
def c(tmp_path: Path) -> FlaskClient:
    client = http_app(ServerConfig(tmp_path / "data", in_memory=True)).test_client()
    assert client.put("/streams/hr?ldes-page=PT1H").status_code == 201
    assert client.post("/streams/hr", data=element("e1", "2016-06-20T10:00:00Z", 70), headers=TRIG).status_code == 200
    return client


def unchanged(c: FlaskClient) -> None:
    described = c.get("/streams/hr").get_json()
    assert described["elements"] == 1 and described["stream_time"] == "2016-06-20T10:00:00Z"
    timemap = c.get("/streams/hr", headers={"Accept": "application/link-format"})
    assert timemap.status_code == 200 and 'datetime="Mon, 20 Jun 2016 10:00:00 GMT"' in timemap.text
    assert c.get("/streams/hr/ldes").status_code in (200, 302, 303)
    # a later element is still accepted (stream time did not jump to year 10000)
    assert c.post("/streams/hr", data=element("e2", "2016-06-20T10:01:00Z", 71), headers=TRIG).status_code == 200


def test_an_element_stamped_in_year_10000_is_refused(c: FlaskClient) -> None:
    for body in (element("far", FAR, 99), element("far", FAR, 99).replace("application/trig", "")):
        r = c.post("/streams/hr", data=body, headers=TRIG)
        assert r.status_code == 400 and RANGE in r.text, r.text
    r = c.post(f"/streams/hr?timestamp={FAR}&graph=http://ex/far", data="<http://ex/o> <http://ex/v> 1 .",
               headers={"Content-Type": "text/turtle"})
    assert r.status_code == 400 and RANGE in r.text
    unchanged(c)


def test_a_punctuation_in_year_10000_is_refused(c: FlaskClient) -> None:
    r = c.post(f"/streams/hr?punctuation={FAR}")
    assert r.status_code == 400 and RANGE in r.text
    unchanged(c)


@pytest.mark.parametrize("url", ["/sparql?query=ASK%7B%7D&revision-id=", "/store?default&revision-id=",
                                 "/streams/hr?revision-id="])
def test_a_revision_id_in_year_10000_is_a_400(c: FlaskClient, url: str) -> None:
    r = c.get(url + FAR.replace("+", "%2B"), headers={"Accept": "application/trig"} if "streams" in url else {})
    assert r.status_code == 400 and RANGE in r.text, r.text


def test_the_earliest_and_latest_instants_are_kept(c: FlaskClient) -> None:
    assert c.put("/streams/edge").status_code == 201
    for name, stamp in (("first", "0001-01-02T00:00:00Z"), ("last", "9999-12-30T23:59:59.999999Z")):
        r = c.post("/streams/edge", data=element(name, stamp, 1), headers=TRIG)
        assert r.status_code == 200, r.text
    assert c.get("/streams/edge").get_json()["stream_time"] == "9999-12-30T23:59:59.999999Z"
    assert c.get("/streams/edge", headers={"Accept": "application/link-format"}).status_code == 200


def test_revision_id_as_a_form_field_is_honoured(c: FlaskClient) -> None:
    """Two revisions of a graph; a form POST asking for revision 1 reads revision 1, as the same parameter in the
    query string does."""
    turtle = {"Content-Type": "text/turtle"}
    assert c.put("/store?graph=http://ex/g", data='<http://ex/s> <http://ex/p> "one" .', headers=turtle) \
        .status_code == 201
    assert c.put("/store?graph=http://ex/g", data='<http://ex/s> <http://ex/p> "two" .', headers=turtle) \
        .status_code == 204
    query = "SELECT ?o { GRAPH <http://ex/g> { ?s ?p ?o } }"
    json = {"Accept": "application/sparql-results+json"}
    for form in ({"query": query, "revision-id": "1"}, {"query": query}):
        r = c.post("/sparql", data=form, headers=json)
        expected = "one" if "revision-id" in form else "two"
        assert [b["o"]["value"] for b in r.get_json()["results"]["bindings"]] == [expected]
        assert r.headers["Revision-Ordinal"] == ("1" if "revision-id" in form else "2")
    r = c.post("/sparql", data={"query": query, "revision-id": "1"}, query_string={"revision-id": "2"})
    assert r.status_code == 400 and "revision-id is given more than once" in r.text
    r = c.post("/sparql", data={"update": "CLEAR ALL", "revision-id": "1"})
    assert r.status_code == 400 and "updates always apply to HEAD" in r.text
