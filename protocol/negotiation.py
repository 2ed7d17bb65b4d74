"""Content negotiation and media types, as pure functions of header values."""

from __future__ import annotations

from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header, parse_options_header

from store.formats import BODY_FORMATS, DATASET_FORMATS, GRAPH_FORMATS, RESULTS_FORMATS

__all__ = ["BODY_FORMATS", "DATASET_FORMATS", "GRAPH_FORMATS", "RESULTS_FORMATS", "best_media_type", "body_media_type",
           "is_utf8"]

def best_media_type(accept: str | None, offered: list[str]) -> str | None:
    """The offered media type the Accept header prefers (the first offered when no header).

    >>> best_media_type("text/csv;q=0.5, application/sparql-results+xml", ["a/b", "text/csv"])
    'text/csv'
    >>> best_media_type(None, ["text/turtle", "application/n-triples"])
    'text/turtle'
    >>> best_media_type("text/turtle; charset=utf-8", ["application/n-triples", "text/turtle"])
    'text/turtle'
    """
    if not accept or not accept.strip():
        return offered[0]
    parsed = parse_accept_header(accept, MIMEAccept)
    # Media-type parameters such as charset=utf-8 must not stop "text/turtle" from matching.
    bare = MIMEAccept([(value.split(";")[0].strip(), quality) for value, quality in parsed])
    return bare.best_match(offered)


def body_media_type(content_type: str | None) -> tuple[str, dict[str, str]]:
    """Media type (lower case, no parameters) and parameters of a Content-Type header."""
    mimetype, options = parse_options_header(content_type or "")
    return mimetype.lower(), options


def is_utf8(options: dict[str, str]) -> bool:
    charset = options.get("charset")
    return charset is None or charset.lower().replace("_", "-") in ("utf-8", "utf8", "us-ascii")
