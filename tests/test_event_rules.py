"""Event rules (issue 18, phase 2): a rule whose CONSTRUCT holds ``MATCH { … }`` fires on each arriving element and
emits one output element per new match, linked to its constituents, exactly once across restarts. The expected
derived events are worked out by hand from the seeds (000: EP-SPARQL's price drop then rise; 001: RSEP-QL's
chronological selection and consumption); no Spark (``--no-pipeline`` servers and the in-process app)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from concentrator.compose import http_app
from conformance.server import running_server
from protocol import ServerConfig
from protocol.services import services_of

PROV = "http://www.w3.org/ns/prov#"
EV = "urn:x-concentrator:event#"
XSD_DT = "^^<http://www.w3.org/2001/XMLSchema#dateTime>"


def day(n: int) -> str:
    """Day n of the seed-000 stream (day 1 is 2024-01-01)."""
    return (datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=n - 1)).strftime("%Y-%m-%dT%H:%M:%SZ")


SECOND = "2024-01-01T00:00:{:02d}Z"  # second n of the seed-001-style stream
OUTPUT_QUERY = f"""PREFIX prov: <{PROV}> PREFIX ev: <{EV}>
SELECT ?g ?t ?start ?end WHERE {{ ?g prov:generatedAtTime ?t GRAPH ?g {{ ?g ev:start ?start ; ev:end ?end }} }}"""


def element(name: str, at: str, *triples: str) -> str:
    body = " ".join(f"{t} ." for t in triples)
    return f'<http://ex/{name}> <{PROV}generatedAtTime> "{at}"{XSD_DT} .\n<http://ex/{name}> {{ {body} }}\n'


# --- seed 000, query (1): a fall below 70 % of price1, then a rise above 105 % of it, within 30 days ----------------

PRICE_RULE = """PREFIX : <http://ex/>
PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>
CONSTRUCT { ?company :from ?price1 ; :fellTo ?price2 ; :roseTo ?price3 }
WHERE {
  MATCH {
    EVENT <streams/prices> { ?company :price ?price1 } SEQ EVENT <streams/prices> { ?company :price ?price2 }
    SEQ EVENT <streams/prices> { ?company :price ?price3 }
    FILTER (?price2 < ?price1 * 0.7 && ?price3 > ?price1 * 1.05 && getDURATION() < "P30D"^^xsd:duration)
  }
}"""
# The seed-000 stream (day, company, price); elements p1 … p7:
#   acme on days 1, 5, 10, 41: 100, 65, 110, 120 — (100, 65, 110): 65 < 70 and 110 > 105, over 9 days: a match
#   on [day 1, day 10] from p1, p3, p5; (100, 65, 120) spans 40 days; no other triple falls below 70 % of price1.
#   beta on days 2, 8, 40: 50, 30, 60 — falls and rises, but over 38 days: nothing.
PRICES = [(1, "acme", 100), (2, "beta", 50), (5, "acme", 65), (8, "beta", 30), (10, "acme", 110), (40, "beta", 60),
          (41, "acme", 120)]


class Http:
    """The few requests these tests make, over a Flask test client or a real server."""

    def __init__(self, request: Callable[..., tuple[int, object]]) -> None:
        self._request = request

    def put_stream(self, name: str) -> None:
        status, _ = self._request("PUT", f"/streams/{name}")
        assert status in (201, 204)

    def upload(self, name: str, body: str) -> None:
        status, reply = self._request("POST", f"/streams/{name}", data=body.encode(),
                                      headers={"Content-Type": "application/trig"})
        assert status == 200, reply

    def put_rule(self, name: str, text: str, output: str, **options: str) -> tuple[int, object]:
        """``options``: evaluate, start (sent as from=), depth."""
        query = "".join(f"&{'from' if key == 'start' else key}={value}" for key, value in options.items())
        return self._request("PUT", f"/rules/{name}?output={output}{query}", data=text.encode(),
                             headers={"Content-Type": "application/sparql-query"})

    def punctuate(self, name: str, at: str) -> None:
        status, reply = self._request("POST", f"/streams/{name}?punctuation={at}")
        assert status in (200, 204), reply

    def wait_evaluated(self, rule: str, at: str, timeout: float = 20.0) -> dict[str, object]:
        """The rule's status once it has evaluated at time ``at`` (a rule with evaluate=)."""
        deadline = time.monotonic() + timeout
        while True:
            status, reply = self.rule(rule)
            assert status == 200, reply
            if (reply["events"]["evaluated"] or "") >= at:  # type: ignore[index]
                return reply  # type: ignore[return-value]
            assert time.monotonic() < deadline, f"rule {rule} did not evaluate at {at}: {reply}"
            time.sleep(0.05)

    def rule(self, name: str) -> tuple[int, object]:
        return self._request("GET", f"/rules/{name}", headers={"Accept": "application/json"})

    def select(self, stream: str, query: str) -> list[dict[str, str]]:
        status, reply = self._request("GET", f"/streams/{stream}", params={"query": query},
                                      headers={"Accept": "application/sparql-results+json"})
        assert status == 200, reply
        return [{k: v["value"] for k, v in row.items()} for row in reply["results"]["bindings"]]  # type: ignore

    def wait_processed(self, rule: str, stream: str, ordinal: int, timeout: float = 20.0) -> dict[str, object]:
        """The rule's status once it has matched every element of ``stream`` up to ``ordinal``."""
        deadline = time.monotonic() + timeout
        while True:
            status, reply = self.rule(rule)
            assert status == 200, reply
            events = reply["events"]  # type: ignore[index]
            if events["processed"].get(stream, 0) >= ordinal:
                return reply  # type: ignore[return-value]
            assert time.monotonic() < deadline, f"rule {rule} did not reach {stream} element {ordinal}: {reply}"
            time.sleep(0.05)


def flask_http(client: FlaskClient) -> Http:
    def request(method: str, path: str, *, params: dict[str, str] | None = None, **kwargs: object
                ) -> tuple[int, object]:
        response = client.open(path, method=method, query_string=params, **kwargs)  # type: ignore[arg-type]
        return response.status_code, response.get_json(silent=True) if response.is_json else response.get_data(
            as_text=True)
    return Http(request)


def server_http(url: str) -> Http:
    def request(method: str, path: str, **kwargs: object) -> tuple[int, object]:
        response = requests.request(method, url + path, timeout=30, **kwargs)  # type: ignore[arg-type]
        is_json = "json" in response.headers.get("Content-Type", "")
        return response.status_code, response.json() if is_json else response.text
    return Http(request)


@pytest.fixture
def http(client: FlaskClient) -> Http:
    return flask_http(client)


def test_price_drop_then_rise_as_a_rule(http: Http) -> None:
    http.put_stream("prices")
    status, reply = http.put_rule("drop-rise", PRICE_RULE, "alerts")
    assert status == 201, reply
    assert reply["events"]["streams"] == ["prices"]  # type: ignore[index]
    http.upload("prices", "".join(element(f"p{n}", day(d), f"<http://ex/{company}> <http://ex/price> {value}")
                                  for n, (d, company, value) in enumerate(PRICES, start=1)))
    status_json = http.wait_processed("drop-rise", "prices", 7)
    assert status_json["events"]["matches"] == 1  # type: ignore[index]
    rows = http.select("alerts", """PREFIX : <http://ex/> PREFIX prov: <http://www.w3.org/ns/prov#>
        PREFIX ev: <urn:x-concentrator:event#>
        SELECT * WHERE { ?g prov:generatedAtTime ?t
          GRAPH ?g { ?c :from ?p1 ; :fellTo ?p2 ; :roseTo ?p3 . ?g ev:start ?start ; ev:end ?end ; ev:rule ?rule } }""")
    assert len(rows) == 1, rows
    [row] = rows
    assert (row["c"], row["p1"], row["p2"], row["p3"]) == ("http://ex/acme", "100", "65", "110")
    assert (row["start"], row["end"], row["t"]) == (day(1), day(10), day(10))
    assert row["rule"] == "http://localhost/rules/drop-rise"
    constituents = http.select("alerts", f"SELECT ?e WHERE {{ GRAPH ?g {{ ?g <{PROV}wasDerivedFrom> ?e }} }}")
    assert {r["e"] for r in constituents} == {"http://ex/p1", "http://ex/p3", "http://ex/p5"}


# --- consumption: RSEP-QL's chronological selection and consumption on every arriving element ------------------------

def seq_rule(operator: str, consume: str) -> str:
    return f"""PREFIX : <http://ex/>
CONSTRUCT {{ ?x :then ?z }}
WHERE {{ MATCH CONSUME {consume} {{
  EVENT <streams/s> {{ ?x :p ?y }} {operator} EVENT <streams/s> {{ ?y :q ?z }} }} }}"""


# G1 @1 {a p b}   G2 @2 {b q c}   G3 @3 {b q d}   G4 @4 {a p b}   G5 @5 {b q e}   (seconds)
STREAM_S = [("G1", 1, "<http://ex/a> <http://ex/p> <http://ex/b>"), ("G2", 2, "<http://ex/b> <http://ex/q> <http://ex/c>"),
            ("G3", 3, "<http://ex/b> <http://ex/q> <http://ex/d>"), ("G4", 4, "<http://ex/a> <http://ex/p> <http://ex/b>"),
            ("G5", 5, "<http://ex/b> <http://ex/q> <http://ex/e>")]
# SEQC + CONSUME CHRONOLOGICAL, evaluated at each element (Eq. 10 + Def. 10):
#   @2: the earliest q with an earlier p is b q c @2, with its first partner G1: (a, c) on [1, 2]; G1 and G2 consumed.
#   @3: b q d @3 has no p left before it (G1 consumed): nothing — a consumed event does not match twice.
#   @4: a p b @4 is no q: nothing.
#   @5: candidates b q d @3 (no partner before 3) and b q e @5 (partner G4 @4): (a, e) on [4, 5].
CHRONOLOGICAL = {("e", "c", 1, 2, ("G1", "G2")), ("e", "e", 4, 5, ("G4", "G5"))}
# SEQ unrestricted (Eq. 7): every p before every compatible q: (a,c) [1,2]; (a,d) [1,3]; (a,e) [1,5] and [4,5].
UNRESTRICTED = {("c", 1, 2, ("G1", "G2")), ("d", 1, 3, ("G1", "G3")), ("e", 1, 5, ("G1", "G5")),
                ("e", 4, 5, ("G4", "G5"))}


def derived(http: Http, stream: str) -> set[tuple[object, ...]]:
    """Each output element as (z, start second, end second, constituent names)."""
    rows = http.select(stream, f"""PREFIX : <http://ex/> PREFIX ev: <{EV}> PREFIX prov: <{PROV}>
        SELECT ?g ?z ?start ?end (GROUP_CONCAT(STRAFTER(STR(?e), "http://ex/"); separator=" ") AS ?from)
        WHERE {{ GRAPH ?g {{ <http://ex/a> :then ?z . ?g ev:start ?start ; ev:end ?end ; prov:wasDerivedFrom ?e }} }}
        GROUP BY ?g ?z ?start ?end""")
    return {(r["z"].removeprefix("http://ex/"), int(r["start"][17:19]), int(r["end"][17:19]),
             tuple(sorted(r["from"].split()))) for r in rows}


def upload_s(http: Http, names: set[str]) -> None:
    http.upload("s", "".join(element(name, SECOND.format(second), triple) for name, second, triple in STREAM_S
                             if name in names))


def test_a_consumed_event_does_not_match_twice(http: Http) -> None:
    http.put_stream("s")
    assert http.put_rule("chrono", seq_rule("SEQC", "CHRONOLOGICAL"), "chrono-out")[0] == 201
    assert http.put_rule("all", seq_rule("SEQ", "UNRESTRICTED"), "all-out")[0] == 201
    for name, _, _ in STREAM_S:  # one element per request: each is matched on its arrival
        upload_s(http, {name})
    http.wait_processed("chrono", "s", 5)
    http.wait_processed("all", "s", 5)
    assert derived(http, "chrono-out") == {(z, s, e, f) for _, z, s, e, f in CHRONOLOGICAL}
    assert derived(http, "all-out") == UNRESTRICTED


def test_a_rule_matches_only_what_arrives_after_it(http: Http) -> None:
    http.put_stream("s")
    upload_s(http, {"G1"})  # before the rule: not an event of it
    assert http.put_rule("all", seq_rule("SEQ", "UNRESTRICTED"), "all-out")[0] == 201
    upload_s(http, {"G2", "G3", "G4", "G5"})
    http.wait_processed("all", "s", 5)
    assert derived(http, "all-out") == {("e", 4, 5, ("G4", "G5"))}


# --- exactly once across restarts -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_matches_survive_a_restart_exactly_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_server(["--no-pipeline"], data_dir=data) as server:
        http = server_http(server.url)
        http.put_stream("s")
        assert http.put_rule("chrono", seq_rule("SEQC", "CHRONOLOGICAL"), "chrono-out")[0] == 201
        assert http.put_rule("all", seq_rule("SEQ", "UNRESTRICTED"), "all-out")[0] == 201
        for name in ("G1", "G2", "G3"):
            upload_s(http, {name})
        http.wait_processed("chrono", "s", 3)
        http.wait_processed("all", "s", 3)
        assert derived(http, "chrono-out") == {("c", 1, 2, ("G1", "G2"))}
    with running_server(["--no-pipeline"], data_dir=data) as server:
        http = server_http(server.url)
        for name in ("G4", "G5"):
            upload_s(http, {name})
        http.wait_processed("chrono", "s", 5)
        http.wait_processed("all", "s", 5)
        # G1 stayed consumed: b q e @5 pairs with G4 (not with G1, its first partner were G1 still there)
        assert derived(http, "chrono-out") == {(z, s, e, f) for _, z, s, e, f in CHRONOLOGICAL}
        assert derived(http, "all-out") == UNRESTRICTED
        assert len(http.select("all-out", OUTPUT_QUERY)) == 4  # no duplicate element


def test_a_crash_before_the_state_is_saved_replays_without_duplicates(tmp_path: Path) -> None:
    """The matcher's state is saved after the outputs: a crash in between replays the elements after the saved state,
    and the outputs the replay makes again are found by their origins (rule + match) and not appended twice."""
    config = ServerConfig(tmp_path / "data", max_body_bytes=1_000_000)
    first = http_app(config)
    http = flask_http(first.test_client())
    http.put_stream("s")
    assert http.put_rule("chrono", seq_rule("SEQC", "CHRONOLOGICAL"), "chrono-out")[0] == 201
    state = tmp_path / "data" / "rules" / "events" / "chrono.json"
    saved = tmp_path / "state-at-registration.json"
    shutil.copy(state, saved)
    for name in ("G1", "G2", "G3", "G4"):
        upload_s(http, {name})
    http.wait_processed("chrono", "s", 4)
    close(first)
    shutil.copy(saved, state)  # the crash: every state save after registration lost, the outputs kept
    second = http_app(config)
    http = flask_http(second.test_client())
    http.wait_processed("chrono", "s", 4)
    upload_s(http, {"G5"})
    reply = http.wait_processed("chrono", "s", 5)
    assert derived(http, "chrono-out") == {(z, s, e, f) for _, z, s, e, f in CHRONOLOGICAL}
    assert len(http.select("chrono-out", OUTPUT_QUERY)) == 2
    # the replayed match was found by its origin: no error (appending it again would be a duplicate graph name), and
    # not counted again (the restored state had counted no match: (a, c) found again is not new, (a, e) is)
    assert (reply["log"], reply["failures"], reply["events"]["matches"]) == ([], 0, 1)  # type: ignore[index]
    close(second)


def close(app: Flask) -> None:
    services_of(app).close()


# --- refusals ---------------------------------------------------------------------------------------------------------

def test_a_bad_event_rule_is_refused_with_its_line_and_column(http: Http) -> None:
    http.put_stream("s")
    bad = "PREFIX : <http://ex/>\nCONSTRUCT { ?x :then ?z }\nWHERE { MATCH { EVENT <streams/s> { ?x :p ?y } THEN " \
          "EVENT <streams/s> { ?y :q ?z } } }"
    status, reply = http.put_rule("bad", bad, "out")
    assert status == 400
    assert "line 3 column 48" in str(reply), reply
    assert http.rule("bad")[0] == 404
    # an EVENT over a stream that does not exist, and an EVENT's pattern that is not SPARQL
    status, reply = http.put_rule("bad", seq_rule("SEQ", "UNRESTRICTED").replace("streams/s>", "streams/nope>"), "out")
    assert status == 400 and "nope" in str(reply), reply
    status, reply = http.put_rule("bad", bad.replace("THEN", "SEQ").replace("?x :p ?y", "?x :p"), "out")
    assert status == 400 and "line 3" in str(reply), reply
    assert http.rule("bad")[0] == 404


def test_a_cycle_through_a_window_rule_is_refused(http: Http) -> None:
    """Event rules may feed themselves (their recursion is bounded: below); a window rule on the cycle may not: its
    firings have no derivation depth to stop at."""
    http.put_stream("s")
    window_rule = """CONSTRUCT { ?x <http://ex/p> ?y } WHERE {
      SERVICE <http://localhost/streams/t?WINDOWS=R/HEAD/PT05M/PT01M> { GRAPH ?g { ?x <http://ex/q> ?y } } }"""
    http.put_stream("t")
    assert http.put_rule("windows", window_rule, "s")[0] == 201  # t -[windows]-> s
    status, reply = http.put_rule("loop", seq_rule("SEQ", "UNRESTRICTED"), "t")  # s -[loop]-> t closes it
    assert status == 409, reply
    assert "rule 'loop': its output stream feeds its own inputs (a cycle: t -[windows]-> s -[loop]-> t); rule " \
           "'windows' on it fires on windows" in str(reply), reply
    assert http.rule("loop")[0] == 404


def test_an_event_rule_from_a_rule_file(app: Flask, tmp_path: Path) -> None:
    http = flask_http(app.test_client())
    http.put_stream("s")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "from-file.rq").write_text("# output: file-out\n" + seq_rule("SEQ", "UNRESTRICTED"), encoding="utf-8")
    assert services_of(app).rules.load_directory(rules, "http://localhost") == []
    upload_s(http, {"G1", "G2"})
    http.wait_processed("from-file", "s", 2)
    assert derived(http, "file-out") == {("c", 1, 2, ("G1", "G2"))}


# --- seed 001, Examples 10 and 11: evaluations at chosen times, consumption carried (evaluate=) ---------------------

W1 = "streams/s?WINDOWS=1970-01-01T00:00:01Z/HEAD"  # landmark from 1: [1, t]
W2 = "streams/s?WINDOWS=R/1970-01-01T00:00:00Z/-PT5S/PT1S"  # the last 5 s: (t − 5, t]
AT_8_AND_10 = "R/1970-01-01T00:00:08Z/PT2S"  # evaluations at 8, 10, 12, …
# Seed 001's stream: G1 @2 {a1 p b1}  G2 @4 {a2 p b2}  G3 @6 {b1 q c1, b2 q c2}  G4 @8 {b2 q c2}
#                    G5 @10 {a3 p b3, b1 q c1}
SEED_001 = [("G1", 2, ["a1 p b1"]), ("G2", 4, ["a2 p b2"]), ("G3", 6, ["b1 q c1", "b2 q c2"]), ("G4", 8, ["b2 q c2"]),
            ("G5", 10, ["a3 p b3", "b1 q c1"])]
# The events of E1 SEQ E2 (docs/events.md): e1 = a1 → c1 on [2, 6] (G1 G3), e2 = a2 → c2 on [4, 6] (G2 G3),
# e3 = a2 → c2 on [4, 8] (G2 G4), e4 = a1 → c1 on [2, 10] (G1 G5).
E1, E2, E3, E4 = (("a1", "c1", 2, 6, ("G1", "G3")), ("a2", "c2", 4, 6, ("G2", "G3")),
                  ("a2", "c2", 4, 8, ("G2", "G4")), ("a1", "c1", 2, 10, ("G1", "G5")))


def example_rule(operator: str, consume: str) -> str:
    return f"""PREFIX : <http://ex/>
CONSTRUCT {{ ?x :then ?z }}
WHERE {{ MATCH CONSUME {consume} {{ EVENT <{W1}> {{ ?x :p ?y }} {operator} EVENT <{W2}> {{ ?y :q ?z }} }} }}"""


def upload_seed_001(http: Http, names: set[str]) -> None:
    def triple(text: str) -> str:
        return " ".join(f"<http://ex/{term}>" for term in text.split())
    http.upload("s", "".join(element(name, f"1970-01-01T00:00:{at:02d}Z", *map(triple, triples))
                             for name, at, triples in SEED_001 if name in names))


def example_derived(http: Http, stream: str) -> set[tuple[object, ...]]:
    """Each output element as (x, z, start second, end second, constituent names)."""
    rows = http.select(stream, f"""PREFIX : <http://ex/> PREFIX ev: <{EV}> PREFIX prov: <{PROV}>
        SELECT ?g ?x ?z ?start ?end (GROUP_CONCAT(STRAFTER(STR(?e), "http://ex/"); separator=" ") AS ?from)
        WHERE {{ GRAPH ?g {{ ?x :then ?z . ?g ev:start ?start ; ev:end ?end ; prov:wasDerivedFrom ?e }} }}
        GROUP BY ?g ?x ?z ?start ?end""")
    return {(r["x"].removeprefix("http://ex/"), r["z"].removeprefix("http://ex/"), int(r["start"][17:19]),
             int(r["end"][17:19]), tuple(sorted(r["from"].split()))) for r in rows}


EXAMPLES_10_AND_11 = [  # (operator, consumption, new at 8, new at 10), worked out in docs/events.md's table
    ("SEQ", "UNRESTRICTED", {E1, E2, E3}, {E4}),
    # Eq. 10: the earliest E2 events with a partner are the two at 6, each with its first partner; G1 G2 (w1) and
    # G3 (w2) are consumed, so at 10 b2 q c2 @8 and b1 q c1 @10 have no p before them (Example 11)
    ("SEQC", "CHRONOLOGICAL", {E1, E2}, set()),
    # Eq. 11: the latest E2 event with a partner is b2 q c2 @8, with its last partner a2 @4 (G2, G4 consumed); at
    # 10 the latest is b1 q c1 @10, whose partner a1 @2 was never used
    ("SEQR", "RECENT", {E3}, {E4}),
    # Eq. 9: LAST E1 = a2 @4 before LAST E2 = b2 q c2 @8; at 10 both lasts are at 10
    ("SEQN", "UNRESTRICTED", {E3}, set()),
]


def test_examples_10_and_11_evaluated_at_8_and_then_10(http: Http) -> None:
    http.put_stream("s")
    for operator, consume, _, _ in EXAMPLES_10_AND_11:
        status, reply = http.put_rule(operator.lower(), example_rule(operator, consume), f"{operator.lower()}-out",
                                      evaluate=AT_8_AND_10)
        assert status == 201, reply
        assert reply["events"]["evaluate"] == AT_8_AND_10  # type: ignore[index]
    upload_seed_001(http, {"G1", "G2", "G3", "G4", "G5"})
    for operator, _, at_8, _ in EXAMPLES_10_AND_11:  # G5 @10 is past 8: the evaluation at 8 is done, not the one at 10
        http.wait_processed(operator.lower(), "s", 5)
        reply = http.wait_evaluated(operator.lower(), "1970-01-01T00:00:08Z")
        assert reply["events"]["evaluated"] == "1970-01-01T00:00:08Z", reply  # type: ignore[index]
        assert example_derived(http, f"{operator.lower()}-out") == at_8, operator
    http.punctuate("s", "1970-01-01T00:00:11Z")  # stream time past 10: every element at 10 is in
    for operator, _, at_8, at_10 in EXAMPLES_10_AND_11:
        http.wait_evaluated(operator.lower(), "1970-01-01T00:00:10Z")
        assert example_derived(http, f"{operator.lower()}-out") == at_8 | at_10, operator


def test_content_change_evaluation_differs_from_evaluations_at_8_and_10(http: Http) -> None:
    """Without evaluate=, SEQr + RECENT evaluates at every element: at 6 the latest E2 events with a partner are both
    q-triples of G3, each with its last partner (e1, e2; G1 G2 G3 consumed); at 8 b2 q c2 has no p left; at 10
    b1 q c1 neither."""
    http.put_stream("s")
    assert http.put_rule("seqr", example_rule("SEQR", "RECENT"), "seqr-out")[0] == 201
    upload_seed_001(http, {"G1", "G2", "G3", "G4", "G5"})
    http.wait_processed("seqr", "s", 5)
    assert example_derived(http, "seqr-out") == {E1, E2}


def test_consumption_is_carried_across_a_restart(tmp_path: Path) -> None:
    """SEQ + CONSUME CHRONOLOGICAL at 8: e1 e2 e3, consuming G1 G2 in w1 and G3 G4 in w2. At 10, after a restart,
    w1 holds only a3 p b3 and w2 only b1 q c1: nothing (unrestricted, e4 is new at 10)."""
    config = ServerConfig(tmp_path / "data", max_body_bytes=1_000_000)
    first = http_app(config)
    http = flask_http(first.test_client())
    http.put_stream("s")
    for name, consume in (("consumed", "CHRONOLOGICAL"), ("all", "UNRESTRICTED")):
        assert http.put_rule(name, example_rule("SEQ", consume), f"{name}-out", evaluate=AT_8_AND_10)[0] == 201
    upload_seed_001(http, {"G1", "G2", "G3", "G4", "G5"})
    for name in ("consumed", "all"):
        http.wait_processed(name, "s", 5)
        http.wait_evaluated(name, "1970-01-01T00:00:08Z")
        assert example_derived(http, f"{name}-out") == {E1, E2, E3}
    close(first)
    second = http_app(config)
    http = flask_http(second.test_client())
    http.punctuate("s", "1970-01-01T00:00:11Z")
    for name in ("consumed", "all"):
        http.wait_evaluated(name, "1970-01-01T00:00:10Z")
    assert example_derived(http, "consumed-out") == {E1, E2, E3}
    assert example_derived(http, "all-out") == {E1, E2, E3, E4}
    assert len(http.select("all-out", OUTPUT_QUERY)) == 4  # the evaluation at 8 was not made again
    close(second)


def test_event_rule_options_are_checked(http: Http) -> None:
    http.put_stream("s")
    for options, word in (({"evaluate": "R/HEAD/PT2S"}, "evaluate="), ({"evaluate": "PT2S"}, "evaluate="),
                          ({"start": "yesterday"}, "from="), ({"depth": "0"}, "depth=")):
        status, reply = http.put_rule("bad", seq_rule("SEQ", "UNRESTRICTED"), "out", **options)
        assert status == 400 and word in str(reply), (options, reply)
    window_rule = """CONSTRUCT { ?x ?p ?y } WHERE {
      SERVICE <http://localhost/streams/s?WINDOWS=R/HEAD/PT05M/PT01M> { GRAPH ?g { ?x ?p ?y } } }"""
    status, reply = http.put_rule("windows", window_rule, "out", evaluate=AT_8_AND_10)
    assert status == 400 and "options of event rules" in str(reply), reply
    assert http.rule("bad")[0] == 404 and http.rule("windows")[0] == 404


# --- history: a rule registered after the elements it could match (from=) ---------------------------------------------

def test_a_rule_replays_history_from_a_time_or_an_ordinal(http: Http) -> None:
    """Registered after G1 … G5 are in, over the whole stream: without from= it sees none of them (test above); with
    from=<second 1> all five, as if it had been there (UNRESTRICTED's four matches); with from=4 it sees G4 and
    G5 only: a p b @4 then b q e @5."""
    http.put_stream("s")
    upload_s(http, {"G1", "G2", "G3", "G4", "G5"})
    assert http.put_rule("none", seq_rule("SEQ", "UNRESTRICTED"), "none-out")[0] == 201
    assert http.put_rule("all", seq_rule("SEQ", "UNRESTRICTED"), "all-out", start=SECOND.format(1))[0] == 201
    assert http.put_rule("late", seq_rule("SEQ", "UNRESTRICTED"), "late-out", start="4")[0] == 201
    for name in ("none", "all", "late"):
        http.wait_processed(name, "s", 5)
    assert http.select("none-out", OUTPUT_QUERY) == []
    assert derived(http, "all-out") == UNRESTRICTED
    assert derived(http, "late-out") == {("e", 4, 5, ("G4", "G5"))}


# --- consumption: whole elements, not the statements used (a deliberate difference from seed 001) ------------------

def test_consumption_takes_the_whole_element(http: Http) -> None:
    """G1 @1 {a1 p b1, a9 p b9}  G2 @2 {b1 q c1}  G3 @3 {b9 q c9}; SEQC + CONSUME CHRONOLOGICAL at every element.
    At 2: b1 q c1 with its first partner a1 p b1: (a1, c1) on [1, 2]; G1 and G2 are consumed. At 3: the seed, which
    consumes the statements used, still has a9 p b9 and would match (a9, c9) on [1, 3]; here G1 is gone whole, so
    nothing."""
    http.put_stream("s")
    assert http.put_rule("chrono", seq_rule("SEQC", "CHRONOLOGICAL"), "chrono-out")[0] == 201
    for name, second, triples in (("G1", 1, ["a1 p b1", "a9 p b9"]), ("G2", 2, ["b1 q c1"]), ("G3", 3, ["b9 q c9"])):
        http.upload("s", element(name, SECOND.format(second),
                                 *(" ".join(f"<http://ex/{term}>" for term in t.split()) for t in triples)))
    http.wait_processed("chrono", "s", 3)
    rows = http.select("chrono-out", f"""PREFIX : <http://ex/> PREFIX ev: <{EV}>
        SELECT ?x ?z WHERE {{ GRAPH ?g {{ ?x :then ?z }} }}""")
    assert rows == [{"x": "http://ex/a1", "z": "http://ex/c1"}]


# --- recursion: an event rule whose output feeds its own input, bounded by depth= ------------------------------------

ECHO_RULE = """PREFIX : <http://ex/>
CONSTRUCT { ?x :p ?y } WHERE { MATCH { EVENT <streams/s> { ?x :p ?y } } }"""


def test_a_recursive_event_rule_stops_at_its_depth_bound(http: Http) -> None:
    """The rule copies every p-triple of s into s: without a bound it would never stop. G1 @1 {a p b} (depth 0)
    gives a derived event of depth 1 at 1 s + 1 µs (strictly after its element: the stream's time + 1 µs), which
    gives depth 2 at + 2 µs, then depth 3 at + 3 µs; its match would derive depth 4 > depth=3: not emitted, and the
    rule's status says so. s ends with 4 elements."""
    http.put_stream("s")
    status, reply = http.put_rule("echo", ECHO_RULE, "s", depth="3")
    assert status == 201, reply
    upload_s(http, {"G1"})
    reply = http.wait_processed("echo", "s", 4)
    deadline = time.monotonic() + 20
    while reply["events"]["depth"]["stopped"] < 1:  # type: ignore[index]
        assert time.monotonic() < deadline, reply
        time.sleep(0.05)
        reply = http.rule("echo")[1]  # type: ignore[assignment]
    assert reply["events"]["depth"] == {"bound": 3, "stopped": 1}  # type: ignore[index]
    assert reply["events"]["matches"] == 3  # type: ignore[index]
    assert any("past the bound 3" in line for line in reply["log"]), reply  # type: ignore[index]
    rows = http.select("s", f"""PREFIX ev: <{EV}> PREFIX prov: <{PROV}>
        SELECT ?t ?depth WHERE {{ ?g prov:generatedAtTime ?t OPTIONAL {{ GRAPH ?g {{ ?g ev:depth ?depth }} }} }}""")
    assert sorted((r["t"], r.get("depth", "0")) for r in rows) == [
        ("2024-01-01T00:00:01.000001Z", "1"), ("2024-01-01T00:00:01.000002Z", "2"),
        ("2024-01-01T00:00:01.000003Z", "3"), ("2024-01-01T00:00:01Z", "0")]
    time.sleep(0.3)
    assert len(http.select("s", OUTPUT_QUERY.replace("ev:start ?start ; ev:end ?end", "ev:depth ?d"))) == 3



def test_a_short_step_across_a_long_gap_evaluates_a_bounded_number_of_times() -> None:
    # evaluate=R/T/PT0.000001S and two elements a day apart: 86,400,000,000 evaluation times lie between them. At most
    # MAX_EVALUATIONS are evaluated (the first ones and the last before the element), the rest counted as left out.
    from sparql_ext.event_schedule import MAX_EVALUATIONS, EvaluationTimes

    day = 86_400_000_000
    started = time.monotonic()
    times, skipped = EvaluationTimes(0, 1).due(0, day)
    assert time.monotonic() - started < 1
    assert len(times) == MAX_EVALUATIONS and times[:2] == [1, 2] and times[-1] == day - 1
    assert skipped == (day - 1) - MAX_EVALUATIONS  # times 1 … day − 1, minus those evaluated
    assert EvaluationTimes(0, 2_000_000).due(8_000_000, 15_000_000) == ([10_000_000, 12_000_000, 14_000_000], 0)
