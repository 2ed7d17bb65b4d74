"""IRI resolution against a base (RFC 3986), as SPARQL's BASE and the protocol's base IRI need it."""

from __future__ import annotations

import re
from urllib.parse import urljoin

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def resolve_iri(base: str | None, value: str) -> str:
    """``value`` resolved against ``base``; absolute IRIs are returned unchanged.

    ``urljoin`` alone drops an empty fragment, which would turn the very common namespace
    ``<http://www.w3.org/2001/XMLSchema#>`` into ``…/XMLSchema``.

    >>> resolve_iri("http://ex/a/b", "http://www.w3.org/2001/XMLSchema#")
    'http://www.w3.org/2001/XMLSchema#'
    >>> resolve_iri("http://ex/a/b", "c#")
    'http://ex/a/c#'
    >>> resolve_iri(None, "c")
    'c'
    """
    if base is None or _SCHEME.match(value):
        return value
    joined = urljoin(base, value)
    return joined + "#" if value.endswith("#") and not joined.endswith("#") else joined
