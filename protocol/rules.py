"""``/rules`` and ``/rules/{name}``: rules (CONSTRUCT queries with an output stream), see rules/registry.py.

- ``PUT /rules/{name}``: body ``application/sparql-query``; ``output=`` a stream name or this server's stream
  URL (created if missing); optional ``report=`` and ``operator=`` (docs/continuous.md); ``publish=`` an MQTT
  topic each output element is published to (docs/connectors.md; needs ``serve --mqtt``). 201 when new, 204
  when replaced; 400 when the rule can have no windowed input or its ``SERVICE ?var`` inputs cannot be
  discovered from the dataset, or a bad report policy; 409 on a cycle. An event rule (docs/events.md) also takes
  ``evaluate=`` (its evaluation times, ``R/T/β``), ``from=`` (an ordinal or a time of its streams' history to
  start matching at) and ``depth=`` (the derivation depth a recursive event rule stops at).
- ``PUT /rules``: many rules at once, all or none: an ``application/json`` body ``{"rules": [{"name", "query",
  "output", "report", "operator", "publish"}, …]}`` (the fields are ``PUT /rules/{name}``'s name, body and
  parameters). 201 when one of them is new, else 200, with ``{"created": [names], "replaced": [names]}``; a bad
  entry, a rule that cannot be registered (400) or a cycle (409) refuses the whole batch, naming the rule.
- ``GET /rules/{name}``: the rule's text, or its JSON status with ``Accept: application/json``.
- ``DELETE /rules/{name}``: 204.
- ``GET /rules``: JSON list (name, output, inputs, firings, outputs, last latency, last error).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection

from flask import Blueprint, Response, jsonify, request

from delivery.publications import PublicationRegistry, rule_publication
from protocol.access import check_stream_write, reads_only, writes
from protocol.bodies import text_body
from protocol.errors import BadRequest, HttpProblem
from protocol.parameters import name_list, near_miss, reads
from protocol.services import services
from protocol.stream_params import mqtt_topic_filter
from rules.analysis import output_stream_name
from rules.registry import Rule, RuleRegistry, RuleSpec
from sparql_ext.errors import ConcentratorError
from store.errors import UnsupportedMediaType

bp = Blueprint("rules", __name__)


def _registry() -> RuleRegistry:
    return services().rules


# A rule's status, field by field: GET /rules?fields=… computes only the fields asked for (with thousands of rules, a
# client polling firings need not have every latency histogram encoded)
_RULE_FIELDS: dict[str, Callable[[Rule], object]] = {
    "name": lambda rule: rule.name,
    "output": lambda rule: rule.output,
    "inputs": lambda rule: [{"stream": i.stream, "windows": i.ref} for i in rule.inputs],
    "discovers_inputs": lambda rule: rule.discovers,
    "report": lambda rule: ",".join(sorted(p.value for p in rule.report_spec.policies)),
    "operator": lambda rule: rule.report_spec.operator.value,
    "firings": lambda rule: rule.status.firings,
    "outputs": lambda rule: rule.status.outputs,
    "failures": lambda rule: rule.status.failures,
    "waiting": lambda rule: rule.status.waiting,
    "placement": lambda rule: rule.status.placement,
    "executor_firings": lambda rule: rule.status.executor_firings,
    "last_latency_ms": lambda rule: rule.status.last_latency_ms,
    "last_error": lambda rule: rule.status.last_error,
    "last_window": lambda rule: rule.status.last_window,
    "log": lambda rule: rule.status.log,
    "publish": lambda rule: rule.publish,
    "latency_seconds": lambda rule: rule.latency.to_json(),  # successful firings since start-up
    "events": lambda rule: _event_status(rule),
}


def rule_json(rule: Rule, fields: Collection[str] | None = None) -> dict[str, object]:
    """A rule's status (docs/rules.md); ``fields``: only these (the name always)."""
    return {key: field(rule) for key, field in _RULE_FIELDS.items()
            if fields is None or key in fields or key == "name"}


def _event_status(rule: Rule) -> dict[str, object] | None:
    """An event rule's matching (streams, last element matched of each, matches, state size); None for others."""
    event_rules = services().event_rules
    if not rule.events or event_rules is None:
        return None
    return event_rules.status(rule.name) or {"streams": rule.events, "state": "not running",
                                            "last_error": rule.status.last_error}


@bp.route("/rules", methods=["GET"])
@reads_only
@reads("fields")
def list_rules() -> Response:
    fields = name_list("fields", _RULE_FIELDS, "rule field")
    return jsonify([rule_json(rule, fields) for rule in _registry().rules()])


@bp.route("/rules/<name>", methods=["PUT"])
@writes("registering a rule")
@reads("output", "report", "operator", "publish", "evaluate", "from", "depth")
def put_rule(name: str) -> Response:
    content_type = (request.mimetype or "").lower()
    if content_type != "application/sparql-query":
        raise UnsupportedMediaType("a rule is sent as the body with Content-Type: application/sparql-query")
    output = request.args.get("output")
    if not output:
        raise HttpProblem("output= is required: the output stream's name or URL", 400)
    text = request.get_data(as_text=True)
    base = request.host_url.rstrip("/")
    publish = request.args.get("publish") or None
    publications = services().mqtt.publications
    _check_publish(publish, "publish=")
    previous = _registry().find(name)
    _check_outputs([(name, output, previous)], base)
    rule, created = _registry().put(name, text, output, base, request.args.get("report"), request.args.get("operator"),
                                    publish, evaluate=request.args.get("evaluate") or None,
                                    replay_from=request.args.get("from") or None,
                                    depth=request.args.get("depth") or None)
    if publications is not None:
        _follow_publish(publications, rule.name, rule.output, publish, base, previous)
    response = jsonify(rule_json(rule)) if created else Response(status=204)
    if created:
        response.status_code = 201
    response.headers["Location"] = f"{base}/rules/{name}"
    return response


BULK_FIELDS = {"name": True, "query": True, "output": True, "report": False, "operator": False, "publish": False,
               "evaluate": False, "from": False, "depth": False}


@bp.route("/rules", methods=["PUT"])
@writes("registering rules")
@reads()
def put_rules() -> Response:
    if (request.mimetype or "").lower() != "application/json":
        raise UnsupportedMediaType('rules are sent as {"rules": [{"name": …, "query": …, "output": …}, …]} with '
                                   "Content-Type: application/json")
    try:
        body = json.loads(text_body("rules"))
    except ValueError as error:
        raise BadRequest(f"the body is not JSON: {error}") from None
    entries = body.get("rules") if isinstance(body, dict) else None
    if not isinstance(entries, list) or set(body) != {"rules"}:
        raise BadRequest('the body must be {"rules": [{"name": …, "query": …, "output": …}, …]}, a list of rules')
    base = request.host_url.rstrip("/")
    specs = [_bulk_spec(index, entry, base) for index, entry in enumerate(entries)]
    registry = _registry()
    previous = {spec.name: registry.find(spec.name) for spec in specs}
    _check_outputs([(spec.name, spec.output, previous[spec.name]) for spec in specs], base)
    made = registry.put_many(specs)
    publications = services().mqtt.publications
    if publications is not None:
        for (rule, _), spec in zip(made, specs, strict=True):
            _follow_publish(publications, rule.name, rule.output, spec.publish, base, previous[spec.name])
    created = [rule.name for rule, new in made if new]
    response = jsonify({"created": created, "replaced": [rule.name for rule, new in made if not new]})
    response.status_code = 201 if created else 200
    return response


def _bulk_spec(index: int, entry: object, base: str) -> RuleSpec:
    """One entry of ``PUT /rules``, checked as ``PUT /rules/{name}`` checks its name, body and parameters."""
    where = f"rules[{index}]"
    if not isinstance(entry, dict):
        raise BadRequest(f"{where} is not an object with name, query and output")
    if isinstance(entry.get("name"), str):
        where += f" ({entry['name']!r})"
    unknown = sorted(set(entry) - set(BULK_FIELDS))
    if unknown:
        miss = near_miss(BULK_FIELDS, unknown)
        hint = f": did you mean {miss[1]}?" if miss else f" (a rule has {', '.join(BULK_FIELDS)})"
        raise BadRequest(f"{where}: unknown field {(miss[0] if miss else unknown[0])}{hint}")
    for field, required in BULK_FIELDS.items():
        value = entry.get(field)
        if (required and not value) or not (value is None or isinstance(value, str)):
            raise BadRequest(f"{where}: {field} must be a {'non-empty ' if required else ''}string"
                             + (" (the output stream's name or URL)" if field == "output" else ""))
    publish = entry.get("publish") or None
    _check_publish(publish, f"{where}: publish")
    return RuleSpec(entry["name"], entry["query"], entry["output"], base, entry.get("report") or None,
                    entry.get("operator") or None, publish, entry.get("evaluate") or None, entry.get("from") or None,
                    entry.get("depth") or None)


def _check_outputs(changes: list[tuple[str, str | None, Rule | None]], base: str) -> None:
    """A rule writes into its output stream: registering, replacing or deleting it needs the write token of the
    stream it will write into and of the one it wrote into, where those streams have their own (or the server's).
    ``changes``: (rule name, its new output or None, the rule it replaces or deletes)."""
    for name, output, previous in changes:
        streams = {previous.output} if previous is not None else set()
        if output is not None:
            streams.add(output_stream_name(output, base))
        for stream in sorted(streams):
            check_stream_write(stream, f"rule {name!r}, which writes into stream {stream!r},")


def _check_publish(topic: str | None, where: str) -> None:
    """A rule's MQTT topic is a topic name, and the server has a broker to publish to."""
    if topic is None:
        return
    mqtt_topic_filter(topic, "publish", wildcards=False)
    if services().mqtt.publications is None:
        raise HttpProblem(f"{where}: this server has no MQTT broker: start it with serve --mqtt mqtt://HOST:PORT", 409)


@bp.route("/rules/<name>", methods=["GET"])
@reads_only
@reads()
def get_rule(name: str) -> Response:
    rule = _registry().get(name)
    best = request.accept_mimetypes.best_match(["application/sparql-query", "application/json"])
    if best == "application/json":
        return jsonify(rule_json(rule))
    return Response(rule.text, mimetype="application/sparql-query")


@bp.route("/rules/<name>", methods=["DELETE"])
@writes("deleting a rule")
@reads()
def delete_rule(name: str) -> Response:
    rule = _registry().get(name)
    _check_outputs([(name, None, rule)], rule.base)
    _registry().delete(name)
    publications = services().mqtt.publications
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
