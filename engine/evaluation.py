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

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlsplit

from pyoxigraph import (
    Literal,
    NamedNode,
    QueryBoolean,
    QueryResultsFormat,
    QuerySolutions,
    QueryTriples,
    Store,
    Triple,
    parse_query_results,
)

from engine.cache import StaticResults, is_static
from engine.errors import EventSourceInvalid, ServiceFailed, ServiceLoop, ServiceNotAllowed, WindowNotComplete
from engine.events import checked_events, substitute_matches
from engine.results import (
    SKOLEM_PREFIX,
    ConstructedQuads,
    ConstructedTriples,
    Row,
    Solutions,
    Term,
    deskolemize,
    deskolemized_solutions,
    instantiate,
    rows_of,
    values_table,
    values_text,
)
from engine.selection import SelectedWindow, elements_key, revision_selection, select_window
from engine.syntax import checked_query
from sparql_ext import THEN_FUNCTION, ExtendedQuery, ExtensionPart, parse_extended
from sparql_ext.errors import ConcentratorError
from sparql_ext.subselects import standalone_subselects
from sparql_ext.windowed import windowed_params
from sparql_ext.windowing import WindowNotResolvable, format_micros
from sparql_ext.windowref import parse_window_ref
from store.dataset import RevisionedDataset
from store.errors import NestedTooDeep, QueryFailed
from store.limits import check_nesting
from store.stream import Stream
from store.streams import StreamCatalog

_XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
# What a query that matches no pattern against its dataset runs on (ExtendedQuery.reads_data): read only, so shared
_NO_DATA = Store()


Result = QuerySolutions | QueryBoolean | ConstructedTriples | ConstructedQuads


@dataclass(frozen=True)
class QueryTarget:
    """The dataset a query is evaluated over.

    ``store`` None means the evaluator's RevisionedDataset at ``revision`` (None: HEAD when the query
    starts): the evaluator then takes the read lock itself, once per query it runs. ``stream`` is set
    when the dataset is (a window or a revision of) a stream: ``WINDOWS`` and ``REVISION`` apply to it.
    """

    store: Store | None = None
    default_graph: list[Any] | None = None
    named_graphs: list[Any] | None = None
    then_time: int | None = None  # µs: what THEN() returns
    base_iri: str | None = None
    revision: int | None = None
    stream: Stream | None = None
    #: which elements ``store`` holds, when it is a window or revision of ``stream``: the same elements always give
    #: the same dataset (elements never change), so static queries over it are cached under this key
    elements_key: str | None = None


#: The header an HTTP SERVICE call carries: how many SERVICE calls led to it. A request that arrives with it (this
#: server called through a chain of SERVICE calls, possibly itself under another name) passes it on plus one.
HOPS_HEADER = "Concentrator-Service-Hops"
#: The longest chain of HTTP SERVICE calls a query may start or continue (a deeper one is refused, 508).
MAX_SERVICE_HOPS = 4
#: Redirects an HTTP SERVICE call follows, each hop checked against the allowlist.
MAX_SERVICE_REDIRECTS = 5
#: The SERVICE hops that led to the request being evaluated (set by the protocol from ``HOPS_HEADER``).
service_hops: ContextVar[int] = ContextVar("service_hops", default=0)
_REDIRECTS = (301, 302, 303, 307, 308)


class HttpResponse(Protocol):
    status_code: int
    content: bytes
    text: str
    headers: Any


class HttpSession(Protocol):
    """What the evaluator needs of ``requests.Session`` (store/ does not import HTTP libraries: the
    protocol layer passes the session in)."""

    def post(self, url: str, *, data: bytes, timeout: float, headers: dict[str, str],
             allow_redirects: bool = True) -> HttpResponse: ...


def host_allowed(url: str, allow_hosts: frozenset[str] | None) -> bool:
    """Whether an http(s) URL's host (or host:port) is on an allowlist (None: any host). The server reaches other
    machines only where its operator allows it (``--service-allow``): SERVICE calls, and LDES sources."""
    if allow_hosts is None:
        return True
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    hostport = f"{host}:{parts.port}" if parts.port else host
    return parts.scheme in ("http", "https") and (host in allow_hosts or hostport in allow_hosts)


class ExtendedEvaluator:
    """Evaluates extended queries over the server's dataset and streams (see the module docstring)."""

    def __init__(self, dataset: RevisionedDataset, catalog: StreamCatalog | None, local_bases: list[str],
                 http: HttpSession | None = None, *, window_timeout: float = 30.0,
                 http_timeout: float = 60.0, pins: dict[tuple[str, str], SelectedWindow] | None = None,
                 cache: StaticResults[Solutions] | None = None, allow_hosts: frozenset[str] | None = None,
                 preloaded: dict[str, QueryTarget] | None = None,
                 sequences: dict[tuple[str, str], str] | None = None,
                 targets: dict[int, tuple[str, ...]] | None = None) -> None:
        self.dataset = dataset
        # SERVICE IRI -> the dataset it names, copied in already (a rule evaluated in a Spark executor, which has
        # the window's quads but no catalog: rules/tasks.py)
        self.preloaded = preloaded or {}
        # a top-level SERVICE ?var part (by ident) -> the IRIs it reads, resolved by the driver (an executor)
        self.targets = targets or {}
        # hosts ("host" or "host:port") SERVICE may reach over HTTP; None: any (this server is in-process anyway)
        self.allow_hosts = allow_hosts
        self.cache: StaticResults[Solutions] = cache if cache is not None else StaticResults()
        # (stream name, canonical repeating WindowRef) -> the window to use instead of the latest (rules)
        self.pins = pins or {}
        # (stream name, canonical repeating WindowRef) -> the sequence to read its latest window from: a rule's own
        # (a HEAD ref names another sequence for every registration); without it, the freshest of that ref
        self.sequences = sequences or {}
        self.catalog = catalog
        self.local_bases = [base.rstrip("/") for base in local_bases]
        self._addresses: frozenset[str] | None = None  # _pinned_addresses, once per evaluator (its pins are fixed)
        # a firing reads a SERVICE ?var's values, and which name the firing window, for the part and again when it
        # narrows its sibling: once per evaluator (one firing), by rows / values object (the object is kept with them,
        # so its id is not reused); per evaluator, so nothing outlives the firing
        self._distinct: dict[tuple[int, str], tuple[list[Row], tuple[Term, ...]]] = {}
        self._firings: dict[int, tuple[tuple[Term, ...], list[Term]]] = {}
        self.http = http  # None: SERVICE to other endpoints fails (SILENT: no solutions)
        self.window_timeout = window_timeout
        self.http_timeout = http_timeout

    def with_local_bases(self, local_bases: list[str]) -> ExtendedEvaluator:
        """The same evaluator for a request arriving at other base IRIs (e.g. ``request.host_url``), which are this
        server's besides those it knew already (the names it serves under: a request's ``Host`` is the client's
        word, so a SERVICE to ``localhost`` is in-process whatever ``Host`` said)."""
        return ExtendedEvaluator(self.dataset, self.catalog, self._bases(local_bases), self.http,
                                 window_timeout=self.window_timeout, http_timeout=self.http_timeout, pins=self.pins,
                                 cache=self.cache, allow_hosts=self.allow_hosts, sequences=self.sequences)

    def for_rule(self, local_bases: list[str], pins: dict[tuple[str, str], SelectedWindow],
                 sequences: dict[tuple[str, str], str] | None = None) -> ExtendedEvaluator:
        """The evaluator a rule firing uses: repeating refs named in ``pins`` resolve to the pinned window,
        the others to the latest complete window of the rule's own sequence (``sequences``) without waiting."""
        return ExtendedEvaluator(self.dataset, self.catalog, self._bases(local_bases), self.http, window_timeout=0.0,
                                 http_timeout=self.http_timeout, pins=pins, cache=self.cache,
                                 allow_hosts=self.allow_hosts, sequences=sequences)

    def _bases(self, local_bases: list[str]) -> list[str]:
        return list(dict.fromkeys([*(base.rstrip("/") for base in local_bases), *self.local_bases]))

    def _window_of(self, stream: Stream, text: str) -> SelectedWindow:
        if not (self.pins or self.sequences):
            return select_window(stream, text, self.window_timeout)
        key = (stream.config.name, _canonical_ref(text))
        pinned = self.pins.get(key)
        if pinned is not None:
            return pinned
        return select_window(stream, text, self.window_timeout, self.sequences.get(key))

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
        sparql = self._spliced(extended, target, answered=bool(self.pins))
        if not extended.reads_data:  # only the parts' tables: no need to open the dataset (a read lock, a snapshot)
            target = QueryTarget(_NO_DATA, None, None, target.then_time, target.base_iri)
        if extended.template is not None:
            solutions = self._select(sparql, target, extended.uses_then)
            return ConstructedQuads(instantiate(extended.template, solutions.rows))
        with self._reading(target) as store:
            result = self._run(store, sparql, target, extended.uses_then)
            if isinstance(result, QueryBoolean):
                return result
            if isinstance(result, QueryTriples):
                return ConstructedTriples(
                    Triple(*(deskolemize(t) for t in (x.subject, x.predicate, x.object))) for x in result)
            return deskolemized_solutions(result)

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
                if not self.pins:
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
        given = self.targets.get(part.ident)
        if given is not None:
            return [NamedNode(iri) for iri in given]
        values = self._prefix_values(part, target)
        if not self.pins or part.kind != "service":
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
        key = (id(bound.rows), variable)
        kept = self._distinct.get(key)
        if kept is not None and kept[0] is bound.rows:
            return kept[1]
        values = tuple(dict.fromkeys(row[variable] for row in bound.rows if variable in row))
        self._distinct[key] = (bound.rows, values)
        return values

    def _firing(self, values: tuple[Term, ...]) -> list[Term]:
        """The values naming a window this evaluation has pinned (the window a rule fires on)."""
        kept = self._firings.get(id(values))
        if kept is not None and kept[0] is values:
            return kept[1]
        addresses = self._pinned_addresses()  # a firing sees every patient's IRI: only the pinned ones are parsed
        firing = [v for v in values if isinstance(v, NamedNode) and v.value.partition("?")[0] in addresses
                  and self.windowed_input(v.value) in self.pins]
        self._firings[id(values)] = (values, firing)
        return firing

    def _pinned_addresses(self) -> frozenset[str]:
        """The IRIs (before ``?``) of the pinned windows' streams: ``BASE/streams/NAME`` and the streams' aliases."""
        if self._addresses is None:
            names = {stream for stream, _ in self.pins}
            streams = [self.catalog.find(name) for name in names] if self.catalog is not None else []
            self._addresses = frozenset(
                [f"{base}/streams/{name}" for base in self.local_bases for name in names]
                + [alias for stream in streams if stream is not None for alias in stream.config.aliases])
        return self._addresses

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

    # -- datasets ------------------------------------------------------------------------------------------

    def _pinned(self, target: QueryTarget) -> QueryTarget:
        if target.store is not None or (target.revision is not None and target.then_time is not None):
            return target
        ordinal = self.dataset.head if target.revision is None else target.revision
        then_time = target.then_time
        if then_time is None:
            revision = self.dataset.revision(ordinal)
            if revision is not None:
                then_time = int(revision.committed_at.timestamp() * 1_000_000)
        # (built whole: dataclasses.replace costs several µs, and every rule firing pins its target)
        return QueryTarget(None, target.default_graph, target.named_graphs, then_time, target.base_iri, ordinal,
                           target.stream, target.elements_key)

    def _revision_target(self, text: str, target: QueryTarget) -> QueryTarget:
        if target.stream is not None:
            return self._stream_target(target.stream, revision_selection(target.stream, text), target.base_iri)
        ordinal = self.dataset.resolve(text)
        return self._pinned(QueryTarget(None, target.default_graph, target.named_graphs, None, target.base_iri,
                                        ordinal if ordinal is not None else self.dataset.head))

    def _window_target(self, text: str, target: QueryTarget) -> QueryTarget:
        if target.stream is None:
            raise QueryFailed(f"WINDOWS {text}: the dataset being queried is not a stream (query a stream IRI, "
                              "or use SERVICE <…/streams/NAME?WINDOWS=…>)")
        return self._stream_target(target.stream, self._window_of(target.stream, text), target.base_iri)

    @staticmethod
    def _stream_target(stream: Stream, selected: SelectedWindow, base_iri: str | None) -> QueryTarget:
        return QueryTarget(stream.window_store(selected.ordinals), None, None, selected.commit, base_iri, None,
                           stream, elements_key(stream, selected))

    def check_reachable(self, iri: str) -> None:
        """Refuse a SERVICE IRI whose host is not on the allowlist (a rule or query must not probe other
        machines through this server)."""
        if not host_allowed(iri, self.allow_hosts):
            assert self.allow_hosts is not None
            parts = urlsplit(iri)
            host = (parts.hostname or "").lower()
            hostport = f"{host}:{parts.port}" if parts.port else host
            raise ServiceNotAllowed(f"SERVICE <{iri}>: {hostport or iri} is not on this server's SERVICE allowlist "
                                    f"({', '.join(sorted(self.allow_hosts)) or 'empty: only this server'}); "
                                    "the operator adds hosts with --service-allow")

    def is_local(self, iri: str) -> bool:
        """Whether a SERVICE IRI is evaluated in-process (this server's /sparql, streams and stream aliases)."""
        if any(iri == f"{base}/sparql" or iri.startswith(f"{base}/sparql?") for base in self.local_bases):
            return True
        return self.local_stream(iri)[0] is not None

    def static_solutions(self, sparql: str, base_iri: str | None) -> Solutions:
        """A SELECT that reads only the dataset, at HEAD, through the per-revision cache (rule input discovery)."""
        return self._select(sparql, self._pinned(QueryTarget(base_iri=base_iri)), False, cacheable=True)

    def windowed_input(self, iri: str) -> tuple[str, str] | None:
        """(stream name, canonical WindowRef) when ``iri`` is a repeating windowed IRI of this server's stream
        (``BASE/streams/NAME?WINDOWS=R…`` or ``ALIAS?WINDOWS=R…``): what a rule reading it fires on."""
        stream, query_string = self.local_stream(iri)
        if stream is None:
            return None
        windows = windowed_params(query_string).windows
        if windows is None:
            return None
        ref = parse_window_ref(windows)
        return (stream, str(ref)) if ref.repeating else None

    def _event_stream(self, iri: str | None, target: QueryTarget) -> Stream:
        """The stream an EVENT of a query reads: its IRI's, or the stream being queried when it names none."""
        if iri is None:
            if target.stream is None:
                raise EventSourceInvalid("an EVENT without a stream IRI reads the stream being queried: query a "
                                         "stream (/streams/NAME), or name it: EVENT <streams/NAME?WINDOWS=…> { … }")
            return target.stream
        name, _ = self.local_stream(iri)
        stream = self.catalog.find(name) if name is not None and self.catalog is not None else None
        if stream is None:
            raise EventSourceInvalid(f"EVENT <{iri}> is not a stream of this server (BASE/streams/NAME or a stream "
                                     "alias)")
        return stream

    def local_stream(self, iri: str) -> tuple[str | None, str]:
        """The name of the stream of this server ``iri`` addresses (None if none) and the IRI's query string."""
        if self.catalog is None:
            return None, ""
        for base in self.local_bases:
            if iri.startswith(f"{base}/streams/"):
                parts = urlsplit(iri)
                return parts.path.rsplit("/", 1)[-1], parts.query
        address, _, query_string = iri.partition("?")
        stream = self.catalog.by_alias(address)
        return (stream.config.name, query_string) if stream is not None else (None, "")

    def local_target(self, iri: str) -> QueryTarget | None:
        """The in-process dataset a SERVICE IRI names, or None when it is not this server's."""
        if iri in self.preloaded:
            return self.preloaded[iri]
        for base in self.local_bases:
            if iri == f"{base}/sparql" or iri.startswith(f"{base}/sparql?"):
                return self._pinned(QueryTarget(base_iri=iri))
        name, query_string = self.local_stream(iri)
        if name is None or self.catalog is None:
            return None
        return self._windowed(self.catalog.get(name), query_string, iri)

    def _windowed(self, stream: Stream, query_string: str, iri: str) -> QueryTarget:
        return self._stream_target(stream, self._selection(stream, query_string), iri)

    def _selection(self, stream: Stream, query_string: str) -> SelectedWindow:
        windows = _windows_param(query_string)
        return revision_selection(stream, None) if windows is None else self._window_of(stream, windows)

    def local_window(self, iri: str) -> tuple[Stream, SelectedWindow] | None:
        """The stream and the elements a SERVICE IRI of this server's streams names (pins applied, as
        ``local_target`` selects them), without building their dataset; None for any other IRI."""
        if iri in self.preloaded:
            return None
        name, query_string = self.local_stream(iri)
        if name is None or self.catalog is None:
            return None
        stream = self.catalog.get(name)
        return stream, self._selection(stream, query_string)

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
        if self.http is None:
            raise QueryFailed(f"SERVICE <{iri}> is not this server's and no HTTP client is configured")
        text = part.inner.original if isinstance(part.inner, ExtendedQuery) else part.inner
        content = self._remote(iri, text.encode("utf-8"))
        try:
            check_nesting(content, QueryResultsFormat.JSON.media_type)  # never too deep for the parser
            results = parse_query_results(content, QueryResultsFormat.JSON)
        except (SyntaxError, ValueError):
            raise ServiceFailed(f"SERVICE <{iri}> did not answer with SPARQL JSON results") from None
        except NestedTooDeep as error:
            raise ServiceFailed(f"SERVICE <{iri}> answered SPARQL JSON results with {error.message}") from None
        if isinstance(results, QueryBoolean):
            return [{}] if bool(results) else []
        return rows_of(results)

    def _remote(self, iri: str, body: bytes) -> bytes:
        """POST a query to another endpoint: every redirect hop checked against the allowlist (re-posting the query),
        one more SERVICE hop announced, and only the status of a failure reported (a remote body is never passed on
        to the client: it may be an internal page)."""
        assert self.http is not None
        hops = service_hops.get() + 1
        if hops > MAX_SERVICE_HOPS:
            raise ServiceLoop(f"SERVICE <{iri}> would be the {hops}th SERVICE call of a chain (this request arrived "
                              f"through {hops - 1}); the limit is {MAX_SERVICE_HOPS}: a query that calls this server "
                              "back loops")
        url = iri
        for _ in range(MAX_SERVICE_REDIRECTS + 1):
            self.check_reachable(url)
            response = self.http.post(url, data=body, timeout=self.http_timeout, allow_redirects=False, headers={
                "Content-Type": "application/sparql-query; charset=utf-8",
                "Accept": "application/sparql-results+json", HOPS_HEADER: str(hops)})
            location = response.headers.get("Location") if response.status_code in _REDIRECTS else None
            if location is None:
                break
            url = urljoin(url, location)
        else:
            raise ServiceFailed(f"SERVICE <{iri}> redirected more than {MAX_SERVICE_REDIRECTS} times")
        if response.status_code != 200:
            moved = f" (redirected to <{url}>)" if url != iri else ""
            raise ServiceFailed(f"SERVICE <{iri}>{moved} answered HTTP {response.status_code}")
        return response.content

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
            result = self._run(store, sparql, target, uses_then)
            if not isinstance(result, QuerySolutions):
                raise QueryFailed("an extension part or prefix must be a SELECT")
            return Solutions([v.value for v in result.variables], rows_of(result))

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

@functools.lru_cache(maxsize=4096)
def _windows_param(query_string: str) -> str | None:
    """The WindowRef text of a windowed IRI's query string (rules ask for the same few IRIs on every firing)."""
    return windowed_params(query_string).windows


@functools.lru_cache(maxsize=4096)
def _canonical_ref(text: str) -> str:
    """A WindowRef text in canonical form (the key of rule pins and sequences)."""
    return str(parse_window_ref(text))


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


