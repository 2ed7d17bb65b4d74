"""Issue 30, finding 1: a write that fails changes nothing, whatever the exception.

A load that fails with a ``MemoryError`` after it changed the store (the worst case), and the same with the first
attempt at undoing it failing half-way too, for every kind of write: HEAD, every revision, the TimeMaps and the
store's content stay exactly what the history below says. An undo that cannot complete leaves the dataset refusing
reads and writes (503) with its journal kept, and the next start completes it.
"""

from __future__ import annotations

import gc
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient
from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Store, serialize

import store.dataset
from concentrator.compose import http_app
from protocol import ServerConfig
from protocol.services import services_of
from store import RevisionedDataset
from store.errors import DatasetUnavailable, StorageFailure
from store.history import undo as real_undo

EX = "http://ex/"
G, OTHER, NEW, EMPTY = (NamedNode(f"{EX}{name}") for name in ("g", "other", "new", "empty"))
S, P = NamedNode(f"{EX}s"), NamedNode(f"{EX}p")
TTL, TRIG, NQ = "text/turtle", "application/trig", "application/n-quads"
INJECTED = "Reached the buffer maximal size of 16777216 (injected)"


def quad(graph: NamedNode | DefaultGraph, value: str) -> Quad:
    return Quad(S, P, Literal(value), graph)


# The history every test starts from, and the dataset at each revision, worked out by hand.
HISTORY = [
    ("PUT", G, '<http://ex/s> <http://ex/p> "one" .'),
    ("PUT", OTHER, '<http://ex/s> <http://ex/p> "x" .'),
    ("POST", G, '<http://ex/s> <http://ex/p> "two" .'),
    ("PUT", DefaultGraph(), '<http://ex/s> <http://ex/p> "d" .'),
    ("PUT", EMPTY, ""),  # an empty named graph: it exists at HEAD, with no quads
]
AT = [
    set(),
    {quad(G, "one")},
    {quad(G, "one"), quad(OTHER, "x")},
    {quad(G, "one"), quad(OTHER, "x"), quad(G, "two")},
    {quad(G, "one"), quad(OTHER, "x"), quad(G, "two"), quad(DefaultGraph(), "d")},
    {quad(G, "one"), quad(OTHER, "x"), quad(G, "two"), quad(DefaultGraph(), "d")},
]
CHANGED = {G: [1, 3], OTHER: [2], NEW: [], EMPTY: []}  # the revisions in each graph's TimeMap

UPDATE = (f'INSERT DATA {{ GRAPH <{G.value}> {{ <{S.value}> <{P.value}> "u1" }} }} ;\n'
          f'DELETE DATA {{ GRAPH <{OTHER.value}> {{ <{S.value}> <{P.value}> "x" }} }} ;\n'
          f"CLEAR GRAPH <{G.value}> ;\n"
          f'INSERT DATA {{ GRAPH <{NEW.value}> {{ <{S.value}> <{P.value}> "u4" }} }}')
# name: (method, target, content type, body, the store method that fails, on which call)
WRITES: dict[str, tuple[str, str, str, str, str, int]] = {
    "put-replaces": ("PUT", f"/store?graph={quote(G.value)}", TTL, '<http://ex/s> <http://ex/p> "three" .', "load", 1),
    "put-creates": ("PUT", f"/store?graph={quote(NEW.value)}", TTL, '<http://ex/s> <http://ex/p> "n" .', "load", 1),
    "put-default": ("PUT", "/store?default", TTL, '<http://ex/s> <http://ex/p> "d2" .', "load", 1),
    "put-dataset": ("PUT", "/store", TRIG, '<http://ex/g> { <http://ex/s> <http://ex/p> "all" . }', "load", 1),
    "post-adds": ("POST", f"/store?graph={quote(G.value)}", TTL, '<http://ex/s> <http://ex/p> "four" .', "load", 1),
    "post-creates": ("POST", f"/store?graph={quote(NEW.value)}", TTL, '<http://ex/s> <http://ex/p> "n" .', "load", 1),
    "delete": ("DELETE", f"/store?graph={quote(G.value)}", "", "", "remove_graph", 1),
    "delete-empty": ("DELETE", f"/store?graph={quote(EMPTY.value)}", "", "", "remove_graph", 1),
    "delete-default": ("DELETE", "/store?default", "", "", "clear_graph", 1),
    "sparql-update": ("POST", "/sparql", "application/sparql-update", UPDATE, "update", 3),
}


class FailingStore:
    """The real store, except that the ``nth`` call of ``method`` is carried out and then raises ``MemoryError``
    (what pyoxigraph's parser raises on a token over its buffer), so the store has changed when the write fails."""

    def __init__(self, real: Store, method: str, nth: int) -> None:
        self.real, self._method, self._nth, self._calls = real, method, nth, 0

    def __contains__(self, item: Quad) -> bool:
        return item in self.real

    def __iter__(self) -> Iterator[Quad]:
        return iter(self.real)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.real, name)
        if name != self._method:
            return attribute

        def call(*args: object, **kwargs: object) -> object:
            result = attribute(*args, **kwargs)
            self._calls += 1
            if self._calls == self._nth:
                raise MemoryError(INJECTED)
            return result

        return call


class HalfUndo:
    """The real store for an undo that fails after its first change (or, with a single change, before its flush)."""

    _CHANGES = frozenset({"clear", "clear_graph", "remove", "bulk_load", "load", "add_graph", "remove_graph"})

    def __init__(self, real: Store) -> None:
        self.real, self._changes = real, 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.real, name)
        if name not in self._CHANGES and name != "flush":
            return attribute

        def call(*args: object, **kwargs: object) -> object:
            if name == "flush" or self._changes == 1:
                raise MemoryError(INJECTED)
            self._changes += 1
            return attribute(*args, **kwargs)

        return call


def undo_failing(times: int) -> Callable[[Store, list[Any]], None]:
    """An undo whose first ``times`` attempts fail half-way; the later ones are the real undo."""
    attempts = 0

    def attempt(target: Store, steps: list[Any]) -> None:
        nonlocal attempts
        attempts += 1
        real_undo(HalfUndo(target) if attempts <= times else target, steps)  # type: ignore[arg-type]

    return attempt


# -- what a reader sees -----------------------------------------------------------------------------------------------

def nquads(quads: set[Quad]) -> set[bytes]:
    return set((serialize(quads, format=RdfFormat.N_QUADS) or b"").splitlines())


def client_with_history(tmp_path: Path) -> FlaskClient:
    c = http_app(ServerConfig(tmp_path / "data", in_memory=True)).test_client()
    for method, graph, body in HISTORY:
        target = "/store?default" if isinstance(graph, DefaultGraph) else f"/store?graph={quote(graph.value)}"
        r = c.open(target, method=method, data=body, content_type=TTL)
        assert r.status_code in (201, 204), r.text
    return c


def seen(c: FlaskClient) -> dict[str, object]:
    """Everything a reader can see of the dataset: its content at HEAD and at every revision, HEAD's headers, which
    graphs exist, and the TimeMaps of the dataset and of each graph."""
    head = c.get("/store", headers={"Accept": NQ})
    assert head.status_code == 200, head.text
    view: dict[str, object] = {"head": (head.headers["Revision-Ordinal"], head.headers["Revision-Id"]),
                               "content": set(head.data.splitlines())}
    for ordinal in range(len(AT)):
        r = c.get(f"/store?revision-id={ordinal}", headers={"Accept": NQ})
        assert r.status_code == 200, r.text
        view[f"revision {ordinal}"] = set(r.data.splitlines())
    assert c.get(f"/store?revision-id={len(AT)}").status_code == 400  # no revision was added
    for graph in (G, OTHER, NEW, EMPTY):
        view[f"exists {graph.value}"] = c.get(f"/store?graph={quote(graph.value)}").status_code
        timemap = c.get(f"/store?graph={quote(graph.value)}", headers={"Accept": "application/link-format"})
        assert timemap.status_code == 200, timemap.text
        view[f"timemap {graph.value}"] = timemap.text
    view["timemap"] = c.get("/store", headers={"Accept": "application/link-format"}).text
    return view


def assert_the_history(c: FlaskClient, view: dict[str, object]) -> None:
    """``view`` is the history above, exactly."""
    uuids = [c.get(f"/store?revision-id={n}").headers["Revision-Id"] for n in range(1, len(AT))]
    assert view["head"] == (str(len(AT) - 1), uuids[-1])
    assert view["content"] == nquads(AT[-1])
    for ordinal, quads in enumerate(AT):
        assert view[f"revision {ordinal}"] == nquads(quads), ordinal
    assert view[f"exists {G.value}"] == view[f"exists {OTHER.value}"] == view[f"exists {EMPTY.value}"] == 200
    assert view[f"exists {NEW.value}"] == 404
    for graph, changed in CHANGED.items():
        timemap = str(view[f"timemap {graph.value}"])
        assert [uuid for uuid in uuids if uuid in timemap] == [uuids[n - 1] for n in changed], graph
    assert all(uuid in str(view["timemap"]) for uuid in uuids)


@pytest.fixture
def fail_undo(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    def failing(times: int) -> None:
        monkeypatch.setattr(store.dataset, "undo", undo_failing(times))
    return failing


# -- the tests --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("undo_fails", [0, 1], ids=["load-fails", "load-and-first-undo-fail"])
@pytest.mark.parametrize("write", list(WRITES))
def test_a_failed_write_changes_nothing(tmp_path: Path, write: str, undo_fails: int,
                                       fail_undo: Callable[[int], None]) -> None:
    c = client_with_history(tmp_path)
    before = seen(c)
    assert_the_history(c, before)
    method, target, content_type, body, failing, nth = WRITES[write]
    dataset = services_of(c.application).dataset
    real = dataset._store
    dataset._store = FailingStore(real, failing, nth)  # type: ignore[assignment]
    fail_undo(undo_fails)
    r = c.open(target, method=method, data=body, content_type=content_type or None)
    dataset._store = real
    assert r.status_code == 500, r.text
    assert "rolled back (nothing changed): MemoryError" in r.text
    assert seen(c) == before


def test_the_write_after_a_failed_one_is_the_next_revision(tmp_path: Path, fail_undo: Callable[[int], None]) -> None:
    c = client_with_history(tmp_path)
    dataset = services_of(c.application).dataset
    real = dataset._store
    dataset._store = FailingStore(real, "load", 1)  # type: ignore[assignment]
    fail_undo(1)
    assert c.put(f"/store?graph={quote(G.value)}", data='<http://ex/s> <http://ex/p> "lost" .',
                 content_type=TTL).status_code == 500
    dataset._store = real
    r = c.put(f"/store?graph={quote(G.value)}", data='<http://ex/s> <http://ex/p> "kept" .', content_type=TTL)
    assert r.status_code == 204 and r.headers["Revision-Ordinal"] == str(len(AT))
    assert c.get(f"/store?graph={quote(G.value)}&revision-id={len(AT) - 1}",
                 headers={"Accept": "application/n-triples"}).data.count(b"\"") == 4  # "one", "two", as before
    assert b'"kept"' in c.get(f"/store?graph={quote(G.value)}", headers={"Accept": "application/n-triples"}).data


def test_an_undo_that_cannot_complete_refuses_reads_and_writes(tmp_path: Path,
                                                               fail_undo: Callable[[int], None]) -> None:
    c = client_with_history(tmp_path)
    dataset = services_of(c.application).dataset
    real = dataset._store
    dataset._store = FailingStore(real, "load", 1)  # type: ignore[assignment]
    fail_undo(store.dataset.UNDO_ATTEMPTS)
    r = c.put(f"/store?graph={quote(G.value)}", data='<http://ex/s> <http://ex/p> "half" .', content_type=TTL)
    dataset._store = real
    assert r.status_code == 503 and "could not be undone" in r.text and "restart" in r.text, r.text
    for read in (f"/store?graph={quote(G.value)}", "/store", "/sparql?query=ASK%7B%7D", "/store?revision-id=1"):
        refused = c.get(read)
        assert refused.status_code == 503, (read, refused.text)
    assert c.get("/store", headers={"Accept": "application/link-format"}).status_code == 503
    assert c.post(f"/store?graph={quote(OTHER.value)}", data="<http://ex/s> <http://ex/p> 1 .",
                  content_type=TTL).status_code == 503
    assert "could not be undone" in c.get("/status").json["dataset"]["unavailable"]


def put(ds: RevisionedDataset, graph: NamedNode | DefaultGraph, body: str) -> None:
    ds.replace(graph, ds.stage(io.BytesIO(body.encode()), RdfFormat.TURTLE, to_graph=graph))


def on_disk_history(directory: Path) -> RevisionedDataset:
    ds = RevisionedDataset(directory)
    for method, graph, body in HISTORY:
        staged = ds.stage(io.BytesIO(body.encode()), RdfFormat.TURTLE, to_graph=graph)
        (ds.replace(graph, staged) if method == "PUT" else ds.add(staged))
    return ds


def at(ds: RevisionedDataset, ordinal: int | None) -> set[Quad]:
    with ds.reading(ordinal) as state:
        return set(state)


@pytest.mark.parametrize("write", ["put", "update"])
def test_a_restart_completes_the_undo(tmp_path: Path, write: str, fail_undo: Callable[[int], None]) -> None:
    ds = on_disk_history(tmp_path / "data")
    assert [at(ds, n) for n in range(len(AT))] == AT
    real = ds._store
    ds._store = FailingStore(real, "load" if write == "put" else "update", 1 if write == "put" else 3)  # type: ignore
    fail_undo(store.dataset.UNDO_ATTEMPTS)
    with pytest.raises(DatasetUnavailable, match="could not be undone"):
        if write == "put":
            put(ds, G, '<http://ex/s> <http://ex/p> "half" .')
        else:
            ds.update(UPDATE)
    ds._store = real
    with pytest.raises(DatasetUnavailable):
        ds.graph_quads(G)
    with pytest.raises(DatasetUnavailable):
        at(ds, None)
    with pytest.raises(DatasetUnavailable):
        at(ds, 1)
    with pytest.raises(DatasetUnavailable):
        ds.graph_revisions(G)
    with pytest.raises(DatasetUnavailable):
        put(ds, OTHER, "<http://ex/s> <http://ex/p> 1 .")
    assert (tmp_path / "data" / "history" / "pending.json").exists()  # the journal is kept for the next start
    ds.close()
    del ds, real
    gc.collect()
    fail_undo(0)
    again = RevisionedDataset(tmp_path / "data")
    assert again.unavailable is None and again.head == len(AT) - 1
    assert [at(again, n) for n in range(len(AT))] == AT
    assert again.contains_graph(EMPTY) and not again.contains_graph(NEW)
    assert [r.ordinal for r in again.graph_revisions(G)] == CHANGED[G]
    assert not (tmp_path / "data" / "history" / "pending.json").exists()
    again.close()


def test_an_exception_of_the_store_s_family_passes_as_it_is(tmp_path: Path) -> None:
    """A refusal found while applying (here a statement over the limit, made by an update) is answered as it is,
    after the same undo."""
    ds = on_disk_history(tmp_path / "data")
    doublings = " ".join(f"BIND(CONCAT(?v{n}, ?v{n}) AS ?v{n + 1})" for n in range(13))  # 1,000 bytes → 8,192,000
    with pytest.raises(Exception) as raised:
        ds.update(f'INSERT {{ <{S.value}> <{P.value}> ?v13 }} WHERE {{ BIND("{"x" * 1_000}" AS ?v0) {doublings} }}')
    assert not isinstance(raised.value, StorageFailure) and raised.value.status_hint == 413  # type: ignore[attr-defined]
    assert ds.head == len(AT) - 1 and [at(ds, n) for n in range(len(AT))] == AT
    ds.close()
