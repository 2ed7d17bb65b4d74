"""Event patterns (docs/events.md): RSEP-QL's EVENT / SEQ / FIRST / LAST / MATCH with selection and consumption
policies (seed 001 §3.3–4.4) and EP-SPARQL's EQUALS / OPTIONALSEQ / EQUALSOPTIONAL / AND / UNION / OPTIONAL and
interval functions (seed 000 §3). This module is the abstract syntax and the vocabulary; ``event_syntax`` parses it
out of a query, ``event_windows`` gives each EVENT its window function, ``event_matching`` matches incrementally.
Pure: terms are opaque hashable values (the engine passes pyoxigraph terms, tests pass strings), times are integer
µs.

How an engine uses the three modules (the integration contract):

1. ``parse_events(query)`` → ``EventQuery``: its ``sparql`` has each ``MATCH { … }`` replaced by a placeholder
   ``VALUES () { () }`` (then ``parse_extended`` as usual); each ``MatchClause`` holds the pattern, its basic event
   patterns ``clause.events`` (an ``Event`` per ``EVENT``, numbered by ``ident`` in order of appearance) and the
   consumption policy.
2. When the query or rule registers: ``EventMatcher(clause, index_of=…, filter=…)``; ``index_of(stream)`` gives the
   store's ``ElementIndex`` so that ``HEAD`` in a repeating window resolves then (as everywhere else), and
   ``filter(event_filter, bindings, start, end) -> bool`` evaluates the FILTERs (``EventFilter.query(start, end)``
   is a SELECT with the interval functions already replaced by literals, to run with the bindings as pyoxigraph's
   ``substitutions=``: the filter holds iff it has a solution).
3. For every element of the streams the clause reads, in time order (also elements without solutions: count windows
   count them): evaluate each ``Event``'s ``query_at(time)`` over the element's graph and call
   ``matcher.arrive(ordinal, time, {event.ident: solutions}, stream=…)``. It returns the **new** ``Match``es:
   bindings, interval ``[start, end]`` and the constituent elements (for the derived event's links, seed 002 DM10).
4. Persist ``matcher.state()`` (JSON-able) with the outputs; after a restart ``EventMatcher.from_state(…)`` resumes:
   consumed events stay consumed, emitted matches are not emitted again, re-fed elements are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from typing import NamedTuple

from sparql_ext.errors import SparqlExtError
from sparql_ext.lexer import Kind, tokenize
from sparql_ext.windowing import from_micros
from sparql_ext.windowref import WindowRef, format_duration

Term = Hashable  # an RDF term as the engine represents it; only equality and hashing are used here
Bindings = Mapping[str, Term]  # variable name (without '?') -> term
XSD = "http://www.w3.org/2001/XMLSchema#"

#: EP-SPARQL's interval functions (seed 000 §3), as written upper-cased; SPARQL function names are case-insensitive.
INTERVAL_FUNCTIONS = ("GETDURATION", "GETSTARTTIME", "GETENDTIME")


class EventPatternError(SparqlExtError):
    """A well-formed event pattern that cannot be evaluated as given (a window form that is no event window, a
    stream the pattern does not read, a FILTER without a filter function)."""


class EventOrderError(SparqlExtError):
    """An element (or an evaluation time) earlier than what the matcher already evaluated: event patterns are
    matched in time order, and an answer once given is never revised (EP-SPARQL's timewise monotonicity)."""

    status_hint = 409


class EventStateError(SparqlExtError):
    """A saved matcher state that is malformed or belongs to another pattern (e.g. the rule text changed)."""

    status_hint = 409


class Selection(Enum):
    """Which matches a SEQ selects (seed 001 §4.3). The value is the operator's keyword."""

    UNRESTRICTED = "SEQ"  # Eq. (7): every E1 event before every compatible E2 event
    CHRONOLOGICAL = "SEQC"  # Eq. (10): the earliest E2 events that have a partner, each with its earliest partner
    RECENT = "SEQR"  # Eq. (11): the latest E2 events that have a partner, each with its latest partner
    NAIVE = "SEQN"  # Eq. (9): C-SPARQL's timestamp(): the last E1 event before the last E2 event, if it is before


class Consumption(Enum):
    """What an evaluation takes away from the next ones' input (seed 001 §4.4, Defs. 8–10)."""

    UNRESTRICTED = "UNRESTRICTED"  # P^u: nothing; every evaluation sees its windows whole
    CHRONOLOGICAL = "CHRONOLOGICAL"  # P^c: the elements used by the matches of an evaluation are gone from the next
    RECENT = "RECENT"  # P^r: the same (the seed defines P^c and P^r alike; they pair with SEQc and SEQr)


class Call(NamedTuple):
    """An interval function call inside a text: its span (offsets in that text) and upper-cased name."""

    start: int
    end: int
    function: str


def interval_literal(function: str, start: int, end: int) -> str:
    """The SPARQL literal an interval function stands for on the interval [start, end] (µs).

    >>> interval_literal("GETDURATION", 0, 90_000_000)
    '"PT1M30S"^^<http://www.w3.org/2001/XMLSchema#dayTimeDuration>'
    >>> interval_literal("GETSTARTTIME", 1_466_416_800_000_000, 0)
    '"2016-06-20T10:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
    """
    if function == "GETDURATION":
        return f'"{format_duration(timedelta(microseconds=end - start))}"^^<{XSD}dayTimeDuration>'
    at = from_micros(start if function == "GETSTARTTIME" else end).isoformat()
    return f'"{at.removesuffix("+00:00")}Z"^^<{XSD}dateTime>'


def substitute_calls(text: str, calls: tuple[Call, ...], start: int, end: int) -> str:
    """``text`` with each interval function call replaced by its literal for [start, end]."""
    pieces, position = [], 0
    for call in calls:
        pieces += [text[position : call.start], interval_literal(call.function, start, end)]
        position = call.end
    return "".join(pieces) + text[position:]


@dataclass(frozen=True)
class EventFilter:
    """A FILTER of an event group, evaluated per event with EP-SPARQL's δ substitution of the interval functions."""

    expression: str  # the Constraint as written, e.g. "(?p2 < ?p1 * 0.7 && getDURATION() < \"P30D\"^^xsd:duration)"
    prologue: str  # the query's PREFIX / BASE declarations, one per line, for the names in the expression
    calls: tuple[Call, ...]  # interval function calls in ``expression``
    variables: tuple[str, ...]  # names (without '?') in the expression
    span: tuple[int, int]  # of ``FILTER …`` in the user's text

    def at(self, start: int, end: int) -> str:
        """The expression on the interval [start, end]: getDURATION(), getSTARTTIME(), getENDTIME() replaced."""
        return substitute_calls(self.expression, self.calls, start, end)

    def query(self, start: int, end: int, bound: frozenset[str] = frozenset()) -> str:
        """A SPARQL 1.1 query that has a solution iff the filter holds on [start, end] once the event's bindings
        of ``variables`` are substituted (pyoxigraph's ``substitutions=``, which needs them projected; a variable
        the event leaves unbound stays unbound, so the filter errs and fails, as SPARQL's would).

        ``bound``: the variables the event binds. pyoxigraph's ``BOUND()`` is false for a substituted variable, so
        ``BOUND(?v)`` of each is written ``true`` (EP-SPARQL's negation, ``OPTIONALSEQ`` + ``!BOUND(?x)``, needs it).

        >>> EventFilter("(!BOUND(?x) && ?y > 1)", "", (), ("x", "y"), (0, 0)).query(0, 0, frozenset({"x", "y"}))
        'SELECT ?x ?y WHERE { FILTER (!true && ?y > 1) }'
        """
        projection = " ".join(f"?{name}" for name in self.variables) or "*"
        expression = _bound_as_true(self.at(start, end), bound) if bound else self.at(start, end)
        return f"{self.prologue}SELECT {projection} WHERE {{ FILTER {expression} }}"


def _bound_as_true(expression: str, bound: frozenset[str]) -> str:
    """``expression`` with ``BOUND(?v)`` written ``true`` for each ``v`` in ``bound`` (``?v`` or ``$v``)."""
    tokens = list(tokenize(expression))
    pieces, position = [], 0
    for i in range(len(tokens) - 3):
        call, opening, variable, closing = tokens[i : i + 4]
        if call.is_keyword("BOUND") and opening.text == "(" and variable.kind is Kind.VAR \
                and variable.text[1:] in bound and closing.text == ")":
            pieces += [expression[position : call.start], "true"]
            position = closing.end
    return "".join(pieces) + expression[position:]


FilterFunction = Callable[[EventFilter, Bindings, int, int], bool]


@dataclass(frozen=True)
class EventWindow:
    """The window function of an EVENT: a stream (None: the stream being queried) and WindowRefs, innermost first
    (``EVENT <s?WINDOWS=A> WINDOWS B`` is B applied to A's window: RSEP-QL's B • A). No ref: the whole stream."""

    stream: str | None
    refs: tuple[WindowRef, ...] = ()

    @property
    def key(self) -> str:
        """Identity of the window (RSEP-QL's w_j): EVENTs over the same window share its consumed input."""
        return " ".join([f"<{self.stream}>" if self.stream is not None else "<>", *map(str, self.refs)])


@dataclass(frozen=True)
class Event:
    """``EVENT window { P }``: a basic event pattern, P evaluated per element (Eq. 4)."""

    ident: int  # 0, 1, … in order of appearance in its MATCH: the key of its solutions in ``arrive``
    window: EventWindow
    group: str  # the GroupGraphPattern ``{ P }`` as written
    prologue: str
    variables: tuple[str, ...]  # names (without '?') mentioned in P, in order
    calls: tuple[Call, ...] = ()  # interval function calls in ``group`` (an element's interval is [t, t])
    span: tuple[int, int] = (0, 0)  # in the user's text

    def query_at(self, time: int) -> str:
        """``SELECT * WHERE { P }`` for an element at ``time``: evaluate it over that element's graph."""
        return f"{self.prologue}SELECT * WHERE {substitute_calls(self.group, self.calls, time, time)}"


@dataclass(frozen=True)
class Seq:
    """``E1 SEQ E2`` and its selection variants SEQc / SEQr / SEQn."""

    left: EventPattern
    right: EventPattern
    selection: Selection = Selection.UNRESTRICTED


@dataclass(frozen=True)
class First:
    """``FIRST E``: the events of E with no event of E strictly before them (Eq. 5)."""

    operand: EventPattern


@dataclass(frozen=True)
class Last:
    """``LAST E``: the events of E with no event of E strictly after them (Eq. 6)."""

    operand: EventPattern


@dataclass(frozen=True)
class Equals:
    """``E1 EQUALS E2``: EP-SPARQL's EqJoin, compatible events on exactly the same interval."""

    left: EventPattern
    right: EventPattern


@dataclass(frozen=True)
class OptionalSeq:
    """``E1 OPTIONALSEQ E2``: EP-SPARQL's SeqRightJoin(E1, E2, F): E2 is mandatory, joined with the compatible E1
    events that end before it starts and satisfy F (the FILTERs of E1's group), or alone if there is none."""

    optional: EventPattern
    mandatory: EventPattern
    condition: tuple[EventFilter, ...] = ()


@dataclass(frozen=True)
class EqualsOptional:
    """``E1 EQUALSOPTIONAL E2``: EP-SPARQL's EqLeftJoin(E1, E2, F): E1 is mandatory, joined with the compatible E2
    events on the same interval that satisfy F (the FILTERs of E2's group), or alone if there is none."""

    mandatory: EventPattern
    optional: EventPattern
    condition: tuple[EventFilter, ...] = ()


@dataclass(frozen=True)
class Join:
    """``E1 AND E2`` (or ``E1 E2``, side by side): EP-SPARQL's Join, every compatible pair of events whatever their
    order in time, on the union of their intervals (earliest start, latest end)."""

    left: EventPattern
    right: EventPattern


@dataclass(frozen=True)
class Union:
    """``E1 UNION E2``: EP-SPARQL's Union, the events of either, each on its own interval."""

    left: EventPattern
    right: EventPattern


@dataclass(frozen=True)
class LeftJoin:
    """``E1 OPTIONAL E2``: EP-SPARQL's LeftJoin(E1, E2, F): E1 is mandatory, joined with the compatible E2 events that
    end no later than it ends and satisfy F (the FILTERs of E2's group), or alone if there is none."""

    mandatory: EventPattern
    optional: EventPattern
    condition: tuple[EventFilter, ...] = ()


@dataclass(frozen=True)
class Filtered:
    """``{ E FILTER … }``: the events of E for which every filter holds on their bindings and interval."""

    operand: EventPattern
    filters: tuple[EventFilter, ...]


EventPattern = Event | Seq | First | Last | Equals | OptionalSeq | EqualsOptional | Join | Union | LeftJoin | Filtered


def children(pattern: EventPattern) -> tuple[EventPattern, ...]:
    """The direct sub-patterns of a pattern."""
    match pattern:
        case Event():
            return ()
        case Seq(left=left, right=right) | Equals(left=left, right=right) | Join(left=left, right=right) \
                | Union(left=left, right=right):
            return left, right
        case OptionalSeq(optional=optional, mandatory=mandatory):
            return optional, mandatory
        case EqualsOptional(mandatory=mandatory, optional=optional) | LeftJoin(mandatory=mandatory, optional=optional):
            return mandatory, optional
        case First(operand=operand) | Last(operand=operand) | Filtered(operand=operand):
            return (operand,)
    raise TypeError(f"not an event pattern: {pattern!r}")


def basic_events(pattern: EventPattern) -> tuple[Event, ...]:
    """The EVENTs of a pattern, left to right."""
    if isinstance(pattern, Event):
        return (pattern,)
    return tuple(event for child in children(pattern) for event in basic_events(child))


def filters_of(pattern: EventPattern) -> tuple[EventFilter, ...]:
    """Every filter a pattern evaluates (group filters and optional-join conditions)."""
    own: tuple[EventFilter, ...] = ()
    if isinstance(pattern, Filtered):
        own = pattern.filters
    elif isinstance(pattern, OptionalSeq | EqualsOptional | LeftJoin):
        own = pattern.condition
    return own + tuple(f for child in children(pattern) for f in filters_of(child))


def is_monotone(pattern: EventPattern) -> bool:
    """True when every new match must use an element that entered a window since the previous evaluation: EVENT,
    SEQ (unrestricted), EQUALS, AND, UNION and FILTER only. Selections (FIRST, LAST, SEQc/r/n) and the optional joins
    can change their answer when events leave a window or are consumed, so the matcher re-evaluates those whole."""
    if isinstance(pattern, First | Last | OptionalSeq | EqualsOptional | LeftJoin):
        return False
    if isinstance(pattern, Seq) and pattern.selection is not Selection.UNRESTRICTED:
        return False
    return all(is_monotone(child) for child in children(pattern))


@dataclass(frozen=True)
class MatchClause:
    """``MATCH [CONSUME policy] { E }``: an event graph pattern; its solutions are E's bindings, times stripped
    (Eq. 8), and it stands in the query's ``sparql`` as a placeholder."""

    ident: int  # 0, 1, … in order of appearance in the query
    pattern: EventPattern
    consumption: Consumption
    text: str  # the clause as written
    prologue: str  # the query's PREFIX / BASE declarations (with ``text``, the fingerprint of a matcher state)
    placeholder: tuple[int, int]  # span of ``VALUES () { () }`` in EventQuery.sparql
    source_span: tuple[int, int]  # span of the clause in the user's text
    events: tuple[Event, ...] = field(default=())

    @property
    def variables(self) -> tuple[str, ...]:
        """The names (without '?') the clause can bind: the VALUES header its solutions are spliced with."""
        return tuple(dict.fromkeys(name for event in self.events for name in event.variables))

    @property
    def streams(self) -> tuple[str | None, ...]:
        """The streams the clause reads (None: the stream being queried), in order of first use."""
        return tuple(dict.fromkeys(event.window.stream for event in self.events))


class ElementRef(NamedTuple):
    """A stream element: its stream (None: the stream being queried) and ordinal."""

    stream: str | None
    ordinal: int


@dataclass(frozen=True)
class Match:
    """A new answer of a MATCH: RSEP-QL's event mapping (µ, t1, t2) plus the elements it was matched from."""

    bindings: Mapping[str, Term]
    start: int  # µs
    end: int  # µs
    elements: tuple[ElementRef, ...]  # constituents in time order (ties by stream, then ordinal), each once

    @property
    def duration(self) -> int:
        """getDURATION() of the match, in µs."""
        return self.end - self.start
