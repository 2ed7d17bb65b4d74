"""SPARQL Update as one transaction over the dataset's store (``RevisionedDataset.update``).

Before each operation, the graphs it can change (the graphs its templates name, the graphs its ``GRAPH ?g``
variables take in its ``WHERE`` clause, all graphs for ``CLEAR ALL`` …) are snapshotted and written as its undo step;
pyoxigraph runs it; the diff of the snapshots is its exact effect. What an operation produced is checked against the
statement limit before the next one runs: an update can build a literal past it from small ones (``CONCAT``), and
the whole request is then refused, its operations undone.
"""

from __future__ import annotations

from pyoxigraph import BlankNode, DefaultGraph, NamedNode, Quad, QuerySolutions, RdfFormat, Store, serialize

from sparql_ext import Operation
from store.durable import fsync_file
from store.errors import QueryFailed
from store.history import History, UndoStep, journal_graphs
from store.staging import check_statements
from store.terms import GraphName, graph_from_iri, graph_to_text

NQ = RdfFormat.N_QUADS


def apply_operations(store: Store, history: History, ordinal: int, operations: list[Operation],
                     base_iri: str | None) -> tuple[set[Quad], set[Quad]]:
    """Run ``operations`` on ``store`` as revision ``ordinal``, journaling each one's undo step before it runs; the
    quads the request inserted (absent before it) and deleted (present before it)."""
    inserted: set[Quad] = set()
    deleted: set[Quad] = set()
    steps: list[UndoStep] = []
    for index, op in enumerate(operations):
        what = f"update operation {index + 1} ({op.kind})"
        graphs = affected_graphs(store, op)
        before = snapshot(store, graphs)
        image = history.scratch_path(f"{ordinal}.{index}.before.nq")
        with image.open("wb") as out:
            serialize(before, out, NQ)
        fsync_file(image)
        absent = [g for g in graphs if not isinstance(g, DefaultGraph) and not store.contains_named_graph(g)]
        steps.append(UndoStep(clear=journal_graphs(graphs), add=str(image), drop=journal_graphs(absent)))
        history.begin(ordinal, list(reversed(steps)))
        try:
            store.update(op.text, base_iri=base_iri)
        except (SyntaxError, ValueError, RuntimeError) as error:
            raise QueryFailed(f"{what} failed: {error}") from None
        after = snapshot(store, graphs)
        check_statements(after - before, what)
        for quad in before - after:  # compose: net change since the request began
            if quad in inserted:
                inserted.discard(quad)
            else:
                deleted.add(quad)
        for quad in after - before:
            if quad in deleted:
                deleted.discard(quad)
            else:
                inserted.add(quad)
    return inserted, deleted


def affected_graphs(store: Store, op: Operation) -> list[GraphName]:
    """The graphs ``op`` can change, in a stable order."""
    graphs: set[GraphName] = {graph_from_iri(g) for g in op.graphs}
    if op.all_named:
        graphs.update(store.named_graphs())
    if op.where is not None:
        try:
            solutions = store.query(
                op.where,
                default_graph=[NamedNode(g) for g in op.using] or None,
                named_graphs=[NamedNode(g) for g in op.using_named] or None,
            )
        except (SyntaxError, ValueError) as error:
            raise QueryFailed(f"update operation ({op.kind}) failed: {error}") from None
        assert isinstance(solutions, QuerySolutions)  # op.where is a SELECT
        for solution in solutions:
            for variable in op.graph_vars:
                term = solution[variable]
                if isinstance(term, NamedNode | BlankNode):
                    graphs.add(term)
    return sorted(graphs, key=graph_to_text)


def snapshot(store: Store, graphs: list[GraphName]) -> set[Quad]:
    quads: set[Quad] = set()
    for graph in graphs:
        quads.update(store.quads_for_pattern(None, None, None, graph))
    return quads


def check_syntax(text: str, base_iri: str | None) -> None:
    """Let pyoxigraph judge the syntax, on an empty store, before anything is touched."""
    try:
        Store().update(text, base_iri=base_iri)
    except SyntaxError as error:
        raise QueryFailed.from_pyoxigraph("update is not valid SPARQL 1.1", error, text, update=True) from None
    except (ValueError, RuntimeError, OSError):
        pass  # an evaluation error on the empty store says nothing about syntax
