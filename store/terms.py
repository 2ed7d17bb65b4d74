"""Graph names as text and back (for the history journal), and small term helpers."""

from __future__ import annotations

from pyoxigraph import BlankNode, DefaultGraph, NamedNode

from store.errors import InvalidIri

GraphName = NamedNode | BlankNode | DefaultGraph

_DEFAULT = "DEFAULT"


def graph_to_text(graph: GraphName) -> str:
    """``<iri>``, ``_:id`` or ``DEFAULT``.

    >>> graph_to_text(NamedNode("http://ex/g")), graph_to_text(DefaultGraph())
    ('<http://ex/g>', 'DEFAULT')
    """
    return _DEFAULT if isinstance(graph, DefaultGraph) else str(graph)


def graph_from_text(text: str) -> GraphName:
    """Inverse of ``graph_to_text``.

    >>> graph_from_text("<http://ex/g>")
    <NamedNode value=http://ex/g>
    """
    if text == _DEFAULT:
        return DefaultGraph()
    if text.startswith("_:"):
        return BlankNode(text[2:])
    return NamedNode(text[1:-1])


def graph_from_iri(iri: str) -> GraphName:
    """A graph name from ``sparql_ext``'s convention ('' is the default graph)."""
    return DefaultGraph() if iri == "" else NamedNode(iri)


def named_node(text: str, label: str) -> NamedNode:
    """An IRI from a request (a graph name, a setting), or ``InvalidIri`` naming it as ``label`` does.

    >>> named_node("http://ex/g", "graph").value
    'http://ex/g'
    """
    try:
        return NamedNode(text)
    except ValueError as error:
        raise InvalidIri(f"{label}={text!r} is not an IRI: {error}") from None
