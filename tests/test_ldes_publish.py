"""Every stream is also a Linked Data Event Stream (issue 16, item 4), over HTTP (Flask test client): the view, pages
of one minute of stream time chained by tree:GreaterThanOrEqualToRelation on the timestamp path, members exactly as
uploaded, immutable closed pages with ETags, the open page, retention (410, ldes:retentionPolicy). The expected
pages are worked out by hand from the element times below and the LDES / TREE specifications."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, parse

from protocol.services import services_of
from store import ldes
from store.elements import ParsedElement
from store.errors import PageGone
from store.stream_config import StreamConfig
from store.streams import StreamCatalog

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"
LDES = "https://w3id.org/ldes#"
TREE = "https://w3id.org/tree#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
BASE = "http://localhost/streams/hr"
VIEW = f"{BASE}/ldes"


def element(name: str, stamp: str, content: str) -> str:
    return f'<http://ex/{name}> <{PROV}> "{stamp}"^^<{XSD}dateTime> .\n<http://ex/{name}> {{ {content} }}\n'


def upload(client: FlaskClient, body: str, stream: str = "hr") -> None:
    r = client.post(f"/streams/{stream}", data=body, content_type="application/trig")
    assert r.status_code == 200, r.text


def get(client: FlaskClient, path: str, **headers: str) -> tuple[int, list[Quad], dict[str, str]]:
    r = client.get(path.removeprefix("http://localhost"), headers=headers)
    quads = list(parse(r.data, RdfFormat.TRIG, rename_blank_nodes=False)) if r.status_code == 200 else []
    return r.status_code, quads, dict(r.headers)


def objects(quads: list[Quad], subject: str, predicate: str) -> list[str]:
    return [str(q.object) for q in quads if q.subject == NamedNode(subject) and q.predicate == NamedNode(predicate)
            and q.graph_name == DefaultGraph()]


def relations(quads: list[Quad], node: str) -> list[tuple[str, str, str, str]]:
    """(type, target node, path, value) of each relation of a node."""
    found = []
    for relation in objects(quads, node, f"{TREE}relation"):
        iri = relation.strip("<>")
        found.append((objects(quads, iri, RDF_TYPE)[0], objects(quads, iri, f"{TREE}node")[0],
                      objects(quads, iri, f"{TREE}path")[0], objects(quads, iri, f"{TREE}value")[0]))
    return found


def time_literal(text: str) -> str:
    return f'"{text}"^^<{XSD}dateTime>'


def gte(page: str, value: str) -> tuple[str, str, str, str]:
    return (f"<{TREE}GreaterThanOrEqualToRelation>", f"<{VIEW}/{page}>", f"<{PROV}>", time_literal(value))


def four_elements(client: FlaskClient) -> None:
    assert client.put("/streams/hr").status_code == 201
    upload(client, element("e1", "2016-06-20T12:00:00+02:00", '<http://ex/o1> <http://ex/hr> 70 .')
           + element("e2", "2016-06-20T10:00:30Z", '<http://ex/o2> <http://ex/note> "calme"@fr ; <http://ex/b> _:n .')
           + element("e3", "2016-06-20T10:01:10Z", '<http://ex/o3> <http://ex/hr> 72.50 .')
           + element("e4", "2016-06-20T10:03:05Z", '<http://ex/o4> <http://ex/hr> 74 .'))


def test_the_view_describes_the_event_stream_and_links_to_the_first_page(client: FlaskClient) -> None:
    four_elements(client)
    status, quads, headers = get(client, "/streams/hr/ldes")
    assert status == 200 and headers["Content-Type"].startswith("application/trig")
    assert objects(quads, BASE, RDF_TYPE) == [f"<{LDES}EventStream>"]
    assert objects(quads, BASE, f"{LDES}timestampPath") == [f"<{PROV}>"]
    assert objects(quads, BASE, f"{TREE}view") == [f"<{VIEW}>"]
    # e1 (10:00:00Z) and e2 (10:00:30) are in the page of [10:00, 10:01)
    assert relations(quads, VIEW) == [gte("2016-06-20T10:00:00Z", "2016-06-20T10:00:00Z")]
    assert objects(quads, VIEW, f"{LDES}retentionPolicy") == []  # no retention: every member is kept
    assert "ETag" in headers and "immutable" not in headers["Cache-Control"]


def test_pages_hold_the_members_as_uploaded_and_chain_over_empty_minutes(client: FlaskClient) -> None:
    four_elements(client)
    status, quads, headers = get(client, f"{VIEW}/2016-06-20T10:00:00Z")
    assert status == 200
    assert objects(quads, BASE, f"{TREE}member") == ["<http://ex/e1>", "<http://ex/e2>"]
    # the members' quads: their timestamp triples (literal as sent) and their graphs, nothing else but controls
    members = {str(q) for q in quads if q.graph_name != DefaultGraph() or q.predicate == NamedNode(PROV)}
    assert members == {
        f'<http://ex/e1> <{PROV}> "2016-06-20T12:00:00+02:00"^^<{XSD}dateTime>',
        f'<http://ex/o1> <http://ex/hr> "70"^^<{XSD}integer> <http://ex/e1>',
        f'<http://ex/e2> <{PROV}> "2016-06-20T10:00:30Z"^^<{XSD}dateTime>',
        '<http://ex/o2> <http://ex/note> "calme"@fr <http://ex/e2>',
        '<http://ex/o2> <http://ex/b> _:n <http://ex/e2>',
    }
    page = f"{VIEW}/2016-06-20T10:00:00Z"
    assert relations(quads, page) == [gte("2016-06-20T10:01:00Z", "2016-06-20T10:01:00Z")]
    assert objects(quads, page, f"{LDES}immutable") == [f'"true"^^<{XSD}boolean>']
    assert headers["Cache-Control"] == "public, max-age=31536000, immutable" and headers["ETag"]
    # 10:01 holds e3 (72.50 kept as written); the next page is 10:03 (no element in 10:02)
    status, quads, _ = get(client, f"{VIEW}/2016-06-20T10:01:00Z")
    assert objects(quads, BASE, f"{TREE}member") == ["<http://ex/e3>"]
    assert Quad(NamedNode("http://ex/o3"), NamedNode("http://ex/hr"), Literal("72.50", datatype=NamedNode(
        f"{XSD}decimal")), NamedNode("http://ex/e3")) in quads
    assert relations(quads, f"{VIEW}/2016-06-20T10:01:00Z") == [gte("2016-06-20T10:03:00Z", "2016-06-20T10:03:00Z")]
    # the last page is open: no relation yet, not immutable, a short max-age
    status, quads, headers = get(client, f"{VIEW}/2016-06-20T10:03:00Z")
    assert objects(quads, BASE, f"{TREE}member") == ["<http://ex/e4>"]
    assert relations(quads, f"{VIEW}/2016-06-20T10:03:00Z") == []
    assert objects(quads, f"{VIEW}/2016-06-20T10:03:00Z", f"{LDES}immutable") == []
    assert headers["Cache-Control"] == "max-age=1"
    for missing in ("2016-06-20T10:02:00Z", "2016-06-20T10:00:30Z", "yesterday"):  # empty, not a start, no time
        assert get(client, f"{VIEW}/{missing}")[0] == 404


def test_etags_and_the_open_page_closing(client: FlaskClient) -> None:
    four_elements(client)
    open_page, closed_page = f"{VIEW}/2016-06-20T10:03:00Z", f"{VIEW}/2016-06-20T10:00:00Z"
    _, _, first = get(client, open_page)
    _, _, closed = get(client, closed_page)
    assert client.get(open_page.removeprefix("http://localhost"),
                      headers={"If-None-Match": first["ETag"]}).status_code == 304
    upload(client, element("e5", "2016-06-20T10:03:40Z", '<http://ex/o5> <http://ex/hr> 75 .'))
    status, quads, second = get(client, open_page, **{"If-None-Match": first["ETag"]})
    assert status == 200 and second["ETag"] != first["ETag"]  # e5 joined the open page
    assert objects(quads, BASE, f"{TREE}member") == ["<http://ex/e4>", "<http://ex/e5>"]
    upload(client, element("e6", "2016-06-20T10:05:00Z", '<http://ex/o6> <http://ex/hr> 76 .'))
    status, quads, third = get(client, open_page)
    assert relations(quads, open_page) == [gte("2016-06-20T10:05:00Z", "2016-06-20T10:05:00Z")]
    assert third["Cache-Control"] == "public, max-age=31536000, immutable"
    _, _, again = get(client, closed_page)
    assert again["ETag"] == closed["ETag"]  # an immutable page never changes
    nquads = client.get(closed_page.removeprefix("http://localhost"), headers={"Accept": "application/n-quads"})
    assert nquads.headers["Content-Type"].startswith("application/n-quads")
    assert nquads.headers["ETag"] != closed["ETag"]  # another representation, another entity tag
    assert set(parse(nquads.data, RdfFormat.N_QUADS, rename_blank_nodes=False)) == \
        set(get(client, closed_page)[1])


def test_a_lateness_holds_members_back_until_no_element_can_precede_them(client: FlaskClient) -> None:
    assert client.put("/streams/late?lateness=PT1M").status_code == 201
    upload(client, element("l1", "2016-06-20T10:00:00Z", "<http://ex/s> <http://ex/p> 1 .")
           + element("l2", "2016-06-20T10:01:30Z", "<http://ex/s> <http://ex/p> 2 ."), "late")
    view = "http://localhost/streams/late/ldes"
    # stream time 10:01:30 minus PT1M = 10:00:30: l1 is published, l2 not yet (an element at 10:00:31 may still come)
    status, quads, _ = get(client, f"{view}/2016-06-20T10:00:00Z")
    assert objects(quads, "http://localhost/streams/late", f"{TREE}member") == ["<http://ex/l1>"]
    assert relations(quads, f"{view}/2016-06-20T10:00:00Z") == []
    assert get(client, f"{view}/2016-06-20T10:01:00Z")[0] == 404
    assert client.post("/streams/late?punctuation=2016-06-20T10:03:00Z").status_code == 200
    status, quads, _ = get(client, f"{view}/2016-06-20T10:00:00Z")  # published until 10:02 now
    assert relations(quads, f"{view}/2016-06-20T10:00:00Z") == [(
        f"<{TREE}GreaterThanOrEqualToRelation>", f"<{view}/2016-06-20T10:01:00Z>", f"<{PROV}>",
        time_literal("2016-06-20T10:01:00Z"))]
    assert get(client, f"{view}/2016-06-20T10:01:00Z")[0] == 200


def test_retention_makes_pages_gone_and_the_view_says_so(client: FlaskClient, app: Flask) -> None:
    four_elements(client)
    assert client.put("/streams/hr?retention=PT10M").status_code == 204
    services_of(app).streams.get("hr").expire_before(2)  # as the pipeline does: e1 (10:00:00) expires
    # e2 is still kept, but the page of 10:00 lost e1: it is gone, and the view starts at 10:01
    assert get(client, f"{VIEW}/2016-06-20T10:00:00Z")[0] == 410
    status, quads, _ = get(client, "/streams/hr/ldes")
    assert relations(quads, VIEW) == [gte("2016-06-20T10:01:00Z", "2016-06-20T10:01:00Z")]
    assert objects(quads, VIEW, f"{LDES}retentionPolicy") == [f"<{VIEW}#retention>"]
    policy = f"{VIEW}#retention"
    assert objects(quads, policy, RDF_TYPE) == [f"<{LDES}DurationAgoPolicy>"]
    assert objects(quads, policy, f"{TREE}value") == [f'"PT10M"^^<{XSD}duration>']
    assert objects(quads, policy, f"{LDES}fullLogDuration") == [f'"PT10M"^^<{XSD}duration>']
    assert objects(quads, policy, f"{LDES}startingFrom") == [time_literal("2016-06-20T10:01:00Z")]
    assert get(client, f"{VIEW}/2016-06-20T10:01:00Z")[0] == 200


def test_gone_pages_stay_gone_after_a_restart(tmp_path: Path) -> None:
    catalog = StreamCatalog(tmp_path / "streams")
    stream, _ = catalog.put(StreamConfig("s"))
    for name, minute in (("a", 0), ("b", 1), ("c", 2)):
        element = ParsedElement(NamedNode(f"http://ex/{name}"),
                                [Quad(NamedNode("http://ex/s"), NamedNode("http://ex/p"), Literal(name),
                                      NamedNode(f"http://ex/{name}"))],
                                1_466_416_800_000_000 + minute * 60_000_000)  # 2016-06-20T10:0M:00Z
        stream.accept(element, 0)
    stream.flush()
    stream.expire_before(2)  # a (10:00) expires: the page of 10:00 is gone, 10:01 is the first
    catalog.close()
    reopened = StreamCatalog(tmp_path / "streams").get("s")
    try:
        assert reopened.expired_time == 1_466_416_800_000_000
        with pytest.raises(PageGone):
            ldes.page(reopened, 1_466_416_800_000_000)
        assert ldes.first_page(reopened) == 1_466_416_860_000_000
        assert ldes.page(reopened, 1_466_416_860_000_000).members == [2]
    finally:
        reopened.close()
