"""GET /metrics: the server's state in the Prometheus text format (prometheus-client), for operators' scrapers.

Nothing is counted twice: a custom collector reads ``/status``'s document (``protocol.status.status_document``) at
each scrape and reports its numbers, so ``/metrics`` and ``/status`` agree, and the layers that count (store,
pipeline, rules) know nothing of Prometheus. The process's own metrics (``process_resident_memory_bytes`` …) come
from the client's ``ProcessCollector``. Counters and histograms count since the server started, except the
rules' firings, outputs and failures and the window counts, which are kept on disk. docs/metrics.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from flask import Blueprint, Flask, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.access import reads_only
from protocol.parameters import reads
from protocol.services import services_of
from protocol.status import status_document

bp = Blueprint("metrics", __name__)
REGISTRY_KEY = "concentrator.metrics"

Document = Mapping[str, Any]


def install(app: Flask) -> None:
    """The app's own registry (not the client's global one: two apps in one process, as in tests, stay apart)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(lambda: status_document(services_of(app), app.config["CONCENTRATOR"])))
    ProcessCollector(registry=registry)
    app.extensions[REGISTRY_KEY] = registry
    app.register_blueprint(bp)


@bp.route("/metrics", methods=["GET"])
@reads_only
@reads()
def metrics() -> Response:
    registry: CollectorRegistry = current_app.extensions[REGISTRY_KEY]
    return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


class StatusCollector(Collector):
    """Metric families made from one ``/status`` document per scrape."""

    def __init__(self, document: Callable[[], Document]) -> None:
        self.document = document

    def collect(self) -> Iterator[Metric]:
        status = self.document()
        load = status.get("load", {})
        yield from _stream_metrics(status.get("streams", {}), load.get("subscribers_per_sequence", {}))
        yield from _load_metrics(load)
        yield from _pipeline_metrics(status.get("pipeline", {}))
        yield from _rule_metrics(status.get("rules", {}))
        dataset = GaugeMetricFamily("concentrator_dataset_revisions", "Revisions of the dataset (its HEAD number).")
        dataset.add_metric([], status.get("dataset", {}).get("revisions", 0))
        yield dataset
        queries = status.get("queries", {})
        running = GaugeMetricFamily("concentrator_queries_running", "Queries being evaluated for clients now.")
        running.add_metric([], queries.get("running", 0))
        stopped = CounterMetricFamily("concentrator_queries_stopped_client_gone", "Queries stopped because their "
                                      "client closed its connection, since start-up.")
        stopped.add_metric([], queries.get("stopped_client_gone", 0))
        yield from (running, stopped)
        yield from _query_budget_metrics(queries)


def _query_budget_metrics(queries: Document) -> Iterator[Metric]:
    """Overload, as ``/status``'s ``queries`` has it: queries waiting for a query process, stopped by their budget,
    refused (by reason), and the query processes alive."""
    queued = GaugeMetricFamily("concentrator_queries_queued", "Queries waiting for a free query process now.")
    queued.add_metric([], queries.get("queued", 0))
    budget = CounterMetricFamily("concentrator_queries_stopped_budget", "Queries stopped because they ran (or "
                                 "waited) past their time budget, since start-up.")
    budget.add_metric([], queries.get("stopped_budget", 0))
    refused = CounterMetricFamily("concentrator_queries_refused", "Queries refused before they ran, since start-up: "
                                  "client_limit (429, --queries-per-client), queue_full (503, --query-queue or the "
                                  "request threads).", labels=["reason"])
    for reason, count in sorted(queries.get("refused", {}).items()):
        refused.add_metric([reason], count)
    processes = GaugeMetricFamily("concentrator_query_processes", "Query worker processes alive now.")
    processes.add_metric([], queries.get("processes", 0))
    yield from (queued, budget, refused, processes)


def _load_metrics(load: Document) -> Iterator[Metric]:
    """What the server holds and refused (``/status``'s ``load``)."""
    connections = load.get("connections", {})
    held = GaugeMetricFamily("concentrator_connections_held", "Connections the HTTP server holds now (waiting for "
                             "a request, kept alive, or being handled); continuous responses are counted apart.")
    held.add_metric([], connections.get("held", 0))
    busy = GaugeMetricFamily("concentrator_threads_busy", "Request threads busy now, by pool (control: /status and "
                             "/metrics; writes; reads).", labels=["pool"])
    for pool, count in sorted(connections.get("threads_busy", {}).items()):
        busy.add_metric([pool], count)
    fanout = load.get("fanout") or {}
    subscribers = GaugeMetricFamily("concentrator_fanout_subscribers", "Continuous responses the fan-out's event "
                                    "loop holds now (HTTP and WebSocket).")
    subscribers.add_metric([], fanout.get("subscribers", 0))
    feeds = GaugeMetricFamily("concentrator_fanout_feeds", "Feeds the fan-out follows now (one evaluation per "
                              "window each).")
    feeds.add_metric([], fanout.get("feeds", 0))
    slow = CounterMetricFamily("concentrator_fanout_ended_too_slow", "Continuous responses ended because their "
                               "client read more slowly than their windows came, since start-up.")
    slow.add_metric([], fanout.get("ended_too_slow", 0))
    refused = CounterMetricFamily("concentrator_requests_refused", "Requests refused for a limit or the load since "
                                  "start-up, by HTTP status (408, 413, 429, 503).", labels=["status"])
    for status, count in sorted(load.get("refused", {}).items()):
        refused.add_metric([status], count)
    timed_out = CounterMetricFamily("concentrator_requests_timed_out", "Requests whose headers or body did not "
                                    "arrive in time (408 from the server's gate), since start-up.", labels=["what"])
    for what, count in sorted(connections.get("timed_out", {}).items()):
        timed_out.add_metric([what], count)
    yield from (held, busy, subscribers, feeds, slow, refused, timed_out)


def _stream_metrics(streams: Document, per_sequence: Document) -> Iterator[Metric]:
    labels = ["stream"]
    retained = GaugeMetricFamily("concentrator_stream_elements", "Elements the stream retains.", labels=labels)
    head = GaugeMetricFamily("concentrator_stream_head_ordinal", "Ordinal of the stream's newest element.",
                             labels=labels)
    elements = CounterMetricFamily("concentrator_stream_elements_ingested", "Elements committed since start-up.",
                                   labels=labels)
    statements = CounterMetricFamily("concentrator_stream_statements_ingested", "Statements committed since "
                                     "start-up (each element's graph statements and its timestamp triple).",
                                     labels=labels)
    written = CounterMetricFamily("concentrator_stream_written_bytes", "Bytes written to the element log since "
                                  "start-up.", labels=labels)
    errors = CounterMetricFamily("concentrator_stream_upload_errors", "Uploads the stream refused since start-up, "
                                 "by HTTP status.", labels=["stream", "status"])
    time = GaugeMetricFamily("concentrator_stream_timestamp_seconds", "Stream time (the newest timestamp or "
                             "punctuation committed), as a Unix timestamp.", labels=labels)
    # per stream, not per sequence: sequences come and go with subscribers (their own counts are in /status)
    windows = CounterMetricFamily("concentrator_stream_windows_emitted", "Windows materialized for the stream's "
                                  "registered window sequences.", labels=labels)
    subscribers = GaugeMetricFamily("concentrator_continuous_subscribers", "Continuous responses running now.",
                                    labels=labels)
    per_stream: dict[str, int] = dict.fromkeys(streams, 0)
    for sequence in per_sequence.values():
        per_stream[sequence["stream"]] = per_stream.get(sequence["stream"], 0) + sequence["subscribers"]
    for name, stream in streams.items():
        ingest = stream.get("ingest", {})
        retained.add_metric([name], stream["elements"])
        head.add_metric([name], stream["head"])
        elements.add_metric([name], ingest.get("elements", 0))
        statements.add_metric([name], ingest.get("statements", 0))
        written.add_metric([name], ingest.get("bytes_written", 0))
        for status_code, count in sorted(ingest.get("upload_errors", {}).items()):
            errors.add_metric([name, status_code], count)
        if stream.get("stream_time_us") is not None:
            time.add_metric([name], stream["stream_time_us"] / 1_000_000)
        windows.add_metric([name], stream["windows_emitted"])
    for name, count in sorted(per_stream.items()):
        subscribers.add_metric([name], count)
    yield from (retained, head, elements, statements, written, errors, time, windows, subscribers)


def _pipeline_metrics(pipeline: Document) -> Iterator[Metric]:
    up = GaugeMetricFamily("concentrator_pipeline_up", "1 while the Spark window pipeline runs, else 0.")
    up.add_metric([], 1 if pipeline.get("ready") and pipeline.get("active") else 0)
    yield up
    if "batches" not in pipeline:  # no pipeline (serve --no-pipeline)
        return
    for key, help_text in (("batches", "Micro-batches applied since start-up."),
                           ("errors", "Pipeline errors since start-up (failed batches, starts, callbacks)."),
                           ("restarts", "Restarts of the streaming query since start-up."),
                           ("windows_emitted", "Windows materialized since start-up.")):
        counter = CounterMetricFamily(f"concentrator_pipeline_{key}", help_text)
        counter.add_metric([], pipeline[key])
        yield counter
    yield _histogram("concentrator_pipeline_batch_seconds", "Time per micro-batch.", [],
                     {"": pipeline["batch_seconds"]})
    last = GaugeMetricFamily("concentrator_pipeline_last_batch_seconds", "Time of the latest micro-batch.")
    if pipeline.get("last_batch_seconds") is not None:
        last.add_metric([], pipeline["last_batch_seconds"])
    yield last
    streams = pipeline.get("streams", {})
    lag = GaugeMetricFamily("concentrator_pipeline_lag_elements", "Elements committed that the pipeline has not "
                            "read yet.", labels=["stream"])
    lag_time = GaugeMetricFamily("concentrator_pipeline_lag_seconds", "Stream time committed ahead of the stream "
                                 "time the pipeline has read.", labels=["stream"])
    for name, stream in streams.items():
        lag.add_metric([name], stream["lag_elements"])
        if stream.get("lag_seconds") is not None:
            lag_time.add_metric([name], stream["lag_seconds"])
    yield lag
    yield lag_time
    yield _histogram("concentrator_window_latency_seconds", "From stream time reaching a window's end to its "
                     "revision's commit.", ["stream"],
                     {name: stream["window_latency_seconds"] for name, stream in streams.items()})


def _rule_metrics(rules: Document) -> Iterator[Metric]:
    labels = ["rule"]
    families = {key: CounterMetricFamily(f"concentrator_rule_{key}", help_text, labels=labels) for key, help_text in (
        ("firings", "Firings of the rule (windows it was evaluated on)."),
        ("outputs", "Elements the rule appended to its output stream."),
        ("failures", "Firings that failed (the rule's status has the error and its window)."))}
    last = GaugeMetricFamily("concentrator_rule_last_latency_seconds", "Latency of the rule's latest firing.",
                             labels=labels)
    for name, rule in rules.items():
        for key, family in families.items():
            family.add_metric([name], rule[key])
        if rule.get("last_latency_ms") is not None:
            last.add_metric([name], rule["last_latency_ms"] / 1000)
    yield from families.values()
    yield last
    yield _histogram("concentrator_rule_latency_seconds", "Time per successful firing (evaluation and output "
                     "commit), since start-up.", labels,
                     {name: rule["latency_seconds"] for name, rule in rules.items()})


def _histogram(name: str, help_text: str, labels: list[str], histograms: Mapping[str, Document]) -> Metric:
    """A histogram family from ``sparql_ext.histogram.Histogram.to_json`` documents (cumulative buckets), one per
    label value ("" when the family has no label)."""
    family = HistogramMetricFamily(name, help_text, labels=labels)
    for value, histogram in histograms.items():
        buckets = [(_bound(bound), count) for bound, count in histogram["buckets"]]
        family.add_metric([value] if labels else [], buckets, histogram["sum"])
    return family


def _bound(bound: float | str) -> str:
    return "+Inf" if bound == "+Inf" else repr(float(bound))
