"""MQTT messages as elements (connectors/messages.py), without a broker: which element a message is, what is refused,
the dead-letter element; and the stream's side of exactly-once (a graph name seen before is a duplicate, whatever
its time). Expected values worked out by hand from the payloads."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pyoxigraph import Literal, NamedNode

from connectors.errors import MessageRejected, UnsupportedMessageFormat
from connectors.messages import DEAD, MessageSettings, dead_letter, digest_uuid, element_of_message
from rules.registry import rule_file
from store.elements import ParsedElement
from store.errors import DuplicateElement, ElementOutOfOrder, ElementRejected, RdfSyntaxError
from store.stream import Stream
from store.stream_config import StreamConfig

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
SETTINGS = MessageSettings(PROV)
TRIG = (f'<urn:e1> <{PROV}> "2024-01-01T00:00:01Z"^^<{XSD_DT}> .\n'
        '<urn:e1> { <urn:s> <urn:p> "x" . }\n').encode()


def test_a_trig_message_is_its_named_graph_with_its_timestamp() -> None:
    element = element_of_message(TRIG, None, "t", SETTINGS)
    assert element.graph == NamedNode("urn:e1")
    assert element.time == 1_704_067_201_000_000  # 2024-01-01T00:00:01Z in µs


def test_a_message_of_two_elements_or_of_an_unknown_type_is_refused() -> None:
    two = TRIG + TRIG.replace(b"urn:e1", b"urn:e2").replace(b":01Z", b":02Z")
    with pytest.raises(ElementRejected, match="holds 2"):
        element_of_message(two, None, "t", SETTINGS)
    with pytest.raises(UnsupportedMessageFormat, match="text/csv"):
        element_of_message(b"a,b", "text/csv", "t", SETTINGS)
    with pytest.raises(RdfSyntaxError):
        element_of_message(b"<urn:e1> { oops", "application/trig; charset=utf-8", "t", SETTINGS)


def test_turtle_gets_its_time_from_the_timestamp_path_and_a_name_from_its_content() -> None:
    settings = MessageSettings(PROV, "text/turtle", timestamp_path="urn:at")
    payload = f'<urn:room> <urn:celsius> 21.5 ; <urn:at> "2024-01-01T00:00:05+01:00"^^<{XSD_DT}> .'.encode()
    element = element_of_message(payload, None, "rooms/1", settings)
    assert element.time == 1_704_067_205_000_000 - 3_600_000_000  # +01:00 is an hour earlier in UTC
    assert element.stamp == Literal("2024-01-01T00:00:05+01:00", datatype=NamedNode(XSD_DT))  # kept as it came
    assert element.graph == NamedNode(f"urn:uuid:{digest_uuid('rooms/1', payload)}")  # the same for a redelivery
    assert len(element.quads) == 2 and all(q.graph_name == element.graph for q in element.quads)
    with pytest.raises(MessageRejected, match="0 <urn:at> values"):
        element_of_message(b"<urn:room> <urn:celsius> 20 .", None, "rooms/1", settings)
    with pytest.raises(MessageRejected, match="not an xsd:dateTime"):
        element_of_message(b'<urn:room> <urn:at> "soon" .', None, "rooms/1", settings)


def test_turtle_without_timestamp_path_gets_a_fresh_name_each_time() -> None:
    settings = MessageSettings(PROV, "text/turtle")
    first = element_of_message(b"<urn:door> <urn:state> <urn:open> .", None, "door", settings)
    second = element_of_message(b"<urn:door> <urn:state> <urn:open> .", None, "door", settings)
    assert first.time is None and first.graph != second.graph  # two openings of the door are two events


def test_json_ld_with_id_and_graph_is_framed_like_trig_plain_json_ld_like_turtle() -> None:
    named = (b'{"@context": {"prov": "http://www.w3.org/ns/prov#"}, "@id": "urn:e7", '
             b'"prov:generatedAtTime": {"@value": "2024-01-01T00:00:07Z", "@type": "' + XSD_DT.encode() + b'"}, '
             b'"@graph": [{"@id": "urn:s", "urn:p": 1}]}')
    element = element_of_message(named, "application/ld+json", "t", SETTINGS)
    assert element.graph == NamedNode("urn:e7") and element.time == 1_704_067_207_000_000
    plain = element_of_message(b'{"@id": "urn:s", "urn:p": 1}', "application/ld+json", "t", SETTINGS)
    assert str(plain.graph).startswith("<urn:uuid:") and len(plain.quads) == 1


def test_a_dead_letter_holds_the_error_and_the_payload_as_it_came() -> None:
    letter = dead_letter("hr", "ward/1", b"not RDF", "text/turtle", "it is not Turtle")
    facts = {q.predicate.value: q.object for q in letter.quads}
    assert facts[DEAD + "payload"] == Literal("not RDF") and facts[DEAD + "error"] == Literal("it is not Turtle")
    assert facts[DEAD + "topic"] == Literal("ward/1") and facts[DEAD + "contentType"] == Literal("text/turtle")
    binary = dead_letter("hr", "ward/1", b"\xff\x00", None, "e")
    raw = {q.predicate.value: q.object for q in binary.quads}[DEAD + "payload"]
    assert isinstance(raw, Literal) and base64.b64decode(raw.value) == b"\xff\x00"
    assert dead_letter("hr", "ward/1", b"not RDF", None, "x").graph == letter.graph  # delivered twice: one letter


def test_a_graph_name_seen_before_is_a_duplicate_even_when_its_time_is_old(tmp_path: Path) -> None:
    # a redelivered element is older than the stream time by then: it must be known as a duplicate, not refused
    # as out of order (which would send it to the dead letters)
    stream = Stream.create(tmp_path / "s", StreamConfig("s"))
    try:
        stream.accept(element_of_message(TRIG, None, "t", SETTINGS), 0)
        later = TRIG.replace(b"urn:e1", b"urn:e2").replace(b":01Z", b":09Z")
        stream.accept(element_of_message(later, None, "t", SETTINGS), 0)
        with pytest.raises(DuplicateElement):  # accepted, maybe not committed yet
            stream.accept(element_of_message(TRIG, None, "t", SETTINGS), 0)
        stream.flush()
        with pytest.raises(DuplicateElement):  # committed
            stream.accept(element_of_message(TRIG, None, "t", SETTINGS), 0)
        old = TRIG.replace(b"urn:e1", b"urn:e3")
        with pytest.raises(ElementOutOfOrder) as refused:  # a new name with an old time is out of order
            stream.accept(element_of_message(old, None, "t", SETTINGS), 0)
        assert not isinstance(refused.value, DuplicateElement)
        assert stream.accept(ParsedElement(NamedNode("urn:e4"), [], None, block=b"<urn:e4> { <urn:a> <urn:b> 1 . }\n"),
                             0) == 3  # receipt time: after the stream time
    finally:
        stream.close()


def test_a_rule_file_may_declare_the_topic_its_outputs_are_published_to() -> None:
    declared = rule_file("# output: alerts\n# publish: ward/alerts\nCONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }")
    assert (declared.output, declared.publish) == ("alerts", "ward/alerts")
    assert rule_file("# output: alerts\nCONSTRUCT {} WHERE {}").publish is None
