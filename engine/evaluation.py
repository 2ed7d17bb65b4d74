"""Evaluating extended SPARQL (docs/extended-sparql.md): REVISION, WINDOWS, SERVICE, THEN() and quad templates.

``sparql_ext.parse_extended`` splits a query into standard SPARQL 1.1 with a placeholder per extension part.
Each part is evaluated over its own dataset (recursively: a part's inner query may itself be extended), its
solutions become a ``VALUES`` table spliced at the placeholder, and pyoxigraph evaluates the result.

- **Constant target**: the inner ``SELECT *`` is evaluated once. **Variable target** (``REVISION ?r``,
  ``SERVICE ?svc``): the part's prefix query (the group's elements before the part) is evaluated on the
  current dataset, the inner once per distinct value, and one table ``VALUES (?target ?v…)`` is spliced.
- **Datasets**: ``REVISION r`` → the RevisionedDataset after r (for a stream: its elements up to r);
  ``WINDOWS ref`` → that window of the current stream; ``SERVICE <this server's /streams/{name}?WINDOWS=…>``
  or an alias IRI of a stream (``urn:uuid:…?WINDOWS=…``) → the window, in-process; ``SERVICE <this
  server's /sparql>`` → the dataset, in-process; any other IRI → HTTP POST ``application/sparql-query``,
  SPARQL JSON results (``SILENT``: no error, the join identity).
- **Blank nodes** cannot be written in ``VALUES``: a part's blank node ``_:x`` is written as the IRI
  ``<urn:x-concentrator:bnode:x>`` (skolemized) and turned back into ``_:x`` in the final solutions, triples
  and quads (de-skolemized). Two parts' blank nodes are the same node only when their labels are equal:
  labels of one store are its own (a stream's blank nodes keep their labels across its elements).
- **THEN()** is the commit time of the dataset being evaluated: a window revision's commit time; for a
  one-shot window its last element's; for a revision the revision's; inside a part, the part's dataset's.
- **Locks**: a part's parts are evaluated before its own query runs, and each query holds the dataset's read
  lock only while it runs, so read locks never nest (a waiting writer would deadlock nested readers). The
  dataset's revision is pinned when the query starts, so every part and the main query read one state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from pyoxigraph import Literal, NamedNode, QueryBoolean, QuerySolutions, QueryTriples, Store, Triple

from engine.cache import StaticResults, is_static
from engine.context import EvaluationContext, QueryTarget, StreamRef
from engine.datasets import Datasets
from engine.errors import WindowNotComplete
from engine.events import checked_events, substitute_matches
from engine.remote import check_reachable, remote_rows
from engine.results import (
    SKOLEM_PREFIX,
    ConstructedQuads,
    ConstructedTriples,
    Row,
    Solutions,
    Term,
    deskolemize,
    deskolemized_solutions,
    drained,
    instantiate,
    rows_of,
    values_table,
    values_text,
)
from engine.selection import SelectedWindow, elements_key
from engine.syntax import checked_query
from sparql_ext import THEN_FUNCTION, ExtendedQuery, ExtensionPart, parse_extended
from sparql_ext.errors import ConcentratorError
from sparql_ext.subselects import standalone_subselects
from sparql_ext.windowing import WindowNotResolvable, format_micros
from store.dataset import RevisionedDataset
from store.errors import QueryFailed
from store.streams import StreamCatalog

_XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
# What a query that matches no pattern against its dataset runs on (ExtendedQuery.reads_data): read only, so shared
_NO_DATA = Store()


Result = QuerySolutions | QueryBoolean | ConstructedTriples | ConstructedQuads


class ExtendedEvaluator(Datasets):
    """Evaluates extended queries over the server's dataset and streams (see the module docstring), under one
    ``EvaluationContext`` (engine/context.py: its modes); which dataset a part reads: ``engine.datasets``."""

    def __init__(self, context: EvaluationContext) -> None:
        super().__init__(context)
        # which values of a SERVICE ?var name the window a firing has pinned, by the values themselves (a tuple of
        # terms; the prefix's distinct values are one tuple per Solutions, so a hit compares by identity): a firing
        # asks for the part and again when it narrows the part's sibling. Safe to keep for the evaluator's life: the
        # answer depends only on the values and the context's pins, bases and streams, which never change here, and
        # a firing's evaluator (``for_rule``) lives for one firing; without pins it is never asked.
        self._firings: dict[tuple[Term, ...], list[Term]] = {}

    @property
    def dataset(self) -> RevisionedDataset:
        return self.context.dataset

    @property
    def catalog(self) -> StreamCatalog | None:
        return self.context.catalog

    @property
    def cache(self) -> StaticResults[Solutions]:
        return self.context.cache

    def with_local_bases(self, local_bases: Iterable[str]) -> ExtendedEvaluator:
        """An evaluator for a request arriving at other base IRIs (``EvaluationContext.with_local_bases``)."""
        return ExtendedEvaluator(self.context.with_local_bases(local_bases))

    def for_rule(self, local_bases: Iterable[str], pins: Mapping[StreamRef, SelectedWindow],
                 sequences: Mapping[StreamRef, str] | None = None) -> ExtendedEvaluator:
        """The evaluator of one rule firing (``EvaluationContext.for_rule``)."""
        return ExtendedEvaluator(self.context.for_rule(local_bases, pins, sequences))

    # -- entry point ------------------------------------------------------------------------------------

    def query(self, text: str, target: QueryTarget) -> Result:
        """Evaluate an extended query: de-skolemized QuerySolutions, a QueryBoolean, a list of Triples
        (CONSTRUCT / DESCRIBE), or a list of Quads (CONSTRUCT with a quad template). ``MATCH`` clauses (event
        patterns, docs/events.md) are replaced by their matches first."""
        events = checked_events(text, target.base_iri)
        if events.clauses:
            text = substitute_matches(events, target.base_iri, lambda iri: self._event_stream(iri, target))
        extended = checked_query(text, target.base_iri)
        target = self._pinned(target)
        sparql = self._spliced(extended, target, answered=bool(self.context.pins))
        if not extended.reads_data:  # only the parts' tables: no need to open the dataset (a read lock, a snapshot)
            target = QueryTarget(_NO_DATA, None, None, target.then_time, target.base_iri)
        if extended.template is not None:
            solutions = self._select(sparql, target, extended.uses_then)
            return ConstructedQuads(instantiate(extended.template, solutions.rows))
        with self._reading(target) as store:  # read as it is evaluated (``drained``: never a local here)
            return drained(self._run(store, sparql, target, extended.uses_then), _deskolemized)

    # -- splicing parts ---------------------------------------------------------------------------------

    def _spliced(self, extended: ExtendedQuery, target: QueryTarget, *, answered: bool = False) -> str:
        """``extended.sparql`` with each placeholder replaced by its part's solutions as a VALUES table; with
        ``answered``, each static sub-SELECT that reads the dataset as the query does, by its solutions too (one
        evaluation per dataset revision: a rule's aggregate over the base data is not computed at every firing)."""
        sparql = extended.sparql
        tables = [(part.placeholder, self._table(part, target, extended.parts)) for part in extended.parts]
        if answered:
            tables += self._answered_subselects(extended, target)
        for (start, end), table in sorted(tables, key=lambda item: item[0][0], reverse=True):
            sparql = sparql[:start] + table + sparql[end:]
        return sparql

    def _answered_subselects(self, extended: ExtendedQuery, target: QueryTarget) -> list[tuple[tuple[int, int], str]]:
        """The static sub-SELECTs of ``extended`` (``sparql_ext.subselects``) over the revisioned dataset, each as
        ``{ VALUES … }`` of its solutions, from the per-revision cache. One holding a part, or whose solutions hold a
        blank node (a VALUES table cannot), stays as it is."""
        if target.store is not None or target.revision is None:
            return []
        answered: list[tuple[tuple[int, int], str]] = []
        for sub in standalone_subselects(extended.sparql):
            if any(sub.start < end and start < sub.end for start, end in (p.placeholder for p in extended.parts)):
                continue
            if not is_static(sub.query):
                continue
            solutions = self._select(sub.query, target, False, cacheable=True)
            table = values_text(solutions.variables, solutions.rows, keep_large=True)  # written once per revision
            if f"<{SKOLEM_PREFIX}" in table:  # a blank node (skolemized): looked for in the text, not term by term
                continue
            answered.append(((sub.start, sub.end), "{ " + table + " }"))
        return answered

    def _table(self, part: ExtensionPart, target: QueryTarget, siblings: tuple[ExtensionPart, ...] = ()) -> str:
        header = part.values_variables
        names = [v[1:] for v in header]
        if not part.target_is_variable:
            return values_text(names, self._part_rows(part, part.target, target))
        rows: list[Row] = []
        variable = part.target[1:]
        for value in self.target_values(part, target, siblings):
            try:
                part_rows = self._part_rows(part, value, target)
            except (WindowNotComplete, WindowNotResolvable):
                if not self.context.pins:
                    raise
                continue  # a rule firing: a stream with no complete window yet (or no element) joins nothing
            for row in part_rows:
                if variable in row and row[variable] != value:
                    continue  # the inner bound the target variable to something else: no join
                rows.append({**row, variable: value})
        return values_table(names, rows)

    def target_values(self, part: ExtensionPart, target: QueryTarget,
                      siblings: tuple[ExtensionPart, ...] = ()) -> list[Term]:
        """The values a part with a variable target reads, in order: the distinct bindings of the variable by the
        patterns before the part (its prefix) over ``target``. In an executor, the IRIs the driver resolved.

        In a rule firing, a ``SERVICE ?var`` whose values include the window that fired reads only that window, so
        a rule over many patients' streams reports the firing patient, not all of them; and another ``SERVICE
        ?var`` of its group (``siblings``: the parts of the query) reads only the values that go with it (the
        activity stream of the patient whose heart-rate window fired, not every patient's)."""
        given = self.context.targets.get(part.ident)
        if given is not None:
            return [NamedNode(iri) for iri in given]
        values = self._prefix_values(part, target)
        if not self.context.pins or part.kind != "service":
            return list(values)
        firing = self._firing(values)
        if firing:
            return list(firing)
        return self._joined_with_firing(part, values, target, siblings)

    def _prefix_values(self, part: ExtensionPart, target: QueryTarget) -> tuple[Term, ...]:
        variable = part.target[1:]
        prefix = parse_extended(part.prefix, target.base_iri)
        bound = self._select(self._spliced(prefix, target), target, prefix.uses_then,
                             cacheable=not prefix.parts)
        return bound.distinct(variable)

    def _firing(self, values: tuple[Term, ...]) -> list[Term]:
        """The values naming a window this evaluation has pinned (the window a rule fires on)."""
        kept = self._firings.get(values)
        if kept is not None:
            return kept
        addresses = self.pinned_addresses  # a firing sees every patient's IRI: only the pinned ones are parsed
        pins = self.context.pins
        firing = [v for v in values if isinstance(v, NamedNode) and v.value.partition("?")[0] in addresses
                  and self.windowed_input(v.value) in pins]
        self._firings[values] = firing
        return firing

    def _joined_with_firing(self, part: ExtensionPart, values: tuple[Term, ...], target: QueryTarget,
                            siblings: tuple[ExtensionPart, ...]) -> list[Term]:
        """``values`` narrowed to those the patterns of the group bind together with the firing window's IRI, when
        a sibling ``SERVICE ?var`` of the same group reads that window: the later part's prefix patterns, which
        bind both targets, selected for both (sparql_ext.prefixes.Prefix; one query per dataset revision, cached).
        Unchanged when there is no such sibling or the patterns cannot say (``Prefix.joinable``)."""
        mine = part.prefix_patterns
        for sibling in siblings:
            theirs = sibling.prefix_patterns
            if (sibling.ident == part.ident or sibling.kind != "service" or theirs is None or mine is None
                    or theirs.group != mine.group or sibling.target == part.target):
                continue
            firing = self._firing(self._prefix_values(sibling, target))
            if not firing:
                continue
            later = theirs if sibling.ident > part.ident else mine
            if not later.joinable or not {part.target, sibling.target} <= later.bound:
                return list(values)
            query = parse_extended(later.select((part.target, sibling.target)), target.base_iri)
            pairs = self._select(self._spliced(query, target), target, query.uses_then,
                                 cacheable=not query.parts).rows
            mine_name, theirs_name = part.target[1:], sibling.target[1:]
            joined = {row.get(mine_name) for row in pairs if row.get(theirs_name) in firing}
            return [v for v in values if v in joined]
        return list(values)

    def _part_rows(self, part: ExtensionPart, value: Term | str, target: QueryTarget) -> list[Row]:
        """The solutions of a part's inner pattern over the dataset its target (a constant or a value) names."""
        try:
            if part.kind == "service":
                iri = value if isinstance(value, str) else _iri_value(value, part)
                return self._service(part, iri, target)
            text = value if isinstance(value, str) else _designator_text(value)
            if part.kind == "revision":
                sub = self._revision_target(text, target)
            else:
                sub = self._window_target(text, target)
            return self._inner(part, sub).rows
        except (ConcentratorError, OSError, ValueError) as error:  # requests' errors are OSErrors
            if part.silent:  # SPARQL 1.1 Federated Query §4: one solution binding nothing (the join identity)
                return [{}]
            raise _failed(error, value if isinstance(value, str) else str(value)) from None

    def _inner(self, part: ExtensionPart, target: QueryTarget) -> Solutions:
        if isinstance(part.inner, ExtendedQuery):
            return self._select(self._spliced(part.inner, target), target, part.inner.uses_then)
        return self._select(part.inner, target, False, cacheable=True)

    # -- SERVICE and static solutions ---------------------------------------------------------------------

    def check_reachable(self, iri: str) -> None:
        """Refuse a SERVICE IRI whose host is not on the allowlist (``engine.remote.check_reachable``)."""
        check_reachable(iri, self.context.allow_hosts)

    def static_solutions(self, sparql: str, base_iri: str | None) -> Solutions:
        """A SELECT that reads only the dataset, at HEAD, through the per-revision cache (rule input discovery)."""
        return self._select(sparql, self._pinned(QueryTarget(base_iri=base_iri)), False, cacheable=True)

    def _service(self, part: ExtensionPart, iri: str, target: QueryTarget) -> list[Row]:
        window = self.local_window(iri)
        if window is not None:
            stream, selected = window
            if isinstance(part.inner, str) and is_static(part.inner):
                # a window's static inner SELECT, under the key _select caches it with: the rules over one window
                # find its solutions without the window's dataset being looked up
                inner = part.inner
                return self.cache.get(inner, -1, _elements_context(iri, elements_key(stream, selected)),
                                      lambda: self._select(inner, self._stream_target(stream, selected, iri),
                                                           False)).rows
            return self._inner(part, self._stream_target(stream, selected, iri)).rows
        local = self.local_target(iri)
        if local is not None:
            return self._inner(part, local).rows
        context = self.context
        if context.http is None:
            raise QueryFailed(f"SERVICE <{iri}> is not this server's and no HTTP client is configured")
        text = part.inner.original if isinstance(part.inner, ExtendedQuery) else part.inner
        return remote_rows(context.http, iri, text, context.allow_hosts, context.http_timeout)

    # -- running pyoxigraph ------------------------------------------------------------------------------

    @contextmanager
    def _reading(self, target: QueryTarget) -> Iterator[Store]:
        if target.store is not None:
            with nullcontext(target.store) as store:
                yield store
        else:
            with self.dataset.reading(target.revision) as store:
                yield store

    def _select(self, sparql: str, target: QueryTarget, uses_then: bool, *, cacheable: bool = False) -> Solutions:
        """Solutions of a SELECT; ``cacheable`` ones that read only the dataset come from the per-revision cache."""
        if cacheable and not uses_then and is_static(sparql):
            if target.store is None and target.revision is not None:
                context = f"{target.base_iri} {target.default_graph} {target.named_graphs}"
                return self.cache.get(sparql, target.revision, context, lambda: self._select(sparql, target, False))
            if target.elements_key is not None and target.default_graph is None and target.named_graphs is None:
                # a window's elements: the rules reading one window share the solutions of their common parts
                context = _elements_context(target.base_iri, target.elements_key)
                return self.cache.get(sparql, -1, context, lambda: self._select(sparql, target, False))
        with self._reading(target) as store:
            return drained(self._run(store, sparql, target, uses_then), _solutions)

    @staticmethod
    def _run(store: Store, sparql: str, target: QueryTarget, uses_then: bool) -> Any:
        functions: dict[NamedNode, Any] = {NamedNode(THEN_FUNCTION): _then(target.then_time)}
        try:
            return store.query(sparql, base_iri=target.base_iri, default_graph=target.default_graph,
                               named_graphs=target.named_graphs, custom_functions=functions)
        except SyntaxError as error:  # only rewritten text fails here: a defect of the rewriting
            raise QueryFailed.from_pyoxigraph("rewritten query is not valid SPARQL 1.1", error) from None
        except (OSError, RuntimeError, ValueError) as error:
            raise QueryFailed(f"query evaluation failed: {error}") from None


# -- helpers ------------------------------------------------------------------------------------------------

def _deskolemized(result: Any) -> Result:
    if isinstance(result, QueryBoolean):
        return result
    if isinstance(result, QueryTriples):
        return ConstructedTriples(Triple(*(deskolemize(t) for t in (x.subject, x.predicate, x.object))) for x in result)
    return deskolemized_solutions(result)


def _solutions(result: Any) -> Solutions:
    if not isinstance(result, QuerySolutions):
        raise QueryFailed("an extension part or prefix must be a SELECT")
    return Solutions([v.value for v in result.variables], rows_of(result))


def _elements_context(base_iri: str | None, key: str) -> str:
    """What a static query's cached solutions over a window's elements depend on besides its text (the window's
    IRI, which is its base, and ``elements_key``)."""
    return f"{base_iri} {key}"


def _then(micros: int | None) -> Callable[[], Literal | None]:
    value = None if micros is None else Literal(format_micros(micros), datatype=_XSD_DATETIME)
    return lambda: value


def _iri_value(value: Term, part: ExtensionPart) -> str:
    if not isinstance(value, NamedNode):
        raise QueryFailed(f"SERVICE {part.target}: bound to {value}, which is not an IRI")
    return value.value


def _designator_text(value: Term) -> str:
    text = value.value if isinstance(value, NamedNode | Literal) else str(value)
    return text[len("urn:uuid:"):] if text.startswith("urn:uuid:") else text


def _failed(error: Exception, target: str) -> ConcentratorError:
    if isinstance(error, ConcentratorError):
        return error
    return QueryFailed(f"SERVICE <{target.strip('<>')}> failed: {error}")


