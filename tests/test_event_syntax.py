"""Event patterns in extended SPARQL (issue 18, docs/events.md): the grammar, what each construct parses to, the
interval functions, and errors at the line and column of the user's text. Pure, apart from pyoxigraph accepting the
texts handed to it."""

from __future__ import annotations

import doctest
import importlib
from datetime import timedelta

import pyoxigraph
import pytest

from sparql_ext import (
    PLACEHOLDER,
    Consumption,
    Equals,
    EqualsOptional,
    Event,
    EventWindow,
    Filtered,
    First,
    Join,
    Last,
    LeftJoin,
    OptionalSeq,
    QuerySyntaxError,
    Selection,
    Seq,
    Union,
    parse_events,
    parse_extended,
    parse_window_ref,
)

PREFIX = "PREFIX : <http://ex/>\n"
XSD = "http://www.w3.org/2001/XMLSchema#"


def clause_of(body: str, consume: str = "") -> tuple[str, object]:
    """The one MATCH clause of ``SELECT * { MATCH … }`` and its pattern."""
    text = f"BASE <http://ex/>\n{PREFIX}SELECT * WHERE {{ MATCH {consume}{{ {body} }} }}"
    [clause] = parse_events(text).clauses
    return text, clause


def ev(ident: int, ref: str = "HEAD/-PT5S", stream: str | None = "http://ex/s") -> tuple[int, EventWindow]:
    return ident, EventWindow(stream, (parse_window_ref(ref),) if ref else ())


def shape(pattern: object) -> object:
    """The pattern with each EVENT reduced to (ident, window): what the grammar decided, without the texts."""
    match pattern:
        case Event(ident=ident, window=window):
            return ident, window
        case Seq(left=left, right=right, selection=selection):
            return ("seq", selection, shape(left), shape(right))
        case Equals(left=left, right=right):
            return ("equals", shape(left), shape(right))
        case OptionalSeq(optional=optional, mandatory=mandatory, condition=condition):
            return ("optionalseq", shape(optional), shape(mandatory), [f.expression for f in condition])
        case EqualsOptional(mandatory=mandatory, optional=optional, condition=condition):
            return ("equalsoptional", shape(mandatory), shape(optional), [f.expression for f in condition])
        case First(operand=operand):
            return ("first", shape(operand))
        case Last(operand=operand):
            return ("last", shape(operand))
        case Join(left=left, right=right):
            return ("and", shape(left), shape(right))
        case Union(left=left, right=right):
            return ("union", shape(left), shape(right))
        case LeftJoin(mandatory=mandatory, optional=optional, condition=condition):
            return ("optional", shape(mandatory), shape(optional), [f.expression for f in condition])
        case Filtered(operand=operand, filters=filters):
            return ("filter", shape(operand), [f.expression for f in filters])
    raise AssertionError(pattern)


A, B, C = "EVENT <s?WINDOWS=HEAD/-PT5S> { ?x :p ?y }", "EVENT <s?WINDOWS=HEAD/-PT5S> { ?y :q ?z }", \
    "EVENT <s?WINDOWS=HEAD/-PT5S> { ?z :r ?w }"


def with_base(body: str) -> object:
    text = f"BASE <http://ex/>\n{PREFIX}SELECT * WHERE {{ MATCH {{ {body} }} }}"
    return parse_events(text).clauses[0]


# --- the seed's query, and what an engine gets from it ---------------------------------------------------------------

SEED_001 = """PREFIX : <http://ex/>
SELECT ?x ?z WHERE {
  ?x a :Thing .
  MATCH {
    EVENT <http://ex/s?WINDOWS=1970-01-01T00:00:01Z/HEAD> { ?x :p ?y }
    SEQ
    EVENT <http://ex/s?WINDOWS=R/1970-01-01T00:00:00Z/-PT5S/PT1S> { ?y :q ?z }
  }
}"""


def test_seed_001_example_4() -> None:
    """RSEP-QL's Example 4 (E1 over a landmark window from 1, E2 over a time window of width 5 and slide 1)."""
    q = parse_events(SEED_001)
    assert q.sparql == ("PREFIX : <http://ex/>\nSELECT ?x ?z WHERE {\n  ?x a :Thing .\n  " + PLACEHOLDER + "\n}")
    [clause] = q.clauses
    assert clause.consumption is Consumption.UNRESTRICTED
    first, second = clause.events
    assert shape(clause.pattern) == ("seq", Selection.UNRESTRICTED,
                                     ev(0, "1970-01-01T00:00:01Z/HEAD"), ev(1, "R/1970-01-01T00:00:00Z/-PT5S/PT1S"))
    assert first.variables == ("x", "y") and second.variables == ("y", "z")
    assert clause.variables == ("x", "y", "z")
    assert clause.streams == ("http://ex/s",)
    assert first.query_at(0) == "PREFIX : <http://ex/>\nSELECT * WHERE { ?x :p ?y }"
    assert clause.text == SEED_001[SEED_001.index("MATCH") : SEED_001.rindex("}\n}") + 1]
    assert clause.prologue == "PREFIX : <http://ex/>\n"
    # positions: the placeholder maps back to the clause; text after it to where it was
    assert q.sparql[clause.placeholder[0] : clause.placeholder[1]] == PLACEHOLDER
    assert q.original_offset(clause.placeholder[0]) == SEED_001.index("MATCH")
    assert q.original_offset(len(q.sparql) - 1) == len(SEED_001) - 1
    # what the engine hands to pyoxigraph and to parse_extended is SPARQL 1.1 (plus the house extensions)
    pyoxigraph.Store().query(q.sparql)
    for event in clause.events:
        pyoxigraph.Store().query(event.query_at(0))
    assert parse_extended(q.sparql).parts == ()


def test_queries_without_event_patterns_are_left_alone() -> None:
    text = "SELECT * { ?s ?p 'MATCHES EVENTS' } # nothing to see: MATCHING"
    assert parse_events(text).sparql == text and parse_events(text).clauses == ()


def test_several_clauses_and_their_placeholders() -> None:
    text = f"{PREFIX}SELECT * {{ MATCH {{ {A} }} ?x :r ?v . MATCH CONSUME RECENT {{ {B} }} }}"
    q = parse_events(text)
    assert q.sparql == f"{PREFIX}SELECT * {{ {PLACEHOLDER} ?x :r ?v . {PLACEHOLDER} }}"
    assert [c.ident for c in q.clauses] == [0, 1]
    assert [c.consumption for c in q.clauses] == [Consumption.UNRESTRICTED, Consumption.RECENT]
    assert [c.events[0].ident for c in q.clauses] == [0, 0]  # EVENTs are numbered per clause
    for clause in q.clauses:
        assert q.sparql[clause.placeholder[0] : clause.placeholder[1]] == PLACEHOLDER
        assert text[clause.source_span[0] : clause.source_span[1]].startswith("MATCH")
    # an error pyoxigraph would report after the second placeholder is at the user's position
    offset = q.sparql.rindex("}")
    assert q.original_offset(offset) == text.rindex("}")


# --- operators, precedence, grouping, policies -----------------------------------------------------------------------

@pytest.mark.parametrize(("keyword", "selection"), [
    ("SEQ", Selection.UNRESTRICTED), ("SEQc", Selection.CHRONOLOGICAL), ("seqr", Selection.RECENT),
    ("SEQN", Selection.NAIVE),
])
def test_seq_and_its_selection_policies(keyword: str, selection: Selection) -> None:
    _, clause = clause_of(f"{A} {keyword} {B}")
    assert shape(clause.pattern) == ("seq", selection, ev(0), ev(1))  # type: ignore[attr-defined]


def test_operators_are_left_associative_and_first_last_bind_tighter() -> None:
    _, clause = clause_of(f"FIRST {A} SEQ LAST LAST {B} EQUALS {C}")
    assert shape(clause.pattern) == (  # type: ignore[attr-defined]
        "equals", ("seq", Selection.UNRESTRICTED, ("first", ev(0)), ("last", ("last", ev(1)))), ev(2))


def test_braces_group_and_their_filters_apply_to_the_group() -> None:
    _, clause = clause_of(f"{A} SEQ {{ {B} SEQR {C} FILTER (?w > 1) }} "
                          "FILTER(getDURATION() < 'PT1M') FILTER REGEX(?x, 'a')")
    assert shape(clause.pattern) == ("filter", (  # type: ignore[attr-defined]
        "seq", Selection.UNRESTRICTED, ev(0), ("filter", ("seq", Selection.RECENT, ev(1), ev(2)), ["(?w > 1)"])),
        ["(getDURATION() < 'PT1M')", "REGEX(?x, 'a')"])


def test_optional_joins_take_the_optional_groups_filters_as_their_condition() -> None:
    # OPTIONALSEQ: the left side is optional; EQUALSOPTIONAL: the right side (SPARQL's OPTIONAL { P FILTER F })
    _, clause = clause_of(f"{{ {A} FILTER (?y != :b) }} OPTIONALSEQ {B} EQUALSOPTIONAL {{ {C} FILTER (?w < 3) }}")
    assert shape(clause.pattern) == ("equalsoptional", (  # type: ignore[attr-defined]
        "optionalseq", ev(0), ev(1), ["(?y != :b)"]), ev(2), ["(?w < 3)"])
    # a group on the mandatory side keeps its FILTERs
    _, clause = clause_of(f"{A} OPTIONALSEQ {{ {B} FILTER (?z > 0) }}")
    assert shape(clause.pattern) == ("optionalseq", ev(0), ("filter", ev(1), ["(?z > 0)"]), [])  # type: ignore


def test_and_union_optional_and_patterns_side_by_side() -> None:
    """Seed 000 §3: juxtaposition is Join, union Union, optional LeftJoin; here of one precedence with the other
    operators, left to right, so ``A SEQ B C`` is (A SEQ B) AND C, as SPARQL's ``P1 OPTIONAL P2 P3`` joins P3 with
    the LeftJoin."""
    _, clause = clause_of(f"{A} AND {B}")
    assert shape(clause.pattern) == ("and", ev(0), ev(1))  # type: ignore[attr-defined]
    _, side_by_side = clause_of(f"{A} {B}")
    assert shape(side_by_side.pattern) == ("and", ev(0), ev(1))  # type: ignore[attr-defined]
    _, clause = clause_of(f"{A} SEQ {B} {C}")
    assert shape(clause.pattern) == ("and", ("seq", Selection.UNRESTRICTED, ev(0), ev(1)), ev(2))  # type: ignore
    _, clause = clause_of(f"{{ {A} }} UNION {{ {B} {C} }} FILTER (getDURATION() < 'PT1M')")
    assert shape(clause.pattern) == ("filter", (  # type: ignore[attr-defined]
        "union", ev(0), ("and", ev(1), ev(2))), ["(getDURATION() < 'PT1M')"])
    # OPTIONAL: the right side is optional and its group's FILTERs are the condition, as SPARQL's OPTIONAL
    _, clause = clause_of(f"{A} optional {{ {B} FILTER (?z != :c) }} FIRST {C}")
    assert shape(clause.pattern) == ("and", (  # type: ignore[attr-defined]
        "optional", ev(0), ev(1), ["(?z != :c)"]), ("first", ev(2)))


def test_an_event_inside_service_reads_the_service_s_stream() -> None:
    """``SERVICE <stream> { MATCH { EVENT WINDOWS ref { P } } }``: the EVENT reads the SERVICE's stream; a windowed
    SERVICE IRI nests the EVENT's window in its own, as ``EVENT <stream?WINDOWS=A> WINDOWS B`` does."""
    def events(text: str) -> list[tuple[int, EventWindow]]:
        return [(event.ident, event.window) for event in parse_events(text).clauses[0].events]
    text = (f"BASE <http://ex/>\n{PREFIX}SELECT * {{ ?a ?b ?c SERVICE <s> {{ MATCH {{ EVENT WINDOWS HEAD/-PT5S "
            "{ ?x :p ?y } SEQ EVENT <t> { ?y :q ?z } } } }")
    assert events(text) == [ev(0), ev(1, "", "http://ex/t")]
    silent = f"{PREFIX}SELECT * {{ SERVICE SILENT :s {{ {{ MATCH {{ EVENT {{ ?x :p ?y }} }} }} }} }}"
    assert events(silent) == [ev(0, "")]  # no window: the whole stream
    nested = f"{PREFIX}SELECT * {{ SERVICE <http://ex/s?WINDOWS=1/HEAD> {{ MATCH {{ EVENT WINDOWS HEAD {{ }} }} }} }}"
    assert events(nested) == [(0, EventWindow("http://ex/s", (parse_window_ref("1/HEAD"), parse_window_ref("HEAD"))))]
    # outside the SERVICE's group the EVENT reads the stream being queried again
    after = "SELECT * { SERVICE <http://ex/s> { ?a ?b ?c } MATCH { EVENT WINDOWS HEAD { } } }"
    assert events(after) == [(0, EventWindow(None, (parse_window_ref("HEAD"),)))]


@pytest.mark.parametrize("policy", list(Consumption))
def test_consumption_policies(policy: Consumption) -> None:
    _, clause = clause_of(A, consume=f"CONSUME {policy.value.lower()} ")
    assert clause.consumption is policy  # type: ignore[attr-defined]


# --- the window of an EVENT ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "window"), [
    ("<http://ex/s?WINDOWS=HEAD~4/HEAD>", EventWindow("http://ex/s", (parse_window_ref("HEAD~4/HEAD"),))),
    ("<http://ex/s>", EventWindow("http://ex/s", ())),  # the whole stream: RSEP-QL's identity window
    ("WINDOWS 1/HEAD", EventWindow(None, (parse_window_ref("1/HEAD"),))),  # the stream being queried
    ("<s?WINDOWS=1/HEAD> WINDOWS HEAD~1/HEAD", EventWindow("http://ex/s", (
        parse_window_ref("1/HEAD"), parse_window_ref("HEAD~1/HEAD")))),  # nested: innermost first
    ("WINDOWS 2016-06-20T10:00:00Z/PT5M WINDOWS HEAD", EventWindow(None, (
        parse_window_ref("2016-06-20T10:00:00Z/PT5M"), parse_window_ref("HEAD")))),
    (":s WINDOWS R/HEAD/-PT05M/PT01M", EventWindow("http://ex/s", (parse_window_ref("R/HEAD/-PT5M/PT1M"),))),
    ("<s?WINDOWS=2016-06-20T12:00:00%2B02:00/HEAD>", EventWindow("http://ex/s", (
        parse_window_ref("2016-06-20T10:00:00Z/HEAD"),))),  # '+' percent-encoded in an IRI, as in requests
])
def test_event_sources(source: str, window: EventWindow) -> None:
    clause = with_base(f"EVENT {source} {{ ?x :p ?y }}")
    assert clause.events[0].window == window  # type: ignore[attr-defined]


def test_window_keys_name_the_shared_input_of_consumption() -> None:
    clause = with_base("EVENT <s?WINDOWS=1/HEAD> { ?x :p ?y } SEQ EVENT <s?WINDOWS=1/HEAD> { ?y :q ?z } "
                       "SEQ EVENT <s?WINDOWS=HEAD/-PT5S> { ?z :r ?w }")
    keys = [event.window.key for event in clause.events]  # type: ignore[attr-defined]
    assert keys == ["<http://ex/s> 1/HEAD", "<http://ex/s> 1/HEAD", "<http://ex/s> HEAD/-PT5S"]


# --- interval functions ----------------------------------------------------------------------------------------------

def test_interval_functions_in_filters_and_in_event_patterns() -> None:
    start, end = 1_466_416_800_000_000, 1_466_416_800_000_000 + 9 * 86_400_000_000 + 500_000  # 10:00 + 9 d 0.5 s
    _, clause = clause_of(f"{A} SEQ EVENT <s?WINDOWS=1/HEAD> {{ ?y :q ?z FILTER (getENDTIME() > ?z) }} "
                          "FILTER (?z < ?x * 0.7 && getDuration() < 'P30D'^^xsd:duration && "
                          "getSTARTTIME() >= '2016-06-20T00:00:00Z'^^xsd:dateTime)")
    [event_filter] = clause.pattern.filters  # type: ignore[attr-defined]
    assert event_filter.variables == ("z", "x")
    assert event_filter.at(start, end) == (
        f"(?z < ?x * 0.7 && \"P9DT0.5S\"^^<{XSD}dayTimeDuration> < 'P30D'^^xsd:duration && "
        f"\"2016-06-20T10:00:00Z\"^^<{XSD}dateTime> >= '2016-06-20T00:00:00Z'^^xsd:dateTime)")
    # the engine's way: the SELECT has a solution iff the filter holds, the event's bindings substituted
    query = event_filter.query(start, end).replace("PREFIX : <http://ex/>\n", "PREFIX xsd: <" + XSD + ">\n")

    def holds(x: int, z: int) -> bool:
        integer = pyoxigraph.NamedNode(XSD + "integer")
        return bool(list(pyoxigraph.Store().query(query, substitutions={
            pyoxigraph.Variable("x"): pyoxigraph.Literal(str(x), datatype=integer),
            pyoxigraph.Variable("z"): pyoxigraph.Literal(str(z), datatype=integer)})))

    assert holds(100, 65) and not holds(100, 75)  # 65 < 70, 75 is not
    # inside an EVENT's P an element's interval is [t, t]
    second = clause.events[1]  # type: ignore[attr-defined]
    assert second.query_at(start) == (f"BASE <http://ex/>\nPREFIX : <http://ex/>\nSELECT * WHERE {{ ?y :q ?z FILTER "
                                      f"(\"2016-06-20T10:00:00Z\"^^<{XSD}dateTime> > ?z) }}")


def test_durations_are_exact_to_the_microsecond() -> None:
    _, clause = clause_of(f"{A} FILTER (getDURATION() > 'PT0S')")
    [event_filter] = clause.pattern.filters  # type: ignore[attr-defined]
    assert event_filter.at(0, 1) == f"(\"PT0.000001S\"^^<{XSD}dayTimeDuration> > 'PT0S')"
    assert event_filter.at(0, timedelta(days=1, minutes=1) // timedelta(microseconds=1)) == (
        f"(\"P1DT1M\"^^<{XSD}dayTimeDuration> > 'PT0S')")


# --- errors, at the user's line and column ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "column", "message"), [
    ("SELECT * { EVENT <s> { ?s ?p ?o } }", 1, 12, "EVENT must be inside MATCH { … }"),
    ("SELECT * MATCH { EVENT <s> { } }", 1, 10, "MATCH must be inside a group pattern"),
    ("SELECT * {\n  MATCH EVENT <s> { } }", 2, 9, "MATCH needs an event group"),
    ("SELECT * { MATCH { } }", 1, 20, "expected an event pattern (EVENT, FIRST, LAST or '{')"),
    ("SELECT * { MATCH { EVENT <s> {} THEN EVENT <s> {} } }", 1, 33,
     "expected an event operator (SEQ, SEQC, SEQR, SEQN, EQUALS, OPTIONALSEQ, EQUALSOPTIONAL, AND, UNION, OPTIONAL), "
     "FILTER or '}', found 'THEN'"),
    ("SELECT * { MATCH { EVENT <s> {} FILTER (?x) EVENT <s> {} } }", 1, 45, "FILTER or '}', found 'EVENT'"),
    ("SELECT * { SERVICE ?s { MATCH { EVENT WINDOWS HEAD { } } } }", 1, 33,
     "inside SERVICE ?s an EVENT cannot know its stream before the query runs"),
    ("SELECT * { MATCH { EVENT <s> {} SEQ } }", 1, 37, "expected an event pattern"),
    ("SELECT * { MATCH { EVENT <s> {} SEQ ?x } }", 1, 37, "expected an event pattern (EVENT, FIRST, LAST or '{'), "
                                                        "found '?x'"),
    ("SELECT * { MATCH { EVENT { } } }", 1, 20, "EVENT needs a stream IRI or WINDOWS, and a group pattern"),
    ("SELECT * { MATCH { EVENT <s> WINDOWS { } } }", 1, 38, "WINDOWS needs a WindowRef"),
    ("SELECT * { MATCH { EVENT <s?WINDOWS=HEAD~/PT5M> { } } }", 1, 26,
     "'HEAD~' is not a revision"),
    ("SELECT * { MATCH { EVENT WINDOWS R/HEAD~9/HEAD/1 { } } }", 1, 34,
     "WINDOWS=R/HEAD~9/HEAD/1 is not an event window (a repeating event window must step by a duration over time "
     "windows); event windows are R/a/-α/β"),
    ("SELECT * { MATCH { EVENT WINDOWS HEAD/PT5M { } } }", 1, 34, "a duration from an element: use HEAD/-α"),
    ("SELECT * { MATCH { EVENT <s?WINDOWS=HEAD&x=1> { } } }", 1, 26,
     "<s?WINDOWS=HEAD&x=1> is not a stream IRI with one WINDOWS= parameter"),
    ("SELECT * { MATCH { EVENT <s?query=x> { } } }", 1, 26, "is not a stream IRI with one WINDOWS= parameter"),
    ("SELECT * { MATCH { EVENT ex:s { } } }", 1, 26, "prefix 'ex' is not declared"),
    ("SELECT * { MATCH { EVENT <s> { ?s ?p ?o } FILTER NOT EXISTS { ?s ?p 1 } } }", 1, 50,
     "an event FILTER takes a bracketted expression or a function call"),
    ("SELECT * { MATCH { EVENT <s> { } FILTER (getDURATION(?x) > 1) } }", 1, 54, "getDURATION() takes no arguments"),
    ("SELECT * { MATCH { EVENT <s> { MATCH { } } } }", 1, 32, "MATCH cannot be inside an EVENT's pattern"),
    ("SELECT * { MATCH CONSUME ALL { EVENT <s> { } } }", 1, 26,
     "CONSUME takes a consumption policy: UNRESTRICTED, CHRONOLOGICAL, RECENT"),
    ("SELECT * { MATCH { EVENT <s> { ) } }", 1, 32, "unbalanced ')'"),
])
def test_errors_name_the_problem_where_it_is(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(QuerySyntaxError) as caught:
        parse_events(text)
    assert (caught.value.line, caught.value.column) == (line, column)
    assert message in caught.value.message
    assert caught.value.status_hint == 400


@pytest.mark.parametrize("name", ["sparql_ext.events", "sparql_ext.event_syntax", "sparql_ext.event_windows",
                                  "sparql_ext.lexer"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0
