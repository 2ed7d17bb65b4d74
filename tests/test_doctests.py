"""The examples in docstrings are tests too."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["sparql_ext.errors", "sparql_ext.lexer", "sparql_ext.revision", "sparql_ext.iris", "sparql_ext.update",
           "sparql_ext.windowref", "sparql_ext.windowing", "sparql_ext.window_data", "store.terms", "store.windows",
           "protocol.negotiation", "protocol.access",
           "sparql_ext.windowed", "protocol.parameters", "connectors.broker", "connectors.messages",
           "protocol.stream_params", "sparql_ext.modifiers", "sparql_ext.graph_patch",
           "sparql_ext.event_schedule"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
