"""Seed 000's last two example queries (EP-SPARQL, queries (5) and (6)): the running count and sum of ACME's stock
price over 10 days, kept by a CONSTRUCT rule whose output feeds back into the stream it reads (recursion), and the
SELECT that outputs the average once the 10 days are exceeded. The seed's forms, reconstructed from its text, and
where these differ from it (docs/events.md, "Seed 000's aggregation over a sliding window"):

- the seed's aggregate points are events on an interval (from the first price they count to the last); here a
  derived element is an instant (the match's end, moved 1 µs past the stream's time), so a point carries the start of
  its window as ``:since`` and ``getDURATION()`` is written ``getENDTIME() - ?since``;
- the recursion needs a first point (count 0, sum 0), which the seed leaves out: ``:origin`` below;
- query (6) in the seed reads ``{ price } SEQ { point }`` and selects ``?sum / ?count``, which its pattern does not
  bind; here it reads ``{ point } SEQ { price }`` (the order of query (5): the first price the window cannot take)
  and selects ``?prevsum / ?prevcount``.

In-process (the Flask test client), no Spark."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.test_event_rules import EV, PROV, Http, day, element, flask_http

PREFIXES = """PREFIX : <http://ex/>
PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>
"""
S = "<http://localhost/streams/prices>"  # the stream the prices and the aggregate points share


def window_pattern(duration_test: str, *, price_first: bool = False) -> str:
    """Seed 000's pattern of queries (5) and (6): the price right after a point (none in between: the
    EQUALSOPTIONAL binds ?inbetween when there is one) and a test of the window's duration."""
    point = f"EVENT {S} {{ ?point :hasCount ?prevcount ; :hasSum ?prevsum ; :since ?since }}"
    price = f"EVENT {S} {{ :ACME :hasStockPrice ?price }}"
    between = f"EVENT {S} {{ :ACME :hasStockPrice ?inbetween }}"
    first, last = (price, point) if price_first else (point, price)
    return f"""MATCH {{
    {{ {first}
      SEQ {last} }}
    EQUALSOPTIONAL
    {{ {first}
      SEQ {between}
      SEQ {last} }}
    FILTER (!BOUND(?inbetween) && {duration_test})
  }}"""


# Query (5): the seed's SELECT subquery (its expressions as SPARQL 1.1 writes them) under a CONSTRUCT of a fresh
# point; its output goes into the stream it reads.
QUERY_5 = PREFIXES + f"""CONSTRUCT {{ _:aaa :hasCount ?count ; :hasSum ?sum ; :since ?since }}
WHERE {{
  {{ SELECT (?prevcount + 1 AS ?count) (?prevsum + ?price AS ?sum) ?since
    WHERE {{
  {window_pattern('getENDTIME() - ?since < "P10D"^^xsd:duration')}
    }} }}
}}"""

# Query (6): the average once the window's duration is exceeded.
QUERY_6 = PREFIXES + f"""SELECT (?prevsum / ?prevcount AS ?average)
WHERE {{
  {window_pattern('getENDTIME() - ?since > "P10D"^^xsd:duration')}
}}"""
# Query (6) as the seed orders it: a price, then a point with no price in between.
QUERY_6_AS_WRITTEN = PREFIXES + f"""SELECT (?prevsum / ?prevcount AS ?average)
WHERE {{
  {window_pattern('getENDTIME() - ?since > "P10D"^^xsd:duration', price_first=True)}
}}"""

# The stream, one element per request (ordinal, day, content); points are the rule's outputs:
#   1 day 1   point0 (:origin, uploaded): count 0, sum 0, since day 1 (depth 0)
#   2 day 2   ACME 100   point0 → 100, nothing in between, 1 day:   3 point1: count 1, sum 100 (depth 1)
#   4 day 4   ACME 110   point1 → 110 (point0 → 110 has 100 in between):  5 point2: count 2, sum 210
#   6 day 5   BETA 40    not ACME's: no point, and not "in between" either
#   7 day 7   ACME 90    point2 → 90 (BETA's 40 between them is no ACME price):  8 point3: count 3, sum 300
#   9 day 9   ACME 120   point3 → 120, 8 days since day 1:  10 point4: count 4, sum 420 (depth 4)
#  11 day 13  ACME 130   point4 → 130 spans 12 days ≥ 10: no point; query (6): point4 → 130, nothing in between,
#                        12 days > 10: the average 420 / 4 = 105
#  12 day 15  ACME 95    point4 → 95 has 130 in between; no point; query (6) still answers 105 alone
PRICES = [(2, "ACME", 100), (4, "ACME", 110), (5, "BETA", 40), (7, "ACME", 90), (9, "ACME", 120),
          (13, "ACME", 130), (15, "ACME", 95)]
EXTENDS = {2, 4, 7, 9}  # the days whose price makes a new point
POINTS = {(1, 100, 1), (2, 210, 2), (3, 300, 3), (4, 420, 4)}  # (count, sum, depth), each since day 1
ORIGIN = element("origin", day(1), "<http://ex/origin> <http://ex/hasCount> 0",
                 "<http://ex/origin> <http://ex/hasSum> 0",
                 f'<http://ex/origin> <http://ex/since> "{day(1)}"^^<http://www.w3.org/2001/XMLSchema#dateTime>')


def price_element(name: str, on: int, company: str, value: int) -> str:
    return element(name, day(on), f"<http://ex/{company}> <http://ex/hasStockPrice> {value}")


def points(http: Http) -> set[tuple[int, int, int]]:
    rows = http.select("prices", f"""PREFIX : <http://ex/> PREFIX ev: <{EV}>
        SELECT ?count ?sum ?since ?depth WHERE {{ GRAPH ?g {{ ?p :hasCount ?count ; :hasSum ?sum ; :since ?since .
                                                              ?g ev:depth ?depth }} }}""")
    assert {row["since"] for row in rows} == {day(1)}, rows
    return {(int(row["count"]), int(row["sum"]), int(row["depth"])) for row in rows}


def averages(http: Http, query: str) -> list[float]:
    return sorted(float(row["average"]) for row in http.select("prices", query))


def test_seed_000_queries_5_and_6_count_sum_and_average_over_10_days(client: FlaskClient) -> None:
    http = flask_http(client)
    http.put_stream("prices")
    status, reply = http.put_rule("acme-10-days", QUERY_5, "prices", depth="20")
    assert status == 201, reply
    http.upload("prices", ORIGIN)
    http.wait_processed("acme-10-days", "prices", 1)
    ordinal = 1
    for n, (on, company, value) in enumerate(PRICES, start=1):
        # one price at a time, after the point of the one before is in: a point is stamped after the stream's time
        http.upload("prices", price_element(f"price{n}", on, company, value))
        ordinal += 2 if on in EXTENDS else 1
        http.wait_processed("acme-10-days", "prices", ordinal)
        if on == 9:  # the window spans 8 days: query (6) has no average yet
            assert averages(http, QUERY_6) == []
    reply = http.wait_processed("acme-10-days", "prices", ordinal)
    assert reply["events"]["matches"] == 4, reply  # type: ignore[index]
    assert reply["events"]["depth"] == {"bound": 20, "stopped": 0}  # type: ignore[index]
    assert points(http) == POINTS
    assert averages(http, QUERY_6) == [105.0]
    # the seed's own order (a price, then a point) pairs each point with the price it counted last, within 8 days
    # of day 1: never over 10 days, no average
    assert averages(http, QUERY_6_AS_WRITTEN) == []
    # each point is derived from the point before it and the price it adds (seed 002 DM10)
    rows = http.select("prices", f"""PREFIX : <http://ex/> PREFIX prov: <{PROV}>
        SELECT ?count ?from WHERE {{ GRAPH ?g {{ ?p :hasCount ?count . ?g prov:wasDerivedFrom ?from }} }}""")
    assert {(int(r["count"]), r["from"]) for r in rows if r["from"].startswith("http://ex/")} == {
        (1, "http://ex/origin"), (1, "http://ex/price1"), (2, "http://ex/price2"), (3, "http://ex/price4"),
        (4, "http://ex/price5")}


def test_prices_uploaded_together_are_counted_from_the_first_alone(client: FlaskClient) -> None:
    """The difference recursion makes here: a point is an element stamped when the rule appends it, after the stream's
    time. Uploaded in one request, the seven prices are all in (stream time day 15) before the first point is: point0
    → 100 gives point1 (count 1, sum 100) at day 15 + 1 µs, after every price, so no price follows it, and point0 →
    110, → 90, … each have 100 in between: one point. In the seed, point1 is an event on [day 1, day 2] and the chain
    goes on as above."""
    http = flask_http(client)
    http.put_stream("prices")
    assert http.put_rule("acme-10-days", QUERY_5, "prices", depth="20")[0] == 201
    http.upload("prices", ORIGIN)
    http.wait_processed("acme-10-days", "prices", 1)
    http.upload("prices", "".join(price_element(f"price{n}", on, company, value)
                                  for n, (on, company, value) in enumerate(PRICES, start=1)))
    reply = http.wait_processed("acme-10-days", "prices", 9)  # the origin, 7 prices, point1
    assert reply["events"]["matches"] == 1, reply  # type: ignore[index]
    assert points(http) == {(1, 100, 1)}
    rows = http.select("prices", f"""PREFIX : <http://ex/> PREFIX prov: <{PROV}>
        SELECT ?t WHERE {{ ?g prov:generatedAtTime ?t GRAPH ?g {{ ?p :hasCount 1 }} }}""")
    assert rows == [{"t": "2024-01-15T00:00:00.000001Z"}]
