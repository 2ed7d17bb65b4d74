"""``/streams/{name}/publications/{publication}``: publish a stream's window results, or its elements, to an MQTT
topic (docs/connectors.md, "MQTT out"); the publishing is ``connectors.mqtt_out``'s, reached through
``services().mqtt``.

- ``PUT`` with a JSON body ``{"topic": …, "windows": "R/…", "query": …, "format": …, "report": …, "operator": …,
  "retain": false}``: one message per window result (the query over each window, as a continuous response with
  the same parameters gives it; no query: the window dataset). Without ``windows``: one message per element
  (TriG). 201 when new, 200 with its description when replaced (it starts again from the next window or element).
- ``GET``: its description (cursor, messages sent, last error); ``GET …/publications``: every one of the stream.
- ``DELETE``: 204.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from delivery.publications import Publication, PublicationRegistry
from delivery.results import kind_of
from protocol.access import reads_only, writes
from protocol.bodies import json_object_body
from protocol.errors import BadRequest, HttpProblem, NotAcceptable
from protocol.negotiation import body_media_type
from protocol.packaging import OFFERED
from protocol.parameters import reads
from protocol.services import services
from protocol.stream_params import mqtt_topic_filter
from sparql_ext.reporting import ReportPolicy, parse_report
from sparql_ext.windowref import parse_window_ref
from store.errors import UnsupportedMediaType
from store.streams import check_stream_name

bp = Blueprint("publications", __name__)

FIELDS = ("topic", "windows", "query", "format", "report", "operator", "retain")


def registry() -> PublicationRegistry:
    found = services().mqtt.publications
    if found is None:
        raise HttpProblem("this server has no MQTT broker to publish to: start it with serve --mqtt mqtt://HOST:PORT",
                          409)
    return found


@bp.route("/streams/<name>/publications", methods=["GET"])
@reads_only
@reads()
def list_publications(name: str) -> Response:
    return jsonify({"publications": registry().describe(name)})


@bp.route("/streams/<name>/publications/<publication>", methods=["GET"])
@reads_only
@reads()
def get_publication(name: str, publication: str) -> Response:
    return jsonify(registry().describe(name, publication)[0])


@bp.route("/streams/<name>/publications/<publication>", methods=["DELETE"])
@writes("deleting a publication")
@reads()
def delete_publication(name: str, publication: str) -> Response:
    registry().delete(name, publication)
    return Response(status=204)


@bp.route("/streams/<name>/publications/<publication>", methods=["PUT"])
@writes("a publication")
@reads()
def put_publication(name: str, publication: str) -> Response:
    found = registry()
    services().streams.get(name)
    described, created = found.put(publication_of(name, publication, _body(), request.host_url.rstrip("/")))
    response = jsonify(described)
    response.status_code = 201 if created else 200
    response.headers["Location"] = request.base_url
    return response


def _body() -> dict[str, Any]:
    mimetype, _ = body_media_type(request.headers.get("Content-Type"))
    if mimetype != "application/json":
        raise UnsupportedMediaType("a publication is a JSON object sent with Content-Type: application/json, e.g. "
                                   '{"topic": "ward/hr", "windows": "R/HEAD/PT05M/PT01M"}')
    body = json_object_body("publication", ': {"topic": …, "windows": …}')
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(f"unknown publication field(s) {unknown}: use {', '.join(FIELDS)}")
    return body


def publication_of(stream: str, name: str, body: dict[str, Any], base: str) -> Publication:
    """The publication a request asks for, every part checked (400 naming the wrong one)."""
    check_stream_name(name)
    topic = body.get("topic")
    if not isinstance(topic, str):
        raise BadRequest("topic is required: the MQTT topic to publish to, e.g. \"ward/hr/windows\"")
    mqtt_topic_filter(topic, "topic", wildcards=False)
    retain = body.get("retain", False)
    if not isinstance(retain, bool):
        raise BadRequest("retain is true or false")
    windows = body.get("windows")
    if windows is None:
        given = sorted(k for k in ("query", "format", "report", "operator") if body.get(k) is not None)
        if given:
            raise BadRequest(f"{', '.join(given)}: a publication without windows sends each element (TriG); give "
                             "windows (a repeating WindowRef) to publish a query's result per window")
        return Publication(stream, name, topic, retain=retain, base=base)
    ref = parse_window_ref(str(windows))
    if not ref.repeating:
        raise BadRequest(f"windows={windows!r} is one window: a publication needs a repeating WindowRef (R/…)")
    query = body.get("query")
    if query is not None and not isinstance(query, str):
        raise BadRequest("query is a SPARQL query, as a string")
    report = body.get("report")
    operator = body.get("operator")
    spec = parse_report(None if report is None else str(report), None if operator is None else str(operator))
    if ReportPolicy.CONTENT_CHANGE in spec.policies:
        raise BadRequest("report=content-change evaluates at every element arrival: a publication sends one message "
                         "per window (use a continuous response for content-change)")
    offered = list(OFFERED[kind_of(query, f"{base}/streams/{stream}")])
    media_type = body.get("format") or offered[0]
    if media_type not in offered:
        raise NotAcceptable(f"format={media_type!r}: this result is available as {', '.join(offered)}")
    return Publication(stream, name, topic, str(ref), query, str(media_type), None if report is None else str(report),
                       None if operator is None else str(operator), retain, base)
