"""A stream fed from MQTT topics (docs/connectors.md, "MQTT in"): one client per stream, exactly-once elements.

- **Persistent session**: a fixed client id per stream (``<prefix>-in-<stream>``), ``clean_start=False`` and a
  session that does not expire, so the broker keeps the subscription and queues QoS 1 messages while the server
  is down, and delivers them when it is back.
- **PUBACK after commit**: a message is acknowledged only once its element (or its dead letter) is committed
  durably (``Stream.flush``); a server that stops before that gets the message again. The acknowledger thread
  flushes whatever was accepted meanwhile and acknowledges it in order: one fsync for many messages while up to
  ``RECEIVE_MAXIMUM`` are in flight.
- **Exactly once**: a message delivered again holds an element whose graph name the stream already has
  (``DuplicateElement``): it is counted as a duplicate and acknowledged, not stored twice.
- **Dead letters**: a message that is not one element the stream takes (bad syntax, an unknown content type, a
  timestamp out of order, …) becomes an element of the dead-letter stream with the error and the raw payload; it
  is acknowledged and the subscription goes on.
- **Reconnects** with exponential back-off (paho's, ``BACKOFF_SECONDS``); messages of a lost connection that were
  not acknowledged are delivered again on the next one (and found to be duplicates if they were committed).
- **A message that kills its parser** is a dead letter once it has killed the process ``PARSING_DEATHS`` times, not
  parsed again (``ParsingMarks``): unacknowledged, it would otherwise be delivered again, crash the process again,
  and so on for ever.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from connectors.broker import Broker, packet_properties
from connectors.errors import ConnectorSettingInvalid, NoBroker
from connectors.messages import MessageSettings, dead_letter, element_of_message
from sparql_ext.errors import ConcentratorError
from sparql_ext.windowing import format_micros
from store.durable import now_micros, write_bytes
from store.errors import DuplicateElement, StorageFailure
from store.stream import Stream
from store.stream_config import MESSAGE_FORMATS, StreamConfig
from store.streams import StreamCatalog, check_stream_name
from store.terms import named_node

log = logging.getLogger(__name__)

RECEIVE_MAXIMUM = 1000  # QoS 1 messages the broker may send before the first is acknowledged
BACKOFF_SECONDS = (1, 30)  # reconnect delays: from the first, doubling, up to the second
SESSION_NEVER_EXPIRES = 0xFFFFFFFF
KEEPALIVE_SECONDS = 30
# Times the process may die while it parses one message before that message is a dead letter: the first death may
# be a kill (a deployment, the OOM killer) that came while a good message was parsed.
PARSING_DEATHS = 2


def check_settings(config: StreamConfig, broker: Broker | None) -> None:
    """A stream's MQTT block, before the catalog takes it (docs/connectors.md): topics need a broker (``serve
    --mqtt``), messages without a content type a format a stream takes, the graph template a name per message, and
    bad messages a dead-letter stream other than the stream itself."""
    mqtt = config.mqtt
    if mqtt.topics and broker is None:
        raise NoBroker("mqtt-topic: this server has no MQTT broker: start it with serve --mqtt mqtt://HOST:PORT")
    if mqtt.format not in MESSAGE_FORMATS:
        raise ConnectorSettingInvalid(f"mqtt-format={mqtt.format!r}: use one of {', '.join(MESSAGE_FORMATS)}")
    template = mqtt.graph_template
    if template is not None:
        named_node(template.replace("{topic}", "t").replace("{uuid}", str(uuid.uuid4())).replace("{digest}", "d"),
                   "graph-template")
        if "{uuid}" not in template and "{digest}" not in template:
            raise ConnectorSettingInvalid(
                f"graph-template={template!r}: put {{uuid}} (a fresh UUID per message) or {{digest}} (a UUID of the "
                "topic and payload) in it: each element needs its own graph name")
    if mqtt.dead_letter is not None:
        check_stream_name(mqtt.dead_letter)
        if mqtt.dead_letter == config.name:
            raise ConnectorSettingInvalid("dead-letter: a stream cannot be its own dead-letter stream")


@dataclass
class TopicCounts:
    """What one subscribed topic filter has brought (``/status``: ``mqtt.subscriptions``)."""

    messages: int = 0
    elements: int = 0  # elements accepted into the stream
    duplicates: int = 0  # messages whose element the stream already had (delivered again)
    punctuations: int = 0
    dead_letters: int = 0
    last_message: int | None = None  # receipt time, µs
    last_element_time: int | None = None  # timestamp of the latest element, µs

    def to_json(self, now: int) -> dict[str, object]:
        return {
            "messages": self.messages, "elements": self.elements, "duplicates": self.duplicates,
            "punctuations": self.punctuations, "dead_letters": self.dead_letters,
            "last_message": None if self.last_message is None else format_micros(self.last_message),
            "lag_seconds": None if self.last_element_time is None
            else round((now - self.last_element_time) / 1_000_000, 3),
        }


@dataclass
class _Delivery:
    """A received message waiting for its element to be durable before it is acknowledged."""

    connection: int  # the connection it came on (a packet id means nothing on another)
    mid: int
    qos: int
    streams: tuple[Stream, ...]  # what must be flushed first (the stream, or the dead-letter stream)


@dataclass
class _Pending:
    deliveries: list[_Delivery] = field(default_factory=list)
    closing: bool = False


class ParsingMarks:
    """Which message a subscriber is parsing, on disk, so that one that kills the process is not parsed for ever.

    Before a message is parsed, its mark (the SHA-256 of its topic and payload) is written in place into the file
    ``parsing``, mapped in memory; once the message is handled (an element, a duplicate or a dead letter), the mark
    is blanked. Neither write is synced, nor a system call: a process that dies (SIGSEGV, abort) leaves its shared
    mapping's pages in the page cache, which is what these marks are for (a system call per write, which lets
    another thread take the GIL, cost ≈ 5–9 % of MQTT ingestion; an fdatasync ≈ 90 µs, a fifth of a message's
    budget). A mark found at start-up counts a death: ``deaths`` are kept in ``suspects`` (``<mark> <deaths>`` a
    line, written durably: it is rare) until the message comes again (the broker delivers what was not
    acknowledged) and is handled."""

    _BLANK = b" " * 64 + b"\n"
    _MARK = re.compile("[0-9a-f]{64}")

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._suspects = directory / "suspects"
        slot = directory / "parsing"
        self.deaths: dict[str, int] = {}  # mark -> times the process died while it parsed that message
        for line in self._suspects.read_text().splitlines() if self._suspects.exists() else ():
            mark, _, deaths = line.partition(" ")
            if self._MARK.fullmatch(mark) and deaths.isdigit():
                self.deaths[mark] = int(deaths)
        left = slot.read_bytes().strip().decode("ascii", "replace") if slot.exists() else ""
        if self._MARK.fullmatch(left):
            self.deaths[left] = self.deaths.get(left, 0) + 1
            self._save()
        descriptor = os.open(slot, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(descriptor, len(self._BLANK))
            self._slot: mmap.mmap | None = mmap.mmap(descriptor, len(self._BLANK))
        finally:
            os.close(descriptor)  # (the mapping keeps the file)
        self._slot[:] = self._BLANK

    @staticmethod
    def mark(topic: str, payload: bytes) -> str:
        return hashlib.sha256(topic.encode() + b"\0" + payload).hexdigest()

    def parsing(self, mark: str) -> None:
        if self._slot is not None:
            self._slot[:] = mark.encode("ascii") + b"\n"

    def handled(self) -> None:
        if self._slot is not None:  # (closed: the subscriber's loop has stopped)
            self._slot[:] = self._BLANK

    def forget(self, mark: str) -> None:
        """A suspect handled at last (parsed, or a dead letter)."""
        if self.deaths.pop(mark, None) is not None:
            self._save()

    def _save(self) -> None:
        write_bytes(self._suspects, "".join(f"{mark} {deaths}\n" for mark, deaths in sorted(self.deaths.items()))
                    .encode())

    def close(self) -> None:
        if self._slot is not None:
            self._slot.close()
            self._slot = None


class StreamSubscriber:
    """The MQTT client feeding one stream from its ``mqtt-topic`` filters (see the module doc). ``marks``: where it
    marks the message it parses (``ParsingMarks``; by default beside the streams, ``mqtt-in/<stream>``)."""

    def __init__(self, broker: Broker, client_id: str, stream: str, catalog: StreamCatalog,
                 topics: list[str], marks: Path | None = None) -> None:
        self.broker = broker
        self._marks = ParsingMarks(marks or catalog.directory.parent / "mqtt-in" / stream)
        self.client_id = client_id
        self.stream_name = stream
        self._catalog = catalog
        self._topics = list(topics)
        self._unsubscribe: set[str] = set()  # filters removed while disconnected
        self.counts: dict[str, TopicCounts] = {topic: TopicCounts() for topic in topics}
        self.connected = False
        self.connections = 0
        self.last_error: str | None = None
        self._pending = _Pending()
        self._wake = threading.Condition()
        self._client = self._make_client()
        self._acker = threading.Thread(target=self._ack_loop, name=f"mqtt-ack-{stream}", daemon=True)

    def _make_client(self) -> mqtt.Client:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv5,
                             manual_ack=True)
        if self.broker.username is not None:
            client.username_pw_set(self.broker.username, self.broker.password)
        if self.broker.tls:
            client.tls_set()
        client.reconnect_delay_set(*BACKOFF_SECONDS)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        return client

    # -- life --------------------------------------------------------------------------------------------------

    def start(self) -> None:
        properties = packet_properties(PacketTypes.CONNECT, SessionExpiryInterval=SESSION_NEVER_EXPIRES,
                                       ReceiveMaximum=RECEIVE_MAXIMUM)
        self._acker.start()
        # connect_async + loop_start: the first connection is retried with the same back-off as reconnects
        self._client.connect_async(self.broker.host, self.broker.port, KEEPALIVE_SECONDS, clean_start=False,
                                   properties=properties)
        self._client.loop_start()

    def update(self, topics: list[str]) -> None:
        """Follow a reconfigured stream's topic filters: subscribe to the new ones, unsubscribe the removed."""
        added = [t for t in topics if t not in self._topics]
        removed = [t for t in self._topics if t not in topics]
        self._topics = list(topics)
        for topic in added:
            self.counts.setdefault(topic, TopicCounts())
        if self.connected:
            if added:
                self._client.subscribe([(t, SubscribeOptions(qos=1)) for t in added])
            if removed:
                self._client.unsubscribe(removed)
        else:
            self._unsubscribe.update(removed)

    def close(self, *, end_session: bool = False) -> None:
        """Acknowledge what is committed, then disconnect. ``end_session`` (the stream was deleted): unsubscribe and
        let the broker drop the session, so it stops keeping messages for it."""
        with self._wake:
            self._pending.closing = True
            self._wake.notify()
        if self._acker.is_alive():
            self._acker.join(timeout=30)
        if end_session and self.connected:
            self._client.unsubscribe(self._topics)
        properties = packet_properties(PacketTypes.DISCONNECT,
                                       SessionExpiryInterval=0 if end_session else SESSION_NEVER_EXPIRES)
        self._client.disconnect(properties=properties)
        self._client.loop_stop()
        self._marks.close()

    def status(self) -> dict[str, object]:
        now = now_micros()
        return {
            "stream": self.stream_name, "client_id": self.client_id, "connected": self.connected,
            "connections": self.connections, "last_error": self.last_error,
            "topics": {topic: self.counts[topic].to_json(now) for topic in self._topics if topic in self.counts},
        }

    # -- paho's callbacks (its network thread) -----------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, _userdata: Any, flags: mqtt.ConnectFlags,
                    reason: Any, _properties: Properties | None) -> None:
        if reason.is_failure:
            self.last_error = f"the broker refused the connection: {reason}"
            log.warning("MQTT %s: %s", self.client_id, self.last_error)
            return
        with self._wake:
            self.connections += 1
            self.connected = True
        if self._unsubscribe:
            client.unsubscribe(sorted(self._unsubscribe))
            self._unsubscribe.clear()
        if self._topics:  # a kept session has them already; subscribing again changes nothing
            client.subscribe([(t, SubscribeOptions(qos=1)) for t in self._topics])
        log.info("MQTT %s connected to %s (session %s)", self.client_id, self.broker,
                 "resumed" if flags.session_present else "new")

    def _on_disconnect(self, _client: mqtt.Client, _userdata: Any, _flags: mqtt.DisconnectFlags, reason: Any,
                       _properties: Properties | None) -> None:
        with self._wake:
            self.connected = False
        if reason.is_failure:
            self.last_error = f"disconnected: {reason}"
            log.warning("MQTT %s: %s; reconnecting", self.client_id, self.last_error)

    def _on_message(self, _client: mqtt.Client, _userdata: Any, message: mqtt.MQTTMessage) -> None:
        try:
            self._receive(message)
        except Exception:  # noqa: BLE001 - an exception would stop paho's loop: the message stays unacknowledged
            log.exception("MQTT %s: message on %s not handled", self.client_id, message.topic)
            self.last_error = "a message could not be handled (see the server log); it will be delivered again"

    def _receive(self, message: mqtt.MQTTMessage) -> None:
        received = now_micros()
        counts = self._counts_for(message.topic)
        counts.messages += 1
        counts.last_message = received
        stream = self._catalog.find(self.stream_name)
        if stream is None:
            return  # deleted: the hub closes this subscriber
        content_type = getattr(message.properties, "ContentType", None) if message.properties else None
        payload = bytes(message.payload)
        flushed: tuple[Stream, ...] = (stream,)
        mark = self._marks.mark(message.topic, payload)
        deaths = self._marks.deaths.get(mark, 0) if self._marks.deaths else 0
        if deaths >= PARSING_DEATHS:  # it kills the process: not parsed again
            flushed = self._dead_letter(stream, message.topic, payload, content_type, received, counts,
                                        f"the server stopped {deaths} times while it parsed this message (delivered "
                                        "again each time): it is not parsed again")
            self._marks.forget(mark)
        else:
            self._marks.parsing(mark)
            try:
                element = element_of_message(payload, content_type, message.topic, MessageSettings.of(stream.config))
                ordinal = stream.accept(element, received)
                if ordinal is None:
                    counts.punctuations += 1
                else:
                    counts.elements += 1
                    counts.last_element_time = element.time
            except DuplicateElement:
                counts.duplicates += 1
            except StorageFailure as error:  # not acknowledged: delivered again once the stream can store it
                self.last_error = error.message
                return
            except (ConcentratorError, ValueError, SyntaxError) as error:
                text = error.message if isinstance(error, ConcentratorError) else str(error)
                flushed = self._dead_letter(stream, message.topic, payload, content_type, received, counts, text)
            finally:
                self._marks.handled()
            if deaths:
                self._marks.forget(mark)
        with self._wake:
            self._pending.deliveries.append(_Delivery(self.connections, message.mid, message.qos, flushed))
            self._wake.notify()

    def _counts_for(self, topic: str) -> TopicCounts:
        for subscribed in self._topics:
            if mqtt.topic_matches_sub(subscribed, topic):
                return self.counts[subscribed]
        return self.counts.setdefault(topic, TopicCounts())  # a filter removed since (the session kept it)

    def _dead_letter(self, stream: Stream, topic: str, payload: bytes, content_type: str | None, received: int,
                     counts: TopicCounts, error: str) -> tuple[Stream, ...]:
        """Accept the message's dead letter: the streams to flush before it is acknowledged."""
        letters = self._dead_letter_stream(stream.config)
        try:
            letters.accept(dead_letter(self.stream_name, topic, payload, content_type, error), received)
            counts.dead_letters += 1
        except DuplicateElement:
            counts.duplicates += 1  # this bad message was delivered before: it is a dead letter already
        return stream, letters

    def _dead_letter_stream(self, config: StreamConfig) -> Stream:
        name = config.dead_letter_stream
        return self._catalog.find(name) or self._catalog.put(StreamConfig(name))[0]

    # -- acknowledging ------------------------------------------------------------------------------------------

    def _ack_loop(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: bool(self._pending.deliveries) or self._pending.closing)
                batch, self._pending.deliveries = self._pending.deliveries, []
                closing = self._pending.closing
            if batch:
                self._acknowledge(batch)
            if closing and not batch:
                return

    def _acknowledge(self, batch: list[_Delivery]) -> None:
        try:
            for stream in {id(s): s for d in batch for s in d.streams}.values():
                stream.flush()
        except StorageFailure as error:  # nothing acknowledged: the broker delivers these again
            self.last_error = error.message
            log.error("MQTT %s: %s", self.client_id, error.message)
            return
        with self._wake:
            connection = self.connections if self.connected else -1
        for delivery in batch:  # in the order they came, as MQTT requires
            if delivery.qos and delivery.connection == connection:
                self._client.ack(delivery.mid, delivery.qos)
