"""SPARQL 1.1 Protocol at /sparql: queries (GET, form POST, direct POST) and updates (POST)."""

from __future__ import annotations

import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from flask import Blueprint, Response, request
from pyoxigraph import NamedNode, QueryResultsFormat, QueryTriples, RdfFormat, Store
from werkzeug.datastructures import MultiDict

from engine import plain
from engine.budget import Budget
from engine.context import QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.query_process import QueryTask
from engine.results import ConstructedQuads, ConstructedTriples, drained
from protocol import service_description
from protocol.access import READ, Need, ParsedRequest, client_name, ensure_write, needs
from protocol.bodies import text_body
from protocol.errors import BadRequest, MethodNotAllowed, NotAcceptable
from protocol.negotiation import (
    DATASET_FORMATS,
    GRAPH_FORMATS,
    RESULTS_FORMATS,
    best_media_type,
    body_media_type,
    is_utf8,
)
from protocol.parameters import reads
from protocol.responses import empty_response, gunicorn_client_gone, revision_headers, spooled_response
from protocol.services import services
from sparql_ext import QuerySyntaxError, parse_events, parse_extended
from sparql_ext.lexer import check_raw_nesting
from sparql_ext.modifiers import silence_query, silence_update, slice_query
from store import RevisionedDataset, UnsupportedMediaType
from store.terms import named_node

bp = Blueprint("sparql", __name__)

FORM = "application/x-www-form-urlencoded"


@dataclass
class SparqlRequest:
    kind: str  # "query" or "update"
    text: str
    default_graphs: list[str] = field(default_factory=list)
    named_graphs: list[str] = field(default_factory=list)
    revision: str | None = None  # revision-id=, in the query string or the form
    timeout: str | None = None  # timeout=: the query's budget in seconds, as sent


def _dataset() -> RevisionedDataset:
    return services().dataset


def read_sparql_request() -> SparqlRequest:
    """The operation of a SPARQL Protocol request, or a 4xx naming what is wrong."""
    params: MultiDict[str, str] = MultiDict(request.args)
    body_text: tuple[str, str] | None = None
    if request.method == "POST":
        mimetype, options = body_media_type(request.headers.get("Content-Type"))
        if not mimetype:
            raise BadRequest(
                "a POST to the SPARQL endpoint needs a Content-Type: "
                f"{FORM}, application/sparql-query or application/sparql-update")
        if not is_utf8(options):
            raise UnsupportedMediaType(
                f"charset {options['charset']!r} is not supported: send UTF-8")
        if mimetype == FORM:
            params.update(MultiDict(request.form))
        elif mimetype == "application/sparql-query":
            body_text = ("query", text_body("query"))
        elif mimetype == "application/sparql-update":
            body_text = ("update", text_body("update"))
        else:
            raise UnsupportedMediaType(
                f"Content-Type {mimetype!r} is not a SPARQL Protocol body: use {FORM}, "
                "application/sparql-query or application/sparql-update")
    elif request.method not in ("GET", "HEAD"):
        raise MethodNotAllowed(f"{request.method} is not a SPARQL Protocol method: use GET or POST",
                               headers={"Allow": ", ".join(METHODS)})
    queries, updates = params.getlist("query"), params.getlist("update")
    if body_text is not None:
        (queries if body_text[0] == "query" else updates).append(body_text[1])
    if len(queries) + len(updates) != 1:
        raise BadRequest("give exactly one 'query' or one 'update' (found "
                         f"{len(queries)} queries and {len(updates)} updates)")
    if updates and request.method == "GET":
        raise BadRequest("an update must be sent with POST, not GET (SPARQL 1.1 Protocol §2.2)")
    revisions = params.getlist("revision-id")
    if len(revisions) > 1:
        raise BadRequest("revision-id is given more than once; give one revision")
    timeouts = params.getlist("timeout")
    if len(timeouts) > 1:
        raise BadRequest("timeout is given more than once; give the query's budget once")
    silent = silent_header()
    if updates:
        if revisions and revisions[0]:
            raise BadRequest("revision-id selects a revision to read; updates always apply to HEAD")
        return SparqlRequest("update", silence_update(updates[0]) if silent else updates[0],
                             params.getlist("using-graph-uri"), params.getlist("using-named-graph-uri"))
    text = slice_query(queries[0], *response_slice(params))
    return SparqlRequest("query", silence_query(text) if silent else text, params.getlist("default-graph-uri"),
                         params.getlist("named-graph-uri"), revisions[0] if revisions else None,
                         timeouts[0] if timeouts else None)


def response_slice(params: MultiDict[str, str]) -> tuple[int | None, int | None]:
    """``limit=`` (or its other name ``response-limit=``) and ``offset=``: whole numbers, 0 or more, each given once."""
    found: dict[str, int | None] = {}
    for names in (("limit", "response-limit"), ("offset",)):
        given = [(name, value) for name in names for value in params.getlist(name)]
        if len(given) > 1:
            raise BadRequest(f"{' or '.join(names)} is given more than once; give it once")
        if given and not given[0][1].isdigit():
            raise BadRequest(f"{given[0][0]}={given[0][1]!r}: give a whole number, 0 or more")
        found[names[0]] = int(given[0][1]) if given else None
    return found["limit"], found["offset"]


def silent_header() -> bool:
    """The ``Silent`` header: ``true`` makes SERVICE and the update operations that take it SILENT."""
    value = request.headers.get("Silent")
    if value is None or value.strip().lower() == "false":
        return False
    if value.strip().lower() == "true":
        return True
    raise BadRequest(f"Silent: {value!r}: give true or false")


def _iris(values: list[str], parameter: str) -> list[NamedNode]:
    return [named_node(v, parameter) for v in values]


def sparql_need(parsed: ParsedRequest) -> Need:
    """A query is a read (GET, or POST of a query or a ``query=`` form); an update, or anything else, a write."""
    if parsed.mimetype == "application/sparql-update" or parsed.parameter("update"):
        return Need(True, what="SPARQL Update")
    query_body = parsed.mimetype in (FORM, "application/sparql-query")
    if parsed.method in ("GET", "HEAD") or (parsed.method == "POST" and query_body):
        return READ
    return Need(True, what=f"{parsed.method} /sparql")


METHODS = ("GET", "HEAD", "POST", "OPTIONS")  # Flask adds HEAD and OPTIONS; any other method: 405 with Allow


@bp.route("/sparql", methods=["GET", "POST"])
@needs(sparql_need)
@reads("query", "update", "default-graph-uri", "named-graph-uri", "using-graph-uri", "using-named-graph-uri",
       "revision-id", "timeout", "limit", "offset", "response-limit")
def sparql_endpoint() -> Response:
    if request.method in ("GET", "HEAD") and "query" not in request.args and "update" not in request.args:
        return _described()
    operation = read_sparql_request()
    if operation.kind == "update":
        ensure_write("SPARQL Update")
        commit = _dataset().update(
            operation.text, base_iri=request.base_url,
            using=operation.default_graphs, using_named=operation.named_graphs)
        return empty_response(204, revision_headers(commit.revision))
    return evaluate_query(operation)


def _described() -> Response:
    """The endpoint's service description (SPARQL 1.1 Service Description §2), in the RDF format ``Accept`` prefers."""
    media_type = best_media_type(request.headers.get("Accept"), list(service_description.OFFERED))
    if media_type is None:
        raise NotAcceptable("GET /sparql without a query answers the service description, available as: "
                            + ", ".join(service_description.OFFERED) + "; give query= to ask a query")
    body = service_description.serialized(service_description.service_description(request.base_url, _dataset()),
                                          media_type)
    return Response(body, content_type=f"{media_type}; charset=utf-8", headers={"Vary": "Accept"})


def evaluate_query(operation: SparqlRequest) -> Response:
    """A query within its budget (``engine.workers``): a plain one in a worker process (killed past its budget), an
    extended one here (its result's writing stopped past it); at most ``--queries-per-client`` per client."""
    budget = query_budget(operation.timeout)
    dataset = _dataset()
    ordinal = dataset.resolve(operation.revision)
    default_graph = _iris(operation.default_graphs, "default-graph-uri") or None
    named_graphs = _iris(operation.named_graphs, "named-graph-uri") or None
    if named_graphs is not None and default_graph is None:
        default_graph = []  # the protocol dataset replaces the store's: an empty default graph
    if ordinal is None:
        ordinal = dataset.head  # pinned: the response's headers name the revision the query read
    queries, client = services().queries, client_name()
    with queries.pool.admit(client, budget):
        if is_extended(operation.text, request.base_url):
            evaluator = _evaluator().with_local_bases([request.host_url.rstrip("/")])
            target = QueryTarget(None, default_graph, named_graphs, None, request.base_url, ordinal)
            stop = budget.stop_when(gunicorn_client_gone(request.environ))
            with queries.evaluating(), plain.stopping(stop):  # its solutions are serialized as it evaluates them
                spool, mimetype = _serialized(evaluator.query(operation.text, target), budget, stop)
        elif queries.pool.in_workers:
            task = QueryTask(operation.text, request.base_url, _values(default_graph), _values(named_graphs),
                             worker_formats(request.headers.get("Accept")))
            with queries.evaluating():
                output = queries.pool.evaluate(task, ordinal, budget, gunicorn_client_gone(request.environ), client)
            spool, mimetype = output.file, output.media_type
        else:
            with dataset.reading(ordinal) as store:
                spool, mimetype = run_query(store, operation.text, default_graph, named_graphs, budget)
    headers = {}
    revision = dataset.revision(ordinal)
    if revision is not None:
        headers = revision_headers(revision)
    return spooled_response(spool, mimetype, headers)


def _evaluator() -> ExtendedEvaluator:
    return services().evaluator


def _values(iris: list[NamedNode] | None) -> tuple[str, ...] | None:
    return None if iris is None else tuple(iri.value for iri in iris)


def query_budget(given: str | None) -> Budget:
    """The request's budget, from now: ``timeout=`` seconds (``given``), at most the server's ``--query-timeout``;
    without it, the server's."""
    pool = services().queries.pool
    if given is None:
        return pool.budget()
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:  # NaN too
        raise BadRequest(f"timeout={given!r}: give the query's budget in seconds, a number more than 0 (at most the "
                         f"server's --query-timeout, {pool.limits.timeout:g} s)")
    return pool.budget(seconds, given)


# SERVICE too: pyoxigraph would call a SERVICE itself, over HTTP, past the allowlist; only the engine may call one
_EXTENSION_WORDS = re.compile(r"\b(REVISION|WINDOWS|THEN|SERVICE)\b", re.IGNORECASE)


def is_extended(text: str, base_iri: str | None) -> bool:
    """Whether a query needs the extended evaluator: REVISION, WINDOWS, SERVICE, THEN(), a quad template or MATCH
    (event patterns).

    Text the extended parser cannot read goes to pyoxigraph (whose message is then the one reported),
    unless it mentions an extension keyword: then the extended parser's error is the useful one."""
    if parse_events(text, base_iri).clauses:  # a syntax error in an event pattern is the useful one
        return True
    try:
        extended = parse_extended(text, base_iri)  # refuses text nested deeper than pyoxigraph's stack allows
    except QuerySyntaxError:
        if _EXTENSION_WORDS.search(text):
            raise
        check_raw_nesting(text)  # the tokenizer failed before it counted: pyoxigraph must not get deep text either
        return False
    return bool(extended.parts or extended.uses_then or extended.template is not None)


def serialize_result(result: Any, budget: Budget | None = None) -> tuple[IO[bytes], str]:
    """Serialize a query result (plain or extended) in the format the request's Accept prefers. pyoxigraph evaluates
    as it writes: a client that goes away meanwhile, or the end of ``budget`` (default: the server's, from now), stops
    the evaluation (``plain.Watched``, ``Budget.stop_when``)."""
    queries = services().queries
    budget = budget or queries.pool.budget()
    with queries.evaluating():
        return _serialized(result, budget, budget.stop_when(gunicorn_client_gone(request.environ)))


def _serialized(result: Any, budget: Budget, stop: Callable[[], bool]) -> tuple[IO[bytes], str]:
    spool = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
    try:
        if budget.expired():  # an extended query's evaluation before its first result took it all
            raise budget.exceeded()
        return spool, drained(result, lambda solutions: _write_result(solutions, spool, stop))
    except BaseException:
        spool.close()
        del result  # the error must not keep pyoxigraph's result (engine.results.drained)
        raise


ResultForm = Literal["solutions", "graph", "dataset"]
_FORMS: dict[ResultForm, tuple[dict[str, QueryResultsFormat] | dict[str, RdfFormat], str]] = {
    "solutions": (RESULTS_FORMATS, "SELECT/ASK results are available as: "),
    "graph": (GRAPH_FORMATS, "CONSTRUCT/DESCRIBE results are available as: "),
    "dataset": (DATASET_FORMATS, "CONSTRUCT with GRAPH in its template gives a dataset, available as: "),
}


def result_format(form: ResultForm, accept: str | None) -> tuple[str, QueryResultsFormat | RdfFormat]:
    """The media type the request's ``Accept`` prefers for a result of ``form`` and pyoxigraph's format for it, or
    ``NotAcceptable`` listing those available: the one choice, for results written here (``_write_result``) and in
    query processes (``worker_formats``)."""
    formats, available = _FORMS[form]
    mimetype = best_media_type(accept, list(formats))
    if mimetype is None:
        raise NotAcceptable(available + ", ".join(formats))
    return mimetype, formats[mimetype]


def worker_formats(accept: str | None) -> dict[str, tuple[str, str] | str]:
    """``result_format`` for each form a plain query may give, as a query process is told it
    (``engine.query_process.QueryTask.formats``): the media type and the canonical media type of pyoxigraph's format, or
    the 406 message."""
    chosen: dict[str, tuple[str, str] | str] = {}
    for form in ("solutions", "graph"):
        try:
            mimetype, found = result_format(form, accept)
        except NotAcceptable as refused:
            chosen[form] = refused.message
        else:
            chosen[form] = (mimetype, found.media_type)
    return chosen


def _write_result(result: Any, spool: IO[bytes], stop: Callable[[], bool]) -> str:
    accept = request.headers.get("Accept")
    if isinstance(result, ConstructedQuads):
        mimetype, found = result_format("dataset", accept)
        assert isinstance(found, RdfFormat)
        plain.write_rdf(result, spool, found, stop)
    elif isinstance(result, ConstructedTriples | QueryTriples):
        mimetype, found = result_format("graph", accept)
        assert isinstance(found, RdfFormat)
        if isinstance(result, QueryTriples):
            plain.write(result, spool, found, stop)
        else:
            plain.write_rdf(result, spool, found, stop)
    else:
        mimetype, found = result_format("solutions", accept)
        plain.write(result, spool, found, stop)
    return mimetype


def run_query(store: Store, text: str, default_graph: list[Any] | None,
              named_graphs: list[Any] | None, budget: Budget | None = None) -> tuple[IO[bytes], str]:
    """Evaluate a plain query in this thread and serialize its result in the format the request's Accept prefers,
    within ``budget`` as far as its writing goes (queries over windows, and ``/sparql`` without query processes).

    The result is computed completely before anything is sent, so an evaluation error is a 4xx."""
    result = plain.run(store, text, base_iri=request.base_url, default_graph=default_graph,
                       named_graphs=named_graphs)
    return serialize_result(result, budget)
