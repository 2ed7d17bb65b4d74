"""The MQTT side of a server (``serve --mqtt URL``): a subscriber per stream that has ``mqtt-topic`` filters,
following the streams' configuration as it changes, and the publisher with its publications; their status for
``/status``. Built and started by ``concentrator.compose``."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from connectors.broker import Broker, client_id_prefix
from connectors.mqtt_in import StreamSubscriber
from connectors.mqtt_out import Publications, Publisher
from delivery.publications import rule_publication
from delivery.results import SharedResults, WindowResult
from engine.evaluation import ExtendedEvaluator
from rules.registry import RuleRegistry
from store.stream import Stream
from store.streams import StreamCatalog

log = logging.getLogger(__name__)


class MqttConnector:
    def __init__(self, broker: Broker, data_dir: Path, streams: StreamCatalog, evaluator: ExtendedEvaluator,
                 window_results: SharedResults[WindowResult], rules: RuleRegistry) -> None:
        self.broker = broker
        self._streams = streams
        self._rules = rules
        self._prefix = client_id_prefix(data_dir)
        self.publisher = Publisher(broker, f"{self._prefix}-out")
        self.publications = Publications(data_dir / "publications", streams, self.publisher, evaluator,
                                         window_results)
        self._subscribers: dict[str, StreamSubscriber] = {}
        self._lock = threading.Lock()
        self._started = False

    def start(self, base_url: str) -> None:
        """Connect (in the background: a broker that is not up yet is retried with back-off), subscribe for the
        streams that have topics, go on with the kept publications, and publish for the rules that say so."""
        catalog = self._streams
        self.publisher.start()
        with self._lock:
            self._started = True
        for name in catalog.names():
            self.stream_changed(catalog.get(name))
        catalog.on_change.append(self.stream_changed)
        catalog.on_delete.append(self.stream_deleted)
        self.publications.start()
        for rule in self._rules.rules():
            if rule.publish is not None:
                self.publish_rule(rule.name, rule.output, rule.publish, base_url)

    def publish_rule(self, rule: str, output: str, topic: str, base_url: str) -> None:
        """Publish the rule's output elements to ``topic`` (kept as it is when it already does)."""
        publication = rule_publication(rule, output, topic, base_url)
        existing = [p for p in self.publications.describe(output, None) if p["name"] == publication.name]
        if existing and existing[0]["topic"] == topic:
            return
        self.publications.put(publication)

    def stream_changed(self, stream: Stream) -> None:
        name, topics = stream.config.name, list(stream.config.mqtt.topics)
        with self._lock:
            if not self._started:
                return
            subscriber = self._subscribers.get(name)
            if subscriber is None and topics:
                subscriber = StreamSubscriber(self.broker, f"{self._prefix}-in-{name}", name, self._streams,
                                              topics)
                self._subscribers[name] = subscriber
                subscriber.start()
                return
            if subscriber is not None and topics:
                subscriber.update(topics)
                return
            if subscriber is not None:
                del self._subscribers[name]
        if subscriber is not None:
            subscriber.close(end_session=True)  # no topics left: the broker need not keep messages for it

    def stream_deleted(self, name: str) -> None:
        with self._lock:
            subscriber = self._subscribers.pop(name, None)
        if subscriber is not None:
            subscriber.close(end_session=True)
        self.publications.stream_deleted(name)

    def status(self) -> dict[str, object]:
        with self._lock:
            subscribers = dict(self._subscribers)
        return {
            "broker": str(self.broker),
            "publisher": {"connected": self.publisher.connected, "last_error": self.publisher.last_error},
            "subscriptions": {name: s.status() for name, s in sorted(subscribers.items())},
            "publications": self.publications.status(),
        }

    def close(self) -> None:
        with self._lock:
            subscribers = list(self._subscribers.values())
            self._subscribers.clear()
            self._started = False
        for subscriber in subscribers:
            subscriber.close()
        self.publications.close()
        self.publisher.close()
