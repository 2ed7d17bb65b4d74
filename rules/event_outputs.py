"""What an event rule outputs for a match (docs/events.md): the elements its CONSTRUCT makes, each linked to the
elements the match was made of (seed 002 DM10) and carrying its derivation depth (the bound of recursion)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad

from engine.results import ConstructedQuads, ConstructedTriples
from rules.errors import RuleRejected
from sparql_ext import Match
from sparql_ext.windowing import format_micros
from store.elements import ParsedElement
from store.stream import Stream

PROV_WAS_DERIVED_FROM = "http://www.w3.org/ns/prov#wasDerivedFrom"
EVENT_NAMESPACE = "urn:x-concentrator:event#"  # ev:start, ev:end, ev:rule, ev:depth of a derived event
_XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
_XSD_INTEGER = NamedNode("http://www.w3.org/2001/XMLSchema#integer")

#: a graph name and the quads of the links of the derived event it names
Links = Callable[[Any], list[Quad]]


def match_digest(match: Match) -> str:
    """A match's identity as text (two matches are the same when bindings, interval and elements are)."""
    identity = [match.start, match.end, [list(element) for element in match.elements],
                sorted([name, str(value)] for name, value in match.bindings.items())]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]


def derived_elements(result: object, origin: str, match: Match, links: Links) -> list[ParsedElement]:
    """The output elements of one match from what the rule constructed for it: a triple template gives one element
    (graph ``urn:uuid:`` named after the match's origin), a quad template one per named graph; each with its links,
    stamped with the match's end."""
    graphs: dict[Any, list[Quad]] = {}
    if isinstance(result, ConstructedTriples):
        if result:
            graph = NamedNode(f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, origin)}")
            graphs[graph] = [Quad(t.subject, t.predicate, t.object, graph) for t in result]
    elif isinstance(result, ConstructedQuads):
        for quad in result:
            if not isinstance(quad.graph_name, DefaultGraph):  # the default graph is the stream's timestamps
                graphs.setdefault(quad.graph_name, []).append(quad)
    else:
        raise RuleRejected("a rule must be a CONSTRUCT query")
    return [ParsedElement(graph, quads + links(graph), match.end, origin=f"{origin}/{position}")
            for position, (graph, quads) in enumerate(graphs.items())]


def derived_links(rule_iri: str, match: Match, depth: int, stream_of: Callable[[str | None], Stream | None]) -> Links:
    """DM10: the derived event (graph ``g``) points back to the elements it was matched from; its ``ev:depth``
    bounds the recursion of the rules that read it. ``stream_of(iri)``: the stream of a constituent."""
    constituents: list[NamedNode] = []
    for element in match.elements:
        stream = stream_of(element.stream)
        name = stream.graph_of(element.ordinal) if stream is not None else None
        if name is not None and name.startswith("<"):
            constituents.append(NamedNode(name[1:-1]))
        elif stream is not None:  # a blank node graph name means nothing outside its element: its revision id
            constituents.append(NamedNode(f"urn:uuid:{stream.uuid_of(element.ordinal)}"))
    start = Literal(format_micros(match.start), datatype=_XSD_DATETIME)
    end = Literal(format_micros(match.end), datatype=_XSD_DATETIME)

    def links(graph: Any) -> list[Quad]:
        return [Quad(graph, NamedNode(f"{EVENT_NAMESPACE}start"), start, graph),
                Quad(graph, NamedNode(f"{EVENT_NAMESPACE}end"), end, graph),
                Quad(graph, NamedNode(f"{EVENT_NAMESPACE}rule"), NamedNode(rule_iri), graph),
                Quad(graph, NamedNode(f"{EVENT_NAMESPACE}depth"), Literal(str(depth), datatype=_XSD_INTEGER), graph),
                *(Quad(graph, NamedNode(PROV_WAS_DERIVED_FROM), constituent, graph) for constituent in constituents)]
    return links
