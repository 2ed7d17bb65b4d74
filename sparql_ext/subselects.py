"""The sub-SELECTs of a query that can be answered on their own, over the query's dataset (a pure function of the
query text; the engine evaluates them once per dataset revision and puts their solutions in their place).

A sub-SELECT is evaluated bottom-up: its solutions do not depend on the patterns around it, so ``{ SELECT … }``
and ``{ VALUES (…) { … } }`` holding those solutions (duplicates and unbound values kept) give the same answers.
That holds where the sub-SELECT reads the query's own dataset as its active graph, so only these qualify:

- inside the query's ``WHERE`` clause, in groups, ``OPTIONAL``, ``UNION`` and ``MINUS`` blocks, at any depth;
- not inside a ``GRAPH`` block (another active graph), a ``SERVICE`` block (another dataset), or ``EXISTS`` /
  ``NOT EXISTS`` (whose patterns are evaluated with the outer solution substituted);
- the outermost ones only (a sub-SELECT inside a qualifying one goes along with it);
- not when the query names its dataset (``FROM`` / ``FROM NAMED``): the sub-SELECT alone would read the
  default one.

Whether one is static (no ``NOW()``, ``RAND()``, ``THEN()`` …) is the caller's to check (``engine.cache``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sparql_ext.errors import QuerySyntaxError
from sparql_ext.lexer import Kind, Token, tokenize

_FORMS = ("SELECT", "CONSTRUCT", "ASK", "DESCRIBE")


@dataclass(frozen=True)
class SubSelect:
    """A sub-SELECT's braces ``{`` … ``}`` in the query text (``start`` at its ``{``, ``end`` after its ``}``) and
    a query of its own: the query's prologue (``PREFIX`` / ``BASE``) and the SELECT."""

    start: int
    end: int
    query: str


@functools.lru_cache(maxsize=1024)
def standalone_subselects(sparql: str) -> tuple[SubSelect, ...]:
    """The sub-SELECTs of ``sparql`` that read its dataset as it does (see the module doc), in text order.

    >>> q = 'PREFIX e: <http://e/> SELECT * WHERE { ?s e:p ?o { SELECT ?s (COUNT(*) AS ?n) { ?s ?p ?x } GROUP BY ?s } }'
    >>> [(s.query, q[s.start:s.end][:10]) for s in standalone_subselects(q)]
    [('PREFIX e: <http://e/> SELECT ?s (COUNT(*) AS ?n) { ?s ?p ?x } GROUP BY ?s', '{ SELECT ?')]
    >>> standalone_subselects('SELECT * { GRAPH ?g { { SELECT ?s { ?s ?p ?o } } } }')
    ()
    """
    try:
        tokens = list(tokenize(sparql))
    except QuerySyntaxError:
        return ()
    form = next((i for i, t in enumerate(tokens) if t.is_keyword(*_FORMS)), None)
    if form is None:
        return ()
    prologue = sparql[:tokens[form].start]
    found: list[SubSelect] = []
    scoped: list[bool] = []  # per open brace: inside GRAPH, SERVICE or EXISTS (at any depth above)
    where = False  # inside the WHERE clause (a CONSTRUCT template's braces come before it)
    top_groups = 0  # groups opened at the top level so far
    i = form
    while i < len(tokens):
        token = tokens[i]
        if token.is_keyword("FROM") and not scoped:
            return ()  # the query names its dataset
        if token.is_keyword("WHERE") and not scoped:
            where = True
        if token.text == "{" and token.kind is Kind.PUNCT:
            if not scoped:  # WHERE is optional: the first top-level brace opens the pattern, a CONSTRUCT's second
                where = where or top_groups >= (1 if tokens[form].is_keyword("CONSTRUCT") else 0)
                top_groups += 1
            inside = bool(scoped and scoped[-1]) or _opens_other_scope(tokens, i)
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            if where and scoped and not inside and following is not None and following.is_keyword("SELECT"):
                close = _matching_brace(tokens, i)
                if close is None:
                    return ()
                found.append(SubSelect(token.start, tokens[close].end,
                                       prologue + sparql[following.start:tokens[close].start].rstrip()))
                i = close + 1
                continue
            scoped.append(inside)
        elif token.text == "}" and token.kind is Kind.PUNCT:
            if not scoped:
                return ()
            scoped.pop()
        i += 1
    return tuple(found)


def _opens_other_scope(tokens: list[Token], brace: int) -> bool:
    """Whether the ``{`` at ``brace`` opens a GRAPH or SERVICE block (``GRAPH ?g {``, ``SERVICE SILENT <x> {``) or an
    EXISTS pattern."""
    before = [tokens[j] for j in range(max(0, brace - 3), brace)]
    if before and before[-1].is_keyword("EXISTS"):
        return True
    return any(t.is_keyword("GRAPH", "SERVICE") for t in before[-2:]) or (
        len(before) == 3 and before[0].is_keyword("SERVICE") and before[1].is_keyword("SILENT"))


def _matching_brace(tokens: list[Token], opening: int) -> int | None:
    depth = 0
    for j in range(opening, len(tokens)):
        if tokens[j].kind is Kind.PUNCT and tokens[j].text == "{":
            depth += 1
        elif tokens[j].kind is Kind.PUNCT and tokens[j].text == "}":
            depth -= 1
            if depth == 0:
                return j
    return None
