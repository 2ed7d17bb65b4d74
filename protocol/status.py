"""GET /status: what the server holds, as JSON. ``status_document`` builds it; ``/metrics`` (``protocol.metrics``)
reports the same document's numbers in the Prometheus format, so the two always agree."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify
from prometheus_client import ProcessCollector

from protocol.parameters import reads
from protocol.rules import rule_json
from protocol.services import ServerConfig, Services, services
from sparql_ext.windowing import format_micros
from store.stream import Stream

bp = Blueprint("status", __name__)


@bp.route("/status", methods=["GET"])
@reads()
def status() -> Response:
    return jsonify(status_document(services(), current_app.config["CONCENTRATOR"]))


def status_document(served: Services, config: ServerConfig) -> dict[str, Any]:
    """The server's state: dataset, streams, pipeline, rules, continuous responses, the process, access rules."""
    dataset = served.dataset
    catalog = served.streams
    head = dataset.revision(dataset.head)
    return {
        "dataset": {
            "head": head.to_json() if head else None,
            "revisions": dataset.head,
            "oldest_readable_revision": dataset.oldest_readable,
        },
        "streams": {name: _stream_status(catalog.get(name)) for name in catalog.names()},
        "framing": served.framing.status(),  # framing processes: started, segments written there and in threads
        "pipeline": served.pipeline_status(),
        "executors": served.executors_status(),  # windows given to rules in executors, content the driver moved
        "rules": {rule.name: rule_json(rule) for rule in served.rules.rules()},
        # static rule parts (SERVICE ?var prefixes, SERVICE <…/sparql>) evaluated once per dataset revision
        "static_cache": served.evaluator.cache.status(),
        "continuous": served.continuous.status(),  # registrations of continuous responses
        "continuous_window_results": served.window_results.status(),
        "connectors": served.connector_status(),  # streams following an LDES: source, pages, members, errors
        "mqtt": served.connectors.status(),  # per stream and topic: messages, elements, duplicates, lag, …
        "process": process_status(),
        # what a client (the console) needs to know before it writes: docs/access.md
        "access": {"token_required": config.token is not None, "read_only": config.read_only},
    }


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
        # by sequence id: a HEAD ref registered at two HEADs is two sequences
        "sequences": {s.id: {"ref": s.ref, "windows_emitted": stream.windows.emitted(s.id),
                             "next_window": stream.windows.state.next_index.get(s.id)}
                      for s in stream.windows.sequences()},
    }
