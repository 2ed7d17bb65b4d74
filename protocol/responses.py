"""Small response builders shared by the blueprints."""

from __future__ import annotations

import select
import socket
from collections.abc import Callable, Iterator
from typing import IO, Any

from flask import Response

from delivery.feeds import bounds_headers
from engine.selection import SelectedWindow
from store import Revision

CHUNK = 1 << 16
TEXT_TYPES = ("text/", "application/n-triples", "application/n-quads", "application/trig")


def revision_headers(revision: Revision) -> dict[str, str]:
    """Which revision a response reflects or a write produced."""
    return {"Revision-Ordinal": str(revision.ordinal), "Revision-Id": str(revision.uuid)}


def empty_response(status: int, headers: dict[str, str]) -> Response:
    """A bodiless answer to a write (201/204), without Flask's default text/html type."""
    response = Response(status=status, headers=headers)
    del response.headers["Content-Type"]
    return response


def spooled_response(spool: IO[bytes], mimetype: str, headers: dict[str, str]) -> Response:
    """Stream a fully computed result (computed first, so errors become 4xx/5xx, not a broken 200)."""
    size = spool.tell()
    spool.seek(0)

    def chunks() -> Iterator[bytes]:
        try:
            while chunk := spool.read(CHUNK):
                yield chunk
        finally:
            spool.close()

    content_type = mimetype
    if mimetype.startswith(TEXT_TYPES) or mimetype.endswith(("+json", "+xml", "/json")):
        content_type = f"{mimetype}; charset=utf-8"
    response = Response(chunks(), headers=headers, content_type=content_type)
    response.content_length = size
    return response


def window_headers(selected: SelectedWindow) -> dict[str, str]:
    """Which window a response is over: its bounds, index and revision id (a window revision), and
    ``Window-Elements``, its number of elements; nothing for a stream revision."""
    if selected.kind is None:
        return {}
    assert selected.start is not None and selected.end is not None
    identity = {} if selected.index is None else {"Window-Index": str(selected.index),
                                                  "Window-Id": selected.revision_id or ""}
    return {**identity, **bounds_headers(selected.kind, selected.start, selected.end),
            "Window-Elements": str(len(selected.ordinals))}


#: The WSGI environ key of ``release(sock) -> sock`` (``concentrator.server``): the server forgets the request's
#: connection, whose response another part (the fan-out) writes and closes from now on
RELEASE_SOCKET = "concentrator.release_socket"


def gunicorn_client_gone(environ: dict[str, Any]) -> Callable[[], bool]:
    """Whether the client closed its connection (gunicorn's socket reads EOF); never, elsewhere."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, socket.socket):
        return lambda: False

    def gone() -> bool:
        poller = select.poll()  # not select(): a server holding thousands of connections has descriptors past 1024
        try:
            poller.register(sock, select.POLLIN)
            readable = poller.poll(0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True

    return gone
