"""Streams over HTTP: ``/streams/{name}`` (configure, describe, upload) and its windowed IRIs
``/streams/{name}?WINDOWS=<WindowRef>`` (the window dataset, or the SPARQL Protocol over it)."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterable

from flask import Blueprint, Response, jsonify, request
from pyoxigraph import Literal, NamedNode, RdfFormat, serialize

from engine.context import QueryTarget
from engine.selection import SelectedWindow, revision_selection, revision_window, select_window
from protocol import memento
from protocol.access import READ, Need, ParsedRequest, ensure_write, needs, reads_only
from protocol.bodies import json_object_body, revision_parameter, text_body
from protocol.continuous import continuous_response, wants_continuous
from protocol.errors import BadRequest, BodyStalled, NotAcceptable
from protocol.incremental import available_reader, drain
from protocol.negotiation import DATASET_FORMATS, best_media_type, body_media_type, is_utf8
from protocol.parameters import reads
from protocol.responses import empty_response, spooled_response, window_headers
from protocol.services import services
from protocol.sparql import FORM, is_extended, run_query, serialize_result
from protocol.stream_params import (
    is_service_identification,
    timeout_seconds,
    windowed_params,
)
from protocol.stream_settings import (
    SETTINGS,
    describe_revision,
    describe_stream,
    iri_parameter,
    settings_of,
    stream_config,
)
from protocol.websocket import continuous_websocket, upload_websocket
from sparql_ext import parse_instant
from sparql_ext.errors import ConcentratorError
from sparql_ext.windowing import format_micros, to_micros
from sparql_ext.windowref import parse_window_ref
from store.durable import now_micros
from store.elements import ParsedElement, single_element
from store.errors import RevisionNotFound, StreamNotFound, UnsupportedMediaType
from store.formats import STREAM_BODY_FORMATS
from store.framing import ElementFramer
from store.jsonld import JsonLdFramer
from store.stream import Stream
from store.streams import StreamCatalog

bp = Blueprint("streams", __name__)

DEFAULT_TIMEOUT = 30.0  # seconds a request waits for a window that is not complete yet
SD_ENDPOINT = "http://www.w3.org/ns/sparql-service-description#endpoint"
XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
STREAM_PARAMETERS = (
    *(setting.name for setting in SETTINGS),  # PUT, PATCH: settings
    "punctuation", "graph", "timestamp",  # POST: upload
    "WINDOWS", "query", "revision-id", "timeout", "default-graph-uri", "named-graph-uri",  # windows, queries
    "answer", "packaging", "format", "report", "operator", "after", "from", "sequence",  # continuous responses
)


def _catalog() -> StreamCatalog:
    return services().streams


@bp.route("/streams", methods=["GET"])
@reads_only
@reads("iri")  # the others go on to the stream, which checks them
def list_streams() -> Response:
    """Every stream; with ``iri=`` a redirect to the stream an alias IRI (e.g. urn:uuid:…) names,
    keeping the other parameters (``WINDOWS=`` …)."""
    alias = request.args.get("iri")
    if alias is None:
        return jsonify({"streams": [describe_stream(_catalog().get(name)) for name in _catalog().names()]})
    stream = _catalog().by_alias(alias)
    if stream is None:
        raise StreamNotFound(f"no stream is mapped to {alias!r} (map one with PUT /streams/{{name}}?alias=IRI)")
    rest = "&".join(part for part in request.query_string.decode("latin-1").split("&")
                    if not part.startswith("iri="))
    location = f"{request.host_url}streams/{stream.config.name}" + (f"?{rest}" if rest else "")
    return Response(status=303, headers={"Location": location})


def stream_need(parsed: ParsedRequest) -> Need:
    """GET reads; a POST with ``WINDOWS`` or a query reads (a continuous response or a query over a window); every
    other POST appends (an upload or a punctuation), PUT configures and DELETE deletes: writes the stream's own
    token also allows. ``stream_resource`` dispatches by the same tests (``carries_query``)."""
    name = parsed.view_args["name"]
    if parsed.websocket:
        return READ if "WINDOWS" in parsed.args else Need(True, name, f"a WebSocket upload to stream {name!r}")
    if parsed.method in ("GET", "HEAD"):
        return READ
    if parsed.method == "POST" and ("WINDOWS" in parsed.args or carries_query(parsed)):
        return READ
    what = {"PUT": "configuring stream", "PATCH": "configuring stream", "DELETE": "deleting stream",
            "POST": "an upload or punctuation to stream"}
    return Need(True, name, f"{what.get(parsed.method, parsed.method)} {name!r}")


def carries_query(parsed: ParsedRequest) -> bool:
    """Whether a request to a stream IRI carries a SPARQL query (``query=``, a query body, or a form's ``query``)."""
    return "query" in parsed.args or parsed.mimetype == "application/sparql-query" or (
        parsed.mimetype == FORM and "query" in parsed.form)


@bp.route("/streams/<name>", methods=["GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"])
@needs(stream_need)
@reads(*STREAM_PARAMETERS)
def stream_resource(name: str) -> Response:
    if request.method == "PUT":
        return _put(name)
    if request.method == "PATCH":
        return _patch(name)
    if request.method == "DELETE":
        _catalog().delete(name)
        return empty_response(204, {})
    stream = _catalog().get(name)
    params = windowed_params(request.query_string.decode("latin-1"))
    query = _query_text(params.extra)
    if params.windows is not None and wants_continuous(params.windows, request.args.get("answer")):
        return continuous_response(stream, params.windows, query)
    if query is not None:
        return _query(stream, params.windows, query)
    if request.method == "POST":
        if params.windows is not None:
            raise BadRequest("a POST to a windowed IRI must carry a SPARQL query; upload elements to the "
                             "stream IRI itself (without WINDOWS)")
        try:
            return _upload(stream)
        except ConcentratorError as error:
            stream.ingest.refused(error.status_hint)  # upload errors in /status and /metrics
            raise
    if is_service_identification(request.headers.get("User-Agent"), has_query=False):
        return _service_description()
    if params.windows is None:
        return _stream_get(stream)
    return _dataset_response(stream, _select_window(stream, params.windows))


@bp.route("/streams/<name>", methods=["GET"], websocket=True)
@needs(stream_need)
@reads(*STREAM_PARAMETERS)
def stream_websocket(name: str) -> Response:
    """A WebSocket at the stream IRI: window results with ``WINDOWS=R…``, else an upload (protocol/websocket.py)."""
    stream = _catalog().get(name)
    params = windowed_params(request.query_string.decode("latin-1"))
    if params.windows is None:
        return upload_websocket(stream)
    if not parse_window_ref(params.windows).repeating:
        raise BadRequest(f"WINDOWS={params.windows}: a WebSocket sends one message per window of a repeating "
                         "WindowRef (R/…); GET the IRI over HTTP for one window")
    return continuous_websocket(stream, params.windows, _query_text(params.extra))


def _stream_get(stream: Stream) -> Response:
    """The stream IRI without WINDOWS: its description (JSON), its dataset at a revision, or its TimeMap; with
    ``Accept-Datetime`` its dataset at the element at or before that instant (Memento)."""
    chosen = best_media_type(request.headers.get("Accept"), ["application/json", *DATASET_FORMATS,
                                                             memento.LINK_FORMAT])
    original = memento.original_url()
    if chosen == memento.LINK_FORMAT:
        return memento.timemap_response(original, memento.stream_mementos(stream, original))
    designator = revision_parameter()
    wanted = memento.accept_datetime() if designator is None else None
    if wanted is not None:
        selected = memento.select_element(stream, wanted, original)
        headers = memento.memento_headers(original, selected, negotiated=True)
        return _dataset_response(stream, revision_selection(stream, str(selected.ordinal)), headers)
    if chosen in DATASET_FORMATS:
        selection = revision_selection(stream, designator)
        found = None if designator is None or not selection.ordinals else \
            memento.stream_memento(stream, selection.ordinals[-1], original)
        headers = {} if found is None else memento.memento_headers(original, found, negotiated=False)
        return _dataset_response(stream, selection, headers)
    return jsonify(describe_stream(stream))


ELEMENTS_LIMIT = 10_000  # records per GET /streams/{name}/elements page


@bp.route("/streams/<name>/elements", methods=["GET"])
@reads_only
@reads("from", "to")
def element_records(name: str) -> Response:
    """The revision records of the stream's retained elements ``from``..``to`` (ordinals, default: the oldest
    retained onwards), at most ``ELEMENTS_LIMIT`` per page: ordinal, timestamp, graph, revision id, commit time."""
    stream = _catalog().get(name)
    first = _ordinal_parameter("from", stream.first_ordinal)
    last = min(_ordinal_parameter("to", stream.head()), first + ELEMENTS_LIMIT - 1)
    records = [stream.record(o) for o in range(max(first, stream.first_ordinal), last + 1)]
    return jsonify({"elements": [{
        "ordinal": r.ordinal, "time": format_micros(r.time), "graph": r.graph,
        "revision_id": str(stream.uuid_of(r.ordinal)), "committed": format_micros(r.commit), "committed_us": r.commit,
    } for r in records if r is not None], "first_ordinal": stream.first_ordinal, "head": stream.head()})


def _ordinal_parameter(name: str, default: int) -> int:
    text = request.args.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise BadRequest(f"{name}={text!r} is not an element ordinal (an integer ≥ 0)")
    return int(text)


@bp.route("/streams/<name>/windows", methods=["GET"])
@reads_only
@reads("ref")
def window_revisions(name: str) -> Response:
    """Every window revision materialized for the stream's sequences (optionally one ``ref``)."""
    stream = _catalog().get(name)
    wanted = request.args.get("ref")
    sequences = stream.windows.sequences()
    if wanted is not None:  # every sequence of that ref (a HEAD ref has one per HEAD it was registered at)
        sequences = stream.windows.with_ref(str(parse_window_ref(wanted)))
    return jsonify({"sequences": [{
        "id": sequence.id, "ref": sequence.ref,
        "windows": [describe_revision(sequence.spec.kind, r) for r in stream.windows.revisions(sequence.id)],
    } for sequence in sequences]})


@bp.route("/streams/<name>/windows/<revision_id>", methods=["GET", "POST"])
@reads_only
@reads("query")
def window_revision(name: str, revision_id: str) -> Response:
    """One window revision, re-addressed by its UUID: its dataset, or the SPARQL Protocol over it."""
    stream = _catalog().get(name)
    revision = stream.windows.by_uuid(revision_id)
    if revision is None:
        raise RevisionNotFound(f"stream {name!r} has no window revision {revision_id!r}")
    sequence = stream.windows.sequence(revision.sequence)
    selected = revision_window(sequence.spec.kind if sequence is not None else "time", revision)
    query = _query_text({})
    if query is not None:
        spool, mimetype = run_query(stream.window_store(selected.ordinals), query, None, None)
        return spooled_response(spool, mimetype, window_headers(selected))
    return _dataset_response(stream, selected)


# -- configuration ---------------------------------------------------------------------------

def _given_settings() -> dict[str, object]:
    """The settings a PUT or PATCH gives: its JSON body's, then its query parameters'."""
    options: dict[str, object] = {}
    mimetype, _ = body_media_type(request.headers.get("Content-Type"))
    if mimetype == "application/json":
        options.update(json_object_body("stream configuration", ' of settings, e.g. {"lateness": "PT5S"}'))
    for setting in SETTINGS:
        if setting.name in request.args:
            key = setting.name
            options[key] = request.args.getlist(key) if setting.repeatable else request.args[key]
    return options


def _put(name: str) -> Response:
    """The stream's whole configuration: settings not given take their defaults (a ``Warning`` names those that
    had another value: PATCH changes some and keeps the others)."""
    existing = _catalog().find(name)
    config = stream_config(name, _given_settings(), existing)
    dropped = [] if existing is None else sorted(set(settings_of(existing.config)) - set(settings_of(config)))
    _, created = _catalog().put(config)
    headers = {"Location": request.base_url}
    if dropped:
        headers["Warning"] = (f'299 concentrator "PUT replaced the whole configuration: {", ".join(dropped)} went '
                              'back to the default; PATCH changes the settings it names and keeps the others"')
    return empty_response(201 if created else 204, headers)


def _patch(name: str) -> Response:
    """Change the settings given and keep the others; a setting given empty goes back to its default."""
    existing = _catalog().get(name)
    options = settings_of(existing.config)
    for key, value in _given_settings().items():
        if value in ("", [""], [], None):
            options.pop(key, None)
            if key == "write-token":
                options[key] = ""  # removes the stream's token (it is kept by hash: absent means "keep it")
        else:
            options[key] = value
    _catalog().put(stream_config(name, options, existing))
    return empty_response(204, {"Location": request.base_url})


def _service_description() -> Response:
    body = f"[] a <http://www.w3.org/ns/sparql-service-description#Service> ; <{SD_ENDPOINT}> <{request.url}> .\n"
    return Response(body, mimetype="text/turtle")


# -- upload ------------------------------------------------------------------------------------

def _upload(stream: Stream) -> Response:
    ensure_write(f"an upload or punctuation to stream {stream.config.name!r}", stream.config.name)
    punctuation = request.args.get("punctuation")
    if punctuation is not None:
        stream.punctuate(now_micros() if punctuation == "now" else _instant(punctuation, "punctuation"))
        stream.flush()
        return _upload_answer(stream, 0, None, None)
    mimetype, options = body_media_type(request.headers.get("Content-Type"))
    if mimetype not in STREAM_BODY_FORMATS:
        raise UnsupportedMediaType(
            f"Content-Type {mimetype or '(none)'!r} is not a stream upload: send application/trig, "
            "application/n-quads or application/ld+json (each named graph one element), or text/turtle or "
            "application/n-triples (the whole body one element)")
    if not is_utf8(options):
        raise UnsupportedMediaType(f"charset {options['charset']!r} is not supported: send UTF-8")
    rdf_format = STREAM_BODY_FORMATS[mimetype]
    reader = available_reader(request.environ)
    if rdf_format in (RdfFormat.TURTLE, RdfFormat.N_TRIPLES):
        graph = iri_parameter(request.args["graph"], "graph") if "graph" in request.args else f"urn:uuid:{uuid.uuid4()}"
        time = _instant(request.args["timestamp"], "timestamp") if "timestamp" in request.args else None
        element = single_element(reader, rdf_format, NamedNode(graph), time, base_iri=request.base_url)
        if time is not None:  # the literal as the client wrote it (its offset kept); a '+' sent raw became a space
            element.stamp = Literal(request.args["timestamp"].strip().replace(" ", "+"), datatype=XSD_DATETIME)
        ordinal = stream.accept(element, now_micros())
        stream.flush()
        return _upload_answer(stream, 1, ordinal, ordinal)
    framer = (
        JsonLdFramer(reader, stream.config.timestamp_predicate, base_iri=request.base_url,
                     first_ordinal=stream.head() + 1) if rdf_format == RdfFormat.JSON_LD else
        ElementFramer(reader, rdf_format, stream.config.timestamp_predicate, base_iri=request.base_url,
                      first_ordinal=stream.head() + 1, segments=services().framing))
    batches: Iterable[list[ParsedElement]] = (
        framer.batches() if isinstance(framer, ElementFramer) else ([element] for element in framer))
    accepted: list[int | None] = []  # ordinals (None: a punctuation), appended as the elements are accepted
    try:
        try:
            for batch in batches:
                stream.accept_many(batch, now_micros(), accepted)
        except TimeoutError:  # the body stalled (the server's body timeout)
            raise BodyStalled() from None
    except ConcentratorError as error:
        stream.flush()
        drain(reader)
        committed, first, last = _accepted_span(accepted)
        span = f" (ordinals {first}–{last})" if first is not None else ""
        raise error.with_context(
            f"The upload stopped there: {committed} element(s) of it before that one were committed{span}; nothing "
            f"of that element or of what followed it was stored. The stream's HEAD is ordinal {stream.head()}.",
            {"Elements-Committed": str(committed), "Connection": "close",
             **({"Revision-Ordinal": str(last)} if last is not None else {})},
        ) from None
    stream.flush()
    if isinstance(framer, ElementFramer):
        stream.ingest.framing_seconds += framer.seconds
    return _upload_answer(stream, *_accepted_span(accepted))


def _accepted_span(accepted: list[int | None]) -> tuple[int, int | None, int | None]:
    """How many elements an upload's accepted ordinals hold (punctuations left out), the first and the last."""
    ordinals = [ordinal for ordinal in accepted if ordinal is not None]
    return len(ordinals), (ordinals[0] if ordinals else None), (ordinals[-1] if ordinals else None)


def _upload_answer(stream: Stream, committed: int, first: int | None, last: int | None) -> Response:
    head = stream.head()
    body = {
        "committed": committed, "first_ordinal": first, "last_ordinal": last, "head": head if len(stream) else 0,
        "stream_time": None if stream.stream_time is None else format_micros(stream.stream_time),
    }
    headers = {"Revision-Ordinal": str(head), "Revision-Id": str(stream.uuid_of(head))} if len(stream) else {}
    response = jsonify(body)
    response.headers.update(headers)
    return response


# -- windows -----------------------------------------------------------------------------------

def _select_window(stream: Stream, text: str) -> SelectedWindow:
    return select_window(stream, text, timeout_seconds(request.args.get("timeout"), DEFAULT_TIMEOUT))


def _query_text(extra: dict[str, list[str]]) -> str | None:
    """The SPARQL query of a request to a stream IRI, wherever the client put it."""
    queries = request.args.getlist("query") + extra.get("query", [])
    if request.method == "POST":
        mimetype, _ = body_media_type(request.headers.get("Content-Type"))
        if mimetype == "application/sparql-query":
            queries.append(text_body("query"))
        elif mimetype == FORM:
            queries.extend(request.form.getlist("query"))
        elif mimetype == "application/sparql-update" or request.form.get("update"):
            raise BadRequest("a stream is appended to by uploading elements, not by SPARQL Update")
    if len(queries) > 1:
        raise BadRequest(f"give one query (found {len(queries)})")
    return queries[0] if queries else None


def _query(stream: Stream, windows: str | None, text: str) -> Response:
    if request.args.getlist("default-graph-uri") or request.args.getlist("named-graph-uri"):
        raise BadRequest("a stream IRI fixes the dataset (its window's elements): default-graph-uri and "
                         "named-graph-uri do not apply")
    if windows is None:
        selected = revision_selection(stream, revision_parameter())
    else:
        selected = _select_window(stream, windows)
    window = stream.window_store(selected.ordinals)
    if is_extended(text, request.base_url):  # THEN(), WINDOWS, REVISION, SERVICE over the window
        evaluator = services().evaluator.with_local_bases([request.host_url.rstrip("/")])
        target = QueryTarget(window, None, None, selected.commit, request.base_url, None, stream)
        spool, mimetype = serialize_result(evaluator.query(text, target))
    else:
        spool, mimetype = run_query(window, text, None, None)
    return spooled_response(spool, mimetype, window_headers(selected))


def _dataset_response(stream: Stream, selected: SelectedWindow, more: dict[str, str] | None = None) -> Response:
    mimetype = best_media_type(request.headers.get("Accept"), list(DATASET_FORMATS))
    if mimetype is None:
        raise NotAcceptable("a window is a dataset: available as " + ", ".join(DATASET_FORMATS))
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    serialize(stream.dataset_quads(selected.ordinals), spool, DATASET_FORMATS[mimetype])
    headers = {**window_headers(selected), "Window-Elements": str(len(selected.ordinals)),  # the whole stream too
               **(more or {})}
    return spooled_response(spool, mimetype, headers)


# -- small parsers -----------------------------------------------------------------------------

def _instant(text: str, parameter: str) -> int:
    """An xsd:dateTime parameter (``punctuation=``, ``timestamp=``) in µs; errors name the parameter."""
    return to_micros(parse_instant(text, f"{parameter}={text!r}").at)

