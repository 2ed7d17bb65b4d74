"""The prefix query of an extension part whose target is a variable (``SERVICE ?svc``, ``REVISION ?r``): the
elements of its group that come before it, which bind the variable; evaluated first, then the part once per value."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparql_ext.lexer import Kind, Token
from sparql_ext.parsing import ParseContext, ParseFailure, mentioned, variable_name

# elements whose solutions over the prefix's relaxed patterns need not extend to the whole group's (see ``Prefix``)
_NOT_CONJUNCTIVE = ("OPTIONAL", "MINUS", "UNION")


@dataclass(frozen=True)
class Prefix:
    """A variable part's prefix query (``text``) and what it is made of, to select other variables over the same
    patterns (``select``).

    Its patterns are a relaxation of the group's elements before the part: a solution of the whole group,
    restricted to ``bound``, is one of theirs. So when a sibling part's target is fixed (a rule firing reads one
    window), the values of another target it may join with are among ``select`` of both targets, where the fixed
    one has its value. ``joinable`` says the relaxation holds: no earlier part is kept in it (the patterns read
    the dataset alone) and no OPTIONAL, MINUS or UNION (whose bindings over relaxed patterns may differ)."""

    text: str
    head: str  # the prologue
    dataset: str  # FROM / FROM NAMED clauses
    body: str  # the group pattern's contents
    bound: frozenset[str]  # the variables its patterns bind
    joinable: bool
    group: int  # token index of the enclosing group's '{': siblings share it

    def select(self, names: tuple[str, ...]) -> str:
        """``SELECT DISTINCT`` of ``names`` over the prefix's patterns."""
        return f"{self.head}SELECT DISTINCT {' '.join(names)}{self.dataset} WHERE {{{self.body}\n}}"


def prefix_query(ctx: ParseContext, enclosing: tuple[int, str | None], part_index: int, var: Token,
                 name: str) -> Prefix:
    """``SELECT DISTINCT ?var`` over the elements of the part's group that come before it.

    The prefix may bind a *superset* of the targets (the complete query still joins and filters), so:

    - A FILTER constrains its whole group, so one before the part may mention variables only the part (or
      later elements) binds; in the prefix such a FILTER would reject every solution. It is dropped.
    - Earlier extension parts are left out when the target is bound without them (their variables, and
      BINDs computed from them, then count as unbound: FILTERs on them are dropped too). The prefix then
      reads only the queried dataset: it is not evaluated twice per query, and it can be cached per revision
      of that dataset (the connected-patient rule's static patient and sensor records). When the target
      needs an earlier part, the parts stay in the prefix.
    """
    tokens, (open_index, graph) = ctx.tokens, enclosing
    elements: list[tuple[int, int]] = []  # token index ranges of the non-FILTER, non-part elements
    parts: list[tuple[int, int]] = []  # of the earlier extension parts (keyword .. closing '}')
    filters: list[tuple[int, int]] = []
    k = run = open_index + 1
    while k < part_index:
        if tokens[k].is_keyword("FILTER") and (end := constraint_end(ctx, k + 1)) is not None:
            elements.append((run, k))
            filters.append((k, end + 1))
            k = run = end + 1
            continue
        if tokens[k].is_keyword("REVISION", "WINDOWS", "SERVICE"):
            block = k + 1
            while not ctx.is_punct(block, "{"):
                block += 1
            elements.append((run, k))
            parts.append((k, ctx.pairs[block] + 1))
            k = run = ctx.pairs[block] + 1
            continue
        k = ctx.pairs[k] + 1 if k in ctx.pairs else k + 1
    elements.append((run, part_index))
    static = {v for lo, hi in elements for v in mentioned(ctx, lo, hi)}
    unbound = {v for lo, hi in parts for v in mentioned(ctx, lo, hi)} - _bound_outside_binds(ctx, elements)
    unbound |= _derived(ctx, elements, unbound)
    left_out = parts if parts and name in static - unbound else []
    bound = static - unbound if left_out else static | {v for lo, hi in parts for v in mentioned(ctx, lo, hi)}
    if name not in bound:
        raise ParseFailure(f"{name} must be bound by the patterns before {tokens[part_index].text.upper()} in its "
                           "group (SERVICE / REVISION with a variable is evaluated once per value of it)", var.start)
    dropped = [(lo, hi) for lo, hi in filters
               if not {variable_name(t) for t in tokens[lo:hi] if t.kind is Kind.VAR} <= bound]
    pieces, position = [], tokens[open_index].end
    for lo, hi in sorted(dropped + left_out):
        pieces.append(ctx.text[position : tokens[lo].start])
        position = tokens[hi - 1].end
    pieces.append(ctx.text[position : tokens[part_index].start])
    body = "".join(pieces)
    if graph is not None:
        body = f" GRAPH {graph} {{{body}\n}}"
    dataset = "".join(f" {clause}" for clause in ctx.dataset)
    kept = {k for lo, hi in elements for k in range(lo, hi)}
    joinable = (bool(left_out) or not parts) and not any(
        tokens[k].is_keyword(*_NOT_CONJUNCTIVE) for k in kept)
    prefix = Prefix("", ctx.prologue, dataset, body, frozenset(bound), joinable, open_index)
    return replace(prefix, text=prefix.select((name,)))


def _binds(ctx: ParseContext, ranges: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """The ``BIND ( expression AS ?v )`` elements in ``ranges``: (expression start, end, ?v)."""
    found = []
    for lo, hi in ranges:
        for k in range(lo, hi):
            if ctx.tokens[k].is_keyword("BIND") and ctx.is_punct(k + 1, "("):
                close = ctx.pairs[k + 1]
                if ctx.tokens[close - 1].kind is Kind.VAR and ctx.tokens[close - 2].is_keyword("AS"):
                    found.append((k + 2, close - 2, variable_name(ctx.tokens[close - 1])))
    return found


def _bound_outside_binds(ctx: ParseContext, ranges: list[tuple[int, int]]) -> set[str]:
    """Variables the elements mention other than inside a BIND's expression (those a BIND reads, not binds)."""
    inside = {k for lo, _, _ in _binds(ctx, ranges) for k in range(lo - 2, lo)} | {
        k for lo, hi, _ in _binds(ctx, ranges) for k in range(lo, hi)}
    return {variable_name(ctx.tokens[k]) for lo, hi in ranges for k in range(lo, hi)
            if k not in inside and ctx.tokens[k].kind is Kind.VAR}


def _derived(ctx: ParseContext, ranges: list[tuple[int, int]], unbound: set[str]) -> set[str]:
    """The BIND targets computed (transitively, in order) from ``unbound`` variables."""
    derived: set[str] = set()
    for lo, hi, target in _binds(ctx, ranges):
        if {variable_name(t) for t in ctx.tokens[lo:hi] if t.kind is Kind.VAR} & (unbound | derived):
            derived.add(target)
    return derived


def constraint_end(ctx: ParseContext, k: int) -> int | None:
    """Index of the last token of a FILTER's Constraint starting at ``k`` (None when it is not one)."""
    tokens = ctx.tokens
    if ctx.is_punct(k, "("):
        return ctx.pairs[k]
    if k < len(tokens) and tokens[k].is_keyword("NOT"):
        k += 1
    if k < len(tokens) and tokens[k].is_keyword("EXISTS") and ctx.is_punct(k + 1, "{"):
        return ctx.pairs[k + 1]
    if k < len(tokens) and tokens[k].kind in (Kind.WORD, Kind.IRI, Kind.PNAME) and ctx.is_punct(k + 1, "("):
        return ctx.pairs[k + 1]
    return None
