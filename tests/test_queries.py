"""RSP-QL and C-SPARQL registrations over HTTP (issue 32): /queries, their results as continuous responses, durability,
refusals, seed 004's listings, CSRBench q1–q7 in both languages through the existing oracle, RSP4J's CityBench
queries. In-process: windows are materialized by hand, as the pipeline commits them (the reference semantics of
``sparql_ext.windowing``, which the Spark pipeline is tested against element for element)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from concentrator.compose import http_app
from conformance.csrbench import CONFIGURATIONS, Benchmark, Report, Response, json_term_key, judge_ours, micros_of
from protocol.services import ServerConfig, services_of
from sparql_ext.windowing import resolve, windows
from sparql_ext.windowref import parse_window_ref
from store.windows import PipelineState, new_revision

ROOT = Path(__file__).resolve().parents[1]
SUITES = ROOT / "conformance" / "suites"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
STAMP = "^^<http://www.w3.org/2001/XMLSchema#dateTime>"
SPARQL = "application/sparql-query"
HR_QUERY = """PREFIX ex: <http://ex/>
REGISTER RSTREAM <http://ex/out> AS
SELECT ?o ?v
FROM NAMED WINDOW ex:w ON ex:hr [RANGE PT5M STEP PT5M]
WHERE { WINDOW ex:w { ?o ex:hr ?v } }"""


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return http_app(ServerConfig(tmp_path / "data", max_body_bytes=10_000_000))


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def put(client: FlaskClient, name: str, text: str, **params: str) -> tuple[int, str]:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    answer = client.put(f"/queries/{name}" + (f"?{query}" if query else ""), data=text, content_type=SPARQL)
    return answer.status_code, answer.get_data(as_text=True)


def feed(client: FlaskClient, stream: str, elements: list[tuple[str, str]]) -> None:
    """Elements (time, Turtle content) appended to ``stream``, graph names ``http://ex/<stream>/<n>``."""
    body = "".join(f'<http://ex/{stream}/{n}> <{PROV}> "{time}"{STAMP} .\n<http://ex/{stream}/{n}> {{ {turtle} }}\n'
                   for n, (time, turtle) in enumerate(elements))
    assert client.post(f"/streams/{stream}", data=body, content_type="application/trig").status_code == 200


def materialize(app: Flask, stream_name: str, sequence: str, watermark: int) -> None:
    """Commit every complete window of ``sequence`` up to ``watermark`` (µs) as the pipeline would."""
    stream = services_of(app).streams.get(stream_name)
    spec = resolve(parse_window_ref(stream.windows.sequence(sequence).ref), stream)  # type: ignore[union-attr]
    for window in windows(spec, stream, watermark):
        runs = ((window.elements[0], window.elements[-1]),) if window.elements else ()
        state = PipelineState(batch=stream.windows.state.batch + 1, next_index={sequence: window.index + 1})
        assert stream.windows.commit(state.batch, [new_revision(sequence, window.index, window.start, window.end,
                                                                runs)], state)


def results(client: FlaskClient, name: str, count: int, start: int = 0) -> list[tuple[dict[str, str], str]]:
    """The first ``count`` parts (headers, body) of a query's results, as multipart with SPARQL JSON."""
    answer = client.get(f"/queries/{name}/results?packaging=multipart&format=application/sparql-results%2Bjson"
                        f"&from={start}", buffered=False)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    boundary = answer.headers["Content-Type"].split("boundary=")[1].encode()
    data, chunks = b"", iter(answer.response)
    while data.count(b"--" + boundary) < count + 1:
        data += next(chunks)
    answer.close()
    parts = []
    for part in data.split(b"--" + boundary)[1:count + 1]:
        head, _, body = part.strip().partition(b"\r\n\r\n") if b"\r\n\r\n" in part else part.strip().partition(
            b"\n\n")
        headers = dict(line.split(": ", 1) for line in head.decode().splitlines() if ": " in line)
        parts.append((headers, body.decode().strip()))
    return parts


def rows(body: str) -> list[dict[str, str]]:
    return sorted(({k: v["value"] for k, v in b.items()} for b in json.loads(body)["results"]["bindings"]),
                  key=lambda r: sorted(r.items()))


# -- registering, describing, refusing -----------------------------------------------------------------------------

def test_register_describe_list_delete(client: FlaskClient) -> None:
    assert client.put("/streams/hr?alias=http://ex/hr").status_code == 201
    status, body = put(client, "q1", HR_QUERY, t0="2016-06-20T10:00:00Z")
    assert status == 201, body
    described = json.loads(body)
    assert described["language"] == "rsp-ql" and described["form"] == "SELECT" and described["rule"] is None
    assert described["report"] == "non-empty-content,window-close" and described["operator"] == "rstream"
    [window] = described["windows"]
    assert (window["window"], window["stream"]) == ("http://ex/w", "hr")
    assert window["windows"] == "R/2016-06-20T10:00:00Z/PT5M"
    assert "SERVICE <http://localhost/streams/hr?WINDOWS=R/2016-06-20T10:00:00Z/PT5M> { SELECT ?o ?v WHERE { " \
           "GRAPH ?_g1 { ?o ex:hr ?v } } }" in described["compiled"]
    assert client.get("/streams/hr/windows").get_json()["sequences"][0]["id"] == window["sequence"]
    assert [q["name"] for q in client.get("/queries").get_json()] == ["q1"]
    assert client.get("/queries/q1", headers={"Accept": SPARQL}).get_data(as_text=True) == HR_QUERY
    assert put(client, "q1", HR_QUERY, t0="2016-06-20T10:00:00Z")[0] == 204
    assert client.delete("/queries/q1").status_code == 204
    assert client.get("/queries/q1").status_code == 404


@pytest.mark.parametrize(("edit", "status", "message"), [
    (("?o ex:hr ?v }", "?o ex:hr ?v "), 400, "line 5 column 7: '{' is never closed"),
    (("WINDOW ex:w {", "WINDOW ex:z {"), 400, "line 5 column 16: WINDOW <http://ex/z> names no window"),
    (("ON ex:hr", "ON ex:nope"), 400, "reads stream <http://ex/nope>, which is not a stream of this server"),
    (("SELECT ?o ?v", "SELECT ?o ?v ?"), 400, "line 3 column 14"),
    (("[RANGE PT5M STEP PT5M]", "[RANGE P1M]"), 400, "'P1M' is not an xsd:duration"),
    (("SELECT ?o ?v", "DESCRIBE ?o"), 400, "DESCRIBE is not supported"),
])
def test_bad_registrations_are_refused_and_register_nothing(client: FlaskClient, edit: tuple[str, str], status: int,
                                                            message: str) -> None:
    client.put("/streams/hr?alias=http://ex/hr")
    code, body = put(client, "bad", HR_QUERY.replace(*edit))
    assert code == status and message in body, body
    assert client.get("/queries").get_json() == []
    assert client.get("/streams/hr/windows").get_json()["sequences"] == []


def test_a_construct_into_a_stream_is_a_rule_and_a_cycle_is_409(client: FlaskClient) -> None:
    client.put("/streams/in")
    text = """PREFIX : <http://ex/>
REGISTER ISTREAM <streams/counts> AS
CONSTRUCT { :topic :count ?n }
FROM NAMED WINDOW :w ON <streams/in> [RANGE PT10M STEP PT10M]
WHERE { WINDOW :w { SELECT (COUNT(*) AS ?n) WHERE { ?m :hasTopic ?t } } }"""
    status, body = put(client, "counts", text)
    assert status == 201, body
    described = json.loads(body)
    assert (described["rule"], described["output"], described["operator"]) == ("query.counts", "counts", "istream")
    rule = client.get("/rules/query.counts", headers={"Accept": "application/json"}).get_json()
    assert rule["output"] == "counts" and rule["operator"] == "istream"
    assert [i["stream"] for i in rule["inputs"]] == ["in"]
    assert client.get("/queries/counts/results").status_code == 409  # its results are the stream counts
    back = text.replace("<streams/counts>", "<streams/in>").replace("ON <streams/in>", "ON <streams/counts>")
    status, body = put(client, "loop", back)
    assert status == 409 and "cycle" in body
    assert [q["name"] for q in client.get("/queries").get_json()] == ["counts"]
    assert client.delete("/queries/counts").status_code == 204
    assert client.get("/rules/query.counts").status_code == 404


def test_registrations_survive_a_restart(tmp_path: Path) -> None:
    config = ServerConfig(tmp_path / "data", max_body_bytes=1_000_000)
    first = http_app(config)
    client = first.test_client()
    client.put("/streams/hr?alias=http://ex/hr")
    described = json.loads(put(client, "q1", HR_QUERY)[1])
    services_of(first).close()
    again = http_app(config).test_client()
    assert again.get("/queries/q1").get_json()["windows"] == described["windows"]


def test_put_many_is_all_or_none(client: FlaskClient) -> None:
    client.put("/streams/hr?alias=http://ex/hr")
    batch = {"queries": [{"name": f"q{i}", "query": HR_QUERY} for i in range(3)]}
    answer = client.put("/queries", json=batch)
    assert answer.status_code == 201 and answer.get_json()["created"] == ["q0", "q1", "q2"]
    batch["queries"].append({"name": "bad", "query": HR_QUERY.replace("ex:hr [", "ex:nope [")})
    batch["queries"][0]["name"] = "q9"
    assert client.put("/queries", json=batch).status_code == 400
    assert [q["name"] for q in client.get("/queries").get_json()] == ["q0", "q1", "q2"]


# -- results -------------------------------------------------------------------------------------------------------

def test_results_window_by_window_and_resumed(app: Flask, client: FlaskClient) -> None:
    client.put("/streams/hr?alias=http://ex/hr")
    described = json.loads(put(client, "q1", HR_QUERY, t0="2016-06-20T10:00:00Z")[1])
    feed(client, "hr", [("2016-06-20T10:01:00Z", "<http://ex/o1> <http://ex/hr> 71 ."),
                        ("2016-06-20T10:02:00Z", "<http://ex/o2> <http://ex/hr> 72 ."),
                        ("2016-06-20T10:06:00Z", "<http://ex/o6> <http://ex/hr> 76 ."),
                        ("2016-06-20T10:16:00Z", "<http://ex/o16> <http://ex/hr> 86 .")])
    materialize(app, "hr", described["windows"][0]["sequence"], 1_466_417_760_000_000)  # 10:16: windows 0, 1, 2
    parts = results(client, "q1", 2)
    assert [(h["Window-Index"], h["Window-Start"]) for h, _ in parts] == [("0", "2016-06-20T10:00:00Z"),
                                                                           ("1", "2016-06-20T10:05:00Z")]
    assert rows(parts[0][1]) == [{"o": "http://ex/o1", "v": "71"}, {"o": "http://ex/o2", "v": "72"}]
    assert rows(parts[1][1]) == [{"o": "http://ex/o6", "v": "76"}]
    # window 2 [10:10, 10:15) holds no element: non-empty-content (the default) skips it; resumed after window 1
    answer = client.get("/queries/q1/results?packaging=multipart&after=1", buffered=False)
    assert answer.headers["Window-From"] == "2"
    answer.close()


def events(client: FlaskClient, name: str, last: str, query: str = "",
           headers: dict[str, str] | None = None) -> tuple[str, list[tuple[str, list[str]]]]:
    """A query's results as server-sent events in CSV, read up to the window event with id ``last``: the response's
    ``Window-From`` and each window event's (id, data lines)."""
    answer = client.get(f"/queries/{name}/results?format=text/csv{query}", buffered=False,
                        headers={"Accept": "text/event-stream", **(headers or {})})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    text, chunks, found = "", iter(answer.response), []
    while last not in [index for index, _ in found]:
        text += next(chunks).decode()
        found = []
        for block in text.split("\n\n")[:-1]:  # complete events only
            fields = [line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")]
            if ["event", "window"] in fields:
                found.append((dict(f for f in fields if f[0] == "id")["id"], [v for k, v in fields if k == "data"]))
    answer.close()
    return answer.headers["Window-From"], found


def test_results_as_csv_server_sent_events_resumed_after_a_window(app: Flask, client: FlaskClient) -> None:
    """Tumbling 5-minute windows from t0 10:00: 0 [10:00, 10:05) {71, 72}, 1 [10:05, 10:10) {76}, 2 [10:10, 10:15)
    no element (not reported: the default report policy skips empty windows), 3 [10:15, 10:20) {86}; the element
    at 10:21 completes window 3."""
    client.put("/streams/hr?alias=http://ex/hr")
    described = json.loads(put(client, "csv", HR_QUERY, t0="2016-06-20T10:00:00Z")[1])
    feed(client, "hr", [("2016-06-20T10:01:00Z", "<http://ex/o1> <http://ex/hr> 71 ."),
                        ("2016-06-20T10:02:00Z", "<http://ex/o2> <http://ex/hr> 72 ."),
                        ("2016-06-20T10:06:00Z", "<http://ex/o6> <http://ex/hr> 76 ."),
                        ("2016-06-20T10:16:00Z", "<http://ex/o16> <http://ex/hr> 86 ."),
                        ("2016-06-20T10:21:00Z", "<http://ex/o21> <http://ex/hr> 91 .")])
    materialize(app, "hr", described["windows"][0]["sequence"], 1_466_418_060_000_000)  # 10:21: windows 0 … 3
    window_1 = ("1", ["o,v", "http://ex/o6,76"])
    window_3 = ("3", ["o,v", "http://ex/o16,86"])
    [(zero, lines), first] = events(client, "csv", "1", "&from=0")[1]  # from the first window
    assert (zero, lines[0], sorted(lines[1:])) == ("0", "o,v", ["http://ex/o1,71", "http://ex/o2,72"])
    assert first == window_1
    assert events(client, "csv", "3", "&after=0") == ("1", [window_1, window_3])
    # an EventSource reconnecting repeats its URL (after=0) and sends the id of the last event it received: that wins
    assert events(client, "csv", "3", "&after=0", {"Last-Event-ID": "1"}) == ("2", [window_3])
    assert events(client, "csv", "3", "&after=2") == ("3", [window_3])


SEED_004 = """PREFIX : <http://debs2015.org/streams/>
REGISTER RSTREAM <http://debs2015.org/streams/out> AS
SELECT ?t (?totalShort / ?totalLong AS ?ratio)
FROM NAMED WINDOW :swin ON :in [RANGE PT10M STEP PT10M]
FROM NAMED WINDOW :lwin ON :in [RANGE PT60M STEP PT10M]
WHERE {
  WINDOW :lwin { SELECT ?t (COUNT(?m) AS ?totalLong) WHERE { ?m :hasTopic ?t } GROUP BY ?t }
  WINDOW :swin { SELECT ?t (COUNT(?m) AS ?totalShort) WHERE { ?m :hasTopic ?t } GROUP BY ?t }
  FILTER(?totalShort / ?totalLong > 0.6)
}"""


def test_seed_004_emerging_topics(app: Flask, client: FlaskClient) -> None:
    """Seed 004's listing 6 (two windows over one stream, a sub-SELECT in each), answers worked out by hand: in
    [10:00, 11:00) topic a is posted 4 times (none in the last 10 minutes), b twice (both in [10:50, 11:00)), c twice
    (once there): short/long is 0 for a, 1 for b, 0.5 for c; only b passes 0.6."""
    client.put("/streams/in?alias=http://debs2015.org/streams/in")
    described = json.loads(put(client, "emerging", SEED_004, t0="2016-06-20T10:00:00Z")[1])
    posts = [("10:05", "a"), ("10:15", "a"), ("10:20", "c"), ("10:25", "a"), ("10:35", "a"), ("10:52", "b"),
             ("10:55", "b"), ("10:57", "c")]
    feed(client, "in", [(f"2016-06-20T{at}:00Z", f"<http://ex/m{n}> <http://debs2015.org/streams/hasTopic> "
                         f"<http://ex/{topic}> .") for n, (at, topic) in enumerate(posts)])
    client.post("/streams/in?punctuation=2016-06-20T11:00:00Z")
    short, long = (w["sequence"] for w in described["windows"])
    materialize(app, "in", long, 1_466_420_400_000_000)  # 11:00: lwin window 0
    materialize(app, "in", short, 1_466_420_400_000_000)  # swin windows 0 … 5
    [(headers, body)] = results(client, "emerging", 1, start=5)  # swin [10:50, 11:00), the driving window
    assert headers["Window-Start"] == "2016-06-20T10:50:00Z"
    assert rows(body) == [{"t": "http://ex/b", "ratio": "1"}]


def test_seed_004_c_sparql_counterparts_register(client: FlaskClient) -> None:
    """Listing 4 (Q1 of the C-SPARQL network: topic counts of the last 120 minutes into :longStream) and its CQELS
    counterpart written in RSP-QL (ISTREAM, a named window)."""
    client.put("/streams/in?alias=http://debs2015.org/streams/in")
    c_sparql = """REGISTER STREAM longStream AS
PREFIX : <http://debs2015.org/streams/>
CONSTRUCT { ?t :totalLong ?totalLong }
FROM STREAM :in [RANGE 120m STEP 10m]
WHERE { SELECT ?t (COUNT(?m) AS ?totalLong) WHERE { ?m :hasTopic ?t } GROUP BY ?t }"""
    status, body = put(client, "q1cs", c_sparql)
    assert status == 201, body
    described = json.loads(body)
    assert (described["language"], described["rule"], described["output"]) == ("c-sparql", "query.q1cs", "longStream")
    assert described["windows"][0]["windows"].endswith("/PT2H/PT10M")
    cqels = SEED_004.replace("REGISTER RSTREAM", "REGISTER ISTREAM")
    status, body = put(client, "cqels", cqels)
    assert status == 201 and json.loads(body)["operator"] == "istream", body


# -- CSRBench q1–q7, in C-SPARQL and RSP-QL, through the existing oracle ----------------------------------------------

@pytest.mark.slow  # ≈ 1.8 s: 14 registrations, 34 elements, the oracle's evaluations
def test_csrbench_in_c_sparql_and_rsp_ql_is_correct_for_the_oracle(app: Flask, client: FlaskClient) -> None:
    bench = Benchmark()
    client.put("/streams/csrbench?alias=http://www.cwi.nl/SRBench/observations")
    names = []
    for number in range(1, 8):
        for language, suffix in (("csparql", "csparql"), ("rspql", "rspql")):
            text = (SUITES / "csrbench" / language / f"q{number}.{suffix}").read_text()
            status, body = put(client, f"{language}{number}", text, t0="1970-01-01T00:00:00Z")
            assert status == 201, body
            names.append((number, f"{language}{number}"))
    for second in range(34):
        data = (SUITES / "csrbench" / "data" / f"data_{second:02d}.ttl").read_bytes()
        answer = client.post(f"/streams/csrbench?graph=http://csrbench/element/{second:02d}"
                             f"&timestamp=1970-01-01T00:00:{second:02d}Z", data=data, content_type="text/turtle")
        assert answer.status_code == 200
    for query in client.get("/queries").get_json():
        materialize(app, "csrbench", query["windows"][0]["sequence"], 50_000_000)
    csparql = CONFIGURATIONS[0]
    for number, name in names:
        expected = judge_ours(bench, Response(str(number), csparql, {}))  # the oracle's admitted outputs, t0 = 0
        count = len(expected.admitted[0].reports)
        parts = results(client, name, count)
        reports = tuple(Report(micros_of(h["Window-End"]), Counter(
            tuple(sorted((n, json_term_key(t)) for n, t in binding.items()))
            for binding in json.loads(body)["results"]["bindings"])) for h, body in parts)
        verdict = judge_ours(bench, Response(str(number), csparql, {}, list(reports)))
        assert verdict.correct, (name, verdict.detail())


# -- RSP4J's CityBench queries ---------------------------------------------------------------------------------------

CITYBENCH = sorted((SUITES / "rsp4j-citybench").glob("*.rspql"))


def test_every_citybench_query_registers_unchanged(client: FlaskClient) -> None:
    ses = "http://www.insight-centre.org/dataset/SampleEventService#"
    streams = sorted({line.split("ses:")[-1].split()[0] for path in CITYBENCH for line in path.read_text().splitlines()
                      if "FROM NAMED WINDOW" in line})
    for name in streams:
        assert client.put(f"/streams/{name}?alias={ses.replace('#', '%23')}{name}").status_code == 201
    assert len(CITYBENCH) == 11
    for path in CITYBENCH:
        status, body = put(client, path.stem, path.read_text())
        if path.name == "q12.rspql":  # SELECT ?service ?p … GROUP BY ?service: ?p is neither grouped nor aggregated
            assert status == 400 and "The SELECT contains a variable that is unbound" in body, body
        else:
            assert status == 201, (path.name, body)
    assert len(client.get("/queries").get_json()) == 10


@pytest.mark.slow  # a server process (no pipeline)
def test_concentrator_register_puts_a_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    import requests

    from conformance.server import running_server

    path = tmp_path / "hot.rspql"
    path.write_text(HR_QUERY)
    with running_server(["--no-pipeline"]) as server:
        assert requests.put(f"{server.url}/streams/hr", params={"alias": "http://ex/hr"}, timeout=30).status_code == 201
        done = subprocess.run([sys.executable, "-m", "concentrator", "register", str(path), server.url],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        url = f"{server.url}/queries/hot"
        assert done.stdout.strip() == f"registered {url}: results at {url}/results"
        bad = tmp_path / "bad.rspql"
        bad.write_text(HR_QUERY.replace("ON ex:hr", "ON ex:none"))
        done = subprocess.run([sys.executable, "-m", "concentrator", "register", str(bad), server.url],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "400: query 'bad'" in done.stderr
