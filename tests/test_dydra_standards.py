"""Issue 36, "Against the standards" and "Query parameters": the service description on ``GET /sparql`` (SPARQL 1.1
Service Description §2), 405 with ``Allow`` (RFC 9110 §15.5.6) and ``OPTIONS`` that agrees, ``Content-Encoding`` of
request bodies and gzip responses, ``Accept-Datetime`` after a graph's deletion, CORS, and ``limit`` / ``offset`` /
``response-limit`` / ``Silent``. Expected values are worked out from the specifications, by hand."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from urllib.parse import urlencode

import pytest
from flask import Flask
from flask.testing import FlaskClient
from pyoxigraph import NamedNode, RdfFormat, parse
from werkzeug.http import http_date

from concentrator.compose import http_app
from protocol import ServerConfig
from protocol.continuous import HeadersAtOnce
from protocol.encoding import compress_response
from protocol.services import services_of

SD = "http://www.w3.org/ns/sparql-service-description#"
TTL = {"Content-Type": "text/turtle"}
JSON = {"Accept": "application/sparql-results+json"}
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return http_app(ServerConfig(tmp_path / "data", in_memory=True, query_processes=0))


@pytest.fixture
def c(app: Flask) -> FlaskClient:
    return app.test_client()


def objects(triples: list[tuple[str, str, str]], subject: str | None, predicate: str) -> set[str]:
    return {o for s, p, o in triples if p == predicate and (subject is None or s == subject)}


def triples_of(body: bytes, rdf_format: RdfFormat) -> list[tuple[str, str, str]]:
    return [(str(t.subject), str(t.predicate), str(t.object)) for t in parse(body, rdf_format)]


# -- the service description -----------------------------------------------------------------------------------------

def test_get_sparql_without_a_query_describes_the_service(c: FlaskClient) -> None:
    assert c.put("/store?graph=urn:g", data="<urn:s> <urn:p> 1 .", headers=TTL).status_code == 201
    r = c.get("/sparql", headers={"Accept": "text/turtle"})
    assert r.status_code == 200 and r.mimetype == "text/turtle"
    found = triples_of(r.data, RdfFormat.TURTLE)
    services = {s for s, p, o in found if p.endswith("#type>") and o == f"<{SD}Service>"}
    assert len(services) == 1
    service = services.pop()
    assert objects(found, service, f"<{SD}endpoint>") == {"<http://localhost/sparql>"}
    assert objects(found, service, f"<{SD}supportedLanguage>") == {f"<{SD}SPARQL11Query>", f"<{SD}SPARQL11Update>"}
    extensions = objects(found, service, f"<{SD}languageExtension>")
    labels = {o for s, p, o in found if s in extensions and p == "<http://www.w3.org/2000/01/rdf-schema#label>"}
    assert {'"REVISION"', '"WINDOWS"', '"MATCH"'} <= labels
    formats = objects(found, service, f"<{SD}resultFormat>")
    assert {"<http://www.w3.org/ns/formats/SPARQL_Results_JSON>", "<http://www.w3.org/ns/formats/Turtle>",
            "<http://www.w3.org/ns/formats/N-Quads>"} <= formats
    assert f"<{SD}BasicFederatedQuery>" in objects(found, service, f"<{SD}feature>")
    (dataset,) = objects(found, service, f"<{SD}defaultDataset>")
    assert len(objects(found, dataset, f"<{SD}defaultGraph>")) == 1
    named = objects(found, dataset, f"<{SD}namedGraph>")
    assert {o for s, p, o in found if s in named and p == f"<{SD}name>"} == {"<urn:g>"}


def test_the_description_is_negotiated(c: FlaskClient) -> None:
    r = c.get("/sparql", headers={"Accept": "application/n-quads"})  # Dydra's scripts' default Accept
    assert r.status_code == 200 and r.mimetype == "application/n-quads"
    assert any(quad.predicate == NamedNode(SD + "endpoint") for quad in parse(r.data, RdfFormat.N_QUADS))
    assert c.head("/sparql").status_code == 200
    r = c.get("/sparql", headers=JSON)  # results are no description
    assert r.status_code == 406 and "service description" in r.text
    assert c.get("/sparql?update=CLEAR%20ALL").status_code == 400  # an update is still no GET


# -- 405 with Allow, OPTIONS that agrees ------------------------------------------------------------------------------

def allow_of(header: str) -> set[str]:
    return {method.strip() for method in header.split(",")}


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_sparql_refuses_other_methods_with_allow(c: FlaskClient, method: str) -> None:
    r = c.open("/sparql", method=method, data="CLEAR ALL", content_type="application/sparql-update")
    assert r.status_code == 405
    assert allow_of(r.headers["Allow"]) == {"GET", "HEAD", "POST", "OPTIONS"}


@pytest.mark.parametrize("path", ["/sparql", "/store", "/store?graph=urn:g", "/streams/hr", "/rules/r"])
def test_options_lists_exactly_what_is_accepted(c: FlaskClient, path: str) -> None:
    allowed = allow_of(c.options(path).headers["Allow"])
    refused = c.open(path, method="PROPFIND")  # a method no route takes: the 405 names the same methods
    assert refused.status_code == 405 and allow_of(refused.headers["Allow"]) == allowed
    for method in allowed:
        assert c.open(path, method=method).status_code != 405, method


# -- Content-Encoding of request bodies -----------------------------------------------------------------------------

def test_gzip_and_deflate_bodies_are_decoded(c: FlaskClient) -> None:
    turtle = b"<urn:s> <urn:p> 1 .\n"
    r = c.put("/store?graph=urn:g", data=gzip.compress(turtle), headers={**TTL, "Content-Encoding": "gzip"})
    assert r.status_code == 201, r.text
    r = c.post("/store?graph=urn:g", data=zlib.compress(b"<urn:s> <urn:p> 2 ."),
               headers={**TTL, "Content-Encoding": "deflate"})
    assert r.status_code == 204, r.text
    ask = "ASK { GRAPH <urn:g> { <urn:s> <urn:p> 1, 2 } }"
    r = c.post("/sparql", data=gzip.compress(ask.encode()),
               headers={"Content-Type": "application/sparql-query", "Content-Encoding": "gzip", **JSON})
    assert r.status_code == 200 and r.get_json()["boolean"] is True
    form = gzip.compress(urlencode({"update": "INSERT DATA { GRAPH <urn:g> { <urn:s> <urn:p> 3 } }"}).encode())
    r = c.post("/sparql", data=form, headers={"Content-Type": "application/x-www-form-urlencoded",
                                              "Content-Encoding": "gzip"})
    assert r.status_code == 204, r.text
    assert len(c.get("/store?graph=urn:g", headers={"Accept": "application/n-triples"}).text.splitlines()) == 3


def test_a_gzipped_stream_upload_is_decoded(c: FlaskClient) -> None:
    assert c.put("/streams/hr").status_code == 201
    element = (f'<http://ex/e0> <{PROV}> "2016-06-20T10:00:00Z"^^<{XSD_DT}> .\n'
               "<http://ex/e0> { <http://ex/o> <http://ex/hr> 70 . }\n")
    r = c.post("/streams/hr", data=gzip.compress(element.encode()),
               headers={"Content-Type": "application/trig", "Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert c.get("/streams/hr").get_json()["elements"] == 1


def test_other_codings_are_415_and_broken_bodies_400_and_nothing_is_written(c: FlaskClient, app: Flask) -> None:
    head = services_of(app).dataset.head
    r = c.put("/store?graph=urn:g", data=b"\x1b\x00", headers={**TTL, "Content-Encoding": "br"})
    assert r.status_code == 415 and r.headers["Accept-Encoding"] == "gzip, deflate" and "'br'" in r.text
    r = c.put("/store?graph=urn:g", data=b"not gzip at all", headers={**TTL, "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "gzip" in r.text
    cut = gzip.compress(b"<urn:s> <urn:p> 1 .\n" * 100)[:-20]
    r = c.put("/store?graph=urn:g", data=cut, headers={**TTL, "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "cut short" in r.text
    assert services_of(app).dataset.head == head and c.get("/store?graph=urn:g").status_code == 404


# -- gzip responses ---------------------------------------------------------------------------------------------------

def test_responses_are_gzipped_when_asked(c: FlaskClient) -> None:
    body = "".join(f"<urn:s{i}> <urn:p> {i} .\n" for i in range(200))
    assert c.put("/store?graph=urn:g", data=body, headers=TTL).status_code == 201
    accept = {"Accept": "application/n-triples"}
    plain = c.get("/store?graph=urn:g", headers=accept)
    assert "Content-Encoding" not in plain.headers and "Accept-Encoding" in plain.headers["Vary"]
    zipped = c.get("/store?graph=urn:g", headers={**accept, "Accept-Encoding": "gzip, deflate"})
    assert zipped.headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in zipped.headers["Vary"]
    assert gzip.decompress(zipped.data) == plain.data and len(zipped.data) < len(plain.data) / 3
    refused = c.get("/store?graph=urn:g", headers={**accept, "Accept-Encoding": "gzip;q=0, identity"})
    assert "Content-Encoding" not in refused.headers


def test_a_gzipped_ldes_page_keeps_its_304(c: FlaskClient) -> None:
    """A gzipped copy is another representation: its ETag is weak, and If-None-Match compares weakly (RFC 9110
    §13.1.2), so a follower that asks for gzip still gets 304 for a page it has."""
    assert c.put("/streams/hr").status_code == 201
    body = "".join(f'<http://ex/e{m}> <{PROV}> "2016-06-20T10:{m:02d}:00Z"^^<{XSD_DT}> .\n'
                   f"<http://ex/e{m}> {{ <http://ex/o> <http://ex/hr> {m} . }}\n" for m in range(40))
    assert c.post("/streams/hr", data=body, headers={"Content-Type": "application/trig"}).status_code == 200
    page = "/streams/hr/ldes/2016-06-20T10:00:00Z"
    first = c.get(page, headers={"Accept-Encoding": "gzip"})
    assert first.headers["Content-Encoding"] == "gzip" and first.headers["ETag"].startswith('W/"')
    again = c.get(page, headers={"Accept-Encoding": "gzip", "If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304


def test_continuous_and_event_streams_are_never_gzipped(app: Flask) -> None:
    headers = {"Accept-Encoding": "gzip"}
    with app.test_request_context("/streams/hr?WINDOWS=R/HEAD/PT1M", headers=headers):
        continuous = compress_response(HeadersAtOnce(iter([b"x" * 5000]), mimetype="application/n-quads"))
        events = compress_response(app.response_class(iter([b"x" * 5000]), mimetype="text/event-stream"))
        document = compress_response(app.response_class(b"x" * 5000, mimetype="application/n-quads"))
    assert "Content-Encoding" not in continuous.headers and b"".join(continuous.response) == b"x" * 5000
    assert "Content-Encoding" not in events.headers
    assert document.headers["Content-Encoding"] == "gzip"


# -- Accept-Datetime after a deletion ------------------------------------------------------------------------------

def test_accept_datetime_after_a_deletion_is_the_404_of_revision_id(c: FlaskClient, app: Flask) -> None:
    assert c.put("/store?graph=urn:g", data="<urn:s> <urn:p> 1 .", headers=TTL).status_code == 201
    assert c.delete("/store?graph=urn:g").status_code == 204
    deleted = services_of(app).dataset.revision(services_of(app).dataset.head)
    assert deleted is not None
    moment = deleted.committed_at.replace(microsecond=999_999)  # the end of the deletion's second
    by_date = c.get("/store?graph=urn:g", headers={"Accept-Datetime": http_date(moment)})
    by_revision = c.get("/store", query_string={"graph": "urn:g", "revision-id": moment.isoformat()})
    assert by_date.status_code == by_revision.status_code == 404
    assert by_date.text == by_revision.text


# -- CORS ---------------------------------------------------------------------------------------------------------

ORIGIN = "https://yasgui.example"


def cors_client(tmp_path: Path, *origins: str, **options: object) -> FlaskClient:
    return http_app(ServerConfig(tmp_path / "data", in_memory=True, query_processes=0, cors_origins=origins,
                                 **options)).test_client()  # type: ignore[arg-type]


def test_cors_is_off_by_default(c: FlaskClient) -> None:
    r = c.get("/sparql?query=ASK%7B%7D", headers={"Origin": ORIGIN, **JSON})
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers


def test_a_listed_origin_may_query_and_send_credentials(tmp_path: Path) -> None:
    c = cors_client(tmp_path, ORIGIN, token="w", read_tokens=("r",))
    preflight = c.options("/sparql", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                                              "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 204  # answered before the token check: a preflight carries none
    assert preflight.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert preflight.headers["Access-Control-Allow-Credentials"] == "true"
    assert {"GET", "POST"} <= allow_of(preflight.headers["Access-Control-Allow-Methods"])
    assert {"authorization", "content-type"} <= {h.lower() for h in
                                                 allow_of(preflight.headers["Access-Control-Allow-Headers"])}
    r = c.post("/sparql", data="ASK {}", headers={"Origin": ORIGIN, "Content-Type": "application/sparql-query",
                                                  "Authorization": "Bearer r", **JSON})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "Revision-Id" in r.headers["Access-Control-Expose-Headers"] and "Origin" in r.headers["Vary"]
    refused = c.get("/sparql?query=ASK%7B%7D", headers={"Origin": ORIGIN})
    assert refused.status_code == 401 and refused.headers["Access-Control-Allow-Origin"] == ORIGIN  # readable
    other = c.get("/sparql?query=ASK%7B%7D", headers={"Origin": "https://evil.example", "Authorization": "Bearer r"})
    assert "Access-Control-Allow-Origin" not in other.headers


def test_any_origin_never_gets_credentials(tmp_path: Path) -> None:
    c = cors_client(tmp_path, "*")
    r = c.get("/sparql?query=ASK%7B%7D", headers={"Origin": "https://anyone.example", **JSON})
    assert r.headers["Access-Control-Allow-Origin"] == "*" and "Access-Control-Allow-Credentials" not in r.headers
    preflight = c.options("/store", headers={"Origin": "https://anyone.example",
                                             "Access-Control-Request-Method": "PUT"})
    assert preflight.status_code == 204 and preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in preflight.headers


# -- limit, offset, response-limit, Silent --------------------------------------------------------------------------

SELECT = "SELECT ?o { GRAPH <urn:g> { ?s ?p ?o } } ORDER BY ?o"


def values(c: FlaskClient, query: str, **parameters: str) -> list[int]:
    r = c.get("/sparql", query_string={"query": query, **parameters}, headers=JSON)
    assert r.status_code == 200, r.text
    return [int(row["o"]["value"]) for row in r.get_json()["results"]["bindings"]]


def test_limit_and_offset_slice_the_solutions(c: FlaskClient) -> None:
    body = "".join(f"<urn:s{i}> <urn:p> {i} .\n" for i in range(1, 8))
    assert c.put("/store?graph=urn:g", data=body, headers=TTL).status_code == 201
    assert values(c, SELECT) == [1, 2, 3, 4, 5, 6, 7]
    assert values(c, SELECT, limit="2", offset="1") == [2, 3]
    assert values(c, SELECT, **{"response-limit": "3"}) == [1, 2, 3]
    assert values(c, SELECT, offset="5") == [6, 7]
    # within the query's own slice, rows 3..6: skip 1 of them, at most 5 → 4, 5, 6
    assert values(c, SELECT + " LIMIT 4 OFFSET 2", limit="5", offset="1") == [4, 5, 6]
    assert values(c, SELECT + " LIMIT 4 OFFSET 2", limit="0") == []
    r = c.post("/sparql", data={"query": SELECT, "limit": "1"}, headers=JSON)  # a form field too
    assert [row["o"]["value"] for row in r.get_json()["results"]["bindings"]] == ["1"]
    for bad in ({"limit": "-1"}, {"offset": "x"}, {"limit": "1", "response-limit": "2"}):
        assert c.get("/sparql", query_string={"query": SELECT, **bad}).status_code == 400


def test_the_silent_header_makes_operations_silent(c: FlaskClient, app: Flask) -> None:
    update = {"Content-Type": "application/sparql-update"}
    refused = c.post("/sparql", data="DROP GRAPH <urn:missing>", headers=update)
    assert refused.status_code == 400, refused.text  # SPARQL 1.1 Update §3.2.2: DROP of a missing graph fails
    head = services_of(app).dataset.head
    r = c.post("/sparql", data="DROP GRAPH <urn:missing>", headers={**update, "Silent": "true"})
    assert r.status_code == 204, r.text
    assert services_of(app).dataset.head == head + 1
    assert c.post("/sparql", data="DROP GRAPH <urn:missing>", headers={**update, "Silent": "maybe"}).status_code == 400
