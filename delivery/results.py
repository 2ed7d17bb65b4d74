"""What one window gives a subscriber: its query's result over the window (``window_result``), passed through the
report policy and the stream operator (``producer``), serialized in the media type asked for
(``serialize_items``), and shared between the subscribers that ask the same query of the same window: it is
computed once, however many ask for it (``SharedResults``; HTTP responses, WebSockets and MQTT publications)."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pyoxigraph import NamedNode, QueryBoolean, QuerySolutions, QueryTriples, Store, serialize

from engine.context import QueryTarget
from engine.errors import WindowNotComplete
from engine.evaluation import ExtendedEvaluator
from engine.results import ConstructedQuads, ConstructedTriples, solutions_from_rows
from engine.selection import SelectedWindow
from engine.syntax import checked_query
from sparql_ext import THEN_FUNCTION
from sparql_ext.reporting import Reporter, ReportPolicy, ReportSpec
from store.formats import DATASET_FORMATS, GRAPH_FORMATS, RESULTS_FORMATS
from store.stream import Stream

T = TypeVar("T")


class SharedResults(Generic[T]):
    """An LRU of computed values by key; concurrent requests for a key being computed wait for it."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._values: OrderedDict[Hashable, T] = OrderedDict()
        self._pending: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()
        self.computed = 0
        self.shared = 0

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        while True:
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    self.shared += 1
                    return self._values[key]
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = threading.Event()
                    break
            pending.wait()  # another response computes it; then it is in _values (or failed: compute here)
        try:
            value = compute()
            with self._lock:
                self.computed += 1
                self._values[key] = value
                while len(self._values) > self.capacity:
                    self._values.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._pending[key]
            pending.set()

    def status(self) -> dict[str, int]:
        with self._lock:
            return {"computed": self.computed, "shared": self.shared, "entries": len(self._values)}


@dataclass
class WindowResult:
    """A window's answer: ``kind`` is 'quads' (the window dataset, or a quad template), 'triples', 'solutions'
    (``variables`` and rows as tuples, None = unbound) or 'boolean'."""

    kind: str
    items: list[Any]
    variables: tuple[str, ...] = ()


def window_result(stream: Stream, ordinals: list[int], commit: int, query: str | None, evaluator: ExtendedEvaluator,
                  base_iri: str) -> WindowResult:
    """The result of ``query`` (None: the window dataset) over the window dataset of these elements."""
    window = stream.window_store(ordinals)
    if query is None:
        return WindowResult("quads", list(window))
    return _as_window_result(evaluator.query(query, QueryTarget(window, None, None, commit, base_iri, None, stream)))


def _as_window_result(result: Any) -> WindowResult:
    if isinstance(result, ConstructedQuads):
        return WindowResult("quads", list(result))
    if isinstance(result, ConstructedTriples):
        return WindowResult("triples", list(result))
    if isinstance(result, QueryBoolean):
        return WindowResult("boolean", [bool(result)])
    assert isinstance(result, QuerySolutions)
    names = tuple(v.value for v in result.variables)
    return WindowResult("solutions", [tuple(s[n] for n in names) for s in result], names)


def kind_of(query: str | None, base_iri: str | None) -> str:
    """The result kind of a query, known before any window so that the response's type is fixed up front: the
    rewritten query (extension parts cut out: nothing is fetched) runs once on an empty store."""
    if query is None:
        return "quads"
    extended = checked_query(query, base_iri)
    if extended.template is not None:
        return "quads"
    result = Store().query(extended.sparql, base_iri=base_iri,
                           custom_functions={NamedNode(THEN_FUNCTION): lambda: None})
    return "triples" if isinstance(result, QueryTriples) else "boolean" if isinstance(result, QueryBoolean) \
        else "solutions"


def numbered(items: list[Any]) -> list[tuple[Any, int]]:
    """Equal items numbered ``(item, 1), (item, 2), …``: a bag as a set, so that the Reporter's set difference
    (IStream, DStream) is bag difference — a solution found twice now and once before is new once.

    >>> numbered(["a", "b", "a"])
    [('a', 1), ('b', 1), ('a', 2)]
    """
    seen: Counter[Any] = Counter()
    result = []
    for item in items:
        seen[item] += 1
        result.append((item, seen[item]))
    return result


@dataclass(frozen=True)
class PinnedQuery:
    """A registered continuous query (rules/queries.py): evaluated at the dataset with its first window's
    (stream, ref) pinned to the window being delivered; its other windows read their own sequences' latest."""

    query: str
    base_iri: str
    stream: str
    ref: str
    sequences: dict[tuple[str, str], str]


def pinned_result(pinned: PinnedQuery, ordinals: list[int], commit: int, evaluator: ExtendedEvaluator
                  ) -> WindowResult | None:
    """A registered query's result for one window of its first window's sequence; None while one of its other
    windows has no complete window yet (as a rule firing then waits)."""
    firing = evaluator.for_rule([pinned.base_iri], {(pinned.stream, pinned.ref): SelectedWindow(ordinals, commit)},
                                pinned.sequences)
    try:
        result = firing.query(pinned.query, QueryTarget(base_iri=pinned.base_iri))
    except WindowNotComplete:
        return None
    return _as_window_result(result)


def producer(stream: Stream, query: str | None, evaluator: ExtendedEvaluator, base_iri: str, spec: ReportSpec,
             media_type: str, shared: SharedResults[WindowResult] | None = None,
             pinned: PinnedQuery | None = None) -> Callable[[list[int], int, int], bytes | None]:
    """What each evaluation gives the client: ``produce(ordinals, commit, at)`` evaluates the query over those
    elements (a window, or with ``content-change`` the window active at an arrival) and passes its result, as a
    bag, through the report policy and the stream operator (RStream: the result; IStream: what is new since the
    previous evaluation; DStream: what left it); ``at`` is the window's end or the arrival's time (µs). With
    ``pinned``, a registered query's result (``pinned_result``) instead of ``query`` over the window."""
    reporter = Reporter(spec)

    def produce(ordinals: list[int], commit: int, at: int) -> bytes | None:
        if ReportPolicy.NON_EMPTY_CONTENT in spec.policies and not ordinals:
            return None  # not evaluated, and not the previous window of the next one
        if pinned is not None:
            found = pinned_result(pinned, ordinals, commit, evaluator)
            if found is None:
                return None
            kept = reporter.report(at, numbered(found.items), len(ordinals))
            return None if kept is None else serialize_items(found.kind, [item for item, _ in kept], found.variables,
                                                             media_type)
        def evaluate() -> WindowResult:
            return window_result(stream, ordinals, commit, query, evaluator, base_iri)

        if shared is None or not ordinals:
            result = evaluate()
        else:  # every response asking this query of this window shares one evaluation
            key = (stream.config.name, ordinals[0], ordinals[-1], len(ordinals), commit, query, base_iri)
            result = shared.get(key, evaluate)
        kept = reporter.report(at, numbered(result.items), len(ordinals))
        if kept is None:
            return None
        return serialize_items(result.kind, [item for item, _ in kept], result.variables, media_type)

    return produce


def serialize_items(kind: str, items: list[Any], variables: tuple[str, ...], media_type: str) -> bytes:
    if kind == "quads":
        return _bytes(serialize(items, format=DATASET_FORMATS[media_type]))
    if kind == "triples":
        return _bytes(serialize(items, format=GRAPH_FORMATS[media_type]))
    if kind == "boolean":
        solutions: Any = Store().query("ASK {}" if items and items[0] else "ASK { FILTER(false) }")
    else:
        solutions = solutions_from_rows(list(variables),
                                        [{n: t for n, t in zip(variables, row, strict=True) if t is not None}
                                         for row in items])
    return solutions.serialize(format=RESULTS_FORMATS[media_type])  # type: ignore[no-any-return]


def _bytes(serialized: bytes | None) -> bytes:
    assert serialized is not None  # serialize() without an output returns the bytes
    return serialized
