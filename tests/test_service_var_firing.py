"""A rule firing with two ``SERVICE ?var`` parts (the connected-patient shape): the part whose values include the
window that fired reads that window only, and the other part reads only the values its group binds together with
it (the firing patient's activity stream, not every patient's). Where the group's patterns cannot say (an
OPTIONAL), every value is read, as before. Expected values by hand: patient pN has heart-rate stream hrN with one
reading 10·N and activity stream aN with one reading N, so a firing of hr2 gives p2 the sum 22."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from pyoxigraph import NamedNode

from concentrator.compose import http_app
from engine.cache import is_static
from engine.context import QueryTarget
from engine.results import ConstructedTriples
from engine.selection import SelectedWindow
from protocol import ServerConfig
from protocol.services import services_of
from rules.tasks import firing_task

HOST = "http://localhost"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"
PATIENTS = (1, 2, 3)
ACTIVITY = "  BIND (IRI(CONCAT(STR(?a), '?WINDOWS=HEAD/-PT05M')) AS ?as)\n" \
           "  SERVICE ?as { SELECT (MAX(?v) AS ?av) WHERE { GRAPH ?g { ?x <http://ex/v> ?v } } }\n"
HEART = "  BIND (IRI(CONCAT(STR(?h), '?WINDOWS=R/HEAD/PT5M')) AS ?hs)\n" \
        "  SERVICE ?hs { SELECT (MAX(?v) AS ?hv) WHERE { GRAPH ?g { ?x <http://ex/v> ?v } } }\n"


def rule(*middle: str) -> str:
    return ("CONSTRUCT { ?p <http://ex/sum> ?s } WHERE {\n  ?p <http://ex/hr> ?h ; <http://ex/act> ?a .\n"
            + "".join(middle) + "  BIND (?av + ?hv AS ?s)\n}")


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = http_app(ServerConfig(tmp_path / "data", in_memory=True))
    client: FlaskClient = app.test_client()
    records = "".join(f"<http://ex/p{n}> <http://ex/hr> <urn:s:hr{n}> ; <http://ex/act> <urn:s:a{n}> .\n"
                      for n in PATIENTS)
    r = client.post("/store", data=records, headers={"Content-Type": "application/trig"})
    assert r.status_code in (200, 201, 204), r.text
    for n in PATIENTS:
        for name, value in ((f"hr{n}", 10 * n), (f"a{n}", n)):
            sensor_stream(client, name, value)
    return app


def sensor_stream(client: FlaskClient, name: str, value: int) -> None:
    """Stream ``name`` (alias ``urn:s:NAME``) with one element at 10:01: ``<http://ex/NAMEo> <http://ex/v> value``."""
    assert client.put(f"/streams/{name}", query_string={"alias": f"urn:s:{name}"}).status_code == 201
    body = (f'<http://ex/{name}e> <{PROV}> "2016-06-20T10:01:00Z"^^<{XSD}dateTime> .\n'
            f"<http://ex/{name}e> {{ <http://ex/{name}o> <http://ex/v> {value} . }}\n")
    r = client.post(f"/streams/{name}", data=body, headers={"Content-Type": "application/trig"})
    assert r.status_code == 200, r.text


def firing_of_hr2(app: Flask, text: str) -> tuple[dict[int, tuple[str, ...]], list[tuple[str, str]]]:
    """What a firing of hr2's window reads per part (the task the driver builds) and what it constructs."""
    evaluator = services_of(app).evaluator.with_local_bases([HOST]).for_rule(
        [HOST], {("hr2", "R/HEAD/PT5M"): SelectedWindow([1], commit=1_000_000)})
    task = firing_task(0, text, HOST, evaluator)
    result = evaluator.query(text, QueryTarget(base_iri=HOST))
    assert isinstance(result, ConstructedTriples)
    return task.targets, sorted((t.subject.value, t.object.value) for t in result
                                if isinstance(t.subject, NamedNode))


@pytest.mark.parametrize("order", ["activity first", "heart rate first"])
def test_the_other_service_var_reads_the_firing_patients_stream_only(app: Flask, order: str) -> None:
    middle = (ACTIVITY, HEART) if order == "activity first" else (HEART, ACTIVITY)
    activity = 0 if order == "activity first" else 1
    targets, constructed = firing_of_hr2(app, rule(*middle))
    assert targets[activity] == ("urn:s:a2?WINDOWS=HEAD/-PT05M",)
    assert targets[1 - activity] == ("urn:s:hr2?WINDOWS=R/HEAD/PT5M",)
    assert constructed == [("http://ex/p2", "22")]


def test_an_optional_before_the_parts_keeps_every_value(app: Flask) -> None:
    """An OPTIONAL's bindings over the relaxed patterns may differ from the group's: no narrowing, same answer."""
    targets, constructed = firing_of_hr2(app, rule("  OPTIONAL { ?p <http://ex/ward> ?w }\n", ACTIVITY, HEART))
    assert sorted(targets[0]) == [f"urn:s:a{n}?WINDOWS=HEAD/-PT05M" for n in PATIENTS]
    assert constructed == [("http://ex/p2", "22")]


def test_a_comment_naming_a_volatile_function_leaves_a_query_cacheable() -> None:
    """The connected-patient rule says "not NOW()" in a comment: its prefixes are still cached per revision."""
    assert is_static("SELECT ?p WHERE { ?p ?q ?r }  # age at the readings, not NOW()\n")
    assert is_static('SELECT ?p WHERE { ?p ?q "NOW()" }')
    assert not is_static("SELECT ?p WHERE { ?p ?q ?r BIND (NOW() AS ?t) }")
    assert not is_static("SELECT ?p WHERE { ?p ?q ?r BIND (struuid ( ) AS ?t) }")
    assert not is_static("SELECT (<urn:x-concentrator:fn:then>() AS ?t) WHERE {}")
