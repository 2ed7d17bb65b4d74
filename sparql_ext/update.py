"""SPARQL 1.1 Update requests split into operations, with the graphs each one can change.

The store runs each operation with pyoxigraph and needs to know, before it runs, which graphs to
snapshot so that it can record exactly what the operation inserted and deleted (the revision's
delta) and undo it if a later operation of the same request fails. The protocol's
``using-graph-uri`` / ``using-named-graph-uri`` parameters are applied here too, as ``USING``
clauses, because pyoxigraph's Python API has no parameter for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sparql_ext.errors import ProtocolConflict, QuerySyntaxError, UnsupportedOperation, line_and_column
from sparql_ext.iris import resolve_iri
from sparql_ext.lexer import Kind, Token, check_derived, check_nesting, matching_close, tokenize
from sparql_ext.syntax_messages import did_you_mean

DEFAULT_GRAPH = ""  # the store's default graph in graph sets below


@dataclass(frozen=True)
class Operation:
    """One operation of an update request, runnable on its own."""

    kind: str  # INSERT DATA, DELETE DATA, DELETE WHERE, MODIFY, LOAD, CLEAR, DROP, CREATE, ADD, ...
    text: str  # the accumulated prologue + the operation (+ injected USING clauses)
    offset: int  # where the operation starts in the user's text
    graphs: frozenset[str] = frozenset()  # IRIs (or DEFAULT_GRAPH) it may change
    all_named: bool = False  # it may change every named graph (CLEAR NAMED, DROP ALL, ...)
    graph_vars: tuple[str, ...] = ()  # template variables naming graphs: values come from WHERE
    where: str | None = None  # prologue + SELECT DISTINCT over graph_vars, when there are any
    using: tuple[str, ...] = ()  # dataset of the WHERE clause, for ``where``
    using_named: tuple[str, ...] = ()


@dataclass
class _Context:
    text: str
    base: str | None
    prefixes: dict[str, str] = field(default_factory=dict)
    prologue: list[str] = field(default_factory=list)

    def iri(self, token: Token) -> str:
        if token.kind is Kind.IRI:
            value = token.text[1:-1]
            return resolve_iri(self.base, value)
        if token.kind is Kind.PNAME:
            prefix, _, local = token.text.partition(":")
            if prefix not in self.prefixes:
                raise QuerySyntaxError(f"prefix {prefix!r} is not declared", self.text, token.start)
            return self.prefixes[prefix] + _unescape_local(local)
        raise QuerySyntaxError(f"expected an IRI, found {token.text!r}", self.text, token.start)


def _unescape_local(local: str) -> str:
    out, i = [], 0
    while i < len(local):
        if local[i] == "\\" and i + 1 < len(local):
            out.append(local[i + 1])
            i += 2
        else:
            out.append(local[i])
            i += 1
    return "".join(out)


def split_update(
    text: str,
    base_iri: str | None = None,
    using: Sequence[str] = (),
    using_named: Sequence[str] = (),
) -> list[Operation]:
    """Split an update request into operations; apply protocol ``using-graph-uri`` parameters.

    >>> [op.kind for op in split_update("CLEAR ALL ; INSERT DATA { <a> <b> <c> }", "http://x/")]
    ['CLEAR', 'INSERT DATA']
    """
    tokens = list(tokenize(text))
    check_nesting(tokens, text)
    service = next((tok for tok in tokens if tok.is_keyword("SERVICE")), None)
    if service is not None:  # pyoxigraph would call it itself, over HTTP, past the server's SERVICE allowlist
        line, column = line_and_column(text, service.start)
        raise UnsupportedOperation(f"SERVICE in an update (line {line} column {column}) is not supported: query "
                                   "the remote endpoint first, then send an INSERT DATA of what it answered")
    ctx = _Context(text, base_iri)
    operations: list[Operation] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.is_keyword("PREFIX"):
            name, iri = _expect(tokens, i + 1, text, Kind.PNAME), _expect(tokens, i + 2, text, Kind.IRI)
            ctx.prefixes[name.text[:-1]] = ctx.iri(iri)
            ctx.prologue.append(text[tok.start : iri.end])
            i += 3
        elif tok.is_keyword("BASE"):
            iri = _expect(tokens, i + 1, text, Kind.IRI)
            ctx.base = ctx.iri(iri)
            ctx.prologue.append(text[tok.start : iri.end])
            i += 2
        elif tok.text == ";":
            i += 1
        else:
            end = _operation_end(tokens, i, text)
            operations.append(_analyze(tokens[i:end], ctx, tuple(using), tuple(using_named)))
            i = end
    for operation in operations:  # each is run as a text of its own (its prologue and rewritten clauses)
        check_derived(operation.text, text)
    return operations


def _expect(tokens: list[Token], i: int, text: str, kind: Kind) -> Token:
    if i >= len(tokens):
        raise QuerySyntaxError(f"unexpected end of update, expected {kind.value}", text, len(text))
    if tokens[i].kind is not kind:
        raise QuerySyntaxError(
            f"expected {kind.value}, found {tokens[i].text!r}", text, tokens[i].start
        )
    return tokens[i]


def _operation_end(tokens: list[Token], start: int, text: str) -> int:
    """Index after the operation starting at ``start`` (a depth-0 ';' or the end)."""
    i = start
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind is Kind.PUNCT and tok.text in "{([":
            i = matching_close(tokens, i, text) + 1
            continue
        if tok.kind is Kind.PUNCT and tok.text == ";":
            return i
        if i > start and tok.is_keyword("PREFIX", "BASE"):
            return i
        i += 1
    return i


def _graph_ref(tokens: list[Token], i: int, ctx: _Context) -> tuple[str | None, bool, int]:
    """Parse ``GRAPH iri | DEFAULT | NAMED | ALL | iri`` at i: (graph, all_named, next index)."""
    if i >= len(tokens):
        raise QuerySyntaxError("a graph is missing", ctx.text, len(ctx.text))
    tok = tokens[i]
    if tok.is_keyword("DEFAULT"):
        return DEFAULT_GRAPH, False, i + 1
    if tok.is_keyword("NAMED"):
        return None, True, i + 1
    if tok.is_keyword("ALL"):
        return DEFAULT_GRAPH, True, i + 1
    if tok.is_keyword("GRAPH"):
        i += 1
        tok = _expect(tokens, i, ctx.text, tokens[i].kind if i < len(tokens) else Kind.IRI)
    return ctx.iri(tok), False, i + 1


def _template(tokens: list[Token], open_i: int, ctx: _Context) -> tuple[set[str], set[str], int]:
    """Graphs (constant, variable) a quad template or quad data block writes; index after it."""
    close = matching_close(tokens, open_i, ctx.text)
    graphs: set[str] = set()
    variables: set[str] = set()
    i = open_i + 1
    while i < close:
        tok = tokens[i]
        if tok.is_keyword("GRAPH"):
            name = tokens[i + 1]
            if name.kind is Kind.VAR:
                variables.add(name.text[1:])
            else:
                graphs.add(ctx.iri(name))
            block = i + 2
            if block >= close or tokens[block].text != "{":
                raise QuerySyntaxError("expected '{' after GRAPH name", ctx.text, name.end)
            i = matching_close(tokens, block, ctx.text) + 1
            continue
        if tok.kind is Kind.PUNCT and tok.text in "([":
            i = matching_close(tokens, i, ctx.text) + 1
            graphs.add(DEFAULT_GRAPH)
            continue
        if tok.text != ".":
            graphs.add(DEFAULT_GRAPH)
        i += 1
    return graphs, variables, close + 1


def _analyze(
    tokens: list[Token], ctx: _Context, using: tuple[str, ...], using_named: tuple[str, ...]
) -> Operation:
    text = ctx.text
    first = tokens[0]
    start, end = first.start, tokens[-1].end
    prologue = "\n".join(ctx.prologue)

    def operation(kind: str, body: str | None = None, **fields: object) -> Operation:
        return Operation(kind, f"{prologue}\n{body if body is not None else text[start:end]}",
                         start, **fields)  # type: ignore[arg-type]

    word = first.text.upper() if first.kind is Kind.WORD else ""
    second = tokens[1] if len(tokens) > 1 else None
    i = 1
    if word in ("CLEAR", "DROP", "CREATE", "LOAD", "ADD", "MOVE", "COPY") and second is not None:
        if second.is_keyword("SILENT"):
            i = 2
    if word in ("CLEAR", "DROP"):
        graph, all_named, _ = _graph_ref(tokens, i, ctx)
        return operation(word, graphs=frozenset(() if graph is None else (graph,)),
                         all_named=all_named)
    if word == "CREATE":
        return operation(word)
    if word == "LOAD":
        graph = DEFAULT_GRAPH
        for j, tok in enumerate(tokens):
            if tok.is_keyword("INTO"):
                graph, _, _ = _graph_ref(tokens, j + 1, ctx)
        return operation(word, graphs=frozenset((graph,)))
    if word in ("ADD", "MOVE", "COPY"):
        source, _, j = _graph_ref(tokens, i, ctx)
        if j >= len(tokens) or not tokens[j].is_keyword("TO"):
            raise QuerySyntaxError(f"expected TO in {word}", text, tokens[min(j, len(tokens) - 1)].start)
        target, _, _ = _graph_ref(tokens, j + 1, ctx)
        return operation(word, graphs=frozenset(g for g in (source, target) if g is not None))
    if word in ("INSERT", "DELETE") and second is not None and second.is_keyword("DATA"):
        graphs, _, _ = _template(tokens, 2, ctx)
        return operation(f"{word} DATA", graphs=frozenset(graphs))
    if word == "DELETE" and second is not None and second.is_keyword("WHERE"):
        graphs, variables, _ = _template(tokens, 2, ctx)
        block = text[tokens[2].start : end]
        body = None
        if using or using_named:  # DELETE WHERE has no USING form: spell it as DELETE … WHERE
            body = f"DELETE {block}\n{_using_clauses(using, using_named)}\nWHERE {block}"
        return operation("DELETE WHERE", body, graphs=frozenset(graphs),
                         graph_vars=tuple(sorted(variables)),
                         where=_where_query(prologue, variables, block), using=using,
                         using_named=using_named)
    if word in ("WITH", "INSERT", "DELETE"):
        return _modify(tokens, ctx, prologue, using, using_named)
    raise QuerySyntaxError(f"{first.text!r} does not start an update operation{did_you_mean(first.text, _OPERATIONS)}",
                           text, first.start)


_OPERATIONS = ("INSERT DATA", "DELETE DATA", "DELETE WHERE", "INSERT", "DELETE", "WITH", "LOAD", "CLEAR", "CREATE",
               "DROP", "COPY", "MOVE", "ADD")


def _modify(
    tokens: list[Token], ctx: _Context, prologue: str,
    using: tuple[str, ...], using_named: tuple[str, ...],
) -> Operation:
    """Modify ::= ('WITH' iri)? (DeleteClause InsertClause? | InsertClause) UsingClause*
    'WHERE' GroupGraphPattern"""
    text = ctx.text
    start, end = tokens[0].start, tokens[-1].end
    with_graph: str | None = None
    graphs: set[str] = set()
    variables: set[str] = set()
    own_using: list[str] = []
    own_using_named: list[str] = []
    i = 0
    if tokens[0].is_keyword("WITH"):
        with_graph = ctx.iri(tokens[1])
        i = 2
    while i < len(tokens) and tokens[i].is_keyword("DELETE", "INSERT"):
        if i + 1 >= len(tokens) or tokens[i + 1].text != "{":
            raise QuerySyntaxError(f"expected '{{' after {tokens[i].text}", text, tokens[i].end)
        template_graphs, template_vars, i = _template(tokens, i + 1, ctx)
        if with_graph is not None and DEFAULT_GRAPH in template_graphs:
            template_graphs.discard(DEFAULT_GRAPH)
            template_graphs.add(with_graph)
        graphs |= template_graphs
        variables |= template_vars
    while i < len(tokens) and tokens[i].is_keyword("USING"):
        if tokens[i + 1].is_keyword("NAMED"):
            own_using_named.append(ctx.iri(tokens[i + 2]))
            i += 3
        else:
            own_using.append(ctx.iri(tokens[i + 1]))
            i += 2
    if i >= len(tokens) or not tokens[i].is_keyword("WHERE"):
        at = tokens[i].start if i < len(tokens) else len(text)
        raise QuerySyntaxError("expected WHERE after the update templates", text, at)
    where_token = tokens[i]
    body = None
    if using or using_named:
        if with_graph is not None or own_using or own_using_named:
            raise ProtocolConflict(
                "the request gives using-graph-uri/using-named-graph-uri parameters and the "
                "update has its own USING or WITH clause; use one or the other (SPARQL 1.1 "
                "Protocol §2.2.3)"
            )
        body = (f"{text[start:where_token.start]}{_using_clauses(using, using_named)}\n"
                f"{text[where_token.start:end]}")
        own_using, own_using_named = list(using), list(using_named)
    elif with_graph is not None and not own_using and not own_using_named:
        own_using = [with_graph]  # WITH names the WHERE clause's default graph when no USING
    block = text[tokens[i + 1].start : end] if i + 1 < len(tokens) else ""
    return Operation(
        "MODIFY", f"{prologue}\n{body if body is not None else text[start:end]}", start,
        graphs=frozenset(graphs), graph_vars=tuple(sorted(variables)),
        where=_where_query(prologue, variables, block), using=tuple(own_using),
        using_named=tuple(own_using_named),
    )


def _using_clauses(using: Sequence[str], using_named: Sequence[str]) -> str:
    return " ".join([f"USING <{g}>" for g in using] + [f"USING NAMED <{g}>" for g in using_named])


def _where_query(prologue: str, variables: set[str], block: str) -> str | None:
    if not variables:
        return None
    projection = " ".join(f"?{v}" for v in sorted(variables))
    return f"{prologue}\nSELECT DISTINCT {projection} WHERE {block}"
