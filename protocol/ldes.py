"""Every stream as a Linked Data Event Stream (``store.ldes``): ``GET /streams/{name}/ldes`` is the view (the root
node, the entry point an LDES client is given), ``GET /streams/{name}/ldes/{start}`` a page.

Pages are TriG (default), N-Quads or JSON-LD. Each response has an ``ETag`` (a conditional GET with
``If-None-Match`` answers 304); an immutable page says so (``Cache-Control: public, max-age=31536000, immutable``),
the view and the open page may change (``Cache-Control: max-age=1``). A page retention expired answers 410.
"""

from __future__ import annotations

import hashlib

from flask import Blueprint, Response, request
from pyoxigraph import RdfFormat, parse, serialize

from protocol.access import reads_only
from protocol.errors import NotAcceptable
from protocol.negotiation import best_media_type
from protocol.parameters import reads
from protocol.services import services
from sparql_ext import parse_instant
from sparql_ext.errors import InstantSyntaxError
from sparql_ext.windowing import to_micros
from store import ldes
from store.errors import PageNotFound
from store.formats import LDES_FORMATS
from store.stream import Stream

bp = Blueprint("ldes", __name__)

IMMUTABLE = "public, max-age=31536000, immutable"
MUTABLE = "max-age=1"


@bp.route("/streams/<name>/ldes", methods=["GET", "HEAD"])
@reads_only
@reads()
def view(name: str) -> Response:
    stream = services().streams.get(name)
    document, tag = ldes.root_document(stream, _names(stream))
    return _answer(document, tag, MUTABLE)


@bp.route("/streams/<name>/ldes/<start>", methods=["GET", "HEAD"])
@reads_only
@reads()
def page(name: str, start: str) -> Response:
    stream = services().streams.get(name)
    try:
        at = to_micros(parse_instant(start, f"page {start!r}").at)
    except InstantSyntaxError as error:
        raise PageNotFound(f"{error.message}: an LDES page of stream {name!r} is named by its start, an "
                           "xsd:dateTime such as 2016-06-20T10:00:00Z") from None
    found = ldes.page(stream, at)
    etag = _etag(found.tag)
    if etag is not None and request.if_none_match.contains(etag):
        return _not_modified(etag, IMMUTABLE if found.immutable else MUTABLE)
    return _answer(ldes.page_document(stream, found, _names(stream)), found.tag,
                   IMMUTABLE if found.immutable else MUTABLE)


def _names(stream: Stream) -> ldes.Names:
    iri = f"{request.host_url}streams/{stream.config.name}"
    return ldes.Names(iri, f"{iri}/ldes")


def _media_type() -> str:
    chosen = best_media_type(request.headers.get("Accept"), list(LDES_FORMATS))
    if chosen is None:
        raise NotAcceptable("an LDES page is available as " + ", ".join(LDES_FORMATS))
    return chosen


def _etag(tag: str) -> str | None:
    """The entity tag of a representation: the document's tag, the media type, and the base URL its IRIs use."""
    try:
        mimetype = _media_type()
    except NotAcceptable:
        return None
    return hashlib.sha256(f"{tag}|{mimetype}|{request.host_url}".encode()).hexdigest()[:32]


def _not_modified(etag: str, cache: str) -> Response:
    response = Response(status=304, headers={"Cache-Control": cache, "Vary": "accept"})
    response.set_etag(etag)
    del response.headers["Content-Type"]
    return response


def _answer(document: bytes, tag: str, cache: str) -> Response:
    mimetype = _media_type()
    etag = _etag(tag)
    assert etag is not None
    if request.if_none_match.contains_weak(etag):  # RFC 9110 §13.1.2: weak comparison (a gzipped copy is W/)
        return _not_modified(etag, cache)
    if LDES_FORMATS[mimetype] != RdfFormat.TRIG:  # the document is TriG (pyoxigraph's own): rewritten, labels kept
        document = serialize(parse(document, RdfFormat.TRIG, rename_blank_nodes=False), format=LDES_FORMATS[mimetype]) \
            or b""
    response = Response(document, mimetype=mimetype, headers={"Cache-Control": cache, "Vary": "accept"})
    response.set_etag(etag)
    return response
