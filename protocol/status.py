"""GET /status: what the server holds, as JSON. ``status_document`` builds it; ``/metrics`` (``protocol.metrics``)
reports the same document's numbers in the Prometheus format, so the two always agree."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from prometheus_client import ProcessCollector

from protocol.access import open_to_all
from protocol.errors import refused_counts
from protocol.parameters import name_list, reads
from protocol.rules import rule_json
from protocol.services import ServerConfig, Services, services
from sparql_ext.windowing import format_micros
from store.stream import Stream

bp = Blueprint("status", __name__)


@bp.route("/status", methods=["GET"])
@open_to_all
@reads("sections")
def status() -> Response:
    sections = name_list("sections", SECTIONS, "status section")
    return jsonify(status_document(services(), current_app.config["CONCENTRATOR"], sections))


def _dataset_status(served: Services) -> dict[str, Any]:
    dataset = served.dataset
    head = dataset.revision(dataset.head)
    return {"head": head.to_json() if head else None, "revisions": dataset.head,
            "oldest_readable_revision": dataset.oldest_readable, "unavailable": dataset.unavailable}


CONTINUOUS_LISTED = 200

# The document's sections, each computed only when asked for (GET /status?sections=…: a dashboard polling the
# pipeline need not encode 1,000 rules' latency histograms, ≈ 30 ms and 570 KB a request)
SECTIONS: dict[str, Callable[[Services, ServerConfig], Any]] = {
    "dataset": lambda served, _: _dataset_status(served),
    "streams": lambda served, _: {name: _stream_status(served.streams.get(name)) for name in served.streams.names()},
    "framing": lambda served, _: served.framing.status(),  # framing processes: segments written there and in threads
    "pipeline": lambda served, _: served.pipeline_status(),
    "executors": lambda served, _: served.executors_status(),  # windows given to rules in executors, content moved
    "rules": lambda served, _: {rule.name: rule_json(rule) for rule in served.rules.rules()},
    # static rule parts (SERVICE ?var prefixes, SERVICE <…/sparql>, sub-SELECTs) evaluated once per dataset revision
    "static_cache": lambda served, _: served.evaluator.cache.status(),
    # registrations of continuous responses: the newest CONTINUOUS_LISTED (thousands would make /status megabytes
    # long and slow the fan-out); ``load`` counts them all
    "continuous": lambda served, _: served.continuous.status(CONTINUOUS_LISTED),
    # how many: connections and threads held, subscribers per sequence, refused requests (docs/deployment.md)
    "load": lambda served, _: load_status(served),
    # running, waiting for a query process, stopped (client gone, budget), refused; the query processes
    "queries": lambda served, _: served.queries.status(),
    "continuous_window_results": lambda served, _: served.window_results.status(),
    "connectors": lambda served, _: {"ldes": served.ldes_followers_status()},  # following an LDES: pages, members, …
    "mqtt": lambda served, _: served.mqtt.status(),  # per stream and topic: messages, elements, lag, …
    "process": lambda served, _: process_status(),
    # what a client (the console) needs to know before it writes: docs/access.md
    "access": lambda _, config: {"token_required": config.token is not None, "read_only": config.read_only,
                                 "read_token_required": bool(config.read_tokens) and not config.public},
}


def status_document(served: Services, config: ServerConfig, sections: Collection[str] | None = None
                    ) -> dict[str, Any]:
    """The server's state: dataset, streams, pipeline, rules, continuous responses, the process, access rules;
    ``sections``: only these (``SECTIONS``' names)."""
    return {name: section(served, config) for name, section in SECTIONS.items()
            if sections is None or name in sections}


def load_status(served: Services) -> dict[str, Any]:
    """What the server holds now and what it refused: the HTTP server's connections and busy threads, the
    fan-out's subscribers and feeds, subscribers per window sequence, queries, and refused requests by status."""
    return {"connections": served.connections(),
            "fanout": served.fanout.status() if served.fanout is not None else None,
            "subscribers": len(served.continuous), "subscribers_per_sequence": served.continuous.per_sequence(),
            "refused": refused_counts()}


def process_status() -> dict[str, float]:
    """This server process's memory, CPU time and file descriptors, as the Prometheus client reads them
    (``process_*`` in ``/metrics``; Linux only: elsewhere an empty object)."""
    names = {"process_resident_memory_bytes": "resident_memory_bytes",
             "process_virtual_memory_bytes": "virtual_memory_bytes", "process_cpu_seconds_total": "cpu_seconds",
             "process_open_fds": "open_fds", "process_start_time_seconds": "start_time_seconds"}
    found: dict[str, float] = {}
    for family in ProcessCollector(registry=None).collect():
        for sample in family.samples:
            if sample.name in names:
                found[names[sample.name]] = found.get(names[sample.name], 0.0) + sample.value
    return found


def _stream_status(stream: Stream) -> dict[str, object]:
    return {
        "elements": len(stream), "head": stream.head() if len(stream) else 0,
        "stream_time": None if stream.stream_time is None else format_micros(stream.stream_time),
        "stream_time_us": stream.stream_time,
        "rate_per_second": stream.rate(60_000_000),
        "ingest": stream.ingest_status(),
        "windows_emitted": stream.windows.emitted_total(),  # every sequence's, retired ones included
        # by sequence id: a HEAD ref registered at two HEADs is two sequences
        "sequences": {s.id: {"ref": s.ref, "windows_emitted": stream.windows.emitted(s.id),
                             "next_window": stream.windows.state.next_index.get(s.id)}
                      for s in stream.windows.sequences()},
    }
