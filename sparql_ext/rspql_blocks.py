"""A window's group pattern read as RSP-QL and C-SPARQL read it: over the **merge** of the window's elements.

The project's window dataset keeps each element as a named graph (its default graph holds the timestamp triples),
so a group written for the merge is rewritten with each triple pattern in a ``GRAPH`` of its own, as
``conformance/csrbench.py`` writes CSRBench's queries by hand::

    ?obs om:result ?r . ?r om:value ?v      →   GRAPH ?_g1 { ?obs om:result ?r } GRAPH ?_g2 { ?r om:value ?v }

That is the merge's evaluation when no triple is in two elements (a solution would then count once per element).
Nested groups (``OPTIONAL``, ``MINUS``, ``UNION`` branches, sub-``SELECT``s, ``EXISTS``) are rewritten the same
way; ``GRAPH`` and ``SERVICE`` blocks are kept as written (inside a window, ``GRAPH ?g { … }`` matches one
element, ``?g`` its graph name); ``FILTER``, ``BIND`` and ``VALUES`` are kept. Abbreviations (``;``, ``,``,
``a``, ``[ … ]``) are expanded; a blank node becomes a variable (``_:b`` → ``?_b_b``), since one label cannot be
shared by two basic graph patterns. A property path stays in one ``GRAPH``: it is matched within one element.

Pure: tokens in, text out (``sparql_ext.lexer``); pyoxigraph checks the result when the registration is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparql_ext.errors import QuerySyntaxError
from sparql_ext.lexer import Kind, Token, matching_close

_KEPT_BLOCKS = ("GRAPH", "SERVICE", "VALUES")  # up to the end of their first group: copied as written
_NESTED = ("OPTIONAL", "MINUS")  # followed by a group that is rewritten
_CALLS = ("FILTER", "BIND")
_PATH_START = {"^", "!", "("}
_PATH_AFTER = {"*", "+"}
_PATH_JOIN = {"/", "|"}


@dataclass
class Rewriter:
    """Rewrites groups of one query's text: generated variables are numbered across the whole query."""

    text: str
    tokens: list[Token]
    counter: int = 0
    generated: set[str] = field(default_factory=set)

    def fresh(self, kind: str) -> str:
        self.counter += 1
        name = f"?_{kind}{self.counter}"
        self.generated.add(name)
        return name

    # -- groups -----------------------------------------------------------------------------------------------------

    def group(self, open_index: int) -> tuple[str, int]:
        """The group opened at ``open_index`` (a ``{``) rewritten, with its braces; and the index of its ``}``."""
        close = matching_close(self.tokens, open_index, self.text)
        return "{ " + self.content(open_index + 1, close) + " }", close

    def content(self, start: int, stop: int) -> str:
        """The tokens ``start`` … ``stop - 1`` of a group's content, rewritten."""
        tokens, out, i = self.tokens, [], start
        if i < stop and tokens[i].is_keyword("SELECT"):
            return self.subselect(start, stop)
        while i < stop:
            tok = tokens[i]
            if tok.kind is Kind.PUNCT and tok.text == "{":
                text, close = self.group(i)
                out.append(text)
                i = close + 1
            elif tok.kind is Kind.PUNCT and tok.text == ".":
                i += 1
            elif tok.is_keyword(*_NESTED):
                brace = self._expect_brace(i + 1, tok)
                text, close = self.group(brace)
                out.append(f"{tok.text} {text}")
                i = close + 1
            elif tok.is_keyword("UNION"):
                out.append("UNION")
                i += 1
            elif tok.is_keyword(*_KEPT_BLOCKS):
                brace = i + 1
                while brace < stop and not (tokens[brace].kind is Kind.PUNCT and tokens[brace].text == "{"):
                    brace += 1
                close = matching_close(tokens, self._expect_brace(brace, tok), self.text)
                out.append(self.text[tok.start:tokens[close].end])
                i = close + 1
            elif tok.is_keyword(*_CALLS):
                i = self.call(i, stop, out)
            else:
                i = self.triples(i, stop, out)
        return " ".join(out)

    def subselect(self, start: int, stop: int) -> str:
        """``SELECT … WHERE { … } modifiers``: its clause and modifiers as written, its pattern rewritten."""
        tokens = self.tokens
        brace = next((j for j in range(start, stop) if tokens[j].kind is Kind.PUNCT and tokens[j].text == "{"), None)
        if brace is None:
            raise QuerySyntaxError("a sub-SELECT without a WHERE { … } pattern", self.text, tokens[start].start)
        head = self.text[tokens[start].start:tokens[brace].start]
        text, close = self.group(brace)
        tail = self.text[tokens[close].end:tokens[stop - 1].end] if close + 1 < stop else ""
        return f"{head}{text}{tail}"

    def call(self, i: int, stop: int, out: list[str]) -> int:
        """``FILTER (…)``, ``FILTER fn(…)``, ``FILTER [NOT] EXISTS {…}`` or ``BIND (…)``, as written except the
        groups of ``EXISTS``, which are rewritten."""
        tokens = self.tokens
        j = i + 1
        while j < stop and not (tokens[j].kind is Kind.PUNCT and tokens[j].text in "({"):
            j += 1
        if j >= stop:
            raise QuerySyntaxError(f"{tokens[i].text} without its expression", self.text, tokens[i].start)
        close = matching_close(tokens, j, self.text)
        pieces, at, k = [], tokens[i].start, i
        while k < close:
            if tokens[k].is_keyword("EXISTS") and k + 1 <= close and tokens[k + 1].text == "{":
                pieces.append(self.text[at:tokens[k].end])
                text, end = self.group(k + 1)
                pieces.append(" " + text)
                at, k = tokens[end].end, end + 1
            else:
                k += 1
        pieces.append(self.text[at:tokens[close].end])
        out.append("".join(pieces))
        return close + 1

    def _expect_brace(self, index: int, after: Token) -> int:
        if index >= len(self.tokens) or self.tokens[index].text != "{":
            raise QuerySyntaxError(f"{after.text} must be followed by a group {{ … }}", self.text, after.start)
        return index

    # -- triples ----------------------------------------------------------------------------------------------------

    def triples(self, i: int, stop: int, out: list[str]) -> int:
        """One ``subject predicate-object-list`` from ``i``: each triple in its own ``GRAPH``."""
        found: list[tuple[str, str, str]] = []
        subject, i = self.node(i, stop, found)
        if i < stop and not self._ends_triples(i):
            i = self.property_list(subject, i, stop, found, closing=None)
        elif not found:
            tok = self.tokens[min(i, stop - 1)]
            raise QuerySyntaxError(f"a triple pattern needs a predicate after {subject}", self.text, tok.start)
        out.extend(f"GRAPH {self.fresh('g')} {{ {s} {p} {o} }}" for s, p, o in found)
        return i

    def _ends_triples(self, i: int) -> bool:
        tok = self.tokens[i]
        return (tok.kind is Kind.PUNCT and tok.text in (".", "}", "{")) or tok.is_keyword(
            *_NESTED, *_KEPT_BLOCKS, *_CALLS, "VALUES", "UNION")

    def property_list(self, subject: str, i: int, stop: int, found: list[tuple[str, str, str]],
                      closing: str | None) -> int:
        tokens = self.tokens
        while i < stop:
            tok = tokens[i]
            if closing is not None and tok.text == closing:
                return i
            if self._ends_triples(i):
                return i
            if tok.kind is Kind.PUNCT and tok.text == ";":
                i += 1
                continue
            predicate, i = self.verb(i, stop)
            while True:
                obj, i = self.node(i, stop, found)
                found.append((subject, predicate, obj))
                if i < stop and tokens[i].text == ",":
                    i += 1
                    continue
                break
        return i

    def verb(self, i: int, stop: int) -> tuple[str, int]:
        """A predicate: a variable, or a property path (IRIs, ``a``, ``^ ! ( ) / | * +``), as written."""
        tokens = self.tokens
        tok = tokens[i]
        if tok.kind is Kind.VAR:
            return tok.text, i + 1
        start, depth, need = i, 0, True
        while i < stop:
            tok = tokens[i]
            if need and (tok.kind in (Kind.IRI, Kind.PNAME) or tok.text == "a"):
                need = False
            elif need and tok.kind is Kind.PUNCT and tok.text in _PATH_START:
                depth += tok.text == "("
            elif not need and tok.kind is Kind.PUNCT and tok.text in _PATH_AFTER:
                pass
            elif not need and tok.kind is Kind.PUNCT and tok.text in _PATH_JOIN:
                need = True
            elif not need and depth and tok.text == ")":
                depth -= 1
            else:
                break
            i += 1
        if need or depth or i == start:
            raise QuerySyntaxError(f"expected a predicate, found {tokens[min(i, stop - 1)].text!r}", self.text,
                                   tokens[min(i, stop - 1)].start)
        return self.text[tokens[start].start:tokens[i - 1].end], i

    def node(self, i: int, stop: int, found: list[tuple[str, str, str]]) -> tuple[str, int]:
        """A subject or object: a term as written, a blank node as a variable, ``[ … ]`` expanded into ``found``."""
        tokens = self.tokens
        if i >= stop:
            raise QuerySyntaxError("a triple pattern ends too early", self.text, tokens[stop - 1].end)
        tok = tokens[i]
        if tok.kind is Kind.PUNCT and tok.text == "[":
            name = self.fresh("b")
            close = self.property_list(name, i + 1, stop, found, closing="]")
            if close >= stop or tokens[close].text != "]":
                raise QuerySyntaxError("'[' is never closed", self.text, tok.start)
            return name, close + 1
        if tok.kind is Kind.PUNCT and tok.text == "(":
            raise QuerySyntaxError("an RDF collection ( … ) inside a window is not supported: write its triples",
                                   self.text, tok.start)
        if tok.kind is Kind.BNODE:
            name = "?_b" + tok.text[2:].replace(".", "_").replace("-", "_")
            self.generated.add(name)
            return name, i + 1
        if tok.kind is Kind.STRING:
            end = i + 1
            if end < stop and tokens[end].kind is Kind.LANGTAG:
                end += 1
            elif end + 1 < stop and tokens[end].text == "^^":
                end += 2
            return self.text[tok.start:tokens[end - 1].end], end
        if tok.kind in (Kind.IRI, Kind.PNAME, Kind.VAR, Kind.NUMBER) or tok.is_keyword("TRUE", "FALSE"):
            return tok.text, i + 1
        raise QuerySyntaxError(f"expected a term of a triple pattern, found {tok.text!r}", self.text, tok.start)


def variables(tokens: list[Token], start: int, stop: int, generated: set[str]) -> list[str]:
    """The user's variables among ``tokens[start:stop]`` (``?x`` and ``$x`` as ``?x``), in order, once each."""
    seen: dict[str, None] = {}
    for tok in tokens[start:stop]:
        if tok.kind is Kind.VAR:
            name = "?" + tok.text[1:]
            if name not in generated and not name.startswith("?_"):
                seen[name] = None
    return list(seen)
