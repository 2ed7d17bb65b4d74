"""CONSTRUCT templates with ``GRAPH`` blocks (quad templates: the Quads production of SPARQL Update, which a
SPARQL 1.1 CONSTRUCT does not allow), parsed into a ``QuadTemplate`` the evaluator instantiates per solution."""

from __future__ import annotations

from dataclasses import dataclass

from sparql_ext.lexer import Kind
from sparql_ext.parsing import ParseContext, ParseFailure, ntriples_string, string_value

_RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
_XSD = "http://www.w3.org/2001/XMLSchema#"

Term = tuple[str, str]  # ('var', name) | ('bnode', label) | ('iri', value) | ('literal', N-Triples text)
Quad = tuple[Term, Term, Term, Term | None]  # graph None = the default graph


@dataclass(frozen=True)
class QuadTemplate:
    """A CONSTRUCT template with GRAPH blocks; instantiate once per solution, with fresh blank nodes each time."""

    quads: tuple[Quad, ...]
    variables: tuple[str, ...]  # names without '?', in order of first appearance: the SELECT's projection


class TemplateParser:
    """Parser of a CONSTRUCT template with GRAPH blocks (the Quads production of SPARQL Update)."""

    def __init__(self, ctx: ParseContext) -> None:
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
                    raise ParseFailure("GRAPH in a template needs a Var or an IRI and a '{'", tok.start)
                graph, _ = self.term(k + 1, hi)
                close = self.ctx.pairs[k + 2]
                inner = k + 3
                while inner < close:
                    if self.ctx.is_punct(inner, "."):
                        inner += 1
                        continue
                    inner = self.triples(inner, close, graph)
                    if inner < close and not self.ctx.is_punct(inner, "."):
                        raise ParseFailure(f"expected '.' or '}}', found {tokens[inner].text!r}", tokens[inner].start)
                k = close + 1
            else:
                k = self.triples(k, hi, None)
                if k < hi and not (self.ctx.is_punct(k, ".") or tokens[k].is_keyword("GRAPH")):
                    raise ParseFailure(f"expected '.', GRAPH or '}}', found {tokens[k].text!r}", tokens[k].start)
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
                raise ParseFailure("expected a predicate", self.ctx.at(k))
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
                raise ParseFailure("expected a predicate", self.ctx.at(k))
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
                raise ParseFailure("expected ']'", self.ctx.at(close))
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
            raise ParseFailure("unexpected end of the CONSTRUCT template", self.ctx.at(k))
        tok = self.ctx.tokens[k]
        if tok.kind is Kind.VAR:
            self.variables[tok.text[1:]] = None
            return ("var", tok.text[1:]), k + 1
        if tok.kind in (Kind.IRI, Kind.PNAME):
            return ("iri", self.ctx.iri(tok)), k + 1
        if tok.kind is Kind.BNODE:
            return ("bnode", tok.text[2:]), k + 1
        if tok.kind is Kind.STRING:
            lexical = ntriples_string(string_value(tok.text))
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
        raise ParseFailure(f"{tok.text!r} is not an RDF term or a variable", tok.start)
