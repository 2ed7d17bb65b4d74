"""One message, one element (store.framing.one_element): what a WebSocket upload's message and an MQTT message are
framed with. Expected graph names and times worked out by hand from the messages."""

from __future__ import annotations

import pytest
from pyoxigraph import NamedNode, RdfFormat

from store.errors import ElementRejected, NestedTooDeep, RdfSyntaxError
from store.framing import one_element

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"


def stamp(graph: str, second: int) -> str:
    return f'{graph} <{PROV}> "2024-01-01T00:00:{second:02d}Z"^^<{XSD_DT}> .\n'


def test_a_message_of_one_element_is_that_element_with_its_time() -> None:
    message = (stamp("<urn:e1>", 1) + '<urn:e1> { <urn:s> <urn:p> "x" . }\n').encode()
    element = one_element(message, RdfFormat.TRIG, PROV)
    assert element.graph == NamedNode("urn:e1")
    assert element.time == 1_704_067_201_000_000  # 2024-01-01T00:00:01Z: 19,723 days after the epoch, plus 1 s
    assert not element.is_punctuation


def test_relative_iris_resolve_against_the_base_and_n_quads_frame_too() -> None:
    message = (stamp("<e2>", 2) + '<s> <p> "y" .\n').encode()
    with pytest.raises(ElementRejected):  # a default-graph triple that is not a timestamp belongs to no element
        one_element(message, RdfFormat.TRIG, PROV, base_iri="http://h/streams/hr")
    element = one_element((stamp("<e2>", 2) + "<e2> { <s> <p> \"y\" . }\n").encode(), RdfFormat.TRIG, PROV,
                          base_iri="http://h/streams/hr")
    assert element.graph == NamedNode("http://h/streams/e2")  # RFC 3986: the last path segment replaced
    quads = (stamp("<urn:e3>", 3) + '<urn:s> <urn:p> "z" <urn:e3> .\n').encode()
    assert one_element(quads, RdfFormat.N_QUADS, PROV).graph == NamedNode("urn:e3")


def test_a_timestamp_triple_alone_is_punctuation() -> None:
    element = one_element(stamp("<urn:p1>", 9).encode(), RdfFormat.TRIG, PROV)
    assert element.is_punctuation and element.time == 1_704_067_209_000_000


def test_none_or_several_elements_are_refused_with_the_count() -> None:
    two = (stamp("<urn:e1>", 1) + "<urn:e1> { <urn:s> <urn:p> 1 . }\n"
           + stamp("<urn:e2>", 2) + "<urn:e2> { <urn:s> <urn:p> 2 . }\n").encode()
    with pytest.raises(ElementRejected, match="holds 2: send one message per element"):
        one_element(two, RdfFormat.TRIG, PROV)
    with pytest.raises(ElementRejected, match="holds 0"):
        one_element(b"", RdfFormat.N_QUADS, PROV)


def test_a_message_nested_too_deep_or_not_rdf_is_refused() -> None:
    deep = stamp("<urn:e1>", 1) + "<urn:e1> { <urn:s> <urn:p> " + "(" * 200 + "1" + ")" * 200 + " . }\n"
    with pytest.raises(NestedTooDeep):  # 201 levels, over the 128 Turtle-family parsers are given
        one_element(deep.encode(), RdfFormat.TRIG, PROV)
    with pytest.raises(RdfSyntaxError):
        one_element(b"<urn:e1> { oops", RdfFormat.TRIG, PROV)
