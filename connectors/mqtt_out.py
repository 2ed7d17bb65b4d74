"""Publishing to MQTT (docs/connectors.md, "MQTT out"): a stream's window results, or its elements, to a topic.

- A **publication** (``protocol.services.Publication``) is kept in ``<data>/publications/<stream>/<name>.json``
  with its cursor (the next window index, or the next element ordinal) and runs in a thread of its own from the
  server's start to its deletion.
- **One message per window result** (as a continuous response gives it: the same query, report policy and stream
  operator, ``delivery.results.producer``), or **per element** (its canonical TriG); the window's headers
  (``Window-Index``, ``Window-Start``, ``Window-End``, ``Window-Id``, ``Window-Committed``, ``Window-Sequence``) or
  the element's (``Element-Ordinal``, ``Element-Time``, ``Element-Graph``, ``Revision-Id``) go as MQTT 5 user
  properties, its media type as the content type; QoS 1.
- **At least once, in order**: the cursor moves only after the broker acknowledged (PUBACK) what was sent, so a
  server or broker that stops meanwhile makes it publish those again, never skip them. A restarted publication
  with ``operator=istream``/``dstream`` first evaluates (without sending) the window before its cursor, as a
  resumed continuous response does (``protocol.resume``).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from connectors.broker import Broker, packet_properties
from connectors.errors import PublicationNotFound
from delivery.feeds import Start, bounds_headers, first_index, seed_window
from delivery.publications import Publication
from delivery.results import SharedResults, WindowResult, producer
from engine.evaluation import ExtendedEvaluator
from sparql_ext.reporting import parse_report
from sparql_ext.windowing import format_micros, resolve
from sparql_ext.windowref import parse_window_ref
from store.durable import now_micros, write_json
from store.errors import StreamNotFound
from store.stream import Stream
from store.streams import StreamCatalog

log = logging.getLogger(__name__)

BATCH = 500  # windows or elements sent before waiting for their acknowledgements and saving the cursor
POLL_SECONDS = 0.5


class Publisher:
    """The server's one MQTT client for publishing (QoS 1); paho keeps what is not acknowledged and sends it again
    after a reconnect, and ``send`` waits for the broker's PUBACK."""

    def __init__(self, broker: Broker, client_id: str) -> None:
        self.broker = broker
        self.connected = False
        self.last_error: str | None = None
        self._acked: set[int] = set()
        self._abandoned: set[int] = set()
        self._changed = threading.Condition()
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        if broker.username is not None:
            client.username_pw_set(broker.username, broker.password)
        if broker.tls:
            client.tls_set()
        client.reconnect_delay_set(1, 30)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        self._client = client

    def start(self) -> None:
        self._client.connect_async(self.broker.host, self.broker.port, 30)
        self._client.loop_start()

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()

    def send(self, topic: str, payload: bytes, media_type: str, headers: dict[str, str], retain: bool) -> int:
        """Queue a message (QoS 1); returns its packet id, for ``wait``."""
        properties = packet_properties(PacketTypes.PUBLISH, ContentType=media_type,
                                       UserProperty=list(headers.items()))
        return self._client.publish(topic, payload, qos=1, retain=retain, properties=properties).mid

    def wait(self, mids: list[int], stop: threading.Event) -> bool:
        """Whether the broker acknowledged all of ``mids`` (False: ``stop`` was set first)."""
        pending = set(mids)
        with self._changed:
            while True:
                pending -= self._acked
                self._acked -= set(mids)
                if not pending:
                    return True
                if stop.is_set():
                    self._abandoned |= pending
                    return False
                self._changed.wait(POLL_SECONDS)

    def _on_connect(self, _client: mqtt.Client, _userdata: Any, _flags: mqtt.ConnectFlags, reason: Any,
                    _properties: Properties | None) -> None:
        self.connected = not reason.is_failure
        if reason.is_failure:
            self.last_error = f"the broker refused the connection: {reason}"

    def _on_disconnect(self, _client: mqtt.Client, _userdata: Any, _flags: mqtt.DisconnectFlags, reason: Any,
                       _properties: Properties | None) -> None:
        self.connected = False
        if reason.is_failure:
            self.last_error = f"disconnected: {reason}"

    def _on_publish(self, _client: mqtt.Client, _userdata: Any, mid: int, _reason: Any,
                    _properties: Properties | None) -> None:
        with self._changed:
            if mid in self._abandoned:
                self._abandoned.discard(mid)
            else:
                self._acked.add(mid)
            self._changed.notify_all()


@dataclass
class _Cursor:
    """Where a publication goes on from: the next window index of its sequence, or the next element ordinal."""

    sequence: str | None = None
    next_index: int = 0
    next_ordinal: int = 1
    messages: int = 0
    last_sent: int | None = None  # µs


class _Runner:
    """One publication's thread."""

    def __init__(self, publication: Publication, cursor: _Cursor, path: Path, publisher: Publisher,
                 stream: Stream, evaluator: ExtendedEvaluator, shared: SharedResults[WindowResult]) -> None:
        self.publication = publication
        self.cursor = cursor
        self.last_error: str | None = None
        self._path = path
        self._publisher = publisher
        self._stream = stream
        self._evaluator = evaluator
        self._shared = shared
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"publish-{publication.stream}-{publication.name}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def save(self) -> None:
        write_json(self._path, {"publication": asdict(self.publication), "cursor": asdict(self.cursor)})

    def describe(self) -> dict[str, object]:
        return {**{k: v for k, v in asdict(self.publication).items() if k != "base"},
                "sequence": self.cursor.sequence, "messages": self.cursor.messages,
                "next_window": self.cursor.next_index if self.publication.windows else None,
                "next_ordinal": None if self.publication.windows else self.cursor.next_ordinal,
                "last_sent": None if self.cursor.last_sent is None else format_micros(self.cursor.last_sent),
                "last_error": self.last_error}

    def _run(self) -> None:
        try:
            if self.publication.windows is not None:
                self._publish_windows()
            else:
                self._publish_elements()
        except Exception as error:  # noqa: BLE001 - the publication stops, visibly (status, log)
            self.last_error = f"{type(error).__name__}: {error}"
            log.exception("publication %s/%s stopped", self.publication.stream, self.publication.name)

    def _publish_windows(self) -> None:
        publication, stream, cursor = self.publication, self._stream, self.cursor
        assert cursor.sequence is not None
        sequence = stream.windows.sequence(cursor.sequence)
        if sequence is None:
            raise StreamNotFound(f"the publication's window sequence {cursor.sequence} is gone (retired)")
        spec = parse_report(publication.report, publication.operator)
        base_iri = f"{publication.base}/streams/{publication.stream}"  # a continuous response's base IRI
        produce = producer(stream, publication.query, self._evaluator, base_iri, spec, publication.media_type,
                           self._shared)
        stream.windows.hold(sequence.id)
        try:
            seed = seed_window(stream, sequence, Start(cursor.next_index, cursor.next_index > 0, ""), spec)
            if seed is not None:  # the operator's previous window, evaluated and not sent (as before the stop)
                produce(list(seed.ordinals()), seed.commit, seed.end)
            while not self._stop.is_set():
                revisions = stream.windows.windows_from(sequence.id, cursor.next_index, POLL_SECONDS)[:BATCH]
                sent = []
                for revision in revisions:
                    body = produce(list(revision.ordinals()), revision.commit, revision.end)
                    if body is None:
                        continue  # the report policy says nothing for this window
                    headers = {"Window-Index": str(revision.index), "Window-Id": revision.uuid,
                               "Window-Committed": format_micros(revision.commit),
                               **bounds_headers(sequence.spec.kind, revision.start, revision.end),
                               "Window-Sequence": sequence.id, "Stream": publication.stream}
                    sent.append(self._publisher.send(publication.topic, body, publication.media_type, headers,
                                                     publication.retain))
                if revisions and self._acknowledged(sent):
                    cursor.next_index = revisions[-1].index + 1
                    self.save()
        finally:
            stream.windows.release(sequence.id)

    def _publish_elements(self) -> None:
        publication, stream, cursor = self.publication, self._stream, self.cursor
        while not self._stop.is_set():
            cursor.next_ordinal = max(cursor.next_ordinal, stream.first_ordinal)  # expired ones are gone
            if not stream.wait_for(lambda: stream.head() >= cursor.next_ordinal, POLL_SECONDS):
                continue
            last = min(stream.head(), cursor.next_ordinal + BATCH - 1)
            sent = []
            for ordinal in range(cursor.next_ordinal, last + 1):
                record = stream.record(ordinal)
                if record is None or (publication.rule is not None
                                      and not (stream.origin_of(ordinal) or "").startswith(publication.rule + "/")):
                    continue
                headers = {"Element-Ordinal": str(ordinal), "Element-Time": format_micros(record.time),
                           "Element-Graph": record.graph, "Revision-Id": str(stream.uuid_of(ordinal)),
                           "Stream": publication.stream}
                sent.append(self._publisher.send(publication.topic, stream.contents([ordinal]), "application/trig",
                                                 headers, publication.retain))
            if self._acknowledged(sent):
                cursor.next_ordinal = last + 1
                self.save()

    def _acknowledged(self, sent: list[int]) -> bool:
        if not self._publisher.wait(sent, self._stop):
            return False
        if sent:
            self.cursor.messages += len(sent)
            self.cursor.last_sent = now_micros()
        return True


class Publications:
    """The publications of this server (``protocol.services.PublicationRegistry``)."""

    def __init__(self, directory: Path, catalog: StreamCatalog, publisher: Publisher, evaluator: ExtendedEvaluator,
                 shared: SharedResults[WindowResult]) -> None:
        self.directory = directory
        self._catalog = catalog
        self._publisher = publisher
        self._evaluator = evaluator
        self._shared = shared
        self._runners: dict[tuple[str, str], _Runner] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Go on with the publications kept from before."""
        for path in sorted(self.directory.glob("*/*.json")):
            data = json.loads(path.read_text())
            publication = Publication(**data["publication"])
            stream = self._catalog.find(publication.stream)
            if stream is None:
                continue
            runner = self._runner(publication, _Cursor(**data["cursor"]), stream)
            self._runners[(publication.stream, publication.name)] = runner
            runner.start()

    def _runner(self, publication: Publication, cursor: _Cursor, stream: Stream) -> _Runner:
        path = self.directory / publication.stream / f"{publication.name}.json"
        evaluator = self._evaluator.with_local_bases([publication.base]) if publication.base else self._evaluator
        return _Runner(publication, cursor, path, self._publisher, stream, evaluator, self._shared)

    def put(self, publication: Publication) -> tuple[dict[str, object], bool]:
        stream = self._catalog.get(publication.stream)
        cursor = _Cursor(next_ordinal=stream.head() + 1)
        if publication.windows is not None:  # registered now: HEAD is this moment's, as for a continuous response
            ref = parse_window_ref(publication.windows)
            sequence = stream.register(str(ref), resolve(ref, stream))
            cursor = _Cursor(sequence=sequence.id, next_index=first_index(ref, sequence, stream))
        with self._lock:
            old = self._runners.pop((publication.stream, publication.name), None)
            if old is not None:
                old.stop()
            (self.directory / publication.stream).mkdir(parents=True, exist_ok=True)
            runner = self._runner(publication, cursor, stream)
            runner.save()
            self._runners[(publication.stream, publication.name)] = runner
            runner.start()
        return runner.describe(), old is None

    def delete(self, stream: str, name: str) -> None:
        with self._lock:
            runner = self._runners.pop((stream, name), None)
        if runner is None:
            raise PublicationNotFound(f"stream {stream!r} has no publication {name!r}")
        runner.stop()
        (self.directory / stream / f"{name}.json").unlink(missing_ok=True)

    def describe(self, stream: str, name: str | None = None) -> list[dict[str, object]]:
        self._catalog.get(stream)
        with self._lock:
            found = [r.describe() for (s, n), r in sorted(self._runners.items())
                     if s == stream and (name is None or n == name)]
        if name is not None and not found:
            raise PublicationNotFound(f"stream {stream!r} has no publication {name!r}")
        return found

    def stream_deleted(self, stream: str) -> None:
        """A deleted stream's publications end with it."""
        with self._lock:
            gone = [key for key in self._runners if key[0] == stream]
            runners = [self._runners.pop(key) for key in gone]
        for runner in runners:
            runner.stop()
        for path in (self.directory / stream).glob("*.json"):
            path.unlink()

    def status(self) -> list[dict[str, object]]:
        with self._lock:
            return [r.describe() for _, r in sorted(self._runners.items())]

    def close(self) -> None:
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.stop()
