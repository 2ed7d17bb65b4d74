"""``/queries``: RSP-QL and C-SPARQL registrations (rules/queries.py, docs/rsp-ql.md).

- ``PUT /queries/{name}``: the registration as ``application/sparql-query``; optional ``report=``, ``operator=``
  (docs/continuous.md) and ``t0=`` (an xsd:dateTime where the first window starts). 201 with its description when
  new, 204 when replaced; 400 for a syntax error (line and column in the text), a window on a stream this server
  does not have or a ``WINDOW`` naming no declared window; 409 for a ``CONSTRUCT`` closing a cycle of rules.
- ``PUT /queries``: many at once, all or none: ``{"queries": [{"name", "query", "report", "operator", "t0"}, …]}``.
- ``GET /queries``, ``GET /queries/{name}`` (its description; its text with ``Accept: application/sparql-query``),
  ``DELETE /queries/{name}``.
- ``GET /queries/{name}/results``: its results as a continuous response over its first window's sequence, with
  every packaging and resumption of a windowed IRI (``after=``, ``from=``, ``Last-Event-ID``), and over a
  WebSocket. A query that is a rule (a ``CONSTRUCT`` into a stream) has its output stream instead: 409 naming it.
"""

from __future__ import annotations

import json

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from delivery.results import PinnedQuery
from protocol.access import check_stream_write, reads_only, writes
from protocol.bodies import text_body
from protocol.continuous import Registered, continuous_response
from protocol.errors import BadRequest, HttpProblem
from protocol.parameters import reads
from protocol.services import ServerConfig, services, services_of
from protocol.websocket import continuous_websocket
from rules.queries import QueryRegistry, QuerySpec, RegisteredQuery
from store.errors import UnsupportedMediaType

bp = Blueprint("queries", __name__)
EXTENSION = "concentrator.queries"
RESULT_PARAMETERS = ("packaging", "format", "after", "from")
BULK_FIELDS = ("name", "query", "report", "operator", "t0")


def install(app: Flask) -> None:
    """Open the registrations at start-up (they hold their window sequences from then on)."""
    config = app.config["CONCENTRATOR"]
    assert isinstance(config, ServerConfig)
    app.extensions[EXTENSION] = QueryRegistry(config.data_dir / "queries", services_of(app).rules)


def registry() -> QueryRegistry:
    found = current_app.extensions[EXTENSION]
    assert isinstance(found, QueryRegistry)
    return found


def query_json(query: RegisteredQuery) -> dict[str, object]:
    """A registration's description: language, form, windows (stream, WindowRef, sequence), output, policy."""
    return {"name": query.name, "language": query.language, "form": query.form, "output": query.output,
            "rule": query.rule, "report": query.report, "operator": query.operator, "t0": query.t0,
            "windows": [{"window": w.window, "stream": w.stream, "windows": w.ref, "sequence": w.sequence or None}
                        for w in query.windows],
            "results": None if query.rule else f"{query.base}/queries/{query.name}/results",
            "compiled": query.compiled}


@bp.route("/queries", methods=["GET"])
@reads_only
@reads()
def list_queries() -> Response:
    return jsonify([query_json(query) for query in registry().queries()])


@bp.route("/queries/<name>", methods=["PUT"])
@writes("registering a query")
@reads("report", "operator", "t0")
def put_query(name: str) -> Response:
    if (request.mimetype or "").lower() != "application/sparql-query":
        raise UnsupportedMediaType("a query is sent as the body with Content-Type: application/sparql-query")
    base = request.host_url.rstrip("/")
    spec = QuerySpec(name, request.get_data(as_text=True), base, request.args.get("report") or None,
                     request.args.get("operator") or None, request.args.get("t0") or None)
    _check_outputs([spec])
    query, created = registry().put(spec)
    response = jsonify(query_json(query)) if created else Response(status=204)
    response.status_code = 201 if created else 204
    response.headers["Location"] = f"{base}/queries/{name}"
    return response


@bp.route("/queries", methods=["PUT"])
@writes("registering queries")
@reads()
def put_queries() -> Response:
    if (request.mimetype or "").lower() != "application/json":
        raise UnsupportedMediaType('queries are sent as {"queries": [{"name": …, "query": …}, …]} with '
                                   "Content-Type: application/json")
    try:
        body = json.loads(text_body("queries"))
    except ValueError as error:
        raise BadRequest(f"the body is not JSON: {error}") from None
    entries = body.get("queries") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise BadRequest('the body must be {"queries": [{"name": …, "query": …}, …]}')
    base = request.host_url.rstrip("/")
    specs = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) - set(BULK_FIELDS) or not all(
                isinstance(entry.get(key), str) for key in ("name", "query")) or not all(
                entry.get(key) is None or isinstance(entry[key], str) for key in BULK_FIELDS):
            raise BadRequest(f"queries[{index}] must be an object with string fields name and query (and report, "
                             "operator, t0)")
        specs.append(QuerySpec(entry["name"], entry["query"], base, entry.get("report"), entry.get("operator"),
                               entry.get("t0")))
    _check_outputs(specs)
    made = registry().put_many(specs)
    created = [query.name for query, new in made if new]
    response = jsonify({"created": created, "replaced": [query.name for query, new in made if not new]})
    response.status_code = 201 if created else 200
    return response


def _check_outputs(specs: list[QuerySpec]) -> None:
    """A registration that replaces a rule writing into a stream needs that stream's write token (as a rule)."""
    for spec in specs:
        old = registry().find(spec.name)
        if old is not None and old.rule is not None and old.output is not None:
            check_stream_write(old.output, f"query {spec.name!r}, which writes into stream {old.output!r},")


@bp.route("/queries/<name>", methods=["GET"])
@reads_only
@reads()
def get_query(name: str) -> Response:
    query = registry().get(name)
    if request.accept_mimetypes.best_match(["application/json", "application/sparql-query"]) == \
            "application/sparql-query":
        return Response(query.text, mimetype="application/sparql-query")
    return jsonify(query_json(query))


@bp.route("/queries/<name>", methods=["DELETE"])
@writes("deleting a query")
@reads()
def delete_query(name: str) -> Response:
    query = registry().get(name)
    if query.rule is not None and query.output is not None:
        check_stream_write(query.output, f"query {name!r}, which writes into stream {query.output!r},")
    registry().delete(name)
    return Response(status=204)


def _registered(name: str) -> tuple[RegisteredQuery, Registered]:
    query = registry().get(name)
    if query.rule is not None:
        raise HttpProblem(f"query {name!r} is the rule {query.rule!r}: its results are the elements of stream "
                          f"{query.output!r} (window them, e.g. {query.base}/streams/{query.output}?WINDOWS=R/HEAD/"
                          "HEAD/1)", 409)
    first = query.windows[0]
    pinned = PinnedQuery(query.compiled, query.base, first.stream, first.ref,
                         {(w.stream, w.ref): w.sequence for w in query.windows})
    return query, Registered(pinned, first.sequence, query.report, query.operator)


@bp.route("/queries/<name>/results", methods=["GET"])
@reads_only
@reads(*RESULT_PARAMETERS)
def query_results(name: str) -> Response:
    query, registered = _registered(name)
    first = query.windows[0]
    return continuous_response(services().streams.get(first.stream), first.ref, query.compiled, registered)


@bp.route("/queries/<name>/results", methods=["GET"], websocket=True)
@reads_only
@reads(*RESULT_PARAMETERS)
def query_results_websocket(name: str) -> Response:
    query, registered = _registered(name)
    first = query.windows[0]
    return continuous_websocket(services().streams.get(first.stream), first.ref, query.compiled, registered)
