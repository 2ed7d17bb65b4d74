"""WebSockets at a stream's IRIs (docs/connectors.md, "WebSocket"): a continuous response with one message per
window, and an upload with one message per element.

- ``ws://HOST/streams/NAME?WINDOWS=R…`` (the parameters of a continuous response: ``query``, ``format``,
  ``report``, ``operator``, and ``after`` / ``from`` / ``sequence`` to resume): a first message with the response's
  headers (``Window-Sequence``, ``Window-From``, …), then one JSON text message per window:
  ``{"Window-Index": …, "Window-Start": …, "Window-End": …, "Window-Id": …, "Window-Committed": …, "Content-Type":
  …, "body": "<the window's document>"}``. A client that reconnects with ``after=<last Window-Index>`` and
  ``sequence=<Window-Sequence>`` gets the windows it missed, then goes on live (``protocol.resume``).
- ``ws://HOST/streams/NAME`` (``format=application/trig`` by default, or ``application/n-quads``): each message the
  client sends is one element (or a punctuation: a timestamp triple alone); each is answered, once committed
  durably, with ``{"ordinal": N, "graph": …, "head": …}``; one whose graph name the stream already has with
  ``{"duplicate": true, "ordinal": …}`` (a client resuming after a disconnect sends again what it has no answer
  for). A refused element is answered with ``{"error": …, "status": 4xx, "committed": …, "head": …}`` and the
  WebSocket is closed (1008), as an HTTP upload stops at a bad element; nothing of it is stored.

Parameters are checked before the handshake: a bad request is an HTTP error response, as for any request, and
access control applies (an upload is a write). The handshake and frames are simple-websocket's (flask-sock's route
decorator is not used: it completes the handshake before the view could answer 4xx).
"""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from typing import Any

from flask import Response, current_app, request
from pyoxigraph import RdfFormat
from simple_websocket import ConnectionClosed, Server

from delivery.fanout import accept_websocket
from protocol.access import ensure_write
from protocol.continuous import POLL_SECONDS, Registered, continuous_plan, followed_body
from protocol.errors import BadRequest
from protocol.responses import RELEASE_SOCKET
from protocol.services import ServerConfig, services
from sparql_ext.errors import ConcentratorError
from sparql_ext.windowing import format_micros
from store.durable import now_micros
from store.errors import DuplicateElement, UnsupportedMediaType
from store.formats import UPLOAD_FORMATS
from store.framing import one_element
from store.stream import Stream

PING_SECONDS = 25.0  # keeps idle connections open through proxies, and notices a client that is gone
BATCH = 1_000  # elements received back to back that one commit makes durable before they are answered
POLICY_VIOLATION = 1008


class Hijacked(Response):
    """What a WebSocket view returns once the WebSocket is over: the connection was the WebSocket's, so nothing
    more may be written on it. Under gunicorn, raising StopIteration ends the request there (the worker closes the
    connection without a response; flask-sock does the same); Werkzeug's development server writes nothing either
    once the socket is closed."""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if "gunicorn.socket" in environ:
            raise StopIteration()
        return super().__call__(environ, start_response)


def _accept() -> Server:
    config = current_app.config["CONCENTRATOR"]
    assert isinstance(config, ServerConfig)
    return Server.accept(request.environ, ping_interval=PING_SECONDS, max_message_size=config.max_body_bytes)


def continuous_websocket(stream: Stream, windows: str, query: str | None, registered: Registered | None = None
                         ) -> Response:
    plan = continuous_plan(stream, windows, query, websocket=True, registered=registered)
    if plan.subscription is None or plan.steps is None:
        return Response(status=204, headers=plan.headers)  # an Rn resumed past its end: nothing to open a socket for
    opening = json.dumps({**plan.headers, "Content-Type": plan.packager.media_type}).encode()
    subscription = replace(plan.subscription, opening=opening)
    fanout, release = services().fanout, request.environ.get(RELEASE_SOCKET)
    sock = request.environ.get("gunicorn.socket")
    if fanout is not None and release is not None and isinstance(sock, socket.socket):
        connection, handshake = accept_websocket(dict(request.headers))
        sock.sendall(handshake)
        fanout.subscribe(release(sock), subscription, False, connection)  # the fan-out's loop holds it from now on
        return Hijacked()
    ws = _accept()  # a server without the fan-out: this thread follows the sequence
    body = followed_body(subscription, plan.packager, services().continuous, lambda: not ws.connected,
                         plan.steps(POLL_SECONDS))
    try:
        for part in body:
            ws.send(part.decode("utf-8"))
        ws.close()
    except (ConnectionClosed, OSError):
        pass  # the client went away: its registration ends with the body
    finally:
        body.close()
    return Hijacked()


def upload_websocket(stream: Stream) -> Response:
    ensure_write(f"a WebSocket upload to stream {stream.config.name!r}", stream.config.name)
    media_type = (request.args.get("format") or "application/trig").split(";")[0].strip().lower()
    rdf_format = UPLOAD_FORMATS.get(media_type)
    if rdf_format is None:
        raise UnsupportedMediaType(f"format={media_type!r}: a WebSocket upload takes one element per message as "
                                   f"{' or '.join(UPLOAD_FORMATS)}")
    if request.args.get("WINDOWS") is not None:
        raise BadRequest("a WebSocket with WINDOWS= receives window results; upload to the stream IRI itself")
    ws = _accept()
    committed = 0
    try:
        ws.send(json.dumps({"stream": stream.config.name, "format": media_type, "head": stream.head()}))
        while True:
            batch = [ws.receive()]
            while len(batch) < BATCH and (more := ws.receive(timeout=0)) is not None:
                batch.append(more)  # sent back to back: committed together, one fsync
            answers: list[dict[str, object]] = []
            error: ConcentratorError | None = None
            for message in batch:
                try:
                    answers.append(_accept_message(stream, message, rdf_format))
                except ConcentratorError as refused:
                    error = refused
                    break
            stream.flush()
            committed += sum(1 for a in answers if "duplicate" not in a and a.get("ordinal") is not None)
            for answer in answers:
                if answer.get("duplicate") and answer["ordinal"] is None:  # its first copy was in this batch
                    answer["ordinal"] = stream.ordinal_of_graph(str(answer["graph"]))
                ws.send(json.dumps({**answer, "head": stream.head()}))
            if error is not None:
                ws.send(json.dumps({"error": error.message, "status": error.status_hint, "committed": committed,
                                    "head": stream.head()}))
                ws.close(POLICY_VIOLATION, error.message.encode("utf-8")[:120].decode("utf-8", "ignore"))
                break
    except (ConnectionClosed, OSError):
        stream.flush()  # what was accepted is committed; the client resends what it got no answer for
    return Hijacked()


def _accept_message(stream: Stream, message: str | bytes, rdf_format: RdfFormat) -> dict[str, object]:
    payload = message.encode("utf-8") if isinstance(message, str) else message
    element = one_element(payload, rdf_format, stream.config.timestamp_predicate, base_iri=request.base_url,
                          first_ordinal=stream.head() + 1)
    graph = str(element.graph)
    try:
        ordinal = stream.accept(element, now_micros())
    except DuplicateElement:
        return {"duplicate": True, "ordinal": stream.ordinal_of_graph(graph), "graph": graph}
    if ordinal is None:
        return {"punctuation": format_micros(element.time or 0), "ordinal": None}
    return {"ordinal": ordinal, "graph": graph}
