"""GET /status: what the server holds, as JSON."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from protocol.parameters import reads
from protocol.rules import rule_json
from protocol.services import services
from sparql_ext.windowing import format_micros
from store.stream import Stream

bp = Blueprint("status", __name__)


@bp.route("/status", methods=["GET"])
@reads()
def status() -> Response:
    dataset = services().dataset
    catalog = services().streams
    head = dataset.revision(dataset.head)
    return jsonify({
        "dataset": {
            "head": head.to_json() if head else None,
            "revisions": dataset.head,
            "oldest_readable_revision": dataset.oldest_readable,
        },
        "streams": {name: _stream_status(catalog.get(name)) for name in catalog.names()},
        "pipeline": services().pipeline_status(),
        "connectors": services().connector_status(),  # streams following an LDES: source, pages, members, errors
        "rules": {rule.name: rule_json(rule) for rule in services().rules.rules()},
        # static rule parts (SERVICE ?var prefixes, SERVICE <…/sparql>) evaluated once per dataset revision
        "static_cache": services().evaluator.cache.status(),
        "continuous": services().continuous.status(),  # registrations of continuous responses
        "continuous_window_results": services().window_results.status(),
        "mqtt": services().connectors.status(),  # per stream and topic: messages, elements, duplicates, lag, …
    })


def _stream_status(stream: Stream) -> dict[str, object]:
    return {
        "elements": len(stream), "head": stream.head() if len(stream) else 0,
        "stream_time": None if stream.stream_time is None else format_micros(stream.stream_time),
        "rate_per_second": stream.rate(60_000_000),
        "ingest": stream.ingest_status(),
        # by sequence id: a HEAD ref registered at two HEADs is two sequences
        "sequences": {s.id: {"ref": s.ref, "windows_emitted": stream.windows.emitted(s.id),
                             "next_window": stream.windows.state.next_index.get(s.id)}
                      for s in stream.windows.sequences()},
    }
