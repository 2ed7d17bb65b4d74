"""Event patterns in extended SPARQL (docs/events.md): the MATCH clauses of a query, parsed into
``sparql_ext.events`` patterns and cut out of the query text. Keywords are case-insensitive (RSEP-QL's ``SEQc``
is ``SEQC``); operators are left-associative and of one precedence, FIRST and LAST bind tighter, braces group; two
patterns side by side are joined, as ``AND``::

    EventGraphPattern ::= 'MATCH' ( 'CONSUME' ( 'UNRESTRICTED' | 'CHRONOLOGICAL' | 'RECENT' ) )? EventGroup
    EventGroup        ::= '{' EventExpression Filter* '}'
    EventExpression   ::= EventUnary ( EventOperator? EventUnary )*
    EventOperator     ::= 'SEQ' | 'SEQC' | 'SEQR' | 'SEQN' | 'EQUALS' | 'OPTIONALSEQ' | 'EQUALSOPTIONAL'
                        | 'AND' | 'UNION' | 'OPTIONAL'
    EventUnary        ::= ( 'FIRST' | 'LAST' ) EventUnary | BasicEventPattern | EventGroup
    BasicEventPattern ::= 'EVENT' ( iri ( 'WINDOWS' WindowRef )* | ( 'WINDOWS' WindowRef )+ ) GroupGraphPattern

A FILTER of a group applies to the group's events, with getDURATION(), getSTARTTIME() and getENDTIME() on each
event's interval; on the optional side of OPTIONALSEQ / EQUALSOPTIONAL / OPTIONAL the group's FILTERs are the join's
condition (as SPARQL's ``OPTIONAL { P FILTER F }`` is LeftJoin(…, P, F)). An EVENT without a stream IRI inside
``SERVICE <stream IRI> { … }`` reads that stream (and, when the IRI has ``?WINDOWS=A``, A's window, nested as
``EVENT <stream?WINDOWS=A> WINDOWS …``). Like ``extended``, only the tokenizer is used, and
every error is a ``QuerySyntaxError`` at the line and column of the user's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from sparql_ext.errors import QuerySyntaxError, SparqlExtError
from sparql_ext.event_windows import event_window_form
from sparql_ext.events import (
    INTERVAL_FUNCTIONS,
    Call,
    Consumption,
    Equals,
    EqualsOptional,
    Event,
    EventFilter,
    EventPattern,
    EventWindow,
    Filtered,
    First,
    Join,
    Last,
    LeftJoin,
    MatchClause,
    OptionalSeq,
    Selection,
    Seq,
    Union,
)
from sparql_ext.extended import PLACEHOLDER
from sparql_ext.iris import resolve_iri
from sparql_ext.lexer import Kind, Token, check_nesting, tokenize_window_refs
from sparql_ext.parsing import Edit, Rewritten
from sparql_ext.windowed import windowed_params
from sparql_ext.windowref import WindowRef, parse_window_ref

_OPERATORS = ("SEQ", "SEQC", "SEQR", "SEQN", "EQUALS", "OPTIONALSEQ", "EQUALSOPTIONAL", "AND", "UNION", "OPTIONAL")
_STARTS = "an event pattern (EVENT, FIRST, LAST or '{')"


@dataclass(frozen=True)
class EventQuery(Rewritten):
    """A query with its MATCH clauses cut out: ``sparql`` has a placeholder ``VALUES () { () }`` for each (the
    engine splices each clause's solutions there), and may still hold REVISION / WINDOWS / SERVICE for
    ``parse_extended``. A position inside a placeholder maps to where its clause began (``Rewritten``)."""

    original: str
    sparql: str
    clauses: tuple[MatchClause, ...]
    edits: tuple[Edit, ...] = field(default=(), repr=False)


def parse_events(text: str, base_iri: str | None = None) -> EventQuery:
    """Find and parse the MATCH clauses of ``text``.

    >>> q = parse_events('SELECT ?x { ?x a <T> MATCH { EVENT <s?WINDOWS=1/HEAD> { ?x <p> ?y } SEQ '
    ...                  'EVENT <s?WINDOWS=HEAD/-PT5S> { ?y <q> ?z } } }')
    >>> q.sparql
    'SELECT ?x { ?x a <T> VALUES () { () } }'
    >>> [(e.ident, e.window.key, e.variables) for e in q.clauses[0].events]
    [(0, '<s> 1/HEAD', ('x', 'y')), (1, '<s> HEAD/-PT5S', ('y', 'z'))]
    """
    if not re.search(r"(?i)\b(MATCH|EVENT)\b", text):
        return EventQuery(text, text, ())
    tokens = tokenize_window_refs(text)
    check_nesting(tokens, text)
    parser = _Parser(text, tokens, _pairs(tokens, text), base_iri)
    i = parser.prologue()
    clauses: list[MatchClause] = []
    chunks: list[str] = []
    edits: list[Edit] = []
    position = length = 0
    services: list[int | None] = []  # per open brace: the token of the innermost enclosing SERVICE's target
    service_at: dict[int, int] = parser.services(i)
    while i < len(tokens):
        tok = tokens[i]
        if parser.is_punct(i, "{"):
            services.append(service_at.get(i, services[-1] if services else None))
        elif parser.is_punct(i, "}"):
            services.pop()
        elif tok.is_keyword("EVENT"):
            raise QuerySyntaxError("EVENT must be inside MATCH { … }", text, tok.start)
        elif tok.is_keyword("MATCH"):
            if not services:
                raise QuerySyntaxError("MATCH must be inside a group pattern", text, tok.start)
            parser.service = services[-1]
            clause, close = parser.clause(i, len(clauses))
            chunks.append(text[position : tok.start])
            length += tok.start - position
            placeholder = (length, length + len(PLACEHOLDER))
            edits.append((*placeholder, tok.start, tokens[close].end))
            clauses.append(replace(clause, placeholder=placeholder))
            chunks.append(PLACEHOLDER)
            length += len(PLACEHOLDER)
            position = tokens[close].end
            i = close + 1
            continue
        i += 1
    chunks.append(text[position:])
    return EventQuery(text, "".join(chunks), tuple(clauses), tuple(edits))


def _pairs(tokens: list[Token], text: str) -> dict[int, int]:
    """Every bracket matched once, so that unbalanced text fails before anything is read from it."""
    closers = {"}": "{", ")": "(", "]": "["}
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for index, tok in enumerate(tokens):
        if tok.kind is Kind.PUNCT and tok.text in "{([":
            stack.append(index)
        elif tok.kind is Kind.PUNCT and tok.text in closers:
            if not stack or tokens[stack[-1]].text != closers[tok.text]:
                raise QuerySyntaxError(f"unbalanced {tok.text!r}", text, tok.start)
            pairs[stack.pop()] = index
    if stack:
        raise QuerySyntaxError(f"{tokens[stack[-1]].text!r} is never closed", text, tokens[stack[-1]].start)
    return pairs


class _Parser:
    """A recursive-descent parser over token index ranges; ``hi`` is always the index of the enclosing '}'."""

    def __init__(self, text: str, tokens: list[Token], pairs: dict[int, int], base_iri: str | None) -> None:
        self.text, self.tokens, self.pairs, self.base = text, tokens, pairs, base_iri
        self.prefixes: dict[str, str] = {}
        self.prologue_text = ""
        self.events: list[Event] = []
        self.service: int | None = None  # the token of the SERVICE target the MATCH being parsed is inside

    def services(self, i: int) -> dict[int, int]:
        """The '{' of each ``SERVICE [SILENT] target { … }`` from token ``i`` on, mapped to its target's token."""
        found: dict[int, int] = {}
        for k in range(i, len(self.tokens)):
            if self.tokens[k].is_keyword("SERVICE"):
                target = k + 2 if self.keyword(k + 1, "SILENT") else k + 1
                if self.is_punct(target + 1, "{"):
                    found[target + 1] = target
        return found

    def fail(self, message: str, index: int) -> QuerySyntaxError:
        offset = self.tokens[index].start if index < len(self.tokens) else len(self.text)
        return QuerySyntaxError(message, self.text, offset)

    def is_punct(self, index: int, *texts: str) -> bool:
        return index < len(self.tokens) and self.tokens[index].kind is Kind.PUNCT and self.tokens[index].text in texts

    def keyword(self, index: int, *words: str) -> bool:
        return index < len(self.tokens) and self.tokens[index].is_keyword(*words)

    def prologue(self) -> int:
        """Read PREFIX / BASE declarations (copied into each EVENT's query and FILTER); the index after them."""
        tokens, i, declarations = self.tokens, 0, []
        while self.keyword(i, "PREFIX", "BASE"):
            is_base = tokens[i].is_keyword("BASE")
            name, iri = (None, i + 1) if is_base else (i + 1, i + 2)
            if iri >= len(tokens) or tokens[iri].kind is not Kind.IRI or (
                    name is not None and tokens[name].kind is not Kind.PNAME):
                raise self.fail("expected a prefix name and an IRI" if name else "expected an IRI", i + 1)
            value = resolve_iri(self.base, tokens[iri].text[1:-1])
            if name is None:
                self.base = value
            else:
                self.prefixes[tokens[name].text.partition(":")[0]] = value
            declarations.append(self.text[tokens[i].start : tokens[iri].end])
            i = iri + 1
        self.prologue_text = "".join(f"{declaration}\n" for declaration in declarations)
        return i

    def clause(self, i: int, ident: int) -> tuple[MatchClause, int]:
        """The MATCH clause whose keyword is token ``i``, and the index of its closing '}'."""
        k, consumption = i + 1, Consumption.UNRESTRICTED
        if self.keyword(k, "CONSUME"):
            names = [policy.value for policy in Consumption]
            if not self.keyword(k + 1, *names):
                raise self.fail(f"CONSUME takes a consumption policy: {', '.join(names)}", k + 1)
            consumption, k = Consumption(self.tokens[k + 1].text.upper()), k + 2
        if not self.is_punct(k, "{"):
            raise self.fail("MATCH needs an event group: MATCH { EVENT … }", k)
        self.events = []
        pattern = self.group(k)
        close = self.pairs[k]
        span = (self.tokens[i].start, self.tokens[close].end)
        clause = MatchClause(ident, pattern, consumption, self.text[span[0] : span[1]], self.prologue_text, (0, 0),
                             span, tuple(self.events))
        return clause, close

    def group(self, open_index: int) -> EventPattern:
        close = self.pairs[open_index]
        pattern, k = self.expression(open_index + 1, close)
        filters: list[EventFilter] = []
        while k < close:
            if not self.keyword(k, "FILTER"):
                raise self.fail(f"expected an event operator ({', '.join(_OPERATORS)}), FILTER or '}}', "
                                f"found {self.tokens[k].text!r}", k)
            event_filter, k = self.filter(k)
            filters.append(event_filter)
        return Filtered(pattern, tuple(filters)) if filters else pattern

    def expression(self, k: int, hi: int) -> tuple[EventPattern, int]:
        left, k = self.unary(k, hi)
        while k < hi:
            if self.keyword(k, *_OPERATORS):
                operator, k = self.tokens[k].text.upper(), k + 1
            elif self.keyword(k, "EVENT", "FIRST", "LAST") or self.is_punct(k, "{"):
                operator = "AND"  # side by side: EP-SPARQL's Join, as juxtaposition is in SPARQL
            else:
                break
            right, k = self.unary(k, hi)
            left = _combine(operator, left, right)
        return left, k

    def unary(self, k: int, hi: int) -> tuple[EventPattern, int]:
        if k >= hi:
            raise self.fail(f"expected {_STARTS}", hi)
        if self.keyword(k, "FIRST", "LAST"):
            operand, end = self.unary(k + 1, hi)
            return (First(operand) if self.tokens[k].is_keyword("FIRST") else Last(operand)), end
        if self.keyword(k, "EVENT"):
            return self.event(k, hi)
        if self.is_punct(k, "{"):
            return self.group(k), self.pairs[k] + 1
        raise self.fail(f"expected {_STARTS}, found {self.tokens[k].text!r}", k)

    def event(self, i: int, hi: int) -> tuple[Event, int]:
        tokens, k = self.tokens, i + 1
        stream: str | None = None
        refs: list[WindowRef] = []
        if k < hi and tokens[k].kind in (Kind.IRI, Kind.PNAME):
            stream, inner = self.window_iri(k)
            refs += inner
            k += 1
        elif self.service is not None and (self.keyword(k, "WINDOWS") or self.is_punct(k, "{")):
            # inside SERVICE: the SERVICE's stream, and its window
            if tokens[self.service].kind is Kind.VAR:
                raise self.fail(f"inside SERVICE {tokens[self.service].text} an EVENT cannot know its stream before "
                                "the query runs: name it, EVENT <streams/NAME?WINDOWS=…> { … }", i)
            stream, inner = self.window_iri(self.service)
            refs += inner
        while self.keyword(k, "WINDOWS"):
            end = k + 1
            while end < hi and not (self.keyword(end, "WINDOWS") or self.is_punct(end, "{")):
                end += 1
            if end == k + 1:
                raise self.fail("WINDOWS needs a WindowRef", end)
            refs.append(self.window_ref(self.text[tokens[k + 1].start : tokens[end - 1].end], k + 1))
            k = end
        if (k == i + 1 and stream is None) or not self.is_punct(k, "{"):
            raise self.fail("EVENT needs a stream IRI or WINDOWS, and a group pattern: EVENT <stream?WINDOWS=…> { P }",
                            i if k == i + 1 else k)
        close = self.pairs[k]
        for position in range(k + 1, close):
            if tokens[position].is_keyword("MATCH", "EVENT"):
                raise self.fail(f"{tokens[position].text.upper()} cannot be inside an EVENT's pattern "
                                "(it is matched against one element)", position)
        group_start = tokens[k].start
        variables = tuple(dict.fromkeys(tok.text[1:] for tok in tokens[k:close] if tok.kind is Kind.VAR))
        event = Event(len(self.events), EventWindow(stream, tuple(refs)), self.text[group_start : tokens[close].end],
                      self.prologue_text, variables, self.calls(k, close, group_start),
                      (tokens[i].start, tokens[close].end))
        self.events.append(event)
        return event, close + 1

    def window_iri(self, k: int) -> tuple[str, list[WindowRef]]:
        """The stream of an EVENT's IRI and the window its ``?WINDOWS=`` names, if any."""
        tok = self.tokens[k]
        if tok.kind is Kind.IRI:
            iri = resolve_iri(self.base, tok.text[1:-1])
        else:
            prefix, _, local = tok.text.partition(":")
            if prefix not in self.prefixes:
                raise self.fail(f"prefix {prefix!r} is not declared", k)
            iri = self.prefixes[prefix] + re.sub(r"\\(.)", r"\1", local)
        stream, _, query = iri.partition("?")
        if not query:
            return stream, []
        try:
            params = windowed_params(query)
        except SparqlExtError as error:
            raise self.fail(error.message, k) from None
        if params.windows is None or params.extra or "&" in query:
            raise self.fail(f"<{iri}> is not a stream IRI with one WINDOWS= parameter", k)
        return stream, [self.window_ref(params.windows, k)]

    def window_ref(self, ref_text: str, k: int) -> WindowRef:
        try:
            ref = parse_window_ref(ref_text)
            event_window_form(ref)
        except SparqlExtError as error:
            raise self.fail(error.message, k) from None
        return ref

    def filter(self, k: int) -> tuple[EventFilter, int]:
        """The FILTER at token ``k`` (its Constraint: a bracketted expression or a function call)."""
        tokens, start = self.tokens, k + 1
        if self.is_punct(start, "("):
            end = self.pairs[start]
        elif start < len(tokens) and tokens[start].kind in (Kind.WORD, Kind.IRI, Kind.PNAME) \
                and not tokens[start].is_keyword("EXISTS", "NOT") and self.is_punct(start + 1, "("):
            end = self.pairs[start + 1]
        else:
            raise self.fail("an event FILTER takes a bracketted expression or a function call (EXISTS cannot be "
                            "evaluated on an event)", start)
        offset = tokens[start].start
        expression = self.text[offset : tokens[end].end]
        variables = tuple(dict.fromkeys(tok.text[1:] for tok in tokens[start:end] if tok.kind is Kind.VAR))
        return EventFilter(expression, self.prologue_text, self.calls(start, end + 1, offset), variables,
                           (tokens[k].start, tokens[end].end)), end + 1

    def calls(self, lo: int, hi: int, offset: int) -> tuple[Call, ...]:
        """The interval function calls among tokens[lo:hi], as spans relative to ``offset``."""
        found = []
        for k in range(lo, hi):
            tok = self.tokens[k]
            if tok.kind is Kind.WORD and tok.text.upper() in INTERVAL_FUNCTIONS and self.is_punct(k + 1, "("):
                if not self.is_punct(k + 2, ")"):
                    raise self.fail(f"{tok.text}() takes no arguments", k + 2)
                found.append(Call(tok.start - offset, self.tokens[k + 2].end - offset, tok.text.upper()))
        return tuple(found)


def _combine(operator: str, left: EventPattern, right: EventPattern) -> EventPattern:
    if operator.startswith("SEQ"):
        return Seq(left, right, Selection(operator))
    if operator == "EQUALS":
        return Equals(left, right)
    if operator == "AND":
        return Join(left, right)
    if operator == "UNION":
        return Union(left, right)
    if operator == "OPTIONAL":  # the optional side is the right one, as in SPARQL
        if isinstance(right, Filtered):
            return LeftJoin(left, right.operand, right.filters)
        return LeftJoin(left, right)
    if operator == "OPTIONALSEQ":  # the optional side is the left one: its group's FILTERs are the join condition
        if isinstance(left, Filtered):
            return OptionalSeq(left.operand, right, left.filters)
        return OptionalSeq(left, right)
    if isinstance(right, Filtered):  # EQUALSOPTIONAL: the optional side is the right one
        return EqualsOptional(left, right.operand, right.filters)
    return EqualsOptional(left, right)
