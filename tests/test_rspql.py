"""The RSP-QL and C-SPARQL front ends' pure core (sparql_ext/rspql.py, rspql_blocks.py): clauses, durations, window
refs on the epoch's grid, the compiled WindowRef form, refusals at the user's line and column."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sparql_ext.errors import QuerySyntaxError
from sparql_ext.rspql import (
    CSPARQL,
    RSPQL,
    RegistrationError,
    Resolved,
    WindowDecl,
    compile_registration,
    duration,
    parse_registration,
    window_ref,
)

T = 1_466_416_950_000_000  # 2016-06-20T10:02:30Z
TS = "http://www.w3.org/ns/prov#generatedAtTime"


@pytest.mark.parametrize(("text", "seconds"), [
    ("PT10S", 10), ("PT5M", 300), ("P1DT1H", 90_000), ("PT0.5S", 0.5), ("10s", 10), ("5m", 300), ("1h", 3600),
    ("500ms", 0.5), ("3 sec", 3), ("2 minutes", 120), ("20", 0.02), ("5M", 300)])
def test_durations_as_xsd_and_as_the_peers_write_them(text: str, seconds: float) -> None:
    assert duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["P1M", "P1Y", "PT", "5 fortnights", "PT0S"])
def test_durations_without_a_fixed_nonzero_length_are_refused(text: str) -> None:
    with pytest.raises(QuerySyntaxError):
        duration(text)


def test_time_windows_end_on_the_epochs_grid() -> None:
    five_by_one = WindowDecl("w", "s", timedelta(minutes=5), timedelta(minutes=1), 0)
    # registered at 10:02:30: the first window holding that instant on the grid of ends k·1m is [09:58, 10:03)
    assert window_ref(five_by_one, T) == "R/2016-06-20T09:58:00Z/PT5M/PT1M"
    tumbling = WindowDecl("w", "s", timedelta(minutes=5), timedelta(minutes=5), 0)
    assert window_ref(tumbling, T) == "R/2016-06-20T10:00:00Z/PT5M"
    # an explicit t0: the first window starts there
    assert window_ref(five_by_one, T, t0=0) == "R/1970-01-01T00:00:00Z/PT5M/PT1M"
    assert window_ref(WindowDecl("w", "s", 10, 2, 0), T) == "R/HEAD~9/HEAD/2"


def test_rsp_ql_clauses() -> None:
    reg = parse_registration("""PREFIX : <http://ex/>
REGISTER ISTREAM :out AS
SELECT ?x
FROM NAMED WINDOW :w1 ON STREAM :s [RANGE PT10S STEP PT5S]
FROM NAMED WINDOW :w2 ON <http://ex/t> [ELEMENTS 3]
FROM <http://ex/static>
WHERE { ?x a :Sensor WINDOW :w1 { ?x :v ?v } WINDOW ?w { ?x :u ?u } }""")
    assert (reg.language, reg.output, reg.operator, reg.form) == (RSPQL, "http://ex/out", "istream", "SELECT")
    assert [(w.name, w.stream, w.width, w.step) for w in reg.windows] == [
        ("http://ex/w1", "http://ex/s", timedelta(seconds=10), timedelta(seconds=5)),
        ("http://ex/w2", "http://ex/t", 3, 3)]
    compiled = compile_registration(reg, {"http://ex/w1": Resolved("http://h/streams/s?WINDOWS=A", TS),
                                          "http://ex/w2": Resolved("http://h/streams/t?WINDOWS=B", TS)})
    assert compiled.split("WHERE", 1)[1].split() == """{ ?x a :Sensor
        SERVICE <http://h/streams/s?WINDOWS=A> { SELECT ?x ?v WHERE { GRAPH ?_g1 { ?x :v ?v } } }
        { SERVICE <http://h/streams/s?WINDOWS=A> { SELECT ?x ?u WHERE { GRAPH ?_g2 { ?x :u ?u } } }
          BIND(<http://ex/w1> AS ?w) } UNION
        { SERVICE <http://h/streams/t?WINDOWS=B> { SELECT ?x ?u WHERE { GRAPH ?_g3 { ?x :u ?u } } }
          BIND(<http://ex/w2> AS ?w) } }""".split()
    assert "FROM <http://ex/static>" in compiled and "REGISTER" not in compiled and "FROM NAMED WINDOW" not in compiled


def test_window_groups_are_read_over_the_merge_of_elements() -> None:
    reg = parse_registration("""PREFIX : <http://ex/>
REGISTER RSTREAM <o> AS SELECT * FROM NAMED WINDOW :w ON :s [RANGE PT1M]
WHERE { WINDOW :w { ?a :p [ :q ?b ; :r _:n ] , ?c . _:n :s ?d OPTIONAL { ?a :t/:u ?e } GRAPH ?g { ?a :v ?f }
                    FILTER NOT EXISTS { ?a :x ?y } } }""")
    compiled = compile_registration(reg, {"http://ex/w": Resolved("http://h/streams/s?WINDOWS=A", TS)})
    assert compiled.split("WHERE", 1)[1].split() == """{ SERVICE <http://h/streams/s?WINDOWS=A> {
        SELECT ?a ?b ?c ?d ?e ?g ?f ?y WHERE {
        GRAPH ?_g2 { ?_b1 :q ?b } GRAPH ?_g3 { ?_b1 :r ?_bn } GRAPH ?_g4 { ?a :p ?_b1 } GRAPH ?_g5 { ?a :p ?c }
        GRAPH ?_g6 { ?_bn :s ?d } OPTIONAL { GRAPH ?_g7 { ?a :t/:u ?e } } GRAPH ?g { ?a :v ?f }
        FILTER NOT EXISTS { GRAPH ?_g8 { ?a :x ?y } } } } }""".split()


def test_c_sparql_default_graph_window_static_graphs_and_timestamp() -> None:
    reg = parse_registration("""REGISTER QUERY Seq AS
PREFIX : <http://ex/>
SELECT ?x FROM STREAM <http://ex/s> [RANGE 5m SLIDE 1s] FROM NAMED <http://ex/g>
WHERE { GRAPH <http://ex/g> { ?x :near :y } :axel :isIn ?x . FILTER (timestamp(:axel :isIn ?x) > 0) }""")
    assert (reg.language, reg.name, reg.output) == (CSPARQL, "Seq", None)
    assert reg.windows[0].name is None and reg.windows[0].step == timedelta(seconds=1)
    compiled = compile_registration(reg, {None: Resolved("http://h/streams/s?WINDOWS=A", TS)})
    assert compiled.split("WHERE", 1)[1].split() == f"""{{ SERVICE <http://h/streams/s?WINDOWS=A> {{
        SELECT ?x ?_ts1 WHERE {{ GRAPH ?_g3 {{ :axel :isIn ?x }}
        GRAPH ?_g2 {{ :axel :isIn ?x }} ?_g2 <{TS}> ?_ts1 . }} }}
        GRAPH <http://ex/g> {{ ?x :near :y }} FILTER (?_ts1 > 0) }}""".split()
    assert parse_registration("REGISTER STREAM out AS CONSTRUCT { ?s ?p ?o } FROM STREAM <s> [RANGE TRIPLES 5] "
                              "WHERE { ?s ?p ?o }").windows[0].width == 5


@pytest.mark.parametrize(("text", "error", "message"), [
    ("REGISTER RSTREAM <o> AS\nSELECT * FROM NAMED WINDOW <w> ON <s> [RANGE PT1M]\nWHERE { WINDOW <v> { ?s ?p ?o } }",
     RegistrationError, "line 3 column 16: WINDOW <v> names no window declared with FROM NAMED WINDOW (declared: <w>)"),
    ("REGISTER RSTREAM <o> AS\nSELECT * FROM NAMED WINDOW <w> ON <s> [RANGE 5 parsecs]\nWHERE { }",
     QuerySyntaxError, "line 2 column 40: '5 parsecs' is not a duration"),
    ("REGISTER FOO <o> AS SELECT * WHERE { }", QuerySyntaxError, "line 1 column 10: REGISTER must be followed by"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <a> [RANGE 1m] FROM STREAM <b> [RANGE 1m] WHERE { ?s ?p ?o }",
     RegistrationError, "several FROM STREAM windows"),
    ("REGISTER QUERY q COMPUTED EVERY 1m AS SELECT * FROM STREAM <a> [RANGE 1m] WHERE { ?s ?p ?o }",
     RegistrationError, "COMPUTED EVERY is not supported"),
    ("REGISTER QUERY q AS SELECT * FROM STREAM <a> [RANGE 1m] FROM <g> WHERE { ?s ?p ?o }",
     RegistrationError, "FROM <graph> merges a static graph"),
    ("REGISTER RSTREAM <o> AS SELECT * FROM NAMED WINDOW <w> ON <s> WHERE { }", QuerySyntaxError,
     "expected a window specification"),
])
def test_refusals_name_the_construct(text: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as raised:
        parse_registration(text)
    assert message in str(raised.value)
