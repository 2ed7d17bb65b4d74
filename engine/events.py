"""Event patterns for the engine (docs/events.md): what pyoxigraph does for the pure matcher
(``sparql_ext.event_matching``), shared by queries and event rules.

- :func:`checked_events`: a query's MATCH clauses parsed and every piece checked by pyoxigraph, errors at the line
  and column of the user's text;
- :func:`element_solutions`: the solutions of each EVENT's P over one element (RSEP-QL Eq. 4), from an in-memory
  store of the element's content as the element log holds it;
- :func:`element_depth`: the derivation depth an event rule wrote into an element (recursion's bound);
- :func:`filter_function`: the matcher's FILTER evaluation (a filter's query on an empty store, bindings
  substituted);
- :func:`substitute_matches`: a query's MATCH clauses replaced by their matches as ``VALUES`` tables, evaluated once
  at the latest element's time (RSEP-QL's evaluation at t): what a one-shot query with ``MATCH`` answers. Event
  *rules* (rules/event_rules.py) match incrementally as elements arrive instead.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from pyoxigraph import BlankNode, DefaultGraph, Literal, NamedNode, RdfFormat, Store, Variable

from engine.results import values_table
from engine.syntax import check_syntax, checked_query
from sparql_ext import Event, EventFilter, EventMatcher, EventQuery, Match, MatchClause, parse_events
from sparql_ext.errors import QuerySyntaxError
from sparql_ext.events import EventPatternError, filters_of
from store.stream import Stream

FilterFunction = Callable[[EventFilter, Mapping[str, Any], int, int], bool]


@functools.lru_cache(maxsize=4096)
def checked_events(text: str, base: str | None) -> EventQuery:
    """``text``'s MATCH clauses (none: ``EventQuery.clauses`` is empty), each EVENT's pattern, each event FILTER and
    the rest of the query checked; ``QuerySyntaxError`` (400) at the line and column of ``text``. Cached, as
    ``checked_query``: every rule firing asks (a failing text raises and is not cached)."""
    query = parse_events(text, base)
    for clause in query.clauses:
        for event in clause.events:
            check_syntax(event.query_at(0), text, _mapper(text, event.query_at(0), event.group, event.span[0]))
        for event_filter in filters_of(clause.pattern):
            checked = event_filter.query(0, 0)
            check_syntax(checked, text, _mapper(text, checked, event_filter.expression, event_filter.span[0]))
    if query.clauses:
        try:
            checked_query(query.sparql, base)
        except QuerySyntaxError as error:
            raise query.syntax_error(_detail(error), error.offset) from None
    return query


def _detail(error: QuerySyntaxError) -> str:
    return re.sub(r"^Syntax error at line \d+ column \d+: ", "", error.message)


def _mapper(text: str, checked: str, piece: str, near: int) -> Callable[[int], int]:
    """Offsets in ``checked`` (a query made around ``piece`` of the user's text) -> offsets in ``text``."""
    in_checked = checked.find(piece)
    in_text = text.find(piece, near)
    if in_checked < 0 or in_text < 0:  # the interval functions were substituted: the piece's start is near enough
        return lambda offset: near
    return lambda offset: in_text + min(max(offset - in_checked, 0), len(piece))


def filter_function(base: str | None) -> FilterFunction:
    """The matcher's FILTER evaluation: the filter's query on an empty store, the event's bindings substituted."""
    empty = Store()

    def holds(event_filter: EventFilter, bindings: Mapping[str, Any], start: int, end: int) -> bool:
        substitutions = {Variable(name): bindings[name] for name in event_filter.variables if name in bindings}
        text = event_filter.query(start, end, frozenset(v.value for v in substitutions))
        solutions = empty.query(text, substitutions=substitutions, base_iri=base)
        return any(True for _ in solutions)  # type: ignore[union-attr]
    return holds


def element_solutions(stream: Stream, ordinal: int, at: int, events: list[Event],
                      base: str | None) -> dict[int, list[dict[str, Any]]]:
    """The solutions of each of ``events`` (EVENTs over ``stream``) on element ``ordinal`` at time ``at``: its P over
    the element's graph (RSEP-QL Eq. 4)."""
    store = Store()
    store.load(stream.contents([ordinal]), RdfFormat.TRIG, lenient=True)  # the log's content is pyoxigraph's own
    graphs: list[NamedNode | BlankNode | DefaultGraph] = list(store.named_graphs())
    solutions: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        if not graphs:
            solutions[event.ident] = []
            continue
        result = store.query(event.query_at(at), default_graph=graphs, base_iri=base)
        variables = result.variables  # type: ignore[union-attr]
        solutions[event.ident] = [{v.value: row[v] for v in variables if row[v] is not None}
                                  for row in result]  # type: ignore[union-attr]
    return solutions


EVENT_DEPTH = NamedNode("urn:x-concentrator:event#depth")


def element_depth(stream: Stream, ordinal: int) -> int:
    """The derivation depth an event rule wrote into element ``ordinal`` (``<g> ev:depth n`` in its graph), 0 for an
    element no event rule derived (docs/events.md, recursion)."""
    store = Store()
    store.load(stream.contents([ordinal]), RdfFormat.TRIG, lenient=True)
    depths = [int(quad.object.value) for quad in store.quads_for_pattern(None, EVENT_DEPTH, None)
              if isinstance(quad.object, Literal) and quad.object.value.isdigit()]
    return max(depths, default=0)


def substitute_matches(query: EventQuery, base: str | None,
                       stream_of: Callable[[str | None], Stream]) -> str:
    """``query.sparql`` with each MATCH clause replaced by a ``VALUES`` table of its matches at the latest element's
    time (times stripped, RSEP-QL Eq. 8). ``stream_of(iri)``: the stream an EVENT reads (None: the stream being
    queried); it raises the error to answer for an IRI that is not one."""
    sparql = query.sparql
    for clause in sorted(query.clauses, key=lambda c: c.placeholder[0], reverse=True):
        matches = match_once(clause, base, stream_of)
        table = values_table(list(clause.variables), [dict(match.bindings) for match in matches])
        start, end = clause.placeholder
        sparql = sparql[:start] + table + sparql[end:]
    return sparql


def match_once(clause: MatchClause, base: str | None, stream_of: Callable[[str | None], Stream]) -> list[Match]:
    """Every match of ``clause`` at the latest element's time of its streams (one evaluation, as a query asks).

    Each EVENT's P is evaluated only on the elements its window holds at that time: a first pass over the elements'
    times alone finds the windows' runs."""
    streams = {iri: stream_of(iri) for iri in clause.streams}
    arrivals = sorted((at, position, ordinal, iri) for position, (iri, stream) in enumerate(streams.items())
                      for ordinal in range(stream.first_ordinal, stream.head() + 1)
                      if (at := stream.time_of(ordinal)) is not None)
    if not arrivals:
        return []
    filters = filter_function(base) if filters_of(clause.pattern) else None
    probe = EventMatcher(clause, index_of=lambda iri: streams[iri], filter=filters)
    for at, _, ordinal, iri in arrivals:
        probe.add(ordinal, at, {}, stream=iri)
    probe.evaluate()
    runs = probe.runs()
    events_of: dict[str | None, list[Event]] = {iri: [] for iri in streams}
    for event in clause.events:
        events_of[event.window.stream].append(event)
    matcher = EventMatcher(clause, index_of=lambda iri: streams[iri], filter=filters)
    for at, _, ordinal, iri in arrivals:
        reached = [event for event in events_of[iri] if (run := runs.get(event.window.key)) is not None
                   and run[0] <= ordinal <= run[1]]
        solutions = element_solutions(streams[iri], ordinal, at, reached, base) if reached else {}
        matcher.add(ordinal, at, solutions, stream=iri)
    return matcher.evaluate()


__all__ = ["EventPatternError", "FilterFunction", "checked_events", "element_solutions", "filter_function",
           "match_once", "substitute_matches"]
