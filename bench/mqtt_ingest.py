"""MQTT ingestion against HTTP upload in the same run (issue 16): elements/s and statements/s.

Run with ``python -m bench.mqtt_ingest [--elements 20000] [--per-request 2000]`` (needs Mosquitto: ``bash
.ci/install-clients``). One server (``serve --no-pipeline --mqtt``: ingestion alone, no Spark) and one broker on
127.0.0.1; every element has 10 statements (9 content triples + its timestamp triple), timestamps 10 ms apart.

1. **HTTP, one upload** (the baseline): one chunked ``POST /streams/http`` of every element (TriG), timed until its
   answer (every element committed on disk);
2. **HTTP, one request per element**: ``--per-request`` elements, each its own ``POST`` (a sensor without a
   batching client), one connection kept alive;
3. **WebSocket, one message per element**: every element a message to ``ws://…/streams/ws``, timed until the last
   answer (committed durably);
4. **MQTT, one message per element** (QoS 1): a publisher sends every element to the stream's topic as fast as the
   broker takes them; timed from the first publish until the stream holds every element (each committed before
   its PUBACK);
5. **the MQTT publisher alone** (nobody subscribed): what the Python client sends on this machine, a bound on 4
   (publisher, broker and server share the cores).

Rates are printed as a table with each ratio to the baseline, written to ``bench/results/mqtt_ingest.json`` and,
where the harness can plot, ``bench/results/mqtt_ingest.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import paho.mqtt.client as mqtt
import requests
from paho.mqtt.enums import CallbackAPIVersion

from bench import harness
from bench.harness import Measurement, print_table, write_json
from conformance.mqtt_broker import running_broker, skip_reason_mosquitto
from conformance.server import RunningServer, running_server
from conformance.websocket_client import Client as WebSocket

BENCH_NAME = "mqtt_ingest"
PROV = "<http://www.w3.org/ns/prov#generatedAtTime>"
XSD_DT = "<http://www.w3.org/2001/XMLSchema#dateTime>"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z in µs
STEP_US = 10_000
STATEMENTS = 10  # per element
CHUNK = 200  # elements per HTTP chunk of the one upload


def element(stream: str, ordinal: int) -> bytes:
    graph = f"<http://ex/{stream}/e{ordinal}>"
    at = datetime.fromtimestamp((T0 + ordinal * STEP_US) / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = "".join(f'  <http://ex/s{ordinal}> <http://ex/p{j}> "{ordinal}-{j}" .\n' for j in range(STATEMENTS - 1))
    return f'{graph} {PROV} "{at}"^^{XSD_DT} .\n{graph} {{\n{body}}}\n'.encode()


def create(server: RunningServer, name: str, config: dict[str, object] | None = None) -> str:
    url = f"{server.url}/streams/{name}"
    requests.put(url, json=config or {}, timeout=30).raise_for_status()
    return url


def count(url: str) -> int:
    return int(requests.get(url, headers={"Accept": "application/json"}, timeout=30).json()["elements"])


def wait_for(url: str, elements: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while count(url) < elements:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: {count(url)} of {elements} elements after {timeout} s")
        time.sleep(0.05)


def timed(name: str, elements: int, run: Callable[[], object]) -> tuple[Measurement, Measurement]:
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    return (Measurement(name, seconds, elements, "elements"),
            Measurement(name, seconds, elements * STATEMENTS, "statements"))


def http_upload(server: RunningServer, elements: int) -> tuple[Measurement, Measurement]:
    url = create(server, "http")

    def body() -> Iterator[bytes]:
        for first in range(1, elements + 1, CHUNK):
            yield b"".join(element("http", o) for o in range(first, min(first + CHUNK, elements + 1)))

    def run() -> None:
        answer = requests.post(url, data=body(), headers={"Content-Type": "application/trig"}, timeout=600)
        answer.raise_for_status()
        assert answer.json()["committed"] == elements, answer.text

    return timed("HTTP, one upload", elements, run)


def http_per_element(server: RunningServer, elements: int) -> tuple[Measurement, Measurement]:
    url = create(server, "requests")
    session = requests.Session()

    def run() -> None:
        for o in range(1, elements + 1):
            session.post(url, data=element("requests", o), headers={"Content-Type": "application/trig"},
                         timeout=60).raise_for_status()

    return timed("HTTP, a request per element", elements, run)


def websocket(server: RunningServer, elements: int) -> tuple[Measurement, Measurement]:
    create(server, "ws")
    ws = WebSocket.connect(server.url.replace("http://", "ws://") + "/streams/ws")
    ws.receive(timeout=30)

    def run() -> None:
        for o in range(1, elements + 1):
            ws.send(element("ws", o).decode())
        answered = 0
        while answered < elements:
            message = json.loads(ws.receive(timeout=60))
            assert "error" not in message, message
            answered += 1

    try:
        return timed("WebSocket, a message per element", elements, run)
    finally:
        ws.close()


def mqtt_messages(server: RunningServer, port: int, elements: int) -> tuple[Measurement, Measurement]:
    url = create(server, "mqtt", {"mqtt-topic": ["bench/mqtt"]})
    deadline = time.monotonic() + 30
    while not requests.get(f"{server.url}/status", timeout=10).json()["mqtt"]["subscriptions"].get(
            "mqtt", {}).get("connected"):
        if time.monotonic() > deadline:
            raise TimeoutError("the server did not subscribe")
        time.sleep(0.1)
    payloads = [element("mqtt", o) for o in range(1, elements + 1)]
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    publisher.max_inflight_messages_set(1000)
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()

    def run() -> None:
        for payload in payloads:
            publisher.publish("bench/mqtt", payload, qos=1)
        wait_for(url, elements, 600)

    try:
        return timed("MQTT, a message per element (QoS 1)", elements, run)
    finally:
        publisher.disconnect()
        publisher.loop_stop()


def publisher_alone(port: int, elements: int) -> tuple[Measurement, Measurement]:
    """The test's own publisher with nobody subscribed: what the client side can send on this machine (it shares
    the cores with the broker and the server), a bound on row 4."""
    payloads = [element("alone", o) for o in range(1, elements + 1)]
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    publisher.max_inflight_messages_set(1000)
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()

    def run() -> None:
        infos = [publisher.publish("bench/nobody", payload, qos=1) for payload in payloads]
        for info in infos:
            info.wait_for_publish(60)

    try:
        return timed("MQTT publisher alone (no subscriber)", elements, run)
    finally:
        publisher.disconnect()
        publisher.loop_stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mqtt_ingest", description=__doc__)
    parser.add_argument("--elements", type=int, default=20_000)
    parser.add_argument("--per-request", type=int, default=2_000,
                        help="elements sent one HTTP request each (default 2000)")
    args = parser.parse_args(argv)
    reason = skip_reason_mosquitto()
    if reason is not None:
        print(reason)
        return 2
    with running_broker() as broker, running_server(["--no-pipeline", "--mqtt", broker.url]) as server:
        runs = [http_upload(server, args.elements), http_per_element(server, args.per_request),
                websocket(server, args.elements), mqtt_messages(server, broker.port, args.elements),
                publisher_alone(broker.port, args.elements)]
        status = requests.get(f"{server.url}/status", timeout=10).json()["mqtt"]["subscriptions"]["mqtt"]
    per_element = [r[0] for r in runs]
    per_statement = [r[1] for r in runs]
    baseline = per_element[0].name
    print_table(f"Ingestion, elements of {STATEMENTS} statements: elements/s", per_element, baseline)
    print_table("statements/s", per_statement, baseline)
    print(f"\nMQTT subscriber: {status['topics']['bench/mqtt']}")
    path = write_json(BENCH_NAME, {
        "elements": args.elements, "per_request": args.per_request, "statements_per_element": STATEMENTS,
        "measurements": [m.to_dict() for m in per_element + per_statement],
        "ratio_mqtt_to_http_upload": per_element[3].rate / per_element[0].rate,
        "mqtt_subscriber": status["topics"]["bench/mqtt"],
    })
    print(f"\nwrote {path}")
    bar_plot = getattr(harness, "bar_plot", None)  # the plotting helpers, where this checkout's harness has them
    if bar_plot is not None:
        try:
            plot = bar_plot(BENCH_NAME, "Ingestion: one upload, a request, a WebSocket message, an MQTT message "
                                        "per element", {"elements/s": {m.name: m.rate for m in per_element},
                                                        "statements/s": {m.name: m.rate for m in per_statement}},
                            reference=baseline, unit="per second")
            print(f"wrote {plot}")
        except RuntimeError as error:  # matplotlib missing: the table and JSON stand
            print(f"no plot: {error}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
