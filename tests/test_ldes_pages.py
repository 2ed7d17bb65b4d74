"""An LDES page that cannot be followed (connectors/ldes_pages.py) is refused as a connector's error: 502, the
source's fault. Documents written by hand."""

from __future__ import annotations

import pytest
from pyoxigraph import RdfFormat

from connectors.errors import ConnectorError
from connectors.ldes_pages import find_view, load

TREE = "https://w3id.org/tree#"


def test_a_page_that_is_not_rdf_is_a_502_connector_error() -> None:
    with pytest.raises(ConnectorError, match="is not valid Turtle") as refused:
        load(b"<urn:a> <urn:b> .", RdfFormat.TURTLE, "http://source/ldes")
    assert refused.value.status_hint == 502


def test_the_view_is_found_once_or_refused() -> None:
    page = f"<http://source/es> <{TREE}view> <http://source/ldes> .".encode()
    document = load(page, RdfFormat.TURTLE, "http://source/ldes")
    assert find_view(document, "http://source/ldes", "http://source/ldes") == ("http://source/es", None)
    two = page + f"\n<http://source/es2> <{TREE}view> <http://source/ldes> .".encode()
    with pytest.raises(ConnectorError, match="the view of 2 event streams") as refused:
        find_view(load(two, RdfFormat.TURTLE, "http://source/ldes"), "http://source/ldes", "http://source/ldes")
    assert refused.value.status_hint == 502
