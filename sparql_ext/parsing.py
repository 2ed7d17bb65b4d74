"""What the extended-query parsers share: the parse context over the tokens of one query (prefixes, base IRI,
bracket pairs), positioned failures, positions of a rewritten text mapped back to the user's (``Rewritten``), and
small readers of terms and variables."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparql_ext.errors import QuerySyntaxError
from sparql_ext.iris import resolve_iri
from sparql_ext.lexer import Kind, Token, tokenize

Edit = tuple[int, int, int, int]  # (start, end) in the rewritten text, (start, end) in the original


class Rewritten:
    """A query rewritten from the user's text (``original``) into ``sparql`` by replacing spans (``edits``, in
    order): positions in ``sparql`` map back to the user's text, so that every error is told where the user wrote
    it. The base of the frozen dataclasses that declare these fields (``ExtendedQuery``, ``EventQuery``)."""

    original: str
    sparql: str
    edits: tuple[Edit, ...]

    def original_offset(self, offset_in_sparql: int) -> int:
        """Position in ``original`` of a position in ``sparql``; inside a replacement, where that replacement began."""
        shift = 0
        for start, end, original_start, original_end in self.edits:
            if offset_in_sparql < start:
                break
            if offset_in_sparql < end:
                return original_start
            shift = original_end - end
        return offset_in_sparql + shift

    def syntax_error(self, message: str, offset_in_sparql: int) -> QuerySyntaxError:
        """An error found in ``sparql`` (by ``parse_extended`` or pyoxigraph), at the user's line and column."""
        return QuerySyntaxError(message, self.original, self.original_offset(offset_in_sparql))


class ParseFailure(Exception):
    """A syntax error at an offset of the text being parsed; nested parses remap it to the user's text."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message, self.offset = message, offset


@dataclass
class ParseContext:
    text: str
    tokens: list[Token]
    pairs: dict[int, int]  # index of an opening bracket -> index of its closing bracket
    base_iri: str | None
    prefixes: dict[str, str] = field(default_factory=dict)
    declarations: list[str] = field(default_factory=list)
    dataset: list[str] = field(default_factory=list)  # FROM / FROM NAMED clauses of this query

    @property
    def prologue(self) -> str:
        return "".join(f"{declaration}\n" for declaration in self.declarations)

    def iri(self, token: Token) -> str:
        if token.kind is Kind.IRI:
            return resolve_base(self.base_iri, token.text[1:-1])
        if token.kind is Kind.PNAME:
            prefix, _, local = token.text.partition(":")
            if prefix not in self.prefixes:
                raise ParseFailure(f"prefix {prefix!r} is not declared", token.start)
            return self.prefixes[prefix] + re.sub(r"\\(.)", r"\1", local)
        raise ParseFailure(f"expected an IRI, found {token.text!r}", token.start)

    def is_punct(self, index: int, *texts: str) -> bool:
        return index < len(self.tokens) and self.tokens[index].kind is Kind.PUNCT and self.tokens[index].text in texts

    def at(self, index: int) -> int:
        """Offset of token ``index``, or the end of the text past the last token."""
        return self.tokens[index].start if index < len(self.tokens) else len(self.text)


def extended_tokens(text: str) -> list[Token]:
    """The lexer's tokens, plus the '~' of HEAD~n (not a SPARQL 1.1 character) and '5.' split as '5' '.'."""
    out: list[Token] = []
    position = 0
    while True:
        try:
            for tok in tokenize(text, position):
                if tok.kind is Kind.NUMBER and tok.text.endswith("."):  # DECIMAL needs digits after '.'
                    out.append(Token(Kind.NUMBER, tok.text[:-1], tok.start, tok.end - 1))
                    out.append(Token(Kind.PUNCT, ".", tok.end - 1, tok.end))
                else:
                    out.append(tok)
            return out
        except QuerySyntaxError as error:
            at = error.offset
            if text[at] != "~":
                raise ParseFailure(str(error).split(": ", 1)[1], at) from None
            out.append(Token(Kind.PUNCT, "~", at, at + 1))
            position = at + 1


def bracket_pairs(tokens: list[Token]) -> dict[int, int]:
    """Match every bracket once, so that unbalanced text fails before anything is cut out of it."""
    closers = {"}": "{", ")": "(", "]": "["}
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for index, tok in enumerate(tokens):
        if tok.kind is not Kind.PUNCT:
            continue
        if tok.text in "{([":
            stack.append(index)
        elif tok.text in closers:
            if not stack or tokens[stack[-1]].text != closers[tok.text]:
                raise ParseFailure(f"unbalanced {tok.text!r}", tok.start)
            pairs[stack.pop()] = index
    if stack:
        raise ParseFailure(f"{tokens[stack[-1]].text!r} is never closed", tokens[stack[-1]].start)
    return pairs


def resolve_base(base: str | None, value: str) -> str:
    return resolve_iri(base, value)


def expect(ctx: ParseContext, index: int, kind: Kind) -> Token:
    if index >= len(ctx.tokens) or ctx.tokens[index].kind is not kind:
        found = repr(ctx.tokens[index].text) if index < len(ctx.tokens) else "the end of the query"
        raise ParseFailure(f"expected {kind.value}, found {found}", ctx.at(index))
    return ctx.tokens[index]


def mentioned(ctx: ParseContext, lo: int, hi: int) -> tuple[str, ...]:
    """Variables in tokens[lo:hi], in order; of a sub-SELECT only what it projects (the rest is not in scope)."""
    tokens, found = ctx.tokens, dict[str, None]()
    k = lo
    while k < hi:
        if ctx.is_punct(k, "{") and k + 1 < hi and tokens[k + 1].is_keyword("SELECT"):
            found.update(dict.fromkeys(projection(ctx, k + 1, ctx.pairs[k])))
            k = ctx.pairs[k] + 1
            continue
        if tokens[k].kind is Kind.VAR:
            found[variable_name(tokens[k])] = None
        k += 1
    return tuple(found)


def variable_name(token: Token) -> str:
    return "?" + token.text[1:]  # $x and ?x are the same variable


_ECHAR = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)


def string_value(literal: str) -> str:
    """The value of a SPARQL string token (any of the four quotings), escapes decoded."""
    quote = 3 if literal[:3] in ('"""', "'''") else 1
    body = literal[quote:-quote]
    return _ESCAPE.sub(lambda m: chr(int(m[1] or m[2], 16)) if (m[1] or m[2]) else _ECHAR.get(m[3], m[0]), body)


def ntriples_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def projection(ctx: ParseContext, select: int, close: int) -> tuple[str, ...]:
    tokens, found = ctx.tokens, dict[str, None]()
    k = select + 1
    if k < close and tokens[k].is_keyword("DISTINCT", "REDUCED"):
        k += 1
    if ctx.is_punct(k, "*"):
        while k < close and not ctx.is_punct(k, "{"):
            k += 1
        return mentioned(ctx, k + 1, ctx.pairs[k]) if k < close else ()
    while k < close and not tokens[k].is_keyword("WHERE") and not ctx.is_punct(k, "{"):
        if tokens[k].kind is Kind.VAR:
            found[variable_name(tokens[k])] = None
        elif ctx.is_punct(k, "("):
            end = ctx.pairs[k]
            if tokens[end - 1].kind is Kind.VAR:  # ( expression AS ?var )
                found[variable_name(tokens[end - 1])] = None
            k = end
        k += 1
    return tuple(found)
