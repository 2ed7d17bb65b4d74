"""``MATCH`` in queries (issue 18, item 1): a query on a stream, or on the SPARQL endpoint, whose WHERE holds event
patterns is answered with the matches at the latest element's time (RSEP-QL's evaluation at t; times stripped by
MATCH, Eq. 8), joined with the rest of the query. Expected answers worked out by hand from seed 001's running example
(the same hand-worked events as tests/test_event_matching.py); no Spark."""

from __future__ import annotations

from collections import Counter

from flask.testing import FlaskClient

BASE = "http://localhost"
PROV = "http://www.w3.org/ns/prov#"
JSON = {"Accept": "application/sparql-results+json"}
W1 = f"<{BASE}/streams/s?WINDOWS=1970-01-01T00:00:01Z/HEAD>"  # landmark from 1: [1, t]
W2 = f"<{BASE}/streams/s?WINDOWS=R/1970-01-01T00:00:00Z/-PT5S/PT1S>"  # the last 5 s, every second: (t − 5, t]
# Seed 001's stream (Fig. 1; Examples 5, 7, 8):
#   G1 @2 {a1 p b1}   G2 @4 {a2 p b2}   G3 @6 {b1 q c1, b2 q c2}   G4 @8 {b2 q c2}   G5 @10 {a3 p b3, b1 q c1}
SEED_001 = [("G1", 2, ["<http://ex/a1> <http://ex/p> <http://ex/b1>"]),
            ("G2", 4, ["<http://ex/a2> <http://ex/p> <http://ex/b2>"]),
            ("G3", 6, ["<http://ex/b1> <http://ex/q> <http://ex/c1>", "<http://ex/b2> <http://ex/q> <http://ex/c2>"]),
            ("G4", 8, ["<http://ex/b2> <http://ex/q> <http://ex/c2>"]),
            ("G5", 10, ["<http://ex/a3> <http://ex/p> <http://ex/b3>", "<http://ex/b1> <http://ex/q> <http://ex/c1>"])]


def upload(client: FlaskClient, upto: int = 10) -> None:
    assert client.put("/streams/s").status_code == 201
    body = "".join(f'<http://ex/{name}> <{PROV}generatedAtTime> "1970-01-01T00:00:{at:02d}Z"'
                   f"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n"
                   f"<http://ex/{name}> {{ {' . '.join(triples)} . }}\n"
                   for name, at, triples in SEED_001 if at <= upto)
    answer = client.post("/streams/s", data=body, headers={"Content-Type": "application/trig"})
    assert answer.status_code == 200, answer.text


def query(operator: str, consume: str = "") -> str:
    return (f"PREFIX : <http://ex/> SELECT ?x ?y ?z WHERE {{ MATCH {consume} {{ EVENT {W1} {{ ?x :p ?y }} {operator} "
            f"EVENT {W2} {{ ?y :q ?z }} }} }}")


def rows(answer: object) -> Counter[tuple[str, ...]]:
    data = answer.get_json()  # type: ignore[attr-defined]
    return Counter(tuple(b[v]["value"].removeprefix("http://ex/") for v in data["head"]["vars"])
                   for b in data["results"]["bindings"])


def test_unrestricted_seq_at_the_latest_element(client: FlaskClient) -> None:
    upload(client)
    # at t = 10: E1's landmark [1, 10] holds a1@2, a2@4, a3@10; E2's window (5, 10] holds (b1c1,6) (b2c2,6)
    # (b2c2,8) (b1c1,10). Each E2 event preceded by a compatible E1 event: e1 = a1@2 → b1c1@6, e2 = a2@4 → b2c2@6,
    # e3 = a2@4 → b2c2@8, e4 = a1@2 → b1c1@10. MATCH strips the times: two rows each of (a1 b1 c1), (a2 b2 c2).
    answer = client.get("/streams/s", query_string={"query": query("SEQ")}, headers=JSON)
    assert answer.status_code == 200, answer.text
    assert rows(answer) == Counter({("a1", "b1", "c1"): 2, ("a2", "b2", "c2"): 2})


def test_at_8_the_window_of_e2_holds_three_events(client: FlaskClient) -> None:
    upload(client, upto=8)
    # at t = 8 (G5 not there yet): E2's window (3, 8] holds (b1c1,6) (b2c2,6) (b2c2,8): e1, e2, e3
    answer = client.get("/streams/s", query_string={"query": query("SEQ")}, headers=JSON)
    assert rows(answer) == Counter({("a1", "b1", "c1"): 1, ("a2", "b2", "c2"): 2})


def test_chronological_and_recent_selection(client: FlaskClient) -> None:
    upload(client)
    # SEQC at 10 (one evaluation, nothing consumed before): the ≺-first E2 candidates are the two at 6, each with its
    # FIRST compatible partner: e1 (a1@2) and e2 (a2@4).
    chronological = client.get("/streams/s", query_string={"query": query("SEQC", "CONSUME CHRONOLOGICAL")},
                               headers=JSON)
    assert rows(chronological) == Counter({("a1", "b1", "c1"): 1, ("a2", "b2", "c2"): 1})
    # SEQR at 10: the ≺-last E2 candidate is (b1c1,10), its LAST compatible partner a1@2: e4 alone.
    recent = client.get("/streams/s", query_string={"query": query("SEQR")}, headers=JSON)
    assert rows(recent) == Counter({("a1", "b1", "c1"): 1})


def test_the_matches_join_the_rest_of_the_query_on_the_sparql_endpoint(client: FlaskClient) -> None:
    upload(client)
    names = '<http://ex/a1> <http://ex/name> "first" .\n<http://ex/a2> <http://ex/name> "second" .\n'
    assert client.post("/store?default", data=names, headers={"Content-Type": "application/n-triples"}).status_code \
        in (200, 201, 204)
    text = (f"PREFIX : <http://ex/> SELECT DISTINCT ?name WHERE {{ ?x :name ?name "
            f"MATCH {{ EVENT {W1} {{ ?x :p ?y }} SEQ EVENT {W2} {{ ?y :q <http://ex/c2> }} }} }}")
    answer = client.post("/sparql", data=text, headers={"Content-Type": "application/sparql-query", **JSON})
    assert answer.status_code == 200, answer.text
    assert rows(answer) == Counter({("second",): 1})  # only a2's events are followed by a q-triple with c2


def test_an_event_without_a_stream_reads_the_stream_queried(client: FlaskClient) -> None:
    upload(client)
    text = ("PREFIX : <http://ex/> SELECT ?x WHERE { MATCH { EVENT WINDOWS HEAD/-PT3S { ?x :p ?y } } }")
    # the last 3 s at t = 10: (7, 10] holds G4, G5; of their triples only a3 p b3 is a p-triple
    answer = client.get("/streams/s", query_string={"query": text}, headers=JSON)
    assert answer.status_code == 200, answer.text
    assert rows(answer) == Counter({("a3",): 1})
    on_endpoint = client.post("/sparql", data=text, headers={"Content-Type": "application/sparql-query", **JSON})
    assert on_endpoint.status_code == 400 and "the stream being queried" in on_endpoint.text


def test_bad_event_queries_are_400s_naming_the_problem(client: FlaskClient) -> None:
    upload(client)
    broken = "SELECT ?x WHERE {\n  MATCH { EVENT WINDOWS HEAD { ?x <http://ex/p> } }\n}"
    answer = client.get("/streams/s", query_string={"query": broken}, headers=JSON)
    assert answer.status_code == 400 and "line 2" in answer.text, answer.text
    elsewhere = f"SELECT ?x WHERE {{ MATCH {{ EVENT <{BASE}/streams/nowhere?WINDOWS=HEAD> {{ ?x ?p ?y }} }} }}"
    answer = client.post("/sparql", data=elsewhere, headers={"Content-Type": "application/sparql-query", **JSON})
    assert answer.status_code == 400 and "not a stream of this server" in answer.text, answer.text


def test_values_bound_by_match_come_back_as_sent(client: FlaskClient) -> None:
    assert client.put("/streams/v").status_code == 201
    stamp = '"2020-06-01T12:00:00+02:00"^^<http://www.w3.org/2001/XMLSchema#dateTime>'
    body = (f"<http://ex/G1> <{PROV}generatedAtTime> {stamp} .\n"
            f'<http://ex/G1> {{ <http://ex/a> <http://ex/t> {stamp} . <http://ex/a> <http://ex/l> "x\\ny"@en . }}\n')
    assert client.post("/streams/v", data=body, headers={"Content-Type": "application/trig"}).status_code == 200
    text = "SELECT ?t ?l WHERE { MATCH { EVENT WINDOWS HEAD { <http://ex/a> <http://ex/t> ?t ; <http://ex/l> ?l } } }"
    answer = client.get("/streams/v", query_string={"query": text}, headers=JSON)
    assert answer.status_code == 200, answer.text
    [row] = answer.get_json()["results"]["bindings"]
    # the offset and the newline as uploaded (a MATCH passes its terms through a VALUES table: nothing rewritten)
    assert row["t"] == {"type": "literal", "value": "2020-06-01T12:00:00+02:00",
                        "datatype": "http://www.w3.org/2001/XMLSchema#dateTime"}
    assert row["l"] == {"type": "literal", "value": "x\ny", "xml:lang": "en"}


def test_an_event_inside_service_to_a_stream_reads_that_stream(client: FlaskClient) -> None:
    """``SERVICE <…/streams/s> { MATCH { EVENT WINDOWS … { … } } }`` on the endpoint: the EVENT reads the SERVICE's
    stream, as it would queried on the stream itself."""
    upload(client)
    last_3s = ("PREFIX : <http://ex/> SELECT ?x WHERE { SERVICE <http://localhost/streams/s> "
               "{ MATCH { EVENT WINDOWS HEAD/-PT3S { ?x :p ?y } } } }")
    # the last 3 s at t = 10: (7, 10] holds G4, G5; of their triples only a3 p b3 is a p-triple
    answer = client.post("/sparql", data=last_3s, headers={"Content-Type": "application/sparql-query", **JSON})
    assert answer.status_code == 200, answer.text
    assert rows(answer) == Counter({("a3",): 1})
    # seed 001's SEQ (e1 … e4 at t = 10, as test_unrestricted_seq_at_the_latest_element) through a windowed SERVICE
    # IRI: its landmark window from 1 s holds all of G1 … G5, and the EVENTs' windows are nested in it
    seq = ("PREFIX : <http://ex/> SELECT ?x ?y ?z WHERE { SERVICE <streams/s?WINDOWS=1970-01-01T00:00:01Z/HEAD> { "
           "MATCH { EVENT WINDOWS 1970-01-01T00:00:01Z/HEAD { ?x :p ?y } SEQ EVENT WINDOWS HEAD/-PT5S { ?y :q ?z } } "
           "} }")
    answer = client.post("/sparql", data=seq, headers={"Content-Type": "application/sparql-query", **JSON})
    assert answer.status_code == 200, answer.text
    assert rows(answer) == Counter({("a1", "b1", "c1"): 2, ("a2", "b2", "c2"): 2})


def test_and_union_optional_and_a_filter_on_the_join_s_interval(client: FlaskClient) -> None:
    """Seed 000 §3's Join, Union and LeftJoin end to end, the FILTER evaluated by pyoxigraph on the combination's
    interval. The stream: G1 @1 {s1 q c}, G2 @2 {a p s1}, G3 @3 {a r d}."""
    assert client.put("/streams/j").status_code == 201
    body = "".join(f'<http://ex/G{n}> <{PROV}generatedAtTime> "1970-01-01T00:00:0{n}Z"'
                   f"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n<http://ex/G{n}> {{ {triple} . }}\n"
                   for n, triple in [(1, "<http://ex/s1> <http://ex/q> <http://ex/c>"),
                                     (2, "<http://ex/a> <http://ex/p> <http://ex/s1>"),
                                     (3, "<http://ex/a> <http://ex/r> <http://ex/d>")])
    assert client.post("/streams/j", data=body, headers={"Content-Type": "application/trig"}).status_code == 200
    every = "EVENT WINDOWS 1970-01-01T00:00:00Z/HEAD"

    def answer(match: str, select: str = "?x ?z") -> Counter[tuple[str, ...]]:
        text = ("PREFIX : <http://ex/> PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> "
                f"SELECT {select} WHERE {{ MATCH {{ {match} }} }}")
        reply = client.get("/streams/j", query_string={"query": text}, headers=JSON)
        assert reply.status_code == 200, reply.text
        return rows(reply)

    # the p-event @2 after the q-event @1: joined, not in sequence
    assert answer(f"{every} {{ ?x :p ?y }} AND {every} {{ ?y :q ?z }}") == Counter({("a", "c"): 1})
    assert answer(f"{every} {{ ?x :p ?y }} SEQ {every} {{ ?y :q ?z }}") == Counter()
    # the join's interval is [1, 2]: it starts with the q-event
    on_interval = (f'{{ {every} {{ ?x :p ?y }} {every} {{ ?y :q ?z }} }} FILTER (getSTARTTIME() = '
                   f'"1970-01-01T00:00:01Z"^^xsd:dateTime && getDURATION() = "PT1S"^^xsd:dayTimeDuration)')
    assert answer(on_interval) == Counter({("a", "c"): 1})
    # UNION: the q-event's z and the r-event's z, each alone
    assert answer(f"{every} {{ ?x :q ?z }} UNION {every} {{ ?x :r ?z }}") == Counter({("s1", "c"): 1, ("a", "d"): 1})
    # OPTIONAL: the r-event @3 with the p-event @2 (ends before it); the p-event @2 without the r-event @3 (after it)
    assert answer(f"{every} {{ ?x :r ?z }} OPTIONAL {every} {{ ?x :p ?y }}", "?x ?y") == Counter({("a", "s1"): 1})
    assert answer(f"{every} {{ ?x :p ?y }} OPTIONAL {every} {{ ?x :r ?z }}", "?x (BOUND(?z) AS ?r)") \
        == Counter({("a", "false"): 1})


def test_an_interval_window_is_half_open_and_its_closed_form_ends_1_us_later(client: FlaskClient) -> None:
    """Seed 001's interval window [t1, t2] is closed; ``T1/T2`` is [T1, T2). With every element in (t = 10), the
    q-events of ``06Z/08Z`` are G3's two @6 (G4 @8 is at the excluded end); ``06Z/08.000001Z`` is the seed's [6, 8]
    and adds G4's b2 q c2 @8; ``06.000001Z/08.000001Z`` is (6, 8]: G4's alone."""
    upload(client)

    def answer(window: str) -> Counter[tuple[str, ...]]:
        text = f"PREFIX : <http://ex/> SELECT ?y ?z WHERE {{ MATCH {{ EVENT WINDOWS {window} {{ ?y :q ?z }} }} }}"
        reply = client.get("/streams/s", query_string={"query": text}, headers=JSON)
        assert reply.status_code == 200, reply.text
        return rows(reply)

    assert answer("1970-01-01T00:00:06Z/1970-01-01T00:00:08Z") == Counter({("b1", "c1"): 1, ("b2", "c2"): 1})
    assert answer("1970-01-01T00:00:06Z/1970-01-01T00:00:08.000001Z") == Counter({("b1", "c1"): 1, ("b2", "c2"): 2})
    assert answer("1970-01-01T00:00:06.000001Z/1970-01-01T00:00:08.000001Z") == Counter({("b2", "c2"): 1})
