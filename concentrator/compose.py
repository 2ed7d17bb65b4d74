"""The composition root: the one place that wires every part of the server together — the services the HTTP
layer uses (dataset, streams, evaluator, rules), the Spark window pipeline, and rule firing on the windows the
pipeline commits, and the MQTT connector (``serve --mqtt``). ``concentrator serve`` and ``concentrator replay`` both
build their server with ``assemble``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import requests
from flask import Flask

from connectors import ldes, mqtt_in
from connectors.broker import Broker as Broker  # re-exported: the CLI names it
from connectors.broker import parse_broker
from connectors.hub import MqttConnector
from connectors.ldes import LdesFollowers
from delivery.fanout import Fanout
from delivery.subscriptions import Registrations
from engine.context import EvaluationContext
from engine.evaluation import ExtendedEvaluator
from engine.remote import HttpSession
from protocol.app import create_app
from protocol.services import MqttService, QueryStats, ServerConfig, Services, query_pool
from rules.event_rules import EventRules
from rules.firing import RuleRunner
from rules.registry import RuleRegistry
from rules.tasks import ExecutorPool, Placement
from store import RevisionedDataset
from store.canonical import FramingProcesses
from store.streams import StreamCatalog

if TYPE_CHECKING:
    from pipeline.batches import WindowPipeline

log = logging.getLogger(__name__)


def mqtt_broker(url: str) -> Broker:
    """``serve --mqtt URL``: the broker (BrokerSettingInvalid when the URL is not one)."""
    return parse_broker(url)


def open_services(config: ServerConfig, mqtt: Broker | None = None) -> Services:
    """The dataset, the streams, the evaluator and the rules of ``config.data_dir``, without a pipeline; the stream
    catalog takes a configuration once the connectors have checked their blocks (``mqtt``: the broker that MQTT
    topics need, None: none). The one place ``Services`` is built (``assemble`` adds the pipeline, rule firing and the
    connectors; tests use it alone)."""
    dataset = RevisionedDataset(config.data_dir, in_memory=config.in_memory, retention=config.retention)
    streams = StreamCatalog(config.data_dir / "streams", in_memory=config.in_memory)
    allow = None if config.service_allow is None else frozenset(config.service_allow)
    streams.checks += [lambda given: mqtt_in.check_settings(given, mqtt),
                       lambda given: ldes.check_settings(given, allow)]
    http = cast(HttpSession, requests.Session())  # what the evaluator uses of it (engine imports no HTTP library)
    evaluator = ExtendedEvaluator(EvaluationContext.for_requests(dataset, streams, config.base_urls, http,
                                                                 allow_hosts=allow))
    rules = RuleRegistry(config.data_dir / "rules", evaluator)
    registrations = Registrations()
    return Services(dataset, streams, evaluator, rules, event_rules=EventRules(rules),
                    framing=FramingProcesses(config.framing_processes), continuous=registrations,
                    queries=QueryStats(pool=query_pool(config, dataset)), fanout=Fanout(registrations))


def http_app(config: ServerConfig) -> Flask:
    """The HTTP app over ``open_services(config)``: no pipeline, no MQTT (tests, benchmarks)."""
    return create_app(config, open_services(config))


@dataclass
class Server:
    """A server's parts, assembled; ``start()`` starts the MQTT connector and the pipeline, ``close()`` stops and
    closes everything in order (the pipeline first: its batches write to the streams and fire rules; then MQTT,
    whose messages become elements)."""

    services: Services
    runner: RuleRunner
    pipeline: WindowPipeline | None = None
    followers: LdesFollowers | None = None  # streams that follow an LDES (ldes-source=)
    rule_errors: list[str] = field(default_factory=list)  # rules of the rules directory that did not load
    mqtt: MqttConnector | None = None
    base_url: str = ""
    _starting: threading.Thread | None = None
    _closed: bool = False

    def start(self, *, background: bool = True) -> threading.Thread | None:
        """Fire rules on windows committed before the last stop, then start the pipeline (Spark takes seconds to
        start: in the background, requests are answered meanwhile)."""
        caught_up = self.runner.catch_up()
        if caught_up:
            log.warning("fired rules on %d window(s) committed before the last stop", caught_up)
        if self.mqtt is not None:  # before the pipeline: its publications hold their window sequences
            self.mqtt.start(self.base_url)
        if self.followers is not None:
            self.followers.start()
        if self.pipeline is None:
            return None
        if background:
            self._starting = self.pipeline.start_in_background()
            return self._starting
        self.pipeline.start()
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.followers is not None:  # they write to streams: stopped before the streams close
                self.followers.close()
            if self._starting is not None:
                if self.pipeline is not None:
                    self.pipeline.abandon_start()  # Spark still starting: no query, no wait for its first batch
                self._starting.join()  # a stop before the query runs would not stop the query started after it
            if self.pipeline is not None:
                self.pipeline.stop(stop_session=True)
            if self.mqtt is not None:
                self.mqtt.close()
        finally:
            self.services.close()


def assemble(config: ServerConfig, *, spark_master: str | None, rules_dir: Path | None = None, base_url: str = "",
             rules_on: Placement = "auto", spark_conf: dict[str, str] | None = None,
             prepare: Callable[[Services], None] | None = None, mqtt: Broker | None = None) -> Server:
    """Open the services of ``config``, ``prepare`` them (replay: its streams and base data), load the rules
    directory, wire the pipeline (``spark_master`` None: no pipeline, repeating windows never complete) to rule
    firing, and the MQTT connector to ``mqtt`` (None: no MQTT)."""
    opened = open_services(config, mqtt)
    if prepare is not None:
        prepare(opened)
    errors = opened.rules.load_directory(rules_dir, base_url) if rules_dir is not None else []
    pipeline = None
    pool = None
    if spark_master is not None:
        from pipeline.batches import WindowPipeline
        from pipeline.spark import SparkSettings, is_on_this_machine

        pipeline = WindowPipeline(opened.streams, config.data_dir,
                                  SparkSettings(master=spark_master, conf=spark_conf or {}))
        opened.pipeline_status = pipeline.status
        spark = pipeline
        # executors on this machine read windows from the element log's files: the driver moves no window content
        pool = ExecutorPool(lambda: spark.spark, reads_log=is_on_this_machine(spark_master))
        opened.executors_status = pool.status
    runner = RuleRunner(opened.rules, opened.evaluator, placement=rules_on, spark_master=spark_master or "",
                        pool=pool)
    if pipeline is not None:
        pipeline.on_windows.append(runner.on_windows)
        pipeline.on_started.append(runner.warm_up)
    connector = None
    if mqtt is not None:
        connector = MqttConnector(mqtt, config.data_dir, opened.streams, opened.evaluator, opened.window_results,
                                  opened.rules)
        opened.mqtt = MqttService(str(mqtt), connector.status, connector.publications)
    followers = LdesFollowers(opened.streams, None if config.service_allow is None else
                              frozenset(config.service_allow))
    opened.streams.on_change.append(followers.on_change)
    opened.ldes_followers_status = followers.status
    return Server(opened, runner, pipeline, followers, errors, connector, base_url)
