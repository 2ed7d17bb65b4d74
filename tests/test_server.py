"""The real server (gunicorn on 127.0.0.1): the only test file that opens sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from conformance.server import running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("server") / "data"
    with running_server(["--max-body-bytes", "2m", "--no-pipeline"], data_dir=data) as running:
        yield running.url
    assert Path(data, "store").exists()  # on disk, in the data directory


def _lines(n: int, start: int = 0) -> Iterator[bytes]:
    for i in range(start, start + n):
        yield b'<http://ex/s%d> <http://ex/p> "v%d" .\n' % (i, i)


def test_chunked_upload_is_parsed_as_it_streams(server: str) -> None:
    graph = server + "/store?graph=http%3A%2F%2Fex%2Fchunked"
    r = requests.put(graph, data=_lines(5000), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 201, r.text
    r = requests.get(server + "/sparql", params={
        "query": "SELECT (COUNT(*) AS ?n) { GRAPH <http://ex/chunked> { ?s ?p ?o } }"})
    assert r.json()["results"]["bindings"][0]["n"]["value"] == "5000"


def test_chunked_upload_over_the_limit_is_413_and_changes_nothing(server: str) -> None:
    graph = server + "/store?graph=http%3A%2F%2Fex%2Flimited"
    r = requests.put(graph, data=_lines(100_000), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 413 and "limit" in r.text
    assert requests.get(graph).status_code == 404


def test_broken_chunked_upload_keeps_the_previous_graph(server: str) -> None:
    graph = server + "/store?graph=http%3A%2F%2Fex%2Fbroken"
    assert requests.put(graph, data=b'<http://ex/s> <http://ex/p> "kept" .',
                        headers={"Content-Type": "application/n-triples"}).status_code == 201

    def body() -> Iterator[bytes]:
        yield from _lines(1000)
        yield b"<http://ex/s> <http://ex/p> broken"

    r = requests.put(graph, data=body(), headers={"Content-Type": "application/n-triples"})
    assert r.status_code == 400 and "line 1001" in r.text
    assert requests.get(graph).text.strip() == '<http://ex/s> <http://ex/p> "kept" .'
