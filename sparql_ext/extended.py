"""Extended SPARQL queries (DESIGN §2) rewritten into standard SPARQL 1.1 plus separately evaluated parts.

pyoxigraph can neither parse ``REVISION``, ``WINDOWS`` or ``THEN()`` nor call back into Python for
``SERVICE``, so each extension part (and every ``SERVICE``) is cut out of the query and replaced by a
placeholder ``VALUES () { () }`` (the join identity). The caller evaluates each part over its own
dataset and substitutes its solutions, as a VALUES table, at the placeholder's span. A part whose
target is a variable carries a ``prefix`` query: the elements of its group that precede it, which bind
the variable. ``CONSTRUCT`` templates with ``GRAPH`` blocks (quad templates, not SPARQL 1.1) become a
SELECT of the template variables plus a parsed ``QuadTemplate`` the caller instantiates per solution.

Only the tokenizer is used: keywords inside strings, IRIs and comments are never matched. Every error
is a ``QuerySyntaxError`` positioned in the user's text, and ``ExtendedQuery.original_offset`` maps
positions of the rewritten text back to it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Literal

from sparql_ext.errors import QuerySyntaxError, RevisionSyntaxError, WindowRefSyntaxError
from sparql_ext.iris import resolve_iri
from sparql_ext.lexer import Kind, Token, check_nesting, tokenize
from sparql_ext.revision import RevisionDesignator, parse_revision
from sparql_ext.windowref import WindowRef, parse_window_ref

PLACEHOLDER = "VALUES () { () }"
THEN_FUNCTION = "urn:x-concentrator:fn:then"
THEN_CALL = f"<{THEN_FUNCTION}>()"
_RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
_XSD = "http://www.w3.org/2001/XMLSchema#"

Term = tuple[str, str]  # ('var', name) | ('bnode', label) | ('iri', value) | ('literal', N-Triples text)
Quad = tuple[Term, Term, Term, Term | None]  # graph None = the default graph
PartKind = Literal["revision", "windows", "service"]
Edit = tuple[int, int, int, int]  # (start, end) in the rewritten text, (start, end) in the original


@dataclass(frozen=True)
class QuadTemplate:
    """A CONSTRUCT template with GRAPH blocks; instantiate once per solution, with fresh blank nodes each time."""

    quads: tuple[Quad, ...]
    variables: tuple[str, ...]  # names without '?', in order of first appearance: the SELECT's projection


@dataclass(frozen=True)
class ExtensionPart:
    """One REVISION / WINDOWS / SERVICE clause, cut out of the query to be evaluated on its own dataset."""

    ident: int  # 0, 1, … in order of appearance at this query level
    kind: PartKind
    target: str  # '?var', the Revision or WindowRef text, a String's value, or the expanded service IRI
    target_is_variable: bool
    silent: bool  # SERVICE SILENT: a failing evaluation yields the join identity instead of an error
    inner: ExtendedQuery | str  # `SELECT * WHERE { … }` (prologue repeated); parsed when it has extensions
    inner_variables: tuple[str, ...]  # '?x' names the inner pattern can bind (sub-SELECTs: their projection)
    prefix: str  # extended SPARQL binding the target variable (parse it in turn), or "" for a constant
    placeholder: tuple[int, int]  # span of `VALUES () { () }` in ExtendedQuery.sparql
    source_span: tuple[int, int]  # span of the whole part in the user's text
    inner_span: tuple[int, int] = (0, 0)  # span of the part's group pattern `{ … }` in the user's text

    @property
    def values_variables(self) -> tuple[str, ...]:
        """The VALUES header for this part's solutions: the target variable (if any) and the inner ones."""
        head = (self.target,) if self.target_is_variable else ()
        return head + tuple(v for v in self.inner_variables if v not in head)

    @property
    def designator(self) -> RevisionDesignator | WindowRef | None:
        """The parsed Revision or WindowRef of a constant REVISION / WINDOWS target (validated at parse time)."""
        if self.target_is_variable or self.kind == "service":
            return None
        return parse_revision(self.target) if self.kind == "revision" else parse_window_ref(self.target)

    def original_offset(self, offset_in_inner: int) -> int:
        """Map a position in the inner query's text (``inner``, or ``inner.original`` when parsed) to the user's text.

        Nested parts' spans are positions in their enclosing ``inner.original``, so calls chain outwards; a
        position in a parsed ``inner.sparql`` goes through ``inner.original_offset`` first.
        """
        inner_text = self.inner.original if isinstance(self.inner, ExtendedQuery) else self.inner
        header = len(inner_text) - (self.inner_span[1] - self.inner_span[0])
        if offset_in_inner < header:
            return self.source_span[0]
        return self.inner_span[0] + offset_in_inner - header


@dataclass(frozen=True)
class ExtendedQuery:
    """A query split into standard SPARQL 1.1 (``sparql``) and the extension parts it needs evaluated first."""

    original: str
    sparql: str
    parts: tuple[ExtensionPart, ...]
    uses_then: bool  # ``sparql`` calls <urn:x-concentrator:fn:then>() (THEN() outside the parts)
    template: QuadTemplate | None
    edits: tuple[Edit, ...] = field(default=(), repr=False)

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
        """An error found in ``sparql`` (e.g. by pyoxigraph), reported at the user's line and column."""
        return QuerySyntaxError(message, self.original, self.original_offset(offset_in_sparql))


@functools.lru_cache(maxsize=1024)
def parse_extended(text: str, base_iri: str | None = None) -> ExtendedQuery:
    """Split an extended query into SPARQL 1.1 and its extension parts (cached: the result is immutable, and
    rules and prefixes parse the same texts again on every firing).

    >>> q = parse_extended('SELECT * WHERE { ?s ?p ?o . WINDOWS HEAD~9/HEAD { ?s ?q ?v } }')
    >>> q.sparql
    'SELECT * WHERE { ?s ?p ?o . VALUES () { () } }'
    >>> q.parts[0].kind, q.parts[0].target, q.parts[0].inner
    ('windows', 'HEAD~9/HEAD', 'SELECT * WHERE { ?s ?q ?v }')
    """
    try:
        return _parse(text, base_iri)
    except _Fail as failure:
        raise QuerySyntaxError(failure.message, text, failure.offset) from None


class _Fail(Exception):
    """A syntax error at an offset of the text being parsed; nested parses remap it to the user's text."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message, self.offset = message, offset


@dataclass(frozen=True)
class _Replacement:
    start: int
    end: int
    text: str
    part: int | None = None  # index into the parts being built when this is a placeholder


@dataclass(frozen=True)
class _RawPart:
    kind: PartKind
    target: str
    target_is_variable: bool
    silent: bool
    inner: ExtendedQuery | str
    inner_variables: tuple[str, ...]
    prefix: str
    source_span: tuple[int, int]
    inner_span: tuple[int, int]


@dataclass
class _Context:
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
            return _resolve(self.base_iri, token.text[1:-1])
        if token.kind is Kind.PNAME:
            prefix, _, local = token.text.partition(":")
            if prefix not in self.prefixes:
                raise _Fail(f"prefix {prefix!r} is not declared", token.start)
            return self.prefixes[prefix] + re.sub(r"\\(.)", r"\1", local)
        raise _Fail(f"expected an IRI, found {token.text!r}", token.start)

    def is_punct(self, index: int, *texts: str) -> bool:
        return index < len(self.tokens) and self.tokens[index].kind is Kind.PUNCT and self.tokens[index].text in texts

    def at(self, index: int) -> int:
        """Offset of token ``index``, or the end of the text past the last token."""
        return self.tokens[index].start if index < len(self.tokens) else len(self.text)


def _parse(text: str, base_iri: str | None) -> ExtendedQuery:
    tokens = _tokens(text)
    check_nesting(tokens, text)
    ctx = _Context(text, tokens, _pairs(tokens), base_iri)
    i = _prologue(ctx)
    _dataset_clauses(ctx, i)
    replacements: list[_Replacement] = []
    raw_parts: list[_RawPart] = []
    template: QuadTemplate | None = None
    if i + 1 < len(tokens) and tokens[i].is_keyword("CONSTRUCT") and ctx.is_punct(i + 1, "{"):
        close = ctx.pairs[i + 1]
        if any(tok.is_keyword("GRAPH") for tok in tokens[i + 2 : close]):
            template = _Template(ctx).parse(i + 2, close)
            projection = " ".join(f"?{name}" for name in template.variables) or "*"
            replacements.append(_Replacement(tokens[i].start, tokens[close].end, f"SELECT {projection}"))
        i = close + 1  # a template holds no extension parts to find
    uses_then = False
    stack: list[tuple[int, str | None]] = []  # open '{' indices with the innermost enclosing GRAPH name
    while i < len(tokens):
        tok = tokens[i]
        if ctx.is_punct(i, "{"):
            graph = stack[-1][1] if stack else None
            if i >= 2 and tokens[i - 2].is_keyword("GRAPH") and tokens[i - 1].kind in (Kind.VAR, Kind.IRI, Kind.PNAME):
                graph = tokens[i - 1].text
            stack.append((i, graph))
        elif ctx.is_punct(i, "}"):
            stack.pop()
        elif tok.is_keyword("REVISION", "WINDOWS", "SERVICE"):
            if not stack:
                raise _Fail(f"{tok.text.upper()} must be inside a group pattern", tok.start)
            part, close = _part(ctx, i, stack[-1])
            replacements.append(_Replacement(tok.start, tokens[close].end, PLACEHOLDER, len(raw_parts)))
            raw_parts.append(part)
            i = close + 1
            continue
        elif tok.is_keyword("THEN"):
            if not (ctx.is_punct(i + 1, "(") and ctx.is_punct(i + 2, ")")):
                raise _Fail("THEN takes no arguments: write THEN()", tok.start)
            replacements.append(_Replacement(tok.start, tokens[i + 2].end, THEN_CALL))
            uses_then = True
            i += 3
            continue
        i += 1
    return _assemble(text, replacements, raw_parts, uses_then, template)


def _assemble(
    text: str, replacements: list[_Replacement], raw_parts: list[_RawPart], uses_then: bool,
    template: QuadTemplate | None,
) -> ExtendedQuery:
    """Apply the replacements, recording where each landed so positions can be mapped back."""
    chunks: list[str] = []
    edits: list[Edit] = []
    placeholders: dict[int, tuple[int, int]] = {}
    position = length = 0
    for replacement in sorted(replacements, key=lambda r: r.start):
        chunks.append(text[position : replacement.start])
        length += replacement.start - position
        edits.append((length, length + len(replacement.text), replacement.start, replacement.end))
        if replacement.part is not None:
            placeholders[replacement.part] = (length, length + len(replacement.text))
        chunks.append(replacement.text)
        length += len(replacement.text)
        position = replacement.end
    chunks.append(text[position:])
    parts = tuple(
        ExtensionPart(ident, raw.kind, raw.target, raw.target_is_variable, raw.silent, raw.inner,
                      raw.inner_variables, raw.prefix, placeholders[ident], raw.source_span, raw.inner_span)
        for ident, raw in enumerate(raw_parts)
    )
    return ExtendedQuery(text, "".join(chunks), parts, uses_then, template, tuple(edits))


def _tokens(text: str) -> list[Token]:
    """The lexer's tokens, plus the '~' of HEAD~n (not a SPARQL 1.1 character) and '5.' split as '5' '.'."""
    out: list[Token] = []
    position = 0
    while True:
        try:
            for tok in tokenize(text[position:]):
                start, end = tok.start + position, tok.end + position
                if tok.kind is Kind.NUMBER and tok.text.endswith("."):  # DECIMAL needs digits after '.'
                    out.append(Token(Kind.NUMBER, tok.text[:-1], start, end - 1))
                    out.append(Token(Kind.PUNCT, ".", end - 1, end))
                else:
                    out.append(Token(tok.kind, tok.text, start, end))
            return out
        except QuerySyntaxError as error:
            at = position + error.offset
            if text[at] != "~":
                raise _Fail(str(error).split(": ", 1)[1], at) from None
            out.append(Token(Kind.PUNCT, "~", at, at + 1))
            position = at + 1


def _pairs(tokens: list[Token]) -> dict[int, int]:
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
                raise _Fail(f"unbalanced {tok.text!r}", tok.start)
            pairs[stack.pop()] = index
    if stack:
        raise _Fail(f"{tokens[stack[-1]].text!r} is never closed", tokens[stack[-1]].start)
    return pairs


def _prologue(ctx: _Context) -> int:
    """Read PREFIX / BASE declarations; index of the first token after them."""
    tokens, i = ctx.tokens, 0
    while i < len(tokens) and tokens[i].is_keyword("PREFIX", "BASE"):
        tok = tokens[i]
        if tok.is_keyword("BASE"):
            iri = _expect(ctx, i + 1, Kind.IRI)
            ctx.base_iri = ctx.iri(iri)
            i += 2
        else:
            name = _expect(ctx, i + 1, Kind.PNAME)
            iri = _expect(ctx, i + 2, Kind.IRI)
            if not name.text.endswith(":") or name.text.count(":") != 1:
                raise _Fail(f"{name.text!r} is not a prefix name (e.g. ex:)", name.start)
            ctx.prefixes[name.text[:-1]] = ctx.iri(iri)
            i += 3
        ctx.declarations.append(ctx.text[tok.start : iri.end])
    return i


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")


def _resolve(base: str | None, value: str) -> str:
    return resolve_iri(base, value)


def _expect(ctx: _Context, index: int, kind: Kind) -> Token:
    if index >= len(ctx.tokens) or ctx.tokens[index].kind is not kind:
        found = repr(ctx.tokens[index].text) if index < len(ctx.tokens) else "the end of the query"
        raise _Fail(f"expected {kind.value}, found {found}", ctx.at(index))
    return ctx.tokens[index]


def _dataset_clauses(ctx: _Context, i: int) -> None:
    """FROM / FROM NAMED clauses (outside all brackets): the prefix queries run over the same dataset."""
    tokens = ctx.tokens
    while i < len(tokens):
        if i in ctx.pairs:
            i = ctx.pairs[i] + 1
            continue
        if tokens[i].is_keyword("FROM"):
            last = i + 2 if i + 1 < len(tokens) and tokens[i + 1].is_keyword("NAMED") else i + 1
            if last < len(tokens):
                ctx.dataset.append(ctx.text[tokens[i].start : tokens[last].end])
            i = last
        i += 1


def _part(ctx: _Context, i: int, enclosing: tuple[int, str | None]) -> tuple[_RawPart, int]:
    """Parse the extension part whose keyword is token ``i``; also return the index of its closing '}'."""
    tokens, keyword = ctx.tokens, ctx.tokens[i]
    kind: PartKind = keyword.text.lower()  # type: ignore[assignment]
    silent = False
    k = i + 1
    if kind == "service":
        if k < len(tokens) and tokens[k].is_keyword("SILENT"):
            silent, k = True, k + 1
        if not (k < len(tokens) and tokens[k].kind in (Kind.VAR, Kind.IRI, Kind.PNAME) and ctx.is_punct(k + 1, "{")):
            raise _Fail("SERVICE needs a Var or an IRI and a group pattern", keyword.start)
        target_token = tokens[k]
        is_variable = target_token.kind is Kind.VAR
        target = _variable(target_token) if is_variable else ctx.iri(target_token)
        open_index = k + 1
    else:
        open_index = k
        while open_index < len(tokens) and not ctx.is_punct(open_index, "{", "}"):
            open_index += 1
        if open_index == k or not ctx.is_punct(open_index, "{"):
            what = "a Var, a Revision or a String" if kind == "revision" else "a WindowRef"
            raise _Fail(f"{kind.upper()} needs {what} and a group pattern", keyword.start)
        target_token = tokens[k]
        is_variable = kind == "revision" and target_token.kind is Kind.VAR and open_index == k + 1
        if is_variable:
            target = _variable(target_token)
        elif kind == "revision" and target_token.kind is Kind.STRING and open_index == k + 1:
            target = _string_value(target_token.text)
            _check_revision(target, target_token.start)
        else:
            target = ctx.text[target_token.start : tokens[open_index - 1].end]
            if kind == "revision":
                _check_revision(target, target_token.start)
            else:
                try:
                    parse_window_ref(target)
                except WindowRefSyntaxError as error:
                    raise _Fail(error.message, target_token.start) from None
    close = ctx.pairs[open_index]
    inner_span = (tokens[open_index].start, tokens[close].end)
    header = f"{ctx.prologue}SELECT * WHERE "
    inner_text = header + ctx.text[inner_span[0] : inner_span[1]]
    try:
        parsed = _parse(inner_text, ctx.base_iri)
    except _Fail as failure:
        offset = failure.offset - len(header) + inner_span[0] if failure.offset >= len(header) else keyword.start
        raise _Fail(failure.message, offset) from None
    inner: ExtendedQuery | str = parsed if parsed.parts or parsed.uses_then else inner_text
    prefix = _prefix(ctx, enclosing, i, target_token, target) if is_variable else ""
    part = _RawPart(kind, target, is_variable, silent, inner, _mentioned(ctx, open_index, close + 1), prefix,
                    (keyword.start, tokens[close].end), inner_span)
    return part, close


def _check_revision(value: str, offset: int) -> None:
    try:
        parse_revision(value)
    except RevisionSyntaxError as error:
        raise _Fail(error.message, offset) from None


def _prefix(ctx: _Context, enclosing: tuple[int, str | None], part_index: int, var: Token, name: str) -> str:
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
        if tokens[k].is_keyword("FILTER") and (end := _constraint_end(ctx, k + 1)) is not None:
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
    static = {v for lo, hi in elements for v in _mentioned(ctx, lo, hi)}
    unbound = {v for lo, hi in parts for v in _mentioned(ctx, lo, hi)} - _bound_outside_binds(ctx, elements)
    unbound |= _derived(ctx, elements, unbound)
    left_out = parts if parts and name in static - unbound else []
    bound = static - unbound if left_out else static | {v for lo, hi in parts for v in _mentioned(ctx, lo, hi)}
    if name not in bound:
        raise _Fail(f"{name} must be bound by the patterns before {tokens[part_index].text.upper()} in its group "
                    "(SERVICE / REVISION with a variable is evaluated once per value of it)", var.start)
    dropped = [(lo, hi) for lo, hi in filters
               if not {_variable(t) for t in tokens[lo:hi] if t.kind is Kind.VAR} <= bound]
    pieces, position = [], tokens[open_index].end
    for lo, hi in sorted(dropped + left_out):
        pieces.append(ctx.text[position : tokens[lo].start])
        position = tokens[hi - 1].end
    pieces.append(ctx.text[position : tokens[part_index].start])
    body = "".join(pieces)
    if graph is not None:
        body = f" GRAPH {graph} {{{body}\n}}"
    dataset = "".join(f" {clause}" for clause in ctx.dataset)
    return f"{ctx.prologue}SELECT DISTINCT {name}{dataset} WHERE {{{body}\n}}"


def _binds(ctx: _Context, ranges: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """The ``BIND ( expression AS ?v )`` elements in ``ranges``: (expression start, end, ?v)."""
    found = []
    for lo, hi in ranges:
        for k in range(lo, hi):
            if ctx.tokens[k].is_keyword("BIND") and ctx.is_punct(k + 1, "("):
                close = ctx.pairs[k + 1]
                if ctx.tokens[close - 1].kind is Kind.VAR and ctx.tokens[close - 2].is_keyword("AS"):
                    found.append((k + 2, close - 2, _variable(ctx.tokens[close - 1])))
    return found


def _bound_outside_binds(ctx: _Context, ranges: list[tuple[int, int]]) -> set[str]:
    """Variables the elements mention other than inside a BIND's expression (those a BIND reads, not binds)."""
    inside = {k for lo, _, _ in _binds(ctx, ranges) for k in range(lo - 2, lo)} | {
        k for lo, hi, _ in _binds(ctx, ranges) for k in range(lo, hi)}
    return {_variable(ctx.tokens[k]) for lo, hi in ranges for k in range(lo, hi)
            if k not in inside and ctx.tokens[k].kind is Kind.VAR}


def _derived(ctx: _Context, ranges: list[tuple[int, int]], unbound: set[str]) -> set[str]:
    """The BIND targets computed (transitively, in order) from ``unbound`` variables."""
    derived: set[str] = set()
    for lo, hi, target in _binds(ctx, ranges):
        if {_variable(t) for t in ctx.tokens[lo:hi] if t.kind is Kind.VAR} & (unbound | derived):
            derived.add(target)
    return derived


def _constraint_end(ctx: _Context, k: int) -> int | None:
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


def _mentioned(ctx: _Context, lo: int, hi: int) -> tuple[str, ...]:
    """Variables in tokens[lo:hi], in order; of a sub-SELECT only what it projects (the rest is not in scope)."""
    tokens, found = ctx.tokens, dict[str, None]()
    k = lo
    while k < hi:
        if ctx.is_punct(k, "{") and k + 1 < hi and tokens[k + 1].is_keyword("SELECT"):
            found.update(dict.fromkeys(_projection(ctx, k + 1, ctx.pairs[k])))
            k = ctx.pairs[k] + 1
            continue
        if tokens[k].kind is Kind.VAR:
            found[_variable(tokens[k])] = None
        k += 1
    return tuple(found)


def _projection(ctx: _Context, select: int, close: int) -> tuple[str, ...]:
    tokens, found = ctx.tokens, dict[str, None]()
    k = select + 1
    if k < close and tokens[k].is_keyword("DISTINCT", "REDUCED"):
        k += 1
    if ctx.is_punct(k, "*"):
        while k < close and not ctx.is_punct(k, "{"):
            k += 1
        return _mentioned(ctx, k + 1, ctx.pairs[k]) if k < close else ()
    while k < close and not tokens[k].is_keyword("WHERE") and not ctx.is_punct(k, "{"):
        if tokens[k].kind is Kind.VAR:
            found[_variable(tokens[k])] = None
        elif ctx.is_punct(k, "("):
            end = ctx.pairs[k]
            if tokens[end - 1].kind is Kind.VAR:  # ( expression AS ?var )
                found[_variable(tokens[end - 1])] = None
            k = end
        k += 1
    return tuple(found)


def _variable(token: Token) -> str:
    return "?" + token.text[1:]  # $x and ?x are the same variable


_ECHAR = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)


def _string_value(literal: str) -> str:
    """The value of a SPARQL string token (any of the four quotings), escapes decoded."""
    quote = 3 if literal[:3] in ('"""', "'''") else 1
    body = literal[quote:-quote]
    return _ESCAPE.sub(lambda m: chr(int(m[1] or m[2], 16)) if (m[1] or m[2]) else _ECHAR.get(m[3], m[0]), body)


def _ntriples_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


class _Template:
    """Parser of a CONSTRUCT template with GRAPH blocks (the Quads production of SPARQL Update)."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.quads: list[Quad] = []
        self.variables: dict[str, None] = {}
        self.labels = {tok.text[2:] for tok in ctx.tokens if tok.kind is Kind.BNODE}
        self.counter = 0

    def parse(self, lo: int, hi: int) -> QuadTemplate:
        tokens, k = self.ctx.tokens, lo
        while k < hi:
            tok = tokens[k]
            if self.ctx.is_punct(k, "."):
                k += 1
            elif tok.is_keyword("GRAPH"):
                if not (k + 1 < hi and tokens[k + 1].kind in (Kind.VAR, Kind.IRI, Kind.PNAME)
                        and self.ctx.is_punct(k + 2, "{")):
                    raise _Fail("GRAPH in a template needs a Var or an IRI and a '{'", tok.start)
                graph, _ = self.term(k + 1, hi)
                close = self.ctx.pairs[k + 2]
                inner = k + 3
                while inner < close:
                    if self.ctx.is_punct(inner, "."):
                        inner += 1
                        continue
                    inner = self.triples(inner, close, graph)
                    if inner < close and not self.ctx.is_punct(inner, "."):
                        raise _Fail(f"expected '.' or '}}', found {tokens[inner].text!r}", tokens[inner].start)
                k = close + 1
            else:
                k = self.triples(k, hi, None)
                if k < hi and not (self.ctx.is_punct(k, ".") or tokens[k].is_keyword("GRAPH")):
                    raise _Fail(f"expected '.', GRAPH or '}}', found {tokens[k].text!r}", tokens[k].start)
        return QuadTemplate(tuple(self.quads), tuple(self.variables))

    def fresh(self) -> Term:
        while f"t{self.counter}" in self.labels:
            self.counter += 1
        self.labels.add(label := f"t{self.counter}")
        return ("bnode", label)

    def triples(self, k: int, hi: int, graph: Term | None) -> int:
        """TriplesSameSubject at ``k``; index after it."""
        if self.ctx.is_punct(k, "[", "("):
            empty = self.ctx.pairs[k] == k + 1
            subject, k = self.node(k, hi, graph)
            if k < hi and self.is_verb(k):
                return self.properties(subject, k, hi, graph)
            if empty:
                raise _Fail("expected a predicate", self.ctx.at(k))
            return k
        subject, k = self.term(k, hi)
        return self.properties(subject, k, hi, graph)

    def is_verb(self, k: int) -> bool:
        tok = self.ctx.tokens[k]
        return tok.kind in (Kind.VAR, Kind.IRI, Kind.PNAME) or (tok.kind is Kind.WORD and tok.text == "a")

    def properties(self, subject: Term, k: int, hi: int, graph: Term | None) -> int:
        """PropertyListNotEmpty: ``verb objects (; verb objects)*``; index after it."""
        while True:
            if k >= hi or not self.is_verb(k):
                raise _Fail("expected a predicate", self.ctx.at(k))
            tok = self.ctx.tokens[k]
            verb = ("iri", _RDF + "type") if tok.kind is Kind.WORD else self.term(k, hi)[0]
            k += 1
            while True:
                obj, k = self.node(k, hi, graph)
                self.quads.append((subject, verb, obj, graph))
                if not self.ctx.is_punct(k, ","):
                    break
                k += 1
            if not self.ctx.is_punct(k, ";"):
                return k
            while k < hi and self.ctx.is_punct(k, ";"):
                k += 1
            if k >= hi or not self.is_verb(k):
                return k

    def node(self, k: int, hi: int, graph: Term | None) -> tuple[Term, int]:
        """GraphNode: a term, ``[ … ]`` or a collection ``( … )``; it emits its own triples."""
        if self.ctx.is_punct(k, "["):
            close, subject = self.ctx.pairs[k], self.fresh()
            if close > k + 1 and self.properties(subject, k + 1, close, graph) != close:
                raise _Fail("expected ']'", self.ctx.at(close))
            return subject, close + 1
        if self.ctx.is_punct(k, "("):
            close = self.ctx.pairs[k]
            items: list[Term] = []
            k += 1
            while k < close:
                item, k = self.node(k, close, graph)
                items.append(item)
            cells = [self.fresh() for _ in items] + [("iri", _RDF + "nil")]
            for index, item in enumerate(items):
                self.quads.append((cells[index], ("iri", _RDF + "first"), item, graph))
                self.quads.append((cells[index], ("iri", _RDF + "rest"), cells[index + 1], graph))
            return cells[0], close + 1
        return self.term(k, hi)

    def term(self, k: int, hi: int) -> tuple[Term, int]:
        """A single RDF term or variable at ``k`` (a literal may span three tokens); index after it."""
        if k >= hi:
            raise _Fail("unexpected end of the CONSTRUCT template", self.ctx.at(k))
        tok = self.ctx.tokens[k]
        if tok.kind is Kind.VAR:
            self.variables[tok.text[1:]] = None
            return ("var", tok.text[1:]), k + 1
        if tok.kind in (Kind.IRI, Kind.PNAME):
            return ("iri", self.ctx.iri(tok)), k + 1
        if tok.kind is Kind.BNODE:
            return ("bnode", tok.text[2:]), k + 1
        if tok.kind is Kind.STRING:
            lexical = _ntriples_string(_string_value(tok.text))
            if k + 1 < hi and self.ctx.tokens[k + 1].kind is Kind.LANGTAG:
                return ("literal", lexical + self.ctx.tokens[k + 1].text), k + 2
            if self.ctx.is_punct(k + 1, "^^") and k + 2 < hi:
                return ("literal", f"{lexical}^^<{self.ctx.iri(self.ctx.tokens[k + 2])}>"), k + 3
            return ("literal", lexical), k + 1
        if tok.kind is Kind.NUMBER:
            datatype = "double" if "e" in tok.text.lower() else "decimal" if "." in tok.text else "integer"
            return ("literal", f'"{tok.text}"^^<{_XSD}{datatype}>'), k + 1
        if tok.kind is Kind.WORD and tok.text.lower() in ("true", "false"):
            return ("literal", f'"{tok.text.lower()}"^^<{_XSD}boolean>'), k + 1
        raise _Fail(f"{tok.text!r} is not an RDF term or a variable", tok.start)
