"""What registration learns from an event rule's text (``MATCH { … }``, docs/events.md): its clause, the streams its
EVENTs read, and the 400s (at the line and column of the user's text) for what cannot be an event rule. The rule
registry calls :func:`event_rule_spec` for every rule; ``rules.event_rules`` runs the rules it accepts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.evaluation import ExtendedEvaluator
from engine.events import checked_events
from engine.results import values_table
from engine.syntax import checked_query
from rules.errors import RuleRejected
from sparql_ext import EventQuery, MatchClause
from sparql_ext.errors import QuerySyntaxError, SparqlExtError


@dataclass(frozen=True)
class EventRuleSpec:
    """What registration learns from an event rule's text."""

    query: EventQuery
    clause: MatchClause
    streams: dict[str, str]  # the stream IRI as the clause names it -> this server's stream name

    def construct_text(self, bindings: Mapping[str, Any]) -> str:
        """The rule with its MATCH replaced by one solution: the query that instantiates the template for it."""
        start, end = self.clause.placeholder
        table = values_table(list(self.clause.variables), [dict(bindings)])
        return self.query.sparql[:start] + table + self.query.sparql[end:]


def event_rule_spec(text: str, base: str, evaluator: ExtendedEvaluator) -> EventRuleSpec | None:
    """The event rule ``text`` is, None when it has no MATCH clause; ``RuleRejected`` (400) naming the problem, at
    the line and column of ``text`` for syntax errors, when it cannot be one."""
    try:
        query = checked_events(text, base)
    except SparqlExtError as error:
        raise RuleRejected(f"rule is not valid extended SPARQL: {error}") from None
    if not query.clauses:
        return None
    if len(query.clauses) > 1:
        second = QuerySyntaxError("an event rule has one MATCH clause (its matches are its firings)", text,
                                  query.clauses[1].source_span[0])
        raise RuleRejected(f"rule is not valid extended SPARQL: {second}")
    clause = query.clauses[0]
    extended = checked_query(query.sparql, base)  # checked by checked_events: cached
    if extended.template is None and "CONSTRUCT" not in query.sparql.upper():  # as analyse_rule judges it
        raise RuleRejected("a rule must be a CONSTRUCT query")
    for part in extended.parts:
        if part.kind == "windows" or (part.kind == "service" and not part.target_is_variable
                                      and evaluator.windowed_input(part.target) is not None):
            raise RuleRejected(f"an event rule fires on each element of the streams its EVENTs read; it cannot also "
                               f"read a sequence of windows ({part.kind.upper()} {part.target}): name that window in "
                               "an EVENT instead")
    streams: dict[str, str] = {}
    for event in clause.events:
        iri = event.window.stream
        if iri is None:
            unnamed = QuerySyntaxError("in a rule, an EVENT names its stream: EVENT <streams/NAME?WINDOWS=…> { … }",
                                       text, event.span[0])
            raise RuleRejected(f"rule is not valid extended SPARQL: {unnamed}")
        name, _ = evaluator.local_stream(iri)
        if name is None:
            raise RuleRejected(f"EVENT <{iri}> is not a stream of this server (BASE/streams/NAME or a stream alias)")
        if evaluator.catalog is None or evaluator.catalog.find(name) is None:
            raise RuleRejected(f"EVENT <{iri}> reads stream {name}, which does not exist: create it first "
                               "(PUT /streams/NAME)")
        streams[iri] = name
    return EventRuleSpec(query, clause, streams)
