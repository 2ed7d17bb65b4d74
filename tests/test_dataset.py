"""The revisioned dataset: revisions, atomic writes, undo, recovery, retention."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat

from store import (
    GraphNotFound,
    QueryFailed,
    RdfSyntaxError,
    RevisionedDataset,
    RevisionNotRetained,
)
from store.history import UndoStep

G = NamedNode("http://ex/g")
S, P = NamedNode("http://ex/s"), NamedNode("http://ex/p")


def put(ds: RevisionedDataset, graph: NamedNode | DefaultGraph, body: str) -> int:
    staged = ds.stage(io.BytesIO(body.encode()), RdfFormat.TURTLE, to_graph=graph)
    return ds.replace(graph, staged).revision.ordinal


def objects(ds: RevisionedDataset, ordinal: int | None = None) -> set[str]:
    quads = ds.graph_quads(G, ordinal) or []
    return {q.object.value for q in quads}


def test_three_puts_each_revision_readable(dataset: RevisionedDataset) -> None:
    for value in ("one", "two", "three"):
        put(dataset, G, f'<http://ex/s> <http://ex/p> "{value}" .')
    assert dataset.head == 3
    assert objects(dataset) == {"three"}
    assert objects(dataset, dataset.resolve("HEAD~1")) == {"two"}
    assert objects(dataset, dataset.resolve("1")) == {"one"}
    assert dataset.graph_quads(G, 0) is None  # before the first PUT the graph did not exist
    first = dataset.revision(1)
    assert first is not None
    assert dataset.resolve(str(first.uuid)) == 1
    # the whole dataset at a revision, through SPARQL
    with dataset.reading(2) as store:
        values = {s["o"].value for s in store.query("SELECT ?o { GRAPH ?g { ?s ?p ?o } }")}
    assert values == {"two"}


def test_revision_by_instant(dataset: RevisionedDataset) -> None:
    put(dataset, G, '<http://ex/s> <http://ex/p> "one" .')
    put(dataset, G, '<http://ex/s> <http://ex/p> "two" .')
    second = dataset.revision(2)
    assert second is not None
    at = second.committed_at.isoformat().replace("+00:00", "Z")
    assert dataset.resolve(at) == 2
    first = dataset.revision(1)
    assert first is not None
    assert dataset.resolve(first.committed_at.isoformat()) == 1
    assert dataset.resolve("2000-01-01T00:00:00Z") == 0


def test_malformed_body_changes_nothing(dataset: RevisionedDataset) -> None:
    put(dataset, G, '<http://ex/s> <http://ex/p> "kept" .')
    with pytest.raises(RdfSyntaxError, match="line 2"):
        dataset.stage(io.BytesIO(b'<http://ex/s> <http://ex/p> "a" .\n<http://ex/s> <p "b" .'),
                      RdfFormat.TURTLE, to_graph=G)
    assert objects(dataset) == {"kept"} and dataset.head == 1


def test_post_records_only_what_was_new(dataset: RevisionedDataset) -> None:
    put(dataset, G, '<http://ex/s> <http://ex/p> "a" .')
    staged = dataset.stage(io.BytesIO(b'<http://ex/s> <http://ex/p> "a", "b" .'),
                           RdfFormat.TURTLE, to_graph=G)
    commit = dataset.add(staged)
    assert commit.revision.inserted == 1 and not commit.created
    assert objects(dataset) == {"a", "b"}
    assert objects(dataset, 1) == {"a"}  # undoing the POST must not remove the older "a"


def test_update_is_one_revision_and_atomic(dataset: RevisionedDataset) -> None:
    put(dataset, G, '<http://ex/s> <http://ex/p> "a" .')
    commit = dataset.update(
        'INSERT DATA { GRAPH <http://ex/g> { <http://ex/s> <http://ex/p> "b" } } ;'
        'DELETE WHERE { GRAPH ?g { ?s ?p "a" } }')
    assert (commit.revision.inserted, commit.revision.deleted) == (1, 1)
    assert objects(dataset) == {"b"} and objects(dataset, 1) == {"a"}
    with pytest.raises(QueryFailed, match="operation 2"):
        dataset.update('INSERT DATA { GRAPH <http://ex/g> { <http://ex/s> <http://ex/p> "c" } } ;'
                       "DROP GRAPH <http://ex/missing>")
    assert objects(dataset) == {"b"} and dataset.head == 2  # the first operation was undone


def test_update_on_graphs_named_by_variables(dataset: RevisionedDataset) -> None:
    dataset.update('INSERT DATA { GRAPH <http://ex/a> { <http://ex/s> <http://ex/p> 1 } '
                   'GRAPH <http://ex/b> { <http://ex/s> <http://ex/p> 2 } }')
    commit = dataset.update("DELETE { GRAPH ?g { ?s ?p ?o } } INSERT { GRAPH ?g { ?s ?p 0 } } "
                            "WHERE { GRAPH ?g { ?s ?p ?o } }")
    assert (commit.revision.inserted, commit.revision.deleted) == (2, 2)
    with dataset.reading(1) as store:
        assert {s["o"].value for s in store.query("SELECT ?o { GRAPH ?g { ?s ?p ?o } }")} == {
            "1", "2"}


def test_delete_missing_graph(dataset: RevisionedDataset) -> None:
    with pytest.raises(GraphNotFound):
        dataset.delete_graph(G)
    assert dataset.head == 0


def test_recovery_undoes_an_interrupted_transaction(tmp_path: Path) -> None:
    ds = RevisionedDataset(tmp_path / "d")
    put(ds, G, '<http://ex/s> <http://ex/p> "committed" .')
    # Simulate a crash half-way through a POST: journal written, quads applied, no commit.
    half = tmp_path / "d" / "history" / "pending" / "ins.nq"
    half.write_text('<http://ex/s> <http://ex/p> "half" <http://ex/g> .\n')
    ds._history.begin(2, [UndoStep(remove=str(half))])
    ds._store.add(Quad(S, P, Literal("half"), G))
    ds._store.flush()
    del ds
    import gc

    gc.collect()
    reopened = RevisionedDataset(tmp_path / "d")
    assert reopened.head == 1
    assert objects(reopened) == {"committed"}
    assert reopened._history.pending() is None


def test_retention_keeps_the_latest_history(tmp_path: Path) -> None:
    ds = RevisionedDataset(tmp_path / "d", retention=2)
    for value in "abcd":
        put(ds, G, f'<http://ex/s> <http://ex/p> "{value}" .')
    assert objects(ds, ds.resolve("HEAD~2")) == {"b"}
    with pytest.raises(RevisionNotRetained, match="oldest readable revision is 2"):
        ds.resolve("1")


def test_history_survives_restart(tmp_path: Path) -> None:
    ds = RevisionedDataset(tmp_path / "d")
    put(ds, G, '<http://ex/s> <http://ex/p> "a" .')
    put(ds, G, '<http://ex/s> <http://ex/p> "b" .')
    uuid_1 = ds.revision(1).uuid  # type: ignore[union-attr]
    ds.close()
    del ds
    import gc

    gc.collect()
    again = RevisionedDataset(tmp_path / "d")
    assert again.head == 2 and again.resolve(str(uuid_1)) == 1
    assert objects(again, 1) == {"a"} and objects(again) == {"b"}


def test_close_releases_the_store(tmp_path: Path) -> None:
    """Once close() returns, nothing holds the store's files (its lock included), even while the closed object is
    still referenced: the directory can be opened again, or removed without an open store writing into it."""
    ds = RevisionedDataset(tmp_path / "d")
    put(ds, G, '<http://ex/s> <http://ex/p> "a" .')
    ds.close()
    again = RevisionedDataset(tmp_path / "d")  # RocksDB refuses a second open of a store that is still open
    assert again.head == 1 and objects(again) == {"a"}
    again.close()
    assert ds is not None  # the first object outlived both opens


def test_update_on_a_graph_named_with_a_hash_namespace_keeps_exact_history(dataset: RevisionedDataset) -> None:
    # ex:g is <http://ex.org/ns#g>: resolving the prefix against the base must keep the '#', or the
    # update would snapshot the wrong graph and record a wrong delta (found while writing issue 4).
    update = ('PREFIX ex: <http://ex.org/ns#> INSERT DATA { GRAPH ex:g { <http://ex/s> <http://ex/p> "%s" } } ;'
              'DELETE DATA { GRAPH ex:g { <http://ex/s> <http://ex/p> "%s" } }')
    dataset.update('PREFIX ex: <http://ex.org/ns#> INSERT DATA { GRAPH ex:g { <http://ex/s> <http://ex/p> "a" } }',
                   base_iri="http://localhost/sparql")
    commit = dataset.update(update % ("b", "a"), base_iri="http://localhost/sparql")
    assert (commit.revision.inserted, commit.revision.deleted) == (1, 1)
    graph = NamedNode("http://ex.org/ns#g")
    assert {q.object.value for q in dataset.graph_quads(graph)} == {"b"}
    assert {q.object.value for q in dataset.graph_quads(graph, 1)} == {"a"}
