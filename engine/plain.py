"""Plain SPARQL 1.1 queries over a pyoxigraph store, and writing any query result out: where pyoxigraph's
exceptions from parsing and evaluation become ours (``QueryFailed``, 400), so the protocol layer never sees them.

pyoxigraph evaluates lazily: a query's errors may surface while its solutions are written, so ``write`` is where
the evaluation really happens (the caller writes into a spool before sending anything, so an error is a 4xx).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any, cast

from pyoxigraph import Quad, QueryBoolean, QuerySolutions, QueryTriples, RdfFormat, Store, Triple, serialize

from engine.errors import EvaluationStopped
from store.errors import QueryFailed

PlainResult = QuerySolutions | QueryBoolean | QueryTriples
STOP_CHECK_SECONDS = 0.05  # how often a result being written asks whether to stop


class Watched:
    """A file being written with a result: its ``write`` (which pyoxigraph calls as it evaluates, the GIL released
    in between) raises ``EvaluationStopped`` once ``stop()`` says so, asked at most every ``STOP_CHECK_SECONDS``;
    the exception ends pyoxigraph's evaluation there (its CPU is released at once)."""

    def __init__(self, output: IO[bytes], stop: Callable[[], bool]) -> None:
        self._output = output
        self._stop = stop
        self._next_check = time.monotonic() + STOP_CHECK_SECONDS

    def write(self, data: bytes) -> int:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + STOP_CHECK_SECONDS
            if self._stop():
                raise EvaluationStopped("the client closed its connection: the query was stopped")
        return self._output.write(data)

    def flush(self) -> None:
        self._output.flush()


def _watched(output: IO[bytes], stop: Callable[[], bool] | None) -> IO[bytes]:
    return output if stop is None else cast(IO[bytes], Watched(output, stop))  # the file methods pyoxigraph calls


# what the request being answered in this thread stops on (its client gone, its budget): None for rule firings
_STOP: ContextVar[Callable[[], bool] | None] = ContextVar("stop", default=None)


@contextmanager
def stopping(stop: Callable[[], bool]) -> Iterator[None]:
    """While the block runs, results written in this thread on their way to a response (``watched``: the extended
    evaluator serializes solutions to de-skolemize them, which evaluates them) ask ``stop`` too, as ``write`` does."""
    token = _STOP.set(stop)
    try:
        yield
    finally:
        _STOP.reset(token)


def watched(output: IO[bytes]) -> IO[bytes]:
    """``output``, stopped by this thread's ``stopping`` (unchanged outside one)."""
    return _watched(output, _STOP.get())


def run(store: Store, text: str, *, base_iri: str | None, default_graph: list[Any] | None = None,
        named_graphs: list[Any] | None = None) -> PlainResult:
    """``store.query`` with pyoxigraph's syntax errors at the user's line and column."""
    try:
        return store.query(text, base_iri=base_iri, default_graph=default_graph, named_graphs=named_graphs)
    except SyntaxError as error:
        raise QueryFailed.from_pyoxigraph("query is not valid SPARQL 1.1", error, text) from None
    except (OSError, RuntimeError, ValueError) as error:
        raise QueryFailed(f"query evaluation failed: {error}") from None


def write(result: PlainResult, output: IO[bytes], format: Any, stop: Callable[[], bool] | None = None) -> None:
    """Serialize a query result (solutions, boolean, triples) in ``format`` (a results or an RDF format); ``stop``:
    asked while it is written, ends the evaluation (``EvaluationStopped``) when it says so (see ``Watched``)."""
    try:
        result.serialize(_watched(output, stop), format)
    except SyntaxError as error:
        raise QueryFailed.from_pyoxigraph("query is not valid SPARQL 1.1", error) from None
    except (OSError, RuntimeError, ValueError) as error:
        raise QueryFailed(f"query evaluation failed: {error}") from None


def write_rdf(items: Iterable[Quad] | Iterable[Triple], output: IO[bytes], format: RdfFormat,
              stop: Callable[[], bool] | None = None) -> None:
    """Serialize constructed quads or triples (an extended CONSTRUCT's result); ``stop`` as for ``write``."""
    try:
        serialize(items, _watched(output, stop), format)
    except (OSError, RuntimeError, ValueError) as error:
        raise QueryFailed(f"query evaluation failed: {error}") from None
