"""Syntax errors in the user's words (issue 34, item 5): the line and column, what was found there, what was likely
meant, in one line, without pyoxigraph's expected-token sets and escapes. Through the HTTP endpoint, as a user (and
the console) sees them; the expected messages are worked out from each text."""

from __future__ import annotations

from pathlib import Path

import pytest

from concentrator.compose import http_app
from protocol import ServerConfig

QUERY = {"Content-Type": "application/sparql-query"}
UPDATE = {"Content-Type": "application/sparql-update"}


@pytest.mark.parametrize(("text", "headers", "message"), [
    ("SELEC * {}", QUERY, "line 1 column 1: SELEC is not a query form; did you mean SELECT?"),
    ('SELECT * {\n  ?s ?p "broken }', QUERY,
     'line 2 column 9: the string that starts here is never closed (a " is missing)'),
    ("SELECT * { ?s ?p ?o FILTER(?o > 3 }", QUERY,
     "line 1 column 27: '(' is never closed (a ')' is missing before line 1 column 35)"),
    ('SELECT * { ?s ?p "a\\qb" }', QUERY,
     "line 1 column 20: \\q is not an escape in a SPARQL string (a backslash itself is written \\\\)"),
    ("INSRT DATA { <urn:a> <urn:b> <urn:c> }", UPDATE,
     "line 1 column 1: 'INSRT' does not start an update operation; did you mean INSERT?"),
])
def test_syntax_errors_say_what_was_meant(tmp_path: Path, text: str, headers: dict[str, str], message: str) -> None:
    c = http_app(ServerConfig(tmp_path / "data", in_memory=True)).test_client()
    r = c.post("/sparql", data=text, headers=headers)
    assert r.status_code == 400
    assert r.text.endswith(message + "\n") and r.text.count("\n") == 1, r.text
    assert "\\u" not in r.text and "[_]" not in r.text
