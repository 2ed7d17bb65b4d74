"""Extended SPARQL queries (docs/extended-sparql.md) rewritten into standard SPARQL 1.1 plus separately evaluated parts.

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
from sparql_ext.lexer import Kind, Token, check_nesting
from sparql_ext.parsing import (
    Edit,
    ParseContext,
    ParseFailure,
    Rewritten,
    bracket_pairs,
    expect,
    extended_tokens,
    mentioned,
    string_value,
    variable_name,
)
from sparql_ext.prefixes import Prefix, prefix_query
from sparql_ext.revision import RevisionDesignator, parse_revision
from sparql_ext.templates import QuadTemplate, TemplateParser
from sparql_ext.windowref import WindowRef, parse_window_ref

PLACEHOLDER = "VALUES () { () }"
THEN_FUNCTION = "urn:x-concentrator:fn:then"
THEN_CALL = f"<{THEN_FUNCTION}>()"

PartKind = Literal["revision", "windows", "service"]


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
    prefix_patterns: Prefix | None  # a variable target's prefix query and what it is made of (sparql_ext.prefixes)
    placeholder: tuple[int, int]  # span of `VALUES () { () }` in ExtendedQuery.sparql
    source_span: tuple[int, int]  # span of the whole part in the user's text
    inner_span: tuple[int, int] = (0, 0)  # span of the part's group pattern `{ … }` in the user's text

    @property
    def prefix(self) -> str:
        """Extended SPARQL binding the target variable (parse it in turn), or "" for a constant target."""
        return self.prefix_patterns.text if self.prefix_patterns is not None else ""

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
class ExtendedQuery(Rewritten):
    """A query split into standard SPARQL 1.1 (``sparql``) and the extension parts it needs evaluated first
    (``original_offset`` and ``syntax_error``: ``Rewritten``)."""

    original: str
    sparql: str
    parts: tuple[ExtensionPart, ...]
    uses_then: bool  # ``sparql`` calls <urn:x-concentrator:fn:then>() (THEN() outside the parts)
    template: QuadTemplate | None
    edits: tuple[Edit, ...] = field(default=(), repr=False)
    #: False when ``sparql`` matches no pattern against its dataset (only the parts' tables, FILTER, BIND and VALUES:
    #: a rule over a window's aggregate), so any store gives its answer (``_reads_data``)
    reads_data: bool = True


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
    except ParseFailure as failure:
        raise QuerySyntaxError(failure.message, text, failure.offset) from None


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
    prefix: Prefix | None
    source_span: tuple[int, int]
    inner_span: tuple[int, int]


def _parse(text: str, base_iri: str | None, tokens: list[Token] | None = None) -> ExtendedQuery:
    """``tokens``: the text's tokens when the caller has them already (an inner group of a parsed query)."""
    inner = tokens is not None
    if tokens is None:
        tokens = extended_tokens(text)
        check_nesting(tokens, text)  # an inner group's text is the outer's, read as deep or less (and checked again
        # before pyoxigraph reads it when a reading of the outer forks: engine.syntax.check_syntax)
    ctx = ParseContext(text, tokens, bracket_pairs(tokens), base_iri)
    i = _prologue(ctx)
    _dataset_clauses(ctx, i)
    replacements: list[_Replacement] = []
    raw_parts: list[_RawPart] = []
    template: QuadTemplate | None = None
    first = i  # the query form's keyword
    if i + 1 < len(tokens) and tokens[i].is_keyword("CONSTRUCT") and ctx.is_punct(i + 1, "{"):
        close = ctx.pairs[i + 1]
        if any(tok.is_keyword("GRAPH") for tok in tokens[i + 2 : close]):
            template = TemplateParser(ctx).parse(i + 2, close)
            projection = " ".join(f"?{name}" for name in template.variables) or "*"
            replacements.append(_Replacement(tokens[i].start, tokens[close].end, f"SELECT {projection}"))
        i = close + 1  # a template holds no extension parts to find
    uses_then = False
    part_tokens: dict[int, int] = {}  # an extension part's first token -> its last
    stack: list[tuple[int, str | None]] = []  # open '{' indices with the innermost enclosing GRAPH name
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind is Kind.PUNCT:  # most tokens are neither brackets nor words: one test each (a rule has dozens)
            if tok.text == "{":
                graph = stack[-1][1] if stack else None
                if (i >= 2 and tokens[i - 2].is_keyword("GRAPH")
                        and tokens[i - 1].kind in (Kind.VAR, Kind.IRI, Kind.PNAME)):
                    graph = tokens[i - 1].text
                stack.append((i, graph))
            elif tok.text == "}":
                stack.pop()
            i += 1
            continue
        if tok.kind is not Kind.WORD:
            i += 1
            continue
        if tok.is_keyword("REVISION", "WINDOWS", "SERVICE"):
            if not stack:
                raise ParseFailure(f"{tok.text.upper()} must be inside a group pattern", tok.start)
            part, close = _part(ctx, i, stack[-1])
            part_tokens[i] = close
            replacements.append(_Replacement(tok.start, tokens[close].end, PLACEHOLDER, len(raw_parts)))
            raw_parts.append(part)
            i = close + 1
            continue
        if tok.is_keyword("THEN"):
            if not (ctx.is_punct(i + 1, "(") and ctx.is_punct(i + 2, ")")):
                raise ParseFailure("THEN takes no arguments: write THEN()", tok.start)
            replacements.append(_Replacement(tok.start, tokens[i + 2].end, THEN_CALL))
            uses_then = True
            i += 3
            continue
        i += 1
    # (an inner query is a part's: its answer is the part's table, whatever store it runs on; not asked)
    reads_data = True if inner else _reads_data(ctx, first, part_tokens)
    return _assemble(text, replacements, raw_parts, uses_then, template, reads_data)


def _reads_data(ctx: ParseContext, first: int, part_tokens: dict[int, int]) -> bool:
    """Whether the query from token ``first`` (its form's keyword) may match a pattern against its dataset outside
    its extension parts. Conservative: False only for a SELECT, ASK or CONSTRUCT (with a template) whose WHERE group
    holds nothing but extension parts, ``FILTER`` and ``BIND`` expressions and ``VALUES`` tables, and which says
    ``EXISTS`` nowhere (the only expression that reads the dataset)."""
    tokens, pairs = ctx.tokens, ctx.pairs
    i = first if "EXISTS" in ctx.text.upper() else len(tokens)  # (the word's tokens are looked for only if it is there)
    while i < len(tokens):
        if i in part_tokens:
            i = part_tokens[i] + 1
        elif tokens[i].is_keyword("EXISTS"):
            return True
        else:
            i += 1
    if first >= len(tokens) or not tokens[first].is_keyword("SELECT", "ASK", "CONSTRUCT"):
        return True
    i = first
    if tokens[i].is_keyword("CONSTRUCT"):
        if not ctx.is_punct(i + 1, "{"):
            return True  # CONSTRUCT WHERE { … }: the template is the pattern
        i = pairs[i + 1] + 1
    while i < len(tokens) and not ctx.is_punct(i, "{"):  # the projection, FROM clauses, WHERE
        i += 1
    if i >= len(tokens):
        return True
    close, i = pairs[i], i + 1
    while i < close:
        if i in part_tokens:
            i = part_tokens[i] + 1
        elif ctx.is_punct(i, "."):
            i += 1
        elif tokens[i].is_keyword("FILTER", "BIND"):
            j = i + 1
            if tokens[i].is_keyword("FILTER") and tokens[j].kind in (Kind.WORD, Kind.IRI, Kind.PNAME):
                j += 1  # FILTER regex(…), FILTER <f>(…)
            if not ctx.is_punct(j, "("):
                return True
            i = pairs[j] + 1
        elif tokens[i].is_keyword("VALUES"):
            j = pairs[i + 1] + 1 if ctx.is_punct(i + 1, "(") else i + 2  # ( ?a ?b ) or one variable
            if not ctx.is_punct(j, "{"):
                return True
            i = pairs[j] + 1
        else:
            return True  # a triple pattern, GRAPH, OPTIONAL, a nested group…
    return False


def _assemble(
    text: str, replacements: list[_Replacement], raw_parts: list[_RawPart], uses_then: bool,
    template: QuadTemplate | None, reads_data: bool = True,
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
    return ExtendedQuery(text, "".join(chunks), parts, uses_then, template, tuple(edits), reads_data)


def _prologue(ctx: ParseContext) -> int:
    """Read PREFIX / BASE declarations; index of the first token after them."""
    tokens, i = ctx.tokens, 0
    while i < len(tokens) and tokens[i].is_keyword("PREFIX", "BASE"):
        tok = tokens[i]
        if tok.is_keyword("BASE"):
            iri = expect(ctx, i + 1, Kind.IRI)
            ctx.base_iri = ctx.iri(iri)
            i += 2
        else:
            name = expect(ctx, i + 1, Kind.PNAME)
            iri = expect(ctx, i + 2, Kind.IRI)
            if not name.text.endswith(":") or name.text.count(":") != 1:
                raise ParseFailure(f"{name.text!r} is not a prefix name (e.g. ex:)", name.start)
            ctx.prefixes[name.text[:-1]] = ctx.iri(iri)
            i += 3
        ctx.declarations.append(ctx.text[tok.start : iri.end])
    return i


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")


def _dataset_clauses(ctx: ParseContext, i: int) -> None:
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


def _part(ctx: ParseContext, i: int, enclosing: tuple[int, str | None]) -> tuple[_RawPart, int]:
    """Parse the extension part whose keyword is token ``i``; also return the index of its closing '}'."""
    tokens, keyword = ctx.tokens, ctx.tokens[i]
    kind: PartKind = keyword.text.lower()  # type: ignore[assignment]
    silent = False
    k = i + 1
    if kind == "service":
        if k < len(tokens) and tokens[k].is_keyword("SILENT"):
            silent, k = True, k + 1
        if not (k < len(tokens) and tokens[k].kind in (Kind.VAR, Kind.IRI, Kind.PNAME) and ctx.is_punct(k + 1, "{")):
            raise ParseFailure("SERVICE needs a Var or an IRI and a group pattern", keyword.start)
        target_token = tokens[k]
        is_variable = target_token.kind is Kind.VAR
        target = variable_name(target_token) if is_variable else ctx.iri(target_token)
        open_index = k + 1
    else:
        open_index = k
        while open_index < len(tokens) and not ctx.is_punct(open_index, "{", "}"):
            open_index += 1
        if open_index == k or not ctx.is_punct(open_index, "{"):
            what = "a Var, a Revision or a String" if kind == "revision" else "a WindowRef"
            raise ParseFailure(f"{kind.upper()} needs {what} and a group pattern", keyword.start)
        target_token = tokens[k]
        is_variable = kind == "revision" and target_token.kind is Kind.VAR and open_index == k + 1
        if is_variable:
            target = variable_name(target_token)
        elif kind == "revision" and target_token.kind is Kind.STRING and open_index == k + 1:
            target = string_value(target_token.text)
            _check_revision(target, target_token.start)
        else:
            target = ctx.text[target_token.start : tokens[open_index - 1].end]
            if kind == "revision":
                _check_revision(target, target_token.start)
            else:
                try:
                    parse_window_ref(target)
                except WindowRefSyntaxError as error:
                    raise ParseFailure(error.message, target_token.start) from None
    close = ctx.pairs[open_index]
    inner_span = (tokens[open_index].start, tokens[close].end)
    header = f"{ctx.prologue}SELECT * WHERE "
    inner_text = header + ctx.text[inner_span[0] : inner_span[1]]
    # the group's tokens are the outer query's, moved (tokenizing from a bracket gives the same tokens): the inner
    # query is not tokenized again, which was most of the cost of parsing a rule
    shift = len(header) - inner_span[0]
    inner_tokens = [*_header_tokens(header),
                    *(Token(t.kind, t.text, t.start + shift, t.end + shift) for t in tokens[open_index : close + 1])]
    try:
        parsed = _parse(inner_text, ctx.base_iri, inner_tokens)
    except ParseFailure as failure:
        offset = failure.offset - len(header) + inner_span[0] if failure.offset >= len(header) else keyword.start
        raise ParseFailure(failure.message, offset) from None
    inner: ExtendedQuery | str = parsed if parsed.parts or parsed.uses_then else inner_text
    prefix = prefix_query(ctx, enclosing, i, target_token, target) if is_variable else None
    part = _RawPart(kind, target, is_variable, silent, inner, mentioned(ctx, open_index, close + 1), prefix,
                    (keyword.start, tokens[close].end), inner_span)
    return part, close


@functools.lru_cache(maxsize=256)
def _header_tokens(header: str) -> tuple[Token, ...]:
    """The tokens of an inner query's header (the prologue and ``SELECT * WHERE``), shared by the parts of a query."""
    return tuple(extended_tokens(header))


def _check_revision(value: str, offset: int) -> None:
    try:
        parse_revision(value)
    except RevisionSyntaxError as error:
        raise ParseFailure(error.message, offset) from None


