"""Plain SPARQL 1.1 queries over a pyoxigraph store, and writing any query result out: where pyoxigraph's
exceptions from parsing and evaluation become ours (``QueryFailed``, 400), so the protocol layer never sees them.

pyoxigraph evaluates lazily: a query's errors may surface while its solutions are written, so ``write`` is where
the evaluation really happens (the caller writes into a spool before sending anything, so an error is a 4xx).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any

from pyoxigraph import Quad, QueryBoolean, QuerySolutions, QueryTriples, RdfFormat, Store, Triple, serialize

from store.errors import QueryFailed

PlainResult = QuerySolutions | QueryBoolean | QueryTriples


def run(store: Store, text: str, *, base_iri: str | None, default_graph: list[Any] | None = None,
        named_graphs: list[Any] | None = None) -> PlainResult:
    """``store.query`` with pyoxigraph's syntax errors at the user's line and column."""
    try:
        return store.query(text, base_iri=base_iri, default_graph=default_graph, named_graphs=named_graphs)
    except SyntaxError as error:
        raise QueryFailed.from_pyoxigraph("query is not valid SPARQL 1.1", error) from None
    except (OSError, RuntimeError, ValueError) as error:
        raise QueryFailed(f"query evaluation failed: {error}") from None


def write(result: PlainResult, output: IO[bytes], format: Any) -> None:
    """Serialize a query result (solutions, boolean, triples) in ``format`` (a results or an RDF format)."""
    try:
        result.serialize(output, format)
    except SyntaxError as error:
        raise QueryFailed.from_pyoxigraph("query is not valid SPARQL 1.1", error) from None
    except (OSError, RuntimeError, ValueError) as error:
        raise QueryFailed(f"query evaluation failed: {error}") from None


def write_rdf(items: Iterable[Quad] | Iterable[Triple], output: IO[bytes], format: RdfFormat) -> None:
    """Serialize constructed quads or triples (an extended CONSTRUCT's result)."""
    try:
        serialize(items, output, format)
    except (OSError, RuntimeError, ValueError) as error:
        raise QueryFailed(f"query evaluation failed: {error}") from None
