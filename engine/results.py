"""What extended queries give: constructed triples and quads, materialized solutions; blank nodes written into
``VALUES`` tables (skolemized, see ``engine.evaluation``) and back; quad templates instantiated per solution."""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyoxigraph import (
    BlankNode,
    DefaultGraph,
    Literal,
    NamedNode,
    Quad,
    QueryResultsFormat,
    QuerySolutions,
    RdfFormat,
    Store,
    Triple,
    parse,
    parse_query_results,
)

from engine.plain import watched
from sparql_ext import QuadTemplate
from sparql_ext.errors import ConcentratorError

SKOLEM_PREFIX = "urn:x-concentrator:bnode:"
Term = Any  # a pyoxigraph term: NamedNode | BlankNode | Literal | Triple
Row = dict[str, Term]  # variable name (without '?') -> term; unbound variables are absent
T = TypeVar("T")
_EXPECTED = (ConcentratorError, OSError, RuntimeError, ValueError)  # raised on purpose, or pyoxigraph's messages


def drained(result: Any, consume: Callable[[Any], T]) -> T:
    """``consume(result)`` for a lazy pyoxigraph result (solutions, triples), which evaluates as it is read. An error
    on the way leaves without the frames that hold ``result`` (``without_frames``): pass the result straight from
    ``Store.query``, never through a local of the caller, whose frame the error would keep."""
    try:
        return consume(result)
    except Exception as error:
        del result
        raise without_frames(error) from error.__cause__


def without_frames(error: BaseException) -> BaseException:
    """``error`` and the errors chained to it, their tracebacks dropped (an unexpected one keeps its text as a note).

    pyoxigraph's results may only be freed by the thread that made them. A traceback holds its frames' locals, and
    a traceback caught in a reference cycle is freed by whichever thread the garbage collector next runs on: a
    result held there leaks, reported as "unsendable, but is being dropped on another thread"."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__traceback__ is not None and not isinstance(current, _EXPECTED):
            current.add_note("".join(traceback.format_tb(current.__traceback__)).rstrip())
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
    return error


class ConstructedTriples(list[Triple]):
    """The triples of a CONSTRUCT / DESCRIBE (blank nodes de-skolemized)."""


class ConstructedQuads(list[Quad]):
    """The quads of a CONSTRUCT with a quad template (fresh blank nodes per solution)."""


@dataclass(frozen=True)
class Solutions:
    """Materialized solutions of a SELECT (terms as pyoxigraph returns them, blank nodes not skolemized)."""

    variables: list[str]
    rows: list[Row]
    #: ``distinct``'s answers by variable, kept with the rows they come from: rows are never changed once made, so
    #: they stay true as long as the solutions live (those of the static cache are shared, and so are these)
    _distinct: dict[str, tuple[Term, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def distinct(self, variable: str) -> tuple[Term, ...]:
        """The values ``variable`` is bound to, each once, in the order of the rows (worked out once per variable:
        a rule firing asks for a ``SERVICE ?var``'s values over the cached prefix solutions more than once)."""
        values = self._distinct.get(variable)
        if values is None:
            values = tuple(dict.fromkeys(row[variable] for row in self.rows if variable in row))
            self._distinct[variable] = values
        return values


def skolemize(term: Term) -> Term:
    if isinstance(term, BlankNode):
        return NamedNode(SKOLEM_PREFIX + term.value)
    if isinstance(term, Triple):
        return Triple(skolemize(term.subject), term.predicate, skolemize(term.object))
    return term


def deskolemize(term: Term) -> Term:
    if isinstance(term, NamedNode) and term.value.startswith(SKOLEM_PREFIX):
        return BlankNode(term.value[len(SKOLEM_PREFIX):])
    if isinstance(term, Triple):
        return Triple(deskolemize(term.subject), term.predicate, deskolemize(term.object))
    return term


def solutions_from_rows(names: list[str], rows: list[Row]) -> QuerySolutions:
    """QuerySolutions holding these rows (in order), e.g. to serialize a computed set of solutions in any results
    format: a VALUES table evaluated on an empty store, blank nodes kept."""
    projection = " ".join(f"?{name}" for name in names) or "*"
    solutions = Store().query(f"SELECT {projection} WHERE {{ {values_table(names, rows)} }}")
    assert isinstance(solutions, QuerySolutions)
    return deskolemized_solutions(solutions)


def values_table(names: list[str], rows: list[Row]) -> str:
    """A VALUES block in N-Triples term syntax (blank nodes skolemized, unbound as UNDEF)."""
    header = " ".join(f"?{name}" for name in names)
    body = " ".join(
        "(" + " ".join(str(skolemize(row[name])) if name in row else "UNDEF" for name in names) + ")"
        for row in rows)
    return f"VALUES ({header}) {{ {body} }}"


def deskolemized_solutions(result: QuerySolutions) -> QuerySolutions:
    """The solutions with skolem IRIs turned back into blank nodes (through SPARQL JSON, which keeps them
    QuerySolutions that serialize to every results format)."""
    import io

    buffer = io.BytesIO()
    result.serialize(watched(buffer), QueryResultsFormat.JSON)  # this evaluates the query: a request may stop it
    data = json.loads(buffer.getvalue())
    for binding in data.get("results", {}).get("bindings", []):
        for term in binding.values():
            _deskolemize_json(term)
    return parse_query_results(json.dumps(data).encode("utf-8"), QueryResultsFormat.JSON)  # type: ignore[return-value]


def _deskolemize_json(term: dict[str, Any]) -> None:
    if term.get("type") == "uri" and term["value"].startswith(SKOLEM_PREFIX):
        term["type"], term["value"] = "bnode", term["value"][len(SKOLEM_PREFIX):]
    elif term.get("type") == "triple":
        for inner in term["value"].values():
            _deskolemize_json(inner)


# -- quad templates --------------------------------------------------------------------------------------

def instantiate(template: QuadTemplate, rows: list[Row]) -> list[Quad]:
    """One instance of the template per solution, with fresh blank nodes per solution; quads with an unbound
    variable or an invalid term position are skipped (as SPARQL CONSTRUCT skips such triples)."""
    out: dict[Quad, None] = {}
    for row in rows:
        fresh: dict[str, BlankNode] = {}
        for s, p, o, g in template.quads:
            terms = [_template_term(t, row, fresh) for t in (s, p, o)]
            graph = DefaultGraph() if g is None else _template_term(g, row, fresh)
            subject, predicate, obj = terms
            if (not isinstance(subject, NamedNode | BlankNode) or not isinstance(predicate, NamedNode)
                    or obj is None or not isinstance(graph, NamedNode | BlankNode | DefaultGraph)):
                continue
            out[Quad(subject, predicate, obj, graph)] = None
    return list(out)


def _template_term(term: tuple[str, str], row: Row, fresh: dict[str, BlankNode]) -> Term:
    kind, value = term
    if kind == "var":
        bound = row.get(value)
        return None if bound is None else deskolemize(bound)
    if kind == "iri":
        return NamedNode(value)
    if kind == "bnode":
        return fresh.setdefault(value, BlankNode())
    return _literal(value)


_LITERALS: dict[str, Literal] = {}


def _literal(ntriples: str) -> Literal:
    if ntriples not in _LITERALS:
        [triple] = parse(f"<urn:s> <urn:p> {ntriples} .".encode(), RdfFormat.N_TRIPLES)
        _LITERALS[ntriples] = triple.object
    return _LITERALS[ntriples]


_TABLES: dict[tuple[tuple[str, ...], int], tuple[list[Row], str]] = {}
_TABLES_KEPT = 256
_TABLE_ROWS_KEPT = 256  # larger tables are written each time: kept, they would hold their rows and text in memory


def values_text(names: list[str], rows: list[Row], *, keep_large: bool = False) -> str:
    """``values_table``, written once per rows object: the rules over one window get the same cached rows of their
    common part, and each would write the same VALUES text again. Small tables only, at most 256 of them, unless
    ``keep_large`` (a static sub-SELECT's solutions, one table per dataset revision that every firing splices in).
    (An entry holds its rows, so their id is not reused while it is kept.)"""
    if len(rows) > _TABLE_ROWS_KEPT and not keep_large:
        return values_table(names, rows)
    key = (tuple(names), id(rows))
    kept = _TABLES.get(key)
    if kept is not None and kept[0] is rows:
        return kept[1]
    text = values_table(names, rows)
    if len(_TABLES) >= _TABLES_KEPT:
        _TABLES.clear()
    _TABLES[key] = (rows, text)
    return text


def rows_of(solutions: QuerySolutions) -> list[Row]:
    """The solutions as rows (unbound variables left out)."""
    names = [v.value for v in solutions.variables]
    return [{name: solution[name] for name in names if solution[name] is not None} for solution in solutions]
