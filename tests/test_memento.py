"""Memento (RFC 7089) for revisions (issue 16, item 7), over HTTP (Flask test client): ``Accept:
application/link-format`` on a graph, the dataset or a stream gives its TimeMap; ``Accept-Datetime`` selects the
revision at or before it (200-style negotiation: the original resource is its own TimeGate). Expected mementos come
from the writes' own ``Revision-Id`` headers and the clock around each write, not from the code under test."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from flask.testing import FlaskClient
from pyoxigraph import NamedNode, RdfFormat, parse

from concentrator.compose import http_app
from protocol import ServerConfig

LINK_FORMAT = "application/link-format"
GRAPH = "/store?graph=" + quote("http://ex/g", safe="")
TTL = "text/turtle"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"


def links(text: str) -> list[tuple[str, dict[str, str]]]:
    """An application/link-format document (RFC 6690) as (target, attributes) pairs, in order."""
    found = []
    for match in re.finditer(r'<([^>]*)>((?:\s*;\s*[a-z]+="[^"]*")*)', text):
        found.append((match[1], dict(re.findall(r'([a-z]+)="([^"]*)"', match[2]))))
    return found


def mementos(text: str) -> list[tuple[str, str, datetime]]:
    """The mementos of a TimeMap: (rel, URI-M, datetime), in order."""
    return [(a["rel"], target, parsedate_to_datetime(a["datetime"])) for target, a in links(text)
            if "memento" in a["rel"].split()]


def revision_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["revision-id"][0]


def http_date(at: datetime) -> str:
    return format_datetime(at.astimezone(UTC), usegmt=True)


def next_second() -> None:
    """Sleep into the next wall-clock second: HTTP dates count whole seconds."""
    time.sleep(1.02 - (time.time() % 1))


def write(client: FlaskClient, method: str, target: str, body: str | None = None
          ) -> tuple[str, datetime, datetime]:
    """A write: its revision id, and the wall-clock seconds around it (its commit time lies in between)."""
    before = datetime.now(UTC).replace(microsecond=0)
    if body is None:
        r = client.open(target, method=method)
    else:
        r = client.open(target, method=method, data=body, content_type=TTL)
    after = datetime.now(UTC).replace(microsecond=0)
    assert r.status_code in (201, 204), r.text
    return r.headers["Revision-Id"], before, after


def put_value(client: FlaskClient, target: str, value: str) -> tuple[str, datetime, datetime]:
    return write(client, "PUT", target, f'<http://ex/s> <http://ex/p> "{value}" .')


def objects(body: bytes) -> set[str]:
    return {t.object.value for t in parse(body, RdfFormat.TURTLE)}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> FlaskClient:
    """One server for the module: the history below takes five seconds to write (a revision per second)."""
    return http_app(ServerConfig(tmp_path_factory.mktemp("memento") / "data", max_body_bytes=1_000_000)).test_client()


@pytest.fixture(scope="module")
def history(client: FlaskClient) -> list[tuple[str, datetime, datetime]]:
    """Five revisions, each in its own second: g="one", h="x", g="two", g deleted, g="three"."""
    steps = []
    for method, target, value in (("PUT", GRAPH, "one"), ("PUT", GRAPH.replace("%2Fg", "%2Fh"), "x"),
                                  ("PUT", GRAPH, "two"), ("DELETE", GRAPH, None), ("PUT", GRAPH, "three")):
        steps.append(put_value(client, target, value) if value else write(client, method, target))
        next_second()
    return steps


@pytest.mark.slow
def test_graph_timemap_lists_the_revisions_that_wrote_it(client: FlaskClient, history: list) -> None:
    r = client.get(GRAPH, headers={"Accept": LINK_FORMAT})
    assert r.status_code == 200, r.text
    assert r.mimetype == LINK_FORMAT
    listed = links(r.text)
    original = "http://localhost/store?graph=http%3A%2F%2Fex%2Fg"
    assert (original, {"rel": "original"}) in listed
    assert any(target == original and a["rel"] == "timegate" for target, a in listed)
    assert any(a["rel"] == "self" and a.get("type") == LINK_FORMAT for _, a in listed)
    # g was written by revisions 1 (one), 3 (two) and 5 (three); after 4 (DELETE) it did not exist, and 2 wrote h
    found = mementos(r.text)
    assert [rel for rel, _, _ in found] == ["first memento", "memento", "last memento"]
    assert [revision_of(url) for _, url, _ in found] == [history[0][0], history[2][0], history[4][0]]
    for (_, url, at), (_, before, after) in zip(found, [history[0], history[2], history[4]], strict=True):
        assert before <= at <= after
        assert url.startswith(original + "&revision-id=")
    # each memento URL answers that state, saying it is a memento of the original
    expected = ["one", "two", "three"]
    for (_, url, at), value in zip(found, expected, strict=True):
        got = client.get(url.removeprefix("http://localhost"), headers={"Accept": TTL})
        assert got.status_code == 200 and objects(got.data) == {value}
        assert got.headers["Memento-Datetime"] == http_date(at)
        assert f'<{original}>; rel="original timegate"' in got.headers["Link"]


def test_accept_datetime_selects_the_revision_at_or_before(client: FlaskClient, history: list) -> None:
    (one, _, one_after), _, (two, two_before, two_after), (_, deleted_before, _), (three, _, _) = history

    def at(moment: datetime) -> tuple[int, str, dict[str, str]]:
        r = client.get(GRAPH, headers={"Accept": TTL, "Accept-Datetime": http_date(moment)})
        return r.status_code, r.text, dict(r.headers)

    status, body, headers = at(one_after)  # the second of revision 1 (or the next): g is "one"
    assert status == 200 and objects(body.encode()) == {"one"}
    assert revision_of(headers["Content-Location"]) == one
    assert "accept-datetime" in headers["Vary"].lower()
    assert 'rel="original timegate"' in headers["Link"] and 'rel="timemap"' in headers["Link"]
    status, body, headers = at(two_after)  # after "two" was written, before the DELETE: "two"
    assert status == 200 and objects(body.encode()) == {"two"}
    assert revision_of(headers["Content-Location"]) == two
    assert two_before <= parsedate_to_datetime(headers["Memento-Datetime"]) <= two_after
    status, body, _ = at(deleted_before.replace(year=deleted_before.year + 1))  # a year on: the latest, "three"
    assert status == 200 and objects(body.encode()) == {"three"}
    status, body, _ = at(datetime(2000, 1, 1, tzinfo=UTC))  # before any revision: g had no state
    assert status == 404 and "2000" in body
    r = client.get(GRAPH, headers={"Accept-Datetime": "yesterday"})
    assert r.status_code == 400 and "Accept-Datetime" in r.text
    assert three  # the DELETE's second selects nothing of g: covered by the TimeMap test


def test_dataset_timemap_and_timegate(client: FlaskClient, history: list) -> None:
    r = client.get("/store", headers={"Accept": LINK_FORMAT})
    assert r.status_code == 200
    found = mementos(r.text)
    assert [revision_of(url) for _, url, _ in found] == [step[0] for step in history]  # every revision
    assert all(url.startswith("http://localhost/store?revision-id=") for _, url, _ in found)
    (_, _, _), (h_written, _, h_after), *_ = history
    r = client.get("/store", headers={"Accept": "application/n-quads", "Accept-Datetime": http_date(h_after)})
    assert r.status_code == 200
    assert revision_of(r.headers["Content-Location"]) == h_written
    # after revision 2 the dataset is g="one" and h="x"
    assert {q.object.value for q in parse(r.data, RdfFormat.N_QUADS)} == {"one", "x"}


def test_stream_timemap_by_element_time(client: FlaskClient) -> None:
    assert client.put("/streams/hr").status_code == 201
    body = "".join(f'<http://ex/e{m}> <{PROV}> "2016-06-20T10:0{m}:00Z"^^<{XSD_DT}> .\n'
                   f'<http://ex/e{m}> {{ <http://ex/o{m}> <http://ex/hr> {70 + m} . }}\n' for m in (0, 2, 4))
    r = client.post("/streams/hr", data=body, content_type="application/trig")
    assert r.status_code == 200, r.text
    ids = [e["revision_id"] for e in client.get("/streams/hr/elements").json["elements"]]
    r = client.get("/streams/hr", headers={"Accept": LINK_FORMAT})
    assert r.status_code == 200 and r.mimetype == LINK_FORMAT
    found = mementos(r.text)
    # one memento per element, dated by its timestamp: 2016-06-20 was a Monday
    assert [(rel, revision_of(url), http_date(at)) for rel, url, at in found] == [
        ("first memento", ids[0], "Mon, 20 Jun 2016 10:00:00 GMT"),
        ("memento", ids[1], "Mon, 20 Jun 2016 10:02:00 GMT"),
        ("last memento", ids[2], "Mon, 20 Jun 2016 10:04:00 GMT")]
    r = client.get("/streams/hr", headers={"Accept": "application/trig",
                                           "Accept-Datetime": "Mon, 20 Jun 2016 10:03:00 GMT"})
    assert r.status_code == 200
    assert r.headers["Memento-Datetime"] == "Mon, 20 Jun 2016 10:02:00 GMT"
    assert revision_of(r.headers["Content-Location"]) == ids[1]
    graphs = {q.graph_name.value for q in parse(r.data, RdfFormat.TRIG) if isinstance(q.graph_name, NamedNode)}
    assert graphs == {"http://ex/e0", "http://ex/e2"}  # the stream as it was after element 2
    r = client.get("/streams/hr", headers={"Accept-Datetime": "Mon, 20 Jun 2016 09:59:59 GMT"})
    assert r.status_code == 404
