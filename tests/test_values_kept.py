"""Values come back as they were sent (issue 12, items 1-2): a timestamp literal keeps its timezone offset in the
stream, its windows and rule outputs; a timestamp finer than the microsecond the server keeps is refused with a
400 naming the precision, never truncated silently. Expected values by hand: 12:00+02:00 is 10:00Z; TZ() of it is
"+02:00" and HOURS() 12 (SPARQL 1.1 §17.4.5)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from pyoxigraph import RdfFormat, parse

from engine.context import EvaluationContext
from engine.evaluation import ExtendedEvaluator
from rules.firing import RuleRunner
from rules.registry import RuleRegistry
from store import RevisionedDataset
from store.durable import now_micros
from store.errors import ElementRejected
from store.framing import ElementFramer
from store.stream import Stream, StreamConfig
from store.streams import StreamCatalog
from store.windows import PipelineState, new_revision

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
BASE = "http://localhost"


def element(name: str, stamp: str, value: int) -> str:
    return (f'<http://ex/{name}> <{PROV}> "{stamp}"^^<{XSD_DT}> .\n'
            f"<http://ex/{name}> {{ <http://ex/{name}/obs> <http://ex/hr> {value} . }}\n")


def stamps(data: bytes, media: RdfFormat = RdfFormat.TRIG) -> list[str]:
    """The lexical forms of the timestamp triples in an RDF body, in order."""
    return [q.object.value for q in parse(data, media) if q.predicate.value == PROV]


@pytest.fixture
def http(client: FlaskClient) -> FlaskClient:
    assert client.put("/streams/hr").status_code == 201
    body = element("e1", "2020-06-01T12:00:00+02:00", 70) + element("e2", "2020-06-01T12:01:30-05:00", 80)
    answer = client.post("/streams/hr", data=body, headers={"Content-Type": "application/trig"})
    assert answer.status_code == 200, answer.text
    return client


def test_timestamp_literals_keep_their_offsets_in_stream_and_window_gets(http: FlaskClient) -> None:
    whole = http.get("/streams/hr", headers={"Accept": "application/trig"})
    assert stamps(whole.data) == ["2020-06-01T12:00:00+02:00", "2020-06-01T12:01:30-05:00"]
    # 12:00+02:00 = 10:00Z, 12:01:30-05:00 = 17:01:30Z: the one-shot window [09:59Z, 10:01Z) holds e1 only
    window = http.get("/streams/hr?WINDOWS=2020-06-01T09:59:00Z/PT2M", headers={"Accept": "application/n-quads"})
    assert window.status_code == 200 and stamps(window.data, RdfFormat.N_QUADS) == ["2020-06-01T12:00:00+02:00"]
    window = http.get("/streams/hr?WINDOWS=HEAD/-PT1S", headers={"Accept": "application/trig"})
    assert stamps(window.data) == ["2020-06-01T12:01:30-05:00"]


def test_sparql_sees_the_offset_of_the_timestamp(http: FlaskClient) -> None:
    query = f"SELECT (TZ(?t) AS ?tz) (HOURS(?t) AS ?h) WHERE {{ ?g <{PROV}> ?t }} ORDER BY ?t"
    answer = http.get("/streams/hr", query_string={"query": query}, headers={"Accept": "text/csv"})
    assert answer.status_code == 200, answer.text
    assert answer.text.split() == ["tz,h", "+02:00,12", "-05:00,12"]
    answer = http.get("/streams/hr", query_string={"query": query, "WINDOWS": "HEAD~1/HEAD"},
                      headers={"Accept": "text/csv"})
    assert answer.text.split() == ["tz,h", "+02:00,12", "-05:00,12"]


def test_a_timestamp_parameter_keeps_its_offset(http: FlaskClient) -> None:
    answer = http.post("/streams/hr?graph=http://ex/e3&timestamp=2020-06-01T19:30:00%2B02:00",
                       data="<http://ex/s> <http://ex/hr> 90 .", headers={"Content-Type": "text/turtle"})
    assert answer.status_code == 200, answer.text
    window = http.get("/streams/hr?WINDOWS=HEAD", headers={"Accept": "application/trig"})
    assert stamps(window.data) == ["2020-06-01T19:30:00+02:00"]


@pytest.mark.parametrize("stamp", ["2020-06-01T12:00:01.0000001Z", "2020-06-01T12:00:01.1234567+02:00"])
def test_a_timestamp_finer_than_a_microsecond_is_refused_not_truncated(http: FlaskClient, stamp: str) -> None:
    answer = http.post("/streams/hr", data=element("fine", stamp, 1), headers={"Content-Type": "application/trig"})
    assert answer.status_code == 400
    assert "finer than a microsecond" in answer.text and stamp in answer.text
    assert "6 fractional digits" in answer.text
    assert http.get("/streams/hr").json["elements"] == 2  # nothing of it stored


def test_two_elements_a_tenth_of_a_microsecond_apart_are_not_merged(http: FlaskClient) -> None:
    body = element("a", "2020-06-01T20:00:01.0000001Z", 1) + element("b", "2020-06-01T20:00:01.0000002Z", 2)
    answer = http.post("/streams/hr", data=body, headers={"Content-Type": "application/trig"})
    assert answer.status_code == 400 and "finer than a microsecond" in answer.text  # not "not after" (409)


def test_trailing_zeros_past_the_microsecond_are_the_same_value_and_kept(http: FlaskClient) -> None:
    answer = http.post("/streams/hr", data=element("z", "2020-06-01T20:00:01.1234560Z", 3),
                       headers={"Content-Type": "application/trig"})
    assert answer.status_code == 200, answer.text
    window = http.get("/streams/hr?WINDOWS=HEAD", headers={"Accept": "application/trig"})
    assert stamps(window.data) == ["2020-06-01T20:00:01.1234560Z"]  # exactly as uploaded (the log keeps the text)


@pytest.mark.parametrize("parameter", ["punctuation", "timestamp"])
def test_sub_microsecond_times_in_parameters_are_refused(http: FlaskClient, parameter: str) -> None:
    answer = http.post(f"/streams/hr?{parameter}=2020-06-01T21:00:00.0000001Z", data="<http://ex/s> <http://ex/p> 1 .",
                       headers={"Content-Type": "text/turtle"})
    assert answer.status_code == 400 and "finer than a microsecond" in answer.text
    answer = http.get("/streams/hr?WINDOWS=2020-06-01T09:00:00.0000001Z/PT1H", headers={"Accept": "application/trig"})
    assert answer.status_code == 400 and "finer than a microsecond" in answer.text


def test_framer_refuses_sub_microsecond_timestamps_by_element() -> None:
    body = element("a", "2020-06-01T12:00:00Z", 1) + element("b", "2020-06-01T12:00:01.0000001Z", 2)
    framed = iter(ElementFramer(io.BytesIO(body.encode()), RdfFormat.TRIG, PROV))
    first = next(framed)
    assert first.stamp_line == f'<http://ex/a> <{PROV}> "2020-06-01T12:00:00Z"^^<{XSD_DT}> .\n'.encode()  # as sent
    with pytest.raises(ElementRejected, match=r"element 2 .*finer than a microsecond"):
        next(framed)


# -- rule outputs --------------------------------------------------------------------------------------------------

def _parts(tmp_path: Path) -> tuple[StreamCatalog, RuleRegistry, RuleRunner]:
    catalog = StreamCatalog(tmp_path / "streams")
    dataset = RevisionedDataset(tmp_path / "data", in_memory=True)
    evaluator = ExtendedEvaluator(EvaluationContext.for_requests(dataset, catalog, []))
    registry = RuleRegistry(tmp_path / "rules", evaluator)
    return catalog, registry, RuleRunner(registry, evaluator)


def _fire_on_first_window(tmp_path: Path, rule: str, body: str) -> Stream:
    catalog, registry, runner = _parts(tmp_path)
    hr = catalog.put(StreamConfig("hr"))[0]
    registered, _ = registry.put("r", rule, "out", BASE)
    sequence = registered.inputs[0].sequence
    ordinals = [hr.accept(e, now_micros()) for e in ElementFramer(io.BytesIO(body.encode()), RdfFormat.TRIG, PROV)]
    hr.flush()
    start = 1_590_998_400_000_000  # 2020-06-01T08:00:00Z
    revision = new_revision(sequence, 0, start, start + 3_600_000_000, ((ordinals[0], ordinals[-1]),))
    assert hr.windows.commit(0, [revision], PipelineState(next_index={sequence: 1}))
    runner.on_windows([(hr, [revision])])
    out = catalog.get("out")
    out.flush()
    return out


def test_a_rule_output_keeps_the_timestamp_literal_it_made(tmp_path: Path) -> None:
    rule = (f"CONSTRUCT {{ GRAPH ?e {{ ?e <http://ex/max> ?v }} ?e <{PROV}> ?t }} WHERE {{ "
            f"SERVICE <{BASE}/streams/hr?WINDOWS=R/2020-06-01T08:00:00Z/PT1H> {{ "
            f"?g <{PROV}> ?t GRAPH ?g {{ ?o <http://ex/hr> ?v }} }} BIND(IRI(CONCAT(STR(?g), '/alert')) AS ?e) }}")
    out = _fire_on_first_window(tmp_path, rule, element("e1", "2020-06-01T10:00:00+02:00", 70))
    quads = list(out.dataset_quads(range(1, out.head() + 1)))
    assert [q.object.value for q in quads if q.predicate.value == PROV] == ["2020-06-01T10:00:00+02:00"]


def test_a_rule_output_at_now_is_moved_to_the_next_microsecond(tmp_path: Path) -> None:
    rule = (f"CONSTRUCT {{ GRAPH ?e {{ ?e <http://ex/n> ?n }} ?e <{PROV}> ?now }} WHERE {{ "
            f"SERVICE <{BASE}/streams/hr?WINDOWS=R/2020-06-01T08:00:00Z/PT1H> {{ "
            "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } } "
            "BIND(NOW() AS ?now) BIND(IRI(CONCAT('urn:uuid:', STRUUID())) AS ?e) }")
    out = _fire_on_first_window(tmp_path, rule, element("e1", "2020-06-01T10:00:00Z", 70))
    [stamp] = [q.object.value for q in out.dataset_quads([1]) if q.predicate.value == PROV]
    seconds = stamp.rstrip("Z").split(":")[-1]
    assert len(seconds.split(".")[1]) <= 6  # NOW() has nanoseconds; the stream keeps microseconds, documented
