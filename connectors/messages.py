"""MQTT messages as stream elements (docs/connectors.md, "MQTT in"): the RDF format of a message, the one element
it holds, and the dead-letter element of a message that is not one.

- **Format**: the message's MQTT 5 content type, else the stream's ``mqtt-format`` (default TriG).
- **TriG / N-Quads**: framed as an HTTP upload is (``store.framing``): the element's graph name and its timestamp
  triple come in the message. A message holding only a timestamp triple is punctuation.
- **JSON-LD**: a top-level ``@id`` + ``@graph`` object is a named graph with its ``prov:generatedAtTime`` (or the
  stream's timestamp predicate) in the default graph: framed like N-Quads. Plain JSON-LD is one element, as
  Turtle is.
- **Turtle / N-Triples** (and plain JSON-LD): the whole message is one element. Its graph name comes from the
  stream's ``graph-template`` (``{uuid}``: a fresh UUID; ``{digest}``: a UUID made from the topic and the payload,
  the same for a message delivered twice; ``{topic}``); by default ``urn:uuid:{digest}`` when the stream has a
  ``timestamp-path`` (the message's own time makes equal payloads the same reading) and ``urn:uuid:{uuid}``
  otherwise. Its timestamp is the object of the ``timestamp-path`` predicate in the message (an xsd:dateTime),
  or the receipt time.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from dataclasses import dataclass
from urllib.parse import quote

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, parse, serialize

from connectors.errors import MessageRejected, UnsupportedMessageFormat
from store.elements import ParsedElement, parse_timestamp, single_element
from store.errors import RdfSyntaxError
from store.framing import one_element
from store.limits import check_nesting, checked
from store.stream_config import MESSAGE_FORMATS, StreamConfig
from store.terms import named_node

# the namespace of dead-letter descriptions (urn:x-concentrator: is this server's own)
DEAD = "urn:x-concentrator:dead-letter#"
_XSD = "http://www.w3.org/2001/XMLSchema#"
_NAMES = uuid.UUID("6b1c3b0e-4a52-4d0e-9d53-0d6f4c1f2a10")  # namespace of name-based element UUIDs


@dataclass(frozen=True)
class MessageSettings:
    """What a stream's configuration says about its messages."""

    timestamp_predicate: str
    default_format: str = "application/trig"
    timestamp_path: str | None = None
    graph_template: str | None = None

    @classmethod
    def of(cls, config: StreamConfig) -> MessageSettings:
        mqtt = config.mqtt
        return cls(config.timestamp_predicate, mqtt.format, mqtt.timestamp_path, mqtt.graph_template)

    @property
    def template(self) -> str:
        if self.graph_template is not None:
            return self.graph_template
        return "urn:uuid:{digest}" if self.timestamp_path is not None else "urn:uuid:{uuid}"


def message_format(content_type: str | None, default: str) -> tuple[str, RdfFormat]:
    """The media type and RDF format of a message: its content type (parameters such as ``charset`` aside), else
    the stream's default."""
    media_type = (content_type or default).split(";")[0].strip().lower()
    found = MESSAGE_FORMATS.get(media_type)
    if found is None:
        raise UnsupportedMessageFormat(f"content type {media_type!r} is not a stream element format: publish "
                                       f"with one of {', '.join(MESSAGE_FORMATS)}")
    return media_type, found


def digest_uuid(topic: str, payload: bytes) -> uuid.UUID:
    """A UUID named by the topic and the payload: a message delivered twice gets the same one."""
    return uuid.uuid5(_NAMES, topic + "\n" + hashlib.sha256(payload).hexdigest())


def element_graph(template: str, topic: str, payload: bytes) -> NamedNode:
    """The graph name of a Turtle / JSON-LD message's element (see the module doc).

    >>> element_graph("urn:x:{topic}/{digest}", "ward 1/hr", b"x").value
    'urn:x:ward%201/hr/86ef42b5-13d4-52d2-89a8-cf9f874d5317'
    """
    iri = template.replace("{topic}", quote(topic, safe="/")).replace("{uuid}", str(uuid.uuid4()))
    iri = iri.replace("{digest}", str(digest_uuid(topic, payload)))
    return named_node(iri, "graph-template")


def element_of_message(payload: bytes, content_type: str | None, topic: str,
                       settings: MessageSettings) -> ParsedElement:
    """The one element (or punctuation) a message holds; ``MessageRejected`` (or a store error naming the
    problem) when it holds none, several, or something that is not RDF in its format."""
    media_type, rdf_format = message_format(content_type, settings.default_format)
    if rdf_format == RdfFormat.JSON_LD:
        try:
            check_nesting(payload, rdf_format.media_type)  # not too deep for the parser (else: a dead letter)
            quads = list(parse(payload, RdfFormat.JSON_LD))
        except SyntaxError as error:
            raise RdfSyntaxError(f"the message is not JSON-LD: {error}") from None
        if any(not isinstance(q.graph_name, DefaultGraph) for q in quads):  # @id + @graph: a named graph element
            return one_element(serialize(quads, format=RdfFormat.N_QUADS) or b"", RdfFormat.N_QUADS,
                               settings.timestamp_predicate)
        graph = element_graph(settings.template, topic, payload)
        element = ParsedElement(graph, [Quad(q.subject, q.predicate, q.object, graph) for q in quads])
        return _stamped(element, settings)
    if rdf_format in (RdfFormat.TRIG, RdfFormat.N_QUADS):
        return one_element(payload, rdf_format, settings.timestamp_predicate)
    graph = element_graph(settings.template, topic, payload)
    element = single_element(checked(payload, rdf_format.media_type), rdf_format, graph, None)  # (or too deep)
    if not element.quads:
        raise MessageRejected(f"the {media_type} message holds no triple: an element needs content")
    return _stamped(element, settings)


def _stamped(element: ParsedElement, settings: MessageSettings) -> ParsedElement:
    """Set the element's time from its ``timestamp-path`` triple (kept in its content), if the stream has one."""
    if settings.timestamp_path is None:
        return element
    stamps = {q.object for q in element.quads if q.predicate.value == settings.timestamp_path}
    if len(stamps) != 1:
        raise MessageRejected(f"the message has {len(stamps)} <{settings.timestamp_path}> values; the stream's "
                              "timestamp-path needs exactly one (an xsd:dateTime)")
    stamp = stamps.pop()
    if not isinstance(stamp, Literal) or stamp.datatype.value not in (_XSD + "dateTime", _XSD + "dateTimeStamp"):
        raise MessageRejected(f"the message's <{settings.timestamp_path}> value {stamp} is not an xsd:dateTime")
    element.time = parse_timestamp(stamp.value, f"the message's <{settings.timestamp_path}>")
    element.stamp = stamp
    return element


def dead_letter(stream: str, topic: str, payload: bytes, content_type: str | None, error: str) -> ParsedElement:
    """The dead-letter element of a message the stream did not take: the error and the payload as it came (a
    string literal when it is UTF-8, else xsd:base64Binary). Its graph is named by the topic and payload, so a
    bad message delivered twice is one dead letter."""
    graph = NamedNode(f"urn:uuid:{uuid.uuid5(_NAMES, 'dead-letter ' + str(digest_uuid(topic, payload)))}")
    try:
        raw = Literal(payload.decode("utf-8"))
    except UnicodeDecodeError:
        raw = Literal(base64.b64encode(payload).decode("ascii"), datatype=NamedNode(_XSD + "base64Binary"))
    facts: list[tuple[NamedNode, NamedNode | Literal]] = [
        (NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type"), NamedNode(DEAD + "DeadLetter")),
        (NamedNode(DEAD + "stream"), Literal(stream)),
        (NamedNode(DEAD + "topic"), Literal(topic)),
        (NamedNode(DEAD + "error"), Literal(error)),
        (NamedNode(DEAD + "payload"), raw),
    ]
    if content_type:
        facts.append((NamedNode(DEAD + "contentType"), Literal(content_type)))
    return ParsedElement(graph, [Quad(graph, predicate, value, graph) for predicate, value in facts])
