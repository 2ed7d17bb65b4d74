"""``/rules`` and ``/rules/{name}``: rules (CONSTRUCT queries with an output stream), see rules/registry.py.

- ``PUT /rules/{name}``: body ``application/sparql-query``; ``output=`` a stream name or this server's stream
  URL (created if missing); optional ``report=`` and ``operator=`` (docs/continuous.md); ``publish=`` an MQTT
  topic each output element is published to (docs/connectors.md; needs ``serve --mqtt``). 201 when new, 204
  when replaced; 400 when the rule can have no windowed input or its ``SERVICE ?var`` inputs cannot be
  discovered from the dataset, or a bad report policy; 409 on a cycle.
- ``GET /rules/{name}``: the rule's text, or its JSON status with ``Accept: application/json``.
- ``DELETE /rules/{name}``: 204.
- ``GET /rules``: JSON list (name, output, inputs, firings, outputs, last latency, last error).
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from protocol.errors import HttpProblem
from protocol.parameters import reads
from protocol.services import PublicationRegistry, rule_publication, services
from protocol.stream_params import mqtt_topic_filter
from rules.registry import Rule, RuleRegistry
from sparql_ext.errors import ConcentratorError

bp = Blueprint("rules", __name__)


def _registry() -> RuleRegistry:
    return services().rules


def rule_json(rule: Rule) -> dict[str, object]:
    status = rule.status
    return {"name": rule.name, "output": rule.output,
            "inputs": [{"stream": i.stream, "windows": i.ref} for i in rule.inputs],
            "discovers_inputs": rule.discovers,
            "report": ",".join(sorted(p.value for p in rule.report_spec.policies)),
            "operator": rule.report_spec.operator.value,
            "firings": status.firings, "outputs": status.outputs, "failures": status.failures,
            "waiting": status.waiting, "placement": status.placement, "executor_firings": status.executor_firings,
            "last_latency_ms": status.last_latency_ms, "last_error": status.last_error,
            "last_window": status.last_window, "log": status.log, "publish": rule.publish,
            "latency_seconds": rule.latency.to_json(),  # successful firings since start-up
            "events": _event_status(rule)}


def _event_status(rule: Rule) -> dict[str, object] | None:
    """An event rule's matching (streams, last element matched of each, matches, state size); None for others."""
    event_rules = services().event_rules
    if not rule.events or event_rules is None:
        return None
    return event_rules.status(rule.name) or {"streams": rule.events, "state": "not running",
                                            "last_error": rule.status.last_error}


@bp.route("/rules", methods=["GET"])
@reads()
def list_rules() -> Response:
    return jsonify([rule_json(rule) for rule in _registry().rules()])


@bp.route("/rules/<name>", methods=["PUT"])
@reads("output", "report", "operator", "publish")
def put_rule(name: str) -> Response:
    content_type = (request.mimetype or "").lower()
    if content_type != "application/sparql-query":
        raise HttpProblem("a rule is sent as the body with Content-Type: application/sparql-query", 415)
    output = request.args.get("output")
    if not output:
        raise HttpProblem("output= is required: the output stream's name or URL", 400)
    text = request.get_data(as_text=True)
    base = request.host_url.rstrip("/")
    publish = request.args.get("publish") or None
    publications = services().connectors.publications
    if publish is not None:
        mqtt_topic_filter(publish, "publish", wildcards=False)
        if publications is None:
            raise HttpProblem("publish=: this server has no MQTT broker: start it with serve --mqtt mqtt://HOST:PORT",
                              409)
    previous = _registry().find(name)
    rule, created = _registry().put(name, text, output, base, request.args.get("report"), request.args.get("operator"),
                                    publish)
    if publications is not None:
        _follow_publish(publications, rule.name, rule.output, publish, base, previous)
    response = jsonify(rule_json(rule)) if created else Response(status=204)
    if created:
        response.status_code = 201
    response.headers["Location"] = f"{base}/rules/{name}"
    return response


@bp.route("/rules/<name>", methods=["GET"])
@reads()
def get_rule(name: str) -> Response:
    rule = _registry().get(name)
    best = request.accept_mimetypes.best_match(["application/sparql-query", "application/json"])
    if best == "application/json":
        return jsonify(rule_json(rule))
    return Response(rule.text, mimetype="application/sparql-query")


@bp.route("/rules/<name>", methods=["DELETE"])
@reads()
def delete_rule(name: str) -> Response:
    rule = _registry().get(name)
    _registry().delete(name)
    publications = services().connectors.publications
    if publications is not None:
        _follow_publish(publications, name, rule.output, None, "", rule)
    return Response(status=204)


def _follow_publish(publications: PublicationRegistry, name: str, output: str, topic: str | None, base: str,
                    previous: Rule | None) -> None:
    """Start, move or end the publication of a rule's output elements as its ``publish=`` says."""
    if previous is not None and previous.publish is not None and (topic is None or previous.output != output):
        try:
            publications.delete(previous.output, rule_publication(name, previous.output, "", base).name)
        except ConcentratorError:
            pass  # already gone
    if topic is not None and (previous is None or previous.publish != topic or previous.output != output):
        publications.put(rule_publication(name, output, topic, base))
