"""MQTT in and out (issue 16) against a real broker (Debian's Mosquitto, started on 127.0.0.1 by each test) and a real
server (``serve --mqtt``). Expected elements, counts and messages are worked out by hand in each test."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import requests
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conformance.mqtt_broker import Mosquitto, running_broker, skip_reason_mosquitto
from conformance.server import RunningServer, free_port, kill_tree, running_server

pytestmark = pytest.mark.slow

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def stamp(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def element(i: int) -> bytes:
    """Element <urn:test:mI> at T0 + I s, holding the reading I."""
    return (f'<urn:test:m{i}> <{PROV}> "{stamp(i)}"^^<{XSD_DT}> .\n'
            f'<urn:test:m{i}> {{ <urn:test:ward> <urn:test:reading> {i} . }}\n').encode()


def _skip_without_mosquitto() -> None:
    reason = skip_reason_mosquitto()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)  # CI installs it (.ci/install-clients): never skip there
        pytest.skip(reason)


@pytest.fixture
def broker() -> Iterator[Mosquitto]:
    _skip_without_mosquitto()
    with running_broker() as running:
        yield running


class Client:
    """A test's own MQTT 5 client (a sensor, a dashboard): publishes at QoS 1 and records what it receives."""

    def __init__(self, broker: Mosquitto, subscribe: str | None = None) -> None:
        self.received: list[mqtt.MQTTMessage] = []
        self.subscribed = threading.Event()
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self._client.reconnect_delay_set(1, 2)
        self._topic = subscribe
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = lambda *_: self.subscribed.set()
        self._client.on_message = lambda _c, _u, message: self.received.append(message)
        self._client.connect("127.0.0.1", broker.port)
        self._client.loop_start()

    def _on_connect(self, client: mqtt.Client, *_: Any) -> None:
        if self._topic is not None:
            client.subscribe(self._topic, qos=1)

    def publish(self, topic: str, payloads: list[bytes], content_type: str | None = None) -> None:
        """Publish at QoS 1 and wait until the broker has them all (PUBACK). After a broker restart the client
        reconnects by itself within ≈ 2 s; a message published before that is refused ("not currently connected")."""
        wait_until(self._client.is_connected, 30, lambda: "the test's MQTT client did not reconnect")
        properties = None
        if content_type is not None:
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ContentType = content_type
        infos = [self._client.publish(topic, payload, qos=1, properties=properties) for payload in payloads]
        for info in infos:
            info.wait_for_publish(30)
            assert info.is_published()

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def wait_until(condition: Callable[[], bool], timeout: float, what: Callable[[], object]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.1)


def status(server: RunningServer) -> dict[str, Any]:
    return requests.get(f"{server.url}/status", timeout=10).json()  # type: ignore[no-any-return]


def subscription(server: RunningServer, stream: str) -> dict[str, Any]:
    return status(server)["mqtt"]["subscriptions"].get(stream, {})  # type: ignore[no-any-return]


def graphs(server: RunningServer, stream: str) -> list[str]:
    """The graph names of the stream's elements in ordinal order."""
    found: list[str] = []
    while True:
        page = requests.get(f"{server.url}/streams/{stream}/elements", params={"from": len(found) + 1},
                            timeout=30).json()
        found += [record["graph"] for record in page["elements"]]
        if not page["elements"] or len(found) >= page["head"]:
            return found


def elements(server: RunningServer, stream: str) -> int:
    streams = status(server)["streams"]
    return int(streams[stream]["elements"]) if stream in streams else 0


def test_a_message_is_an_element_a_duplicate_is_counted_a_bad_message_is_a_dead_letter(broker: Mosquitto) -> None:
    with running_server(["--no-pipeline", "--mqtt", broker.url]) as server:
        response = requests.put(f"{server.url}/streams/hr", json={"mqtt-topic": ["ward/+/hr"]}, timeout=10)
        assert response.status_code == 201
        wait_until(lambda: subscription(server, "hr").get("connected") is True, 30, lambda: status(server)["mqtt"])
        sensor = Client(broker)
        turtle = f'<urn:test:ward> <urn:test:reading> 7 ; <urn:test:at> "{stamp(3)}"^^<{XSD_DT}> .'.encode()
        bad = b"<urn:test:m9> { <urn:test:ward> oops }"
        # m1, m1 again (a second delivery: the same element), a syntax error, m4, then a Turtle reading (the
        # stream has no timestamp-path: it is stamped with its receipt time, after m4's)
        sensor.publish("ward/1/hr", [element(1), element(1), bad])
        sensor.publish("ward/2/hr", [element(4)])
        sensor.publish("ward/1/hr", [turtle], content_type="text/turtle")
        wait_until(lambda: elements(server, "hr") == 3 and elements(server, "hr-dead-letter") == 1, 30,
                   lambda: (status(server)["streams"], status(server)["mqtt"]))
        names = graphs(server, "hr")
        assert names[:2] == ["<urn:test:m1>", "<urn:test:m4>"]
        assert names[2].startswith("<urn:uuid:")  # the Turtle message's element: a fresh graph name
        counts = subscription(server, "hr")["topics"]["ward/+/hr"]
        assert {k: counts[k] for k in ("messages", "elements", "duplicates", "dead_letters", "punctuations")} == {
            "messages": 5, "elements": 3, "duplicates": 1, "dead_letters": 1, "punctuations": 0}
        # lag: now - the latest element's time (the Turtle reading's receipt time): a few seconds at most
        assert 0 <= counts["lag_seconds"] < 30
        letter = requests.get(f"{server.url}/streams/hr-dead-letter", headers={"Accept": "application/n-quads"},
                              timeout=10).text
        dead = "urn:x-concentrator:dead-letter#"
        assert f'<{dead}payload> "<urn:test:m9> {{ <urn:test:ward> oops }}"' in letter  # the payload as it came
        assert f'<{dead}topic> "ward/1/hr"' in letter and "oops" in letter.split(f"<{dead}error>")[1]
        # the subscription went on after the bad message (m4 came after it): nothing stops it
        sensor.close()


def test_a_turtle_message_timestamped_by_its_timestamp_path_is_one_element_once(broker: Mosquitto) -> None:
    with running_server(["--no-pipeline", "--mqtt", broker.url]) as server:
        config = {"mqtt-topic": ["temp"], "mqtt-format": "text/turtle", "timestamp-path": "urn:test:at"}
        assert requests.put(f"{server.url}/streams/temp", json=config, timeout=10).status_code == 201
        wait_until(lambda: subscription(server, "temp").get("connected") is True, 30, lambda: status(server))
        sensor = Client(broker)
        reading = f'<urn:test:room> <urn:test:celsius> 21.5 ; <urn:test:at> "{stamp(10)}"^^<{XSD_DT}> .'.encode()
        sensor.publish("temp", [reading, reading])  # the same reading delivered twice: one element
        def topic() -> dict[str, Any]:
            return subscription(server, "temp")["topics"]["temp"]  # type: ignore[no-any-return]

        def elements() -> list[dict[str, Any]]:
            return requests.get(f"{server.url}/streams/temp/elements", timeout=10).json()["elements"]  # type: ignore[no-any-return]

        wait_until(lambda: topic()["messages"] == 2 and topic()["duplicates"] == 1, 30, lambda: status(server))

        # the counters move as messages arrive; the element is listed once its commit is done
        wait_until(lambda: len(elements()) >= 1, 10, lambda: status(server))
        record = elements()
        assert len(record) == 1 and record[0]["time"] == stamp(10)
        sensor.close()


def test_settings_are_checked_and_need_a_broker(broker: Mosquitto) -> None:
    with running_server(["--no-pipeline"]) as plain:
        response = requests.put(f"{plain.url}/streams/s", json={"mqtt-topic": ["a"]}, timeout=10)
        assert response.status_code == 409 and "serve --mqtt" in response.text
    with running_server(["--no-pipeline", "--mqtt", broker.url]) as server:
        for config, word in (({"mqtt-topic": ["a/b#"]}, "whole topic levels"),
                             ({"mqtt-topic": ["a"], "mqtt-format": "text/csv"}, "mqtt-format"),
                             ({"mqtt-topic": ["a"], "graph-template": "urn:x:fixed"}, "{uuid}"),
                             ({"mqtt-topic": ["a"], "dead-letter": "s"}, "own dead-letter")):
            response = requests.put(f"{server.url}/streams/s", json=config, timeout=10)
            assert response.status_code == 400 and word in response.text, (config, response.text)
        assert requests.get(f"{server.url}/streams/s", timeout=10).status_code == 404  # nothing was created


def test_1000_messages_are_1000_elements_across_a_broker_restart_and_a_server_crash(broker: Mosquitto,
                                                                                   tmp_path: Any) -> None:
    data, port = tmp_path / "data", free_port()
    sensor = Client(broker)
    with running_server(["--no-pipeline", "--mqtt", broker.url], data_dir=data, port=port) as server:
        assert requests.put(f"{server.url}/streams/hr", json={"mqtt-topic": ["ward/hr"]}, timeout=10).ok
        wait_until(lambda: subscription(server, "hr").get("connected") is True, 30, lambda: status(server))
        sensor.publish("ward/hr", [element(i) for i in range(1, 301)])
        broker.restart()  # messages the server has not acknowledged yet are kept by the broker (persistence)
        wait_until(lambda: subscription(server, "hr").get("connected") is True, 60, lambda: status(server))
        sensor.publish("ward/hr", [element(i) for i in range(301, 601)])
        kill_tree(server.process.pid)  # a crash while messages are coming in: no clean stop, no last PUBACKs
        server.process.wait()
    # while the server is down the broker keeps what comes for its persistent session
    sensor.publish("ward/hr", [element(i) for i in range(601, 1001)])
    with running_server(["--no-pipeline", "--mqtt", broker.url], data_dir=data, port=port) as server:
        wait_until(lambda: elements(server, "hr") >= 1000 and subscription(server, "hr").get("connected") is True,
                   120, lambda: (elements(server, "hr"), status(server)["mqtt"], broker.log()[-2000:]))
        time.sleep(1)  # anything delivered twice would show up now
        assert graphs(server, "hr") == [f"<urn:test:m{i}>" for i in range(1, 1001)]  # each once, in order
        assert elements(server, "hr-dead-letter") == 0
    sensor.close()


@pytest.mark.jvm
def test_window_results_arrive_on_a_topic_one_message_per_window(spark_server: RunningServer,
                                                                   shared_broker: Mosquitto | None) -> None:
    # the test worker's shared Spark server and its broker (tests/conftest.py): names and topics of this test's own
    _skip_without_mosquitto()
    assert shared_broker is not None
    broker, server = shared_broker, spark_server
    dashboard = Client(broker, subscribe="ward/mqtt-hr/windows")
    alerts = Client(broker, subscribe="ward/mqtt-hr/alerts")
    url = f"{server.url}/streams/mqtt-hr"
    assert requests.put(url, timeout=10).status_code == 201
    assert requests.post(url, data=element(0), headers={"Content-Type": "application/trig"}, timeout=30).ok
    query = "SELECT (SUM(?v) AS ?sum) WHERE { GRAPH ?g { ?s <urn:test:reading> ?v } }"
    publication = {"topic": "ward/mqtt-hr/windows", "windows": "R/HEAD/PT10S", "query": query,
                   "format": "text/csv"}
    response = requests.put(f"{url}/publications/sums", json=publication, timeout=10)
    assert response.status_code == 201, response.text
    # a rule over the same windows whose output elements are published: an alert where the sum passes 10
    rule = (f"CONSTRUCT {{ GRAPH ?e {{ ?e <urn:test:sum> ?sum }} ?e <{PROV}> ?t }} WHERE {{ "
            f"SERVICE <{url}?WINDOWS=R/HEAD/PT10S> {{ SELECT (SUM(?v) AS ?sum) (MAX(?time) AS ?t) WHERE {{ "
            f"?g <{PROV}> ?time GRAPH ?g {{ ?s <urn:test:reading> ?v }} }} }} "
            "FILTER(?sum > 10) BIND(IRI(CONCAT('urn:test:alert/', STR(?t))) AS ?e) }")
    response = requests.put(f"{server.url}/rules/mqtt-alerts", data=rule, timeout=30,
                            params={"output": "mqtt-alerts", "publish": "ward/mqtt-hr/alerts"},
                            headers={"Content-Type": "application/sparql-query"})
    assert response.status_code == 201, response.text
    assert dashboard.subscribed.wait(10) and alerts.subscribed.wait(10)
    # t0 = HEAD = element 0 (T0): windows [0,10) {0, 4}, [10,20) {12, 15}, [20,30) {}, then 31 closes [20,30);
    # SUM over no row is 0 (SPARQL 1.1 §18.5.1.3: Sum of the empty multiset)
    body = b"".join(element(i) for i in (4, 12, 15, 31))
    assert requests.post(url, data=body, headers={"Content-Type": "application/trig"}, timeout=30).ok
    wait_until(lambda: len(dashboard.received) >= 3, 90, lambda: (status(server)["mqtt"], server.log_tail()))
    time.sleep(1)
    messages = dashboard.received
    assert [m.payload.decode().split() for m in messages] == [["sum", "4"], ["sum", "27"], ["sum", "0"]]
    headers = [dict(m.properties.UserProperty) for m in messages]  # type: ignore[union-attr]
    assert [h["Window-Index"] for h in headers] == ["0", "1", "2"]
    assert [(h["Window-Start"], h["Window-End"]) for h in headers] == [
        (stamp(0), stamp(10)), (stamp(10), stamp(20)), (stamp(20), stamp(30))]
    assert all(m.properties.ContentType == "text/csv" for m in messages)  # type: ignore[union-attr]
    described = requests.get(f"{url}/publications/sums", timeout=10).json()
    assert described["messages"] == 3 and described["next_window"] == 3
    # the rule fired on [10,20) only (sum 27 > 10): one output element, published with its headers
    wait_until(lambda: len(alerts.received) >= 1, 30, lambda: status(server)["mqtt"])
    time.sleep(1)
    assert len(alerts.received) == 1
    alert = alerts.received[0]
    assert b"<urn:test:alert/2024-01-01T00:00:15Z> {" in alert.payload and b"27" in alert.payload
    assert dict(alert.properties.UserProperty)["Element-Ordinal"] == "1"  # type: ignore[union-attr]
    dashboard.close()
    alerts.close()


def test_each_element_of_a_stream_is_published_with_its_headers(broker: Mosquitto) -> None:
    dashboard = Client(broker, subscribe="ward/hr/elements")
    with running_server(["--no-pipeline", "--mqtt", broker.url]) as server:
        url = f"{server.url}/streams/hr"
        assert requests.put(url, timeout=10).status_code == 201
        response = requests.put(f"{url}/publications/all", json={"topic": "ward/hr/elements"}, timeout=10)
        assert response.status_code == 201, response.text
        assert dashboard.subscribed.wait(10)
        body = b"".join(element(i) for i in (1, 2))
        assert requests.post(url, data=body, headers={"Content-Type": "application/trig"}, timeout=30).ok
        wait_until(lambda: len(dashboard.received) >= 2, 30, lambda: status(server)["mqtt"])
        first = dashboard.received[0]
        assert dict(first.properties.UserProperty)["Element-Ordinal"] == "1"  # type: ignore[union-attr]
        assert dict(first.properties.UserProperty)["Element-Time"] == stamp(1)  # type: ignore[union-attr]
        assert b"<urn:test:m1> {" in first.payload and f'"{stamp(1)}"'.encode() in first.payload
        bad = requests.put(f"{url}/publications/x", json={"topic": "a/#"}, timeout=10)
        assert bad.status_code == 400 and "wildcard" in bad.text
        assert requests.delete(f"{url}/publications/all", timeout=10).status_code == 204
        assert requests.get(f"{url}/publications/all", timeout=10).status_code == 404
    dashboard.close()


def test_a_message_too_deep_for_the_parser_is_a_dead_letter(broker: Mosquitto) -> None:
    """Issue 30: one JSON-LD message nested 5,000 deep crashed the server (SIGSEGV in pyoxigraph's parser), and, never
    acknowledged, crashed it again each time the broker delivered it: ≈ 50 crashes a minute. It is refused before it
    is parsed: a dead letter naming the limit, acknowledged, and the subscription goes on."""
    deep_jsonld = b'{"@id":"urn:test:s","urn:test:p":' + b'{"urn:test:p":' * 5_000 + b'{"@id":"urn:test:o"}' + \
        b"}" * 5_001
    deep_trig = (b'<urn:test:m2> <' + PROV.encode() + b'> "' + stamp(2).encode() + b'"^^<' + XSD_DT.encode() +
                 b'> .\n<urn:test:m2> { <urn:test:s> <urn:test:p> ' + b"<<( <urn:test:s> <urn:test:p> " * 20_000 +
                 b"<urn:test:o>" + b" )>>" * 20_000 + b" . }\n")
    with running_server(["--no-pipeline", "--mqtt", broker.url]) as server:
        assert requests.put(f"{server.url}/streams/hr", json={"mqtt-topic": ["ward/hr"]}, timeout=10).ok
        wait_until(lambda: subscription(server, "hr").get("connected") is True, 30, lambda: status(server))
        sensor = Client(broker)
        sensor.publish("ward/hr", [deep_jsonld], content_type="application/ld+json")
        sensor.publish("ward/hr", [deep_trig, element(3)])
        wait_until(lambda: elements(server, "hr") == 1 and elements(server, "hr-dead-letter") == 2, 30,
                   lambda: (status(server)["streams"], status(server)["mqtt"], server.log_tail()))
        assert server.process.poll() is None
        assert graphs(server, "hr") == ["<urn:test:m3>"]  # the subscription went on past them
        letters = requests.get(f"{server.url}/streams/hr-dead-letter", headers={"Accept": "application/n-quads"},
                               timeout=10).text
        errors = [line for line in letters.splitlines() if "dead-letter#error>" in line]
        assert len(errors) == 2 and any("JSON objects and arrays nested more than 128 deep" in e for e in errors)
        assert any("N-Triples / N-Quads triple terms nested more than 128 deep" in e or
                   "Turtle brackets ( [ { << nested more than 128 deep" in e for e in errors)
        counts = subscription(server, "hr")["topics"]["ward/hr"]
        assert (counts["messages"], counts["elements"], counts["dead_letters"]) == (3, 1, 2)
        sensor.close()


def test_a_message_that_killed_the_server_twice_is_a_dead_letter_and_not_parsed_again(broker: Mosquitto,
                                                                                      tmp_path: Any) -> None:
    """A crash the limits do not foresee: the server marks the message it parses (``ParsingMarks``). A message the
    process died parsing twice, delivered again, is a dead letter (saying why), acknowledged, and is not parsed; one
    it died parsing once (it may have been killed then) is parsed again. The crashes are played by what they leave:
    the server is stopped, the messages published meanwhile, and the marks written where dead processes would have
    left them (the SHA-256 of the topic, a NUL and the payload): the last one in ``parsing``, deaths counted before
    in ``suspects``."""
    import hashlib

    data, port = tmp_path / "data", free_port()
    poison, killed = element(5), element(7)  # valid elements: had the poison been parsed, the stream would hold it
    with running_server(["--no-pipeline", "--mqtt", broker.url], data_dir=data, port=port) as server:
        assert requests.put(f"{server.url}/streams/hr", json={"mqtt-topic": ["ward/hr"]}, timeout=10).ok
        wait_until(lambda: subscription(server, "hr").get("connected") is True, 30, lambda: status(server))
    sensor = Client(broker)
    sensor.publish("ward/hr", [poison, killed])  # kept by the broker for the server's persistent session
    marks = data / "mqtt-in" / "hr"
    poison_mark, killed_mark = (hashlib.sha256(b"ward/hr\0" + payload).hexdigest() for payload in (poison, killed))
    marks.mkdir(parents=True, exist_ok=True)
    (marks / "suspects").write_text(f"{poison_mark} 1\n{killed_mark} 1\n")  # each killed the process once
    (marks / "parsing").write_bytes(poison_mark.encode() + b"\n")  # and the poison again: its second death
    with running_server(["--no-pipeline", "--mqtt", broker.url], data_dir=data, port=port) as server:
        wait_until(lambda: elements(server, "hr-dead-letter") == 1 and elements(server, "hr") == 1, 30,
                   lambda: (status(server)["streams"], status(server)["mqtt"], server.log_tail()))
        letters = requests.get(f"{server.url}/streams/hr-dead-letter", headers={"Accept": "application/n-quads"},
                               timeout=10).text
        assert "the server stopped 2 times while it parsed this message" in letters
        assert graphs(server, "hr") == ["<urn:test:m7>"]  # the poison not parsed, the one killed once parsed
        sensor.publish("ward/hr", [element(8)])
        wait_until(lambda: elements(server, "hr") == 2, 30, lambda: status(server)["mqtt"])
    assert (marks / "suspects").read_text() == ""  # both handled
    with running_server(["--no-pipeline", "--mqtt", broker.url], data_dir=data, port=port) as server:
        wait_until(lambda: subscription(server, "hr").get("connected") is True, 30, lambda: status(server))
        time.sleep(2)  # anything not acknowledged would be delivered again now
        assert subscription(server, "hr")["topics"].get("ward/hr", {}).get("messages", 0) == 0
        assert (elements(server, "hr"), elements(server, "hr-dead-letter")) == (2, 1)
    sensor.close()


def test_parsing_marks_count_deaths_until_the_message_is_handled(tmp_path: Any) -> None:
    from connectors.mqtt_in import ParsingMarks

    marks = ParsingMarks(tmp_path)
    first, second = ParsingMarks.mark("a", b"1"), ParsingMarks.mark("a", b"2")
    marks.parsing(first)
    marks.handled()
    marks.parsing(second)  # the process dies here: nothing closes, nothing is synced
    again = ParsingMarks(tmp_path)
    assert again.deaths == {second: 1}
    again.parsing(second)  # and dies again
    third = ParsingMarks(tmp_path)
    assert third.deaths == {second: 2}
    assert ParsingMarks(tmp_path).deaths == {second: 2}  # kept (in ``suspects``) until the message is handled
    third.forget(second)
    assert ParsingMarks(tmp_path).deaths == {}
    for each in (marks, again, third):
        each.close()
