"""Every query has a budget (engine/workers.py): plain queries in worker processes that are killed past their budget
(503 with Retry-After), a per-client limit (429), the queue bound, /status and /metrics while every query process is
busy; and the answers of the worker processes are those of the request thread, byte for byte."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from pyoxigraph import QueryResultsFormat, RdfFormat

from concentrator.compose import http_app
from conformance.server import RunningServer, running_server
from engine.budget import Budget, QueryLimits
from engine.errors import ClientQueryLimit, QueryBudgetExceeded, QueryQueueFull
from engine.snapshots import Snapshots
from engine.workers import QueryPool
from protocol import ServerConfig
from protocol.negotiation import GRAPH_FORMATS, RESULTS_FORMATS
from protocol.services import services_of

#: 375 million rows to count: minutes of CPU, and nothing written before the count (pyoxigraph cannot be interrupted)
HEAVY = "SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?a ?p ?x . ?b ?p ?y . ?c ?p ?z } }"
GRAPH = "http://ex/cartesian"


def cartesian(subjects: int = 500, properties: int = 3) -> str:
    """1,500 triples by default: every subject has every property."""
    return "".join(f"<http://ex/s{i}> <http://ex/p{j}> {i} .\n" for i in range(subjects) for j in range(properties))


def _app(tmp_path: Path, name: str, **options: object) -> Flask:
    return http_app(ServerConfig(tmp_path / name, **options))  # type: ignore[arg-type]


def _load(client: FlaskClient, subjects: int = 500) -> None:
    r = client.put("/store", query_string={"graph": GRAPH}, data=cartesian(subjects), content_type="text/turtle")
    assert r.status_code == 201, r.text


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# --- in the app (Flask test client) ------------------------------------------------------------------------------


@pytest.fixture
def pooled(tmp_path: Path) -> Iterator[FlaskClient]:
    app = _app(tmp_path, "pooled", query_processes=1)
    yield app.test_client()
    services_of(app).queries.pool.close()


def test_a_query_past_its_budget_is_503_and_its_worker_is_killed(pooled: FlaskClient) -> None:
    _load(pooled)
    assert pooled.get("/sparql", query_string={"query": "ASK {}"}).status_code == 200  # a worker, warm
    pool = services_of(pooled.application).queries.pool
    (pid,) = pool.status()["process_ids"]
    r = pooled.get("/sparql", query_string={"query": HEAVY, "timeout": "1"})
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "1"
    assert r.text == "the query ran past its budget of 1 s (timeout=1; the server's --query-timeout is 60 s) and " \
                     "was stopped\n"
    assert _gone(pid), f"worker {pid} still runs"
    status = services_of(pooled.application).queries.status()
    assert status["stopped_budget"] == 1 and status["processes_killed"] == 1 and status["running"] == 0
    # a fresh worker took its place and answers
    r = pooled.get("/sparql", query_string={"query": f"SELECT (COUNT(*) AS ?n) {{ GRAPH <{GRAPH}> {{ ?s ?p ?o }} }}"})
    assert r.status_code == 200 and r.json["results"]["bindings"][0]["n"]["value"] == "1500"
    assert pid not in pool.status()["process_ids"]


def test_the_budget_ends_an_extended_query_while_its_result_is_written(pooled: FlaskClient) -> None:
    # THEN() makes it extended: evaluated in the request thread, its rows written as they come, the deadline asked
    _load(pooled)
    query = "SELECT * { GRAPH ?g { ?a ?p ?x . ?b ?p ?y . ?c ?p ?z } BIND (THEN() AS ?then) }"
    r = pooled.get("/sparql", query_string={"query": query, "timeout": "0.5"}, headers={"Accept": "text/csv"})
    assert r.status_code == 503 and "budget of 0.5 s (timeout=0.5;" in r.text and r.headers["Retry-After"] == "1"
    assert services_of(pooled.application).queries.status()["stopped_budget"] == 1


@pytest.mark.parametrize("given", ["abc", "0", "-3", "nan", ""])
def test_a_timeout_that_is_not_a_positive_number_is_400_naming_it(pooled: FlaskClient, given: str) -> None:
    r = pooled.get("/sparql", query_string={"query": "ASK {}", "timeout": given})
    assert r.status_code == 400 and r.text.startswith(f"timeout={given!r}: give the query's budget in seconds")


def test_a_timeout_above_the_servers_is_capped_to_it(tmp_path: Path) -> None:
    app = _app(tmp_path, "capped", query_processes=1, query_timeout=1.0)
    client = app.test_client()
    try:
        _load(client)
        r = client.post("/sparql", data={"query": HEAVY, "timeout": "600"})
        assert r.status_code == 503
        assert "budget of 1 s (timeout=600, capped to the server's --query-timeout)" in r.text
        r = client.get("/sparql?query=ASK%7B%7D&timeout=1&timeout=2")
        assert r.status_code == 400 and "timeout is given more than once" in r.text
        assert client.get("/sparql", query_string={"query": "ASK {}", "timeuot": "1"}).status_code == 400  # near miss
    finally:
        services_of(app).queries.pool.close()


ANSWERS = [  # (query, Accept, query-string extras)
    ("SELECT ?s ?o { GRAPH ?g { ?s <http://ex/p1> ?o } } ORDER BY ?o LIMIT 7", None, {}),
    ("SELECT ?s ?o { GRAPH ?g { ?s <http://ex/p1> ?o } } ORDER BY ?o LIMIT 7", "application/sparql-results+xml", {}),
    ("SELECT ?s ?o { GRAPH ?g { ?s <http://ex/p1> ?o } } ORDER BY ?o LIMIT 7", "text/csv", {}),
    ("SELECT ?s ?o { GRAPH ?g { ?s <http://ex/p1> ?o } } ORDER BY ?o LIMIT 7", "text/tab-separated-values", {}),
    ("SELECT ?s ?o { GRAPH ?g { ?s <http://ex/p1> ?o } } ORDER BY ?o LIMIT 7", "application/json", {}),
    ("ASK { GRAPH ?g { <http://ex/s3> ?p 3 } }", None, {}),
    ("SELECT (COUNT(*) AS ?n) { ?s ?p ?o }", None, {"default-graph-uri": GRAPH}),
    ("SELECT (COUNT(*) AS ?n) { ?s ?p ?o }", None, {"named-graph-uri": GRAPH}),
    ("SELECT ?x { <s3> ?p ?x } ORDER BY ?x", None, {"default-graph-uri": GRAPH}),  # relative IRIs: the endpoint's
    ("CONSTRUCT { <http://ex/s1> ?p ?o } WHERE { GRAPH ?g { <http://ex/s1> ?p ?o } }", None, {}),
    ("CONSTRUCT { <http://ex/s1> ?p ?o } WHERE { GRAPH ?g { <http://ex/s1> ?p ?o } }", "application/n-triples", {}),
    ("CONSTRUCT { <http://ex/s1> ?p ?o } WHERE { GRAPH ?g { <http://ex/s1> ?p ?o } }", "text/plain", {}),
    ("CONSTRUCT { <http://ex/s1> ?p ?o } WHERE { GRAPH ?g { <http://ex/s1> ?p ?o } }", "application/ld+json", {}),
    ("CONSTRUCT { <http://ex/s1> ?p ?o } WHERE { GRAPH ?g { <http://ex/s1> ?p ?o } }", "application/rdf+xml", {}),
    ("DESCRIBE <http://ex/s2>", "application/n-triples", {"default-graph-uri": GRAPH}),
    ("SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } }", None, {"revision-id": "1"}),  # a past revision
    ("SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } }", None, {"revision-id": "HEAD~2"}),
    ("SELECT * { ?s ?p ?o }", "image/png", {}),  # 406
    ("CONSTRUCT WHERE { ?s ?p ?o }", "application/sparql-results+json", {}),  # 406
    ("SELECT * WHERE {\n ?s ?p }", None, {}),  # syntax errors: 400 with the user's line and column
    ("SELEC * { ?s ?p ?o }", None, {}),
    ("SELECT * { ?s ?p ?o } LIMIT x", None, {}),
    ("SELECT (<http://ex/f>(?o) AS ?x) { GRAPH ?g { ?s ?p ?o } } LIMIT 1", None, {}),  # an unknown function
    ("SELECT * { ?s ?p ?o }", None, {"revision-id": "HEAD~9"}),  # no such revision
]


@pytest.mark.parametrize("in_memory", [False, True], ids=["on disk", "in memory"])
def test_worker_processes_answer_byte_for_byte_what_the_request_thread_does(tmp_path: Path, in_memory: bool) -> None:
    """The same requests to an app with query processes and one without (evaluated in the request thread)."""
    apps = [_app(tmp_path, name, query_processes=processes, in_memory=in_memory)
            for name, processes in (("workers", 2), ("threads", 0))]
    try:
        answers = []
        for app in apps:
            client = app.test_client()
            _load(client, 50)
            client.post("/sparql", data=f"DELETE WHERE {{ GRAPH <{GRAPH}> {{ <http://ex/s0> ?p ?o }} }}",
                        content_type="application/sparql-update")  # revision 2: HEAD~1 and 1 differ
            assert services_of(app).queries.pool.in_workers is (app is apps[0])
            found = []
            for query, accept, extras in ANSWERS:
                r = client.get("/sparql", query_string={"query": query, **extras},
                               headers={"Accept": accept} if accept else {})
                found.append((r.status_code, r.headers.get("Content-Type"), r.headers.get("Revision-Ordinal"),
                              r.data))
            answers.append(found)
        for (query, accept, extras), pooled, threaded in zip(ANSWERS, *answers, strict=True):
            assert pooled == threaded, (query, accept, extras)
        statuses = [status for status, *_ in answers[0]]
        assert statuses.count(200) == 17 and statuses.count(406) == 2 and statuses.count(400) == 5, statuses
        assert b"line 2 column 9" in answers[0][19][3]
        status = services_of(apps[0]).queries.status()
        assert status["processes"] >= 1 and status["snapshots_made"] >= 3  # HEAD, revision 1, HEAD~1
    finally:
        for app in apps:
            services_of(app).queries.pool.close()


def test_the_formats_a_worker_is_told_are_the_protocols() -> None:
    for formats, kind in ((RESULTS_FORMATS, QueryResultsFormat), (GRAPH_FORMATS, RdfFormat)):
        for media_type, found in formats.items():
            assert kind.from_media_type(found.media_type) == found, media_type


# --- budgets, admission and snapshots, without a server ----------------------------------------------------------


def test_a_budget_names_where_it_comes_from() -> None:
    assert Budget.start(60).exceeded().message == \
        "the query ran past its budget of 60 s (the server's --query-timeout) and was stopped"
    waited = Budget.start(60, 2.5, "2.5").exceeded(waiting=True)
    assert waited.message == ("the query waited for a free query process past its budget of 2.5 s (timeout=2.5; the "
                              "server's --query-timeout is 60 s) and was stopped")
    assert waited.status_hint == 503 and waited.headers == {"Retry-After": "3"}
    stop = Budget.start(60, 0.001).stop_when(lambda: False)
    time.sleep(0.01)
    with pytest.raises(QueryBudgetExceeded):
        stop()


def test_a_client_past_its_limit_is_refused_with_retry_after() -> None:
    pool = QueryPool(QueryLimits(per_client=2, in_flight=3))
    budget = pool.budget(30)
    with pool.admit("10.0.0.1", budget), pool.admit("10.0.0.1", budget):
        with pytest.raises(ClientQueryLimit) as refused:
            with pool.admit("10.0.0.1", budget):
                pass
        assert refused.value.status_hint == 429 and 29 <= int(refused.value.headers["Retry-After"]) <= 30
        assert "10.0.0.1 already has 2 queries running or waiting (the limit is 2, server option " \
               "--queries-per-client)" in refused.value.message
        with pool.admit("10.0.0.2", budget):  # another client may
            with pytest.raises(QueryQueueFull):  # but not a fourth query in flight: threads are kept for others
                with pool.admit("10.0.0.3", budget):
                    pass
    with pool.admit("10.0.0.1", budget):  # freed
        pass
    assert pool.status()["refused"] == {"client_limit": 1, "queue_full": 1}


def test_a_snapshot_lives_while_used_or_of_head(tmp_path: Path) -> None:
    made: list[int] = []
    head = [3]

    def make(ordinal: int, path: Path) -> None:
        made.append(ordinal)
        path.mkdir()

    snapshots = Snapshots(tmp_path / "snapshots", make, lambda: head[0])
    with snapshots.use(3) as first, snapshots.use(3) as again:
        assert first == again and made == [3]  # shared by the queries of one revision
    with snapshots.use(2) as past:
        assert past.exists()
    assert not past.exists() and first.exists()  # a past revision's, unused: deleted; HEAD's kept
    head[0] = 4
    with snapshots.use(4) as latest:
        assert latest.exists()
    assert not first.exists() and latest.exists() and made == [3, 2, 4]


# --- a real server ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline", "--query-processes", "2", "--queries-per-client", "2",
                         "--token", "secret"]) as running:
        r = requests.put(f"{running.url}/store?graph={quote(GRAPH, safe='')}", data=cartesian(),
                         headers={"Content-Type": "text/turtle", "Authorization": "Bearer secret"}, timeout=30)
        assert r.status_code == 201, r.text
        yield running


def _queries(server: RunningServer) -> dict[str, object]:
    answer: dict[str, object] = requests.get(server.url + "/status?sections=queries", timeout=5).json()["queries"]
    return answer


def _send(server: RunningServer, query: str, timeout: float, source: str = "127.0.0.1") -> socket.socket:
    """A query sent on a connection of its own (held open: the query runs until its budget or the socket closes)."""
    address = urlsplit(server.url)
    sock = socket.create_connection((address.hostname, address.port), timeout=5, source_address=(source, 0))
    body = f"query={quote(query)}&timeout={timeout:g}".encode()
    sock.sendall(b"POST /sparql HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def _wait_for(check: object, what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_query_past_its_budget_is_503_over_http_and_its_process_is_gone(server: RunningServer) -> None:
    requests.post(server.url + "/sparql", data={"query": "ASK {}"}, timeout=10).raise_for_status()  # workers, warm
    before = _queries(server)
    r = requests.post(server.url + "/sparql", data={"query": HEAVY, "timeout": "1"}, timeout=30)
    assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
    assert "ran past its budget of 1 s (timeout=1; the server's --query-timeout is 60 s)" in r.text
    after = _queries(server)
    killed = set(before["process_ids"]) - set(after["process_ids"])  # type: ignore[call-overload]
    assert len(killed) == 1 and _gone(killed.pop())
    assert after["stopped_budget"] == before["stopped_budget"] + 1  # type: ignore[operator]


def test_a_client_over_its_limit_gets_429_while_status_answers(server: RunningServer) -> None:
    # two heavy queries of one client: one runs (a client uses at most half the query processes), one waits in line
    held = [_send(server, HEAVY, 60) for _ in range(2)]
    try:
        _wait_for(lambda: (_queries(server)["running"], _queries(server)["queued"]) == (1, 1),
                  "the two queries did not start")
        r = requests.post(server.url + "/sparql", data={"query": "ASK {}"}, timeout=10)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1, r.text
        assert "127.0.0.1 already has 2 queries running or waiting (the limit is 2" in r.text
        # the write token's holder is another client: the other query process answers it at once
        r = requests.post(server.url + "/sparql", data={"query": "ASK {}"}, headers={"Authorization": "Bearer secret"},
                          timeout=10)
        assert r.status_code == 200 and r.json()["boolean"] is True
        metrics = {sample.name + str(sorted(sample.labels.items())): sample.value
                   for family in text_string_to_metric_families(requests.get(server.url + "/metrics", timeout=5).text)
                   for sample in family.samples}
        queries = _queries(server)
        assert metrics["concentrator_queries_refused_total[('reason', 'client_limit')]"] == \
            queries["refused"]["client_limit"] >= 1  # type: ignore[index]
        assert metrics["concentrator_queries_running[]"] == 1 and metrics["concentrator_queries_queued[]"] == 1
        assert metrics["concentrator_query_processes[]"] == 2
        assert metrics["concentrator_queries_stopped_budget_total[]"] == queries["stopped_budget"]
    finally:
        for sock in held:  # the clients go away: their queries' processes are killed
            sock.close()
    _wait_for(lambda: _queries(server)["running"] == 0, "the abandoned queries still run")
    assert requests.post(server.url + "/sparql", data={"query": "ASK {}"}, timeout=10).status_code == 200


def test_status_answers_while_every_query_process_is_busy(server: RunningServer) -> None:
    held = [_send(server, HEAVY, 60, source) for source in ("127.0.0.1", "127.0.0.2")]
    try:
        _wait_for(lambda: _queries(server)["busy"] == 2, "the two queries did not start in their processes")
        started = time.monotonic()
        status = requests.get(server.url + "/status", timeout=5)
        assert status.status_code == 200 and time.monotonic() - started < 2.0
        # a third client waits in line for a free process, for its budget
        r = _http_status(_send(server, "ASK {}", 0.5, "127.0.0.3"))
        assert r.startswith(b"HTTP/1.1 503 ") and b"waited for a free query process past its budget of 0.5 s" in r
        # the first client's next query waits behind its own running one, whose process it may not share
        r = _http_status(_send(server, "ASK {}", 0.5, "127.0.0.1"))
        assert b"127.0.0.1 had 1 other queries running, as many query processes as one client may use" in r
    finally:
        for sock in held:
            sock.close()
    _wait_for(lambda: _queries(server)["running"] == 0, "the abandoned queries still run")


def _http_status(sock: socket.socket) -> bytes:
    """The answer on ``sock``: its head and its body of ``Content-Length`` bytes (or what came before the server
    closed the connection, or 5 s passed)."""
    sock.settimeout(5)
    answer = b""
    with sock:
        while True:
            head, _, body = answer.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if _ and length is not None and len(body) >= int(length.group(1)):
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


@pytest.mark.skipif(not os.path.exists("/proc"), reason="reads /proc")
def test_the_workers_run_at_a_lower_priority(server: RunningServer) -> None:
    requests.post(server.url + "/sparql", data={"query": "ASK {}"}, timeout=10).raise_for_status()
    for pid in _queries(server)["process_ids"]:  # type: ignore[attr-defined]
        assert int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) == 10  # nice
