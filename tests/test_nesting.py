"""One request must not take the server down (issue 12, item 11): a query nested 5,000 groups deep overflowed
pyoxigraph's parser stack and killed the server worker (SIGSEGV), and Spark and every upload with it. Queries,
updates and rules nested deeper than ``MAX_NESTING`` are refused with a 400 before pyoxigraph sees them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from conformance.server import RunningServer, running_server
from sparql_ext import parse_extended, split_update
from sparql_ext.errors import NestingTooDeep
from sparql_ext.lexer import MAX_NESTING


def nested(depth: int, core: str = "?s ?p ?o") -> str:
    return "{ " * depth + core + " }" * depth


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:
        yield running


def test_the_limit_is_exact() -> None:
    parse_extended(f"SELECT * WHERE {nested(MAX_NESTING)}")  # the WHERE group is the first of them
    with pytest.raises(NestingTooDeep) as refused:
        parse_extended(f"SELECT * WHERE {nested(MAX_NESTING + 1)}")
    # the first bracket past the limit ("{ " each): line 1, column len("SELECT * WHERE ") + 2·MAX_NESTING + 1
    assert (refused.value.line, refused.value.column) == (1, len("SELECT * WHERE ") + 2 * MAX_NESTING + 1)
    assert refused.value.status_hint == 400
    with pytest.raises(NestingTooDeep):
        split_update(f"INSERT DATA {{ <http://s> <http://p> {'(' * 300}1{')' * 300} }}")


@pytest.mark.parametrize("field, text", [
    ("query", f"SELECT * WHERE {nested(5_000)}"),
    ("query", f"SELECT * WHERE {nested(5_000, '?s ` ?o')}"),  # a character the tokenizer refuses, deep inside
    ("query", "ASK { FILTER(" + "(" * 5_000 + "1" + ")" * 5_000 + ") }"),
    ("update", f"DELETE WHERE {nested(5_000)}"),
])
def test_deep_requests_are_refused_and_the_server_lives(server: RunningServer, field: str, text: str) -> None:
    response = requests.post(f"{server.url}/sparql", data={field: text}, timeout=30)
    assert response.status_code == 400, response.text[:300]
    assert f"nested more than {MAX_NESTING} deep" in response.text
    assert requests.get(f"{server.url}/status", timeout=10).status_code == 200  # the worker is still there
    assert server.process.poll() is None


def test_a_deep_rule_is_refused(server: RunningServer) -> None:
    assert requests.put(f"{server.url}/streams/hr", timeout=10).status_code == 201
    rule = (f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ SERVICE <{server.url}/streams/hr?WINDOWS=R/HEAD/PT1M> "
            f"{nested(3_000)} }}")
    response = requests.put(f"{server.url}/rules/deep", data=rule, params={"output": "out"},
                            headers={"Content-Type": "application/sparql-query"}, timeout=30)
    assert response.status_code == 400 and "nested more than" in response.text
    assert requests.get(f"{server.url}/status", timeout=10).status_code == 200


def test_a_deep_query_to_a_stream_iri_is_refused(server: RunningServer) -> None:
    requests.put(f"{server.url}/streams/deep", timeout=10)
    response = requests.post(f"{server.url}/streams/deep", data=f"SELECT * WHERE {nested(5_000)}", timeout=30,
                             headers={"Content-Type": "application/sparql-query"})
    assert response.status_code == 400 and "nested more than" in response.text
    assert requests.get(f"{server.url}/status", timeout=10).status_code == 200
