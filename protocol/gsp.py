"""SPARQL 1.1 Graph Store HTTP Protocol at /store (indirect) and /store/… (direct identification).

Status codes follow the specification (and Oxigraph): PUT that creates a graph → 201, that
replaces one → 204; POST that creates → 201 (with Location when the server names the graph);
DELETE or GET of a missing graph → 404; both ``default`` and ``graph`` → 400. PATCH (a SPARQL Update), revision
ranges and Dydra's pseudo-graphs are ``gsp_dydra``'s.
"""

from __future__ import annotations

import tempfile
import uuid

from flask import Blueprint, Response, request
from pyoxigraph import DefaultGraph, NamedNode, RdfFormat
from werkzeug.datastructures import FileStorage
from werkzeug.exceptions import RequestEntityTooLarge

from protocol import gsp_dydra, memento
from protocol.access import READ, Need, needs
from protocol.bodies import revision_parameter, upload_limit
from protocol.errors import BadRequest, NotAcceptable
from protocol.negotiation import (
    BODY_FORMATS,
    DATASET_FORMATS,
    GRAPH_FORMATS,
    best_media_type,
    body_media_type,
    is_utf8,
)
from protocol.parameters import reads
from protocol.responses import empty_response, revision_headers, spooled_response
from protocol.services import services
from sparql_ext.revision import parse_revision_range
from store import BodyTooLarge, GraphNotFound, RevisionedDataset, StagedQuads, UnsupportedMediaType
from store.terms import GraphName, graph_to_text, named_node

bp = Blueprint("gsp", __name__)
METHODS = ["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"]


def _dataset() -> RevisionedDataset:
    return services().dataset


def _target(subpath: str | None) -> GraphName | None:
    """The graph a request identifies; None for the whole dataset (``/store`` alone)."""
    has_default, graphs = "default" in request.args, request.args.getlist("graph")
    if subpath is not None:
        if has_default or graphs:
            raise BadRequest("a directly identified graph (/store/…) takes no 'graph' or "
                             "'default' parameter")
        return NamedNode(request.base_url)
    if has_default and graphs:
        raise BadRequest("give either 'default' or 'graph', not both")
    if len(graphs) > 1:
        raise BadRequest("'graph' is given more than once; a request addresses one graph")
    if graphs and graphs[0] in (gsp_dydra.ALL, gsp_dydra.DEFAULT):  # Dydra's names: the dataset, the default graph
        return None if graphs[0] == gsp_dydra.ALL else DefaultGraph()
    if graphs:
        return named_node(graphs[0], "graph")
    return DefaultGraph() if has_default else None


@bp.route("/store", methods=METHODS)
@bp.route("/store/<path:subpath>", methods=METHODS)
@needs(lambda parsed: READ if parsed.method in ("GET", "HEAD") else Need(True, what=f"Graph Store {parsed.method}"))
@reads("default", "graph", "revision-id")
def graph_store(subpath: str | None = None) -> Response:
    method = gsp_dydra.method()
    answered = None if subpath is not None else gsp_dydra.view(method)  # urn:dydra:named, timemap, …
    if answered is not None:
        return answered
    target = _target(subpath)
    if method in ("GET", "HEAD"):
        return _get(target)
    if request.args.get("revision-id"):
        raise BadRequest("revision-id selects a revision to read; writes always apply to HEAD")
    if method == "PATCH":
        return gsp_dydra.patch(target, target.value if isinstance(target, NamedNode) else request.base_url)
    if method == "DELETE":
        if target is None:
            return gsp_dydra.delete_all()
        commit = _dataset().delete_graph(target, "gsp-delete")
        return empty_response(204, revision_headers(commit.revision))
    if method == "PUT":
        return _put(target)
    return _post(target)


def _get(target: GraphName | None) -> Response:
    dataset = _dataset()
    accept = request.headers.get("Accept")
    formats = gsp_dydra.QUAD_FORMATS if target is None else {**GRAPH_FORMATS, **DATASET_FORMATS}
    original = memento.original_url()
    if best_media_type(accept, [*formats, memento.LINK_FORMAT]) == memento.LINK_FORMAT:
        return memento.timemap_response(original, memento.dataset_mementos(dataset, original) if target is None
                                        else memento.graph_mementos(dataset, target, original))
    designator = revision_parameter()
    if designator is not None and parse_revision_range(designator) is not None:
        return gsp_dydra.range_response(target, designator)
    wanted = memento.accept_datetime() if designator is None else None
    selected = None if wanted is None else memento.select_revision(dataset, target, wanted, original)
    ordinal = selected.ordinal if selected is not None else dataset.resolve(designator)
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    if target is None:
        mimetype = best_media_type(accept, list(formats))
        if mimetype is None:
            raise NotAcceptable("the whole dataset is available as: " + ", ".join(formats)
                                + f", and its TimeMap as {memento.LINK_FORMAT}")
        with dataset.reading(ordinal) as store:
            store.dump(spool, formats[mimetype])
    else:
        mimetype = best_media_type(accept, list(formats))
        if mimetype is None:  # N-Quads and TriG name the graph (Dydra's scripts ask for N-Quads)
            raise NotAcceptable("a graph is available as: " + ", ".join(formats)
                                + f", and its TimeMap as {memento.LINK_FORMAT}")
        quads = dataset.graph_quads(target, ordinal)
        if quads is None:
            at = "" if ordinal is None else f" at revision {ordinal}"
            raise GraphNotFound(f"graph {graph_to_text(target)} does not exist{at}")
        gsp_dydra.serialize_graph(quads, spool, formats[mimetype])
    revision = dataset.revision(dataset.head if ordinal is None else ordinal)
    headers = revision_headers(revision) if revision else {}
    if selected is not None:  # Accept-Datetime: this resource is its own TimeGate
        headers.update(memento.memento_headers(original, selected, negotiated=True))
    elif designator is not None and revision is not None:  # a revision-id= URL is a memento
        headers.update(memento.memento_headers(original, memento.revision_memento(original, revision),
                                               negotiated=False))
    return spooled_response(spool, mimetype, headers)


def _body_format(mimetype: str, options: dict[str, str]) -> RdfFormat:
    if not mimetype:
        raise BadRequest("the request has no Content-Type; send one of: "
                         + ", ".join(BODY_FORMATS))
    if not is_utf8(options):
        raise UnsupportedMediaType(f"charset {options['charset']!r} is not supported: send UTF-8")
    if mimetype not in BODY_FORMATS:
        raise UnsupportedMediaType(f"Content-Type {mimetype!r} is not a supported RDF format; "
                                   "send one of: " + ", ".join(BODY_FORMATS))
    return BODY_FORMATS[mimetype]


def _stage_body(target: GraphName | None) -> StagedQuads:
    """Parse the body (or every file of a multipart/form-data body) into one staged file."""
    dataset = _dataset()
    limit = upload_limit()
    mimetype, options = body_media_type(request.headers.get("Content-Type"))
    base_iri = target.value if isinstance(target, NamedNode) else request.base_url
    if mimetype == "multipart/form-data":
        parts = []
        request.max_content_length = limit  # the whole form (parts are spooled before they are staged)
        try:
            for upload in _form_files():
                part_type, part_options = body_media_type(upload.content_type)
                parts.append(dataset.stage(upload.stream, _body_format(part_type, part_options),
                                           base_iri=base_iri, to_graph=target, max_bytes=limit))
        except BaseException:
            for part in parts:
                part.discard()
            raise
        return dataset.concatenate(parts)
    return dataset.stage(request.stream, _body_format(mimetype, options), base_iri=base_iri,
                         to_graph=target, max_bytes=limit)


def _form_files() -> list[FileStorage]:
    try:
        return list(request.files.values())
    except RequestEntityTooLarge:
        raise BodyTooLarge(f"request body exceeds the limit of {request.max_content_length:,} bytes (server option "
                           "--max-body-bytes)") from None


def _put(target: GraphName | None) -> Response:
    mimetype, _ = body_media_type(request.headers.get("Content-Type"))
    if target is None and mimetype not in DATASET_FORMATS:
        raise BadRequest("PUT /store replaces the whole dataset and needs a dataset format "
                         "(application/trig, application/n-quads); to replace one graph add "
                         "?default or ?graph=IRI")
    commit = _dataset().replace(target, _stage_body(target), "gsp-put")
    return empty_response(201 if commit.created else 204, revision_headers(commit.revision))


def _post(target: GraphName | None) -> Response:
    mimetype, _ = body_media_type(request.headers.get("Content-Type"))
    location = None
    if target is None and mimetype not in DATASET_FORMATS:
        # POST of a graph to the store itself: the server names a new graph (GSP §5.5).
        location = f"{request.host_url}store/{uuid.uuid4()}"
        target = NamedNode(location)
    commit = _dataset().add(_stage_body(target), "gsp-post")
    headers = revision_headers(commit.revision)
    if location is not None:
        headers["Location"] = location
        return empty_response(201, headers)
    return empty_response(201 if commit.created else 204, headers)
