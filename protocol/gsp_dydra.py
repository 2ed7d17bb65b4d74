"""The Graph Store behaviours Dydra's clients rely on, beside the standard ones of ``gsp.py``: ``PATCH`` with a
SPARQL Update (and ``X-HTTP-Method-Override: PATCH`` on a ``POST``), revision ranges (``revision-id=A--B``), Dydra's
pseudo-graph names, and the listing of the revisions (``GET /store/revisions``; docs/http.md, docs/revisions.md).

Pseudo-graphs (``graph=`` values): ``urn:dydra:default`` is the default graph and ``urn:dydra:all`` the whole
dataset (``gsp.py`` maps both); ``urn:dydra:named`` (the named graphs without the default graph: read, or dropped
by ``DELETE``), ``urn:dydra:timemap`` (the dataset's Memento TimeMap as RDF) and ``urn:dydra:service-description``
(the description ``GET /sparql`` answers) are answered here.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from flask import Blueprint, Response, request
from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Store, Triple, serialize

from protocol import memento, service_description
from protocol.access import READ, Need, needs
from protocol.bodies import revision_parameter, text_body
from protocol.errors import BadRequest, MethodNotAllowed, NotAcceptable
from protocol.negotiation import DATASET_FORMATS, GRAPH_FORMATS, best_media_type, body_media_type
from protocol.parameters import reads
from protocol.responses import empty_response, revision_headers, spooled_response
from protocol.services import services
from sparql_ext import DEFAULT_GRAPH
from sparql_ext.graph_patch import retarget_update
from sparql_ext.revision import parse_revision_range
from sparql_ext.windowing import from_micros
from store import GraphNotFound, UnsupportedMediaType
from store.terms import GraphName, graph_to_text
from store.updates import check_syntax
from store.whole_store import empty, named_quads, resolve_range, union_of_revisions

bp = Blueprint("gsp_dydra", __name__)

ALL, NAMED, DEFAULT = "urn:dydra:all", "urn:dydra:named", "urn:dydra:default"
TIMEMAP, SERVICE_DESCRIPTION = "urn:dydra:timemap", "urn:dydra:service-description"
VIEWS = (NAMED, TIMEMAP, SERVICE_DESCRIPTION)  # pseudo-graphs answered here rather than read as graphs
#: the whole dataset, or several graphs with their names
QUAD_FORMATS: dict[str, RdfFormat] = {**DATASET_FORMATS, "application/ld+json": RdfFormat.JSON_LD}
UPDATE = "application/sparql-update"
OVERRIDE = "X-HTTP-Method-Override"
_READS = ("GET", "HEAD")


def method() -> str:
    """The Graph Store method of the request: a ``POST`` with ``X-HTTP-Method-Override: PATCH`` is a ``PATCH`` (for
    clients that cannot send one); any other override is refused rather than read as the method it was sent with."""
    override = request.headers.get(OVERRIDE)
    if override is None:
        return request.method
    if request.method != "POST" or override.strip().upper() != "PATCH":
        raise BadRequest(f"{OVERRIDE}: {override} on {request.method}: only a POST with {OVERRIDE}: PATCH is "
                         "accepted (a Graph Store PATCH)")
    return "PATCH"


# -- PATCH ----------------------------------------------------------------------------------------------------------

def patch(target: GraphName | None, base_iri: str) -> Response:
    """Apply the SPARQL Update of the body to ``target`` (``sparql_ext.graph_patch``), or as it is to the whole
    dataset (None): one transaction, one revision. ``201`` when it created the target graph, else ``204``."""
    mimetype, _ = body_media_type(request.headers.get("Content-Type"))
    if mimetype != UPDATE:
        raise UnsupportedMediaType(f"a Graph Store PATCH takes a SPARQL Update, Content-Type: {UPDATE} (got "
                                   f"{mimetype or 'no Content-Type'}); to replace or add RDF use PUT or POST")
    text = text_body("update")
    dataset = services().dataset
    check_syntax(text, base_iri)  # pyoxigraph's syntax errors about the user's text, not the rewritten one
    if target is None:
        commit = dataset.update(text, base_iri=base_iri)
        return empty_response(204, revision_headers(commit.revision))
    rewritten = retarget_update(text, DEFAULT_GRAPH if isinstance(target, DefaultGraph) else target.value, base_iri)
    existed = dataset.contains_graph(target)
    commit = dataset.update(rewritten, base_iri=base_iri)
    created = not existed and dataset.contains_graph(target)
    return empty_response(201 if created else 204, revision_headers(commit.revision))


def delete_all() -> Response:
    """``DELETE /store``: the dataset emptied, one revision."""
    return empty_response(204, revision_headers(empty(services().dataset).revision))


# -- reads: revision ranges and pseudo-graphs -----------------------------------------------------------------------

@contextmanager
def reading(designator: str | None) -> Iterator[tuple[Store, dict[str, str]]]:
    """The store a read sees — HEAD, one revision, or the union of a revision range — and the headers naming it
    (``Revision-Ordinal`` and ``Revision-Id``, or ``Revision-Range: first--last`` in ordinals)."""
    dataset = services().dataset
    spec = None if designator is None else parse_revision_range(designator)
    if spec is not None:
        assert designator is not None
        first, last = resolve_range(dataset, spec, designator)
        with union_of_revisions(dataset, first, last) as union:
            yield union, {"Revision-Range": f"{first}--{last}"}
        return
    ordinal = dataset.resolve(designator)
    revision = dataset.revision(dataset.head if ordinal is None else ordinal)
    with dataset.reading(ordinal) as store:
        yield store, revision_headers(revision) if revision is not None else {}


def range_response(target: GraphName | None, designator: str) -> Response:
    """``GET /store`` or ``/store?graph=…`` with ``revision-id=A--B``: the union of the states of that range."""
    accept = request.headers.get("Accept")
    offered = QUAD_FORMATS if target is None else {**GRAPH_FORMATS, **DATASET_FORMATS}
    mimetype = _negotiate(accept, offered, "a revision range")
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    with reading(designator) as (store, headers):
        if target is None:
            store.dump(spool, QUAD_FORMATS[mimetype])
        else:
            quads = list(store.quads_for_pattern(None, None, None, target))
            if not quads and not isinstance(target, DefaultGraph):
                raise GraphNotFound(f"graph {graph_to_text(target)} has no quad in revisions "
                                    f"{headers['Revision-Range']}")
            serialize_graph(quads, spool, offered[mimetype])
    return spooled_response(spool, mimetype, headers)


def serialize_graph(quads: list[Quad], spool: IO[bytes], rdf_format: RdfFormat) -> None:
    """One graph's quads into ``spool``: its triples in a graph format, its quads (the graph named) in a dataset
    format."""
    if rdf_format.supports_datasets:
        serialize(quads, spool, rdf_format)
    else:
        serialize((q.triple for q in quads), spool, rdf_format)


def view(requested: str) -> Response | None:
    """The answer to a request naming a pseudo-graph of ``VIEWS`` with ``graph=`` (None for any other request)."""
    graphs = request.args.getlist("graph")
    if len(graphs) != 1 or graphs[0] not in VIEWS or "default" in request.args:
        return None
    name = graphs[0]
    if name == NAMED and requested == "DELETE":
        if request.args.get("revision-id"):
            return None  # gsp.py refuses revision-id on a write
        commit = services().dataset.update("DROP NAMED")
        return empty_response(204, revision_headers(commit.revision))
    if requested not in _READS:
        allowed = "GET, HEAD, DELETE" if name == NAMED else "GET, HEAD"
        raise MethodNotAllowed(f"graph={name} is read only (it is not a graph of the store)"
                               + (": DELETE drops every named graph" if name == NAMED else ""),
                               headers={"Allow": allowed})
    if name == SERVICE_DESCRIPTION:  # what GET /sparql answers
        mimetype = _negotiate(request.headers.get("Accept"), service_description.OFFERED, "the service description")
        described = service_description.service_description(f"{request.host_url}sparql", services().dataset)
        return Response(service_description.serialized(described, mimetype), mimetype=mimetype)
    if name == NAMED:
        mimetype = _negotiate(request.headers.get("Accept"), QUAD_FORMATS, "the named graphs")
        spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
        with reading(revision_parameter()) as (store, headers):
            serialize(named_quads(store), spool, QUAD_FORMATS[mimetype])
        return spooled_response(spool, mimetype, headers)
    return _timemap_graph()


_RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
_ORE, _TB = "http://www.openarchives.org/ore/terms/", "http://www.mementoweb.org/terms/tb/"
_MEMENTO_DATETIME = NamedNode("http://mementoweb.org/ns#mementoDatetime")
_XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")


def _timemap_graph() -> Response:
    """The dataset's TimeMap (its mementos: one per readable revision, as ``Accept: application/link-format`` lists
    them) as RDF, in the Memento TimeBundle vocabulary Dydra answers with: an ``ore:ResourceMap`` describing the
    aggregation of the mementos, the dataset as ``tb:OriginalResource`` and its own ``tb:TimeGate``, and each memento
    a ``tb:Memento`` with ``tb:mementoFor`` and its commit time."""
    mimetype = _negotiate(request.headers.get("Accept"), {**GRAPH_FORMATS, **DATASET_FORMATS}, "the TimeMap")
    original, timemap = NamedNode(request.base_url), NamedNode(request.url)
    aggregation = NamedNode(f"{request.base_url}#mementos")
    triples = [Triple(timemap, _RDF_TYPE, NamedNode(_ORE + "ResourceMap")),
               Triple(timemap, NamedNode(_ORE + "describes"), aggregation),
               Triple(aggregation, _RDF_TYPE, NamedNode(_ORE + "Aggregation")),
               Triple(original, _RDF_TYPE, NamedNode(_TB + "OriginalResource")),
               Triple(original, _RDF_TYPE, NamedNode(_TB + "TimeGate")),
               Triple(original, NamedNode(_TB + "timeGateFor"), original)]
    for found in memento.dataset_mementos(services().dataset, request.base_url):
        node = NamedNode(found.url)
        at = from_micros(found.at).isoformat().replace("+00:00", "Z")
        triples += [Triple(aggregation, NamedNode(_ORE + "aggregates"), node),
                    Triple(node, _RDF_TYPE, NamedNode(_TB + "Memento")),
                    Triple(node, NamedNode(_TB + "mementoFor"), original),
                    Triple(node, _MEMENTO_DATETIME, Literal(at, datatype=_XSD_DATETIME))]
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    rdf_format = {**GRAPH_FORMATS, **DATASET_FORMATS}[mimetype]
    serialize(triples if not rdf_format.supports_datasets else (Quad(*t) for t in triples), spool, rdf_format)
    return spooled_response(spool, mimetype, {})


def _negotiate(accept: str | None, offered: dict[str, RdfFormat], what: str) -> str:
    mimetype = best_media_type(accept, list(offered))
    if mimetype is None:
        raise NotAcceptable(f"{what} is available as: " + ", ".join(offered))
    return mimetype


# -- the listing of the revisions -----------------------------------------------------------------------------------

@bp.route("/store/revisions", methods=["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"])
@needs(lambda parsed: READ if parsed.method in _READS else Need(True, what=f"{parsed.method} /store/revisions"))
@reads()
def revisions() -> Response:
    """Every revision, oldest first: JSON (each record, and whether its state is still ``readable``), or
    ``text/plain`` (one UUID a line, as Dydra lists them)."""
    if request.method not in _READS:  # checked as a write first: without the token, 401 like every write
        raise MethodNotAllowed(f"/store/revisions is the listing of the revisions: {request.method} is not allowed "
                               "(a graph named …/store/revisions is written with ?graph=)",
                               headers={"Allow": "GET, HEAD"})
    mimetype = best_media_type(request.headers.get("Accept"), ["application/json", "text/plain"])
    if mimetype is None:
        raise NotAcceptable("the revisions are listed as: application/json, text/plain")
    dataset = services().dataset
    oldest = dataset.oldest_readable
    listed = dataset.revisions_since(0)
    if mimetype == "text/plain":
        return Response("".join(f"{r.uuid}\n" for r in listed), mimetype="text/plain")
    records = [{**r.to_json(), "readable": r.ordinal >= oldest} for r in listed]
    head = dataset.revision(dataset.head)
    response = Response(json.dumps(records, separators=(",", ":")), mimetype="application/json")
    if head is not None:
        response.headers.update(revision_headers(head))
    return response
