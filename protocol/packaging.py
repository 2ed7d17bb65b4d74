"""How continuous responses are packaged (docs/continuous.md, "Packaging"): which media type each window's result
gets (``choose``) and how parts are framed for the packaging (``Packager``: one document per HTTP chunk, a
continuous N-Quads/N-Triples stream, ``multipart/mixed`` parts, server-sent events, WebSocket messages)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import BadRequest, NotAcceptable
from protocol.negotiation import DATASET_FORMATS, GRAPH_FORMATS, RESULTS_FORMATS, best_media_type

PACKAGINGS = ("chunked", "lines", "multipart", "event-stream")
WEBSOCKET = "websocket"  # one JSON text message per window over a WebSocket (protocol.websocket), never chosen by HTTP

OFFERED: dict[str, dict[str, Any]] = {"quads": DATASET_FORMATS, "triples": GRAPH_FORMATS, "solutions": RESULTS_FORMATS,
           "boolean": RESULTS_FORMATS}
LINE_DEFAULT = {"quads": "application/n-quads", "triples": "application/n-triples"}


def choose(kind: str, accept: str | None, packaging: str | None, format_: str | None) -> tuple[str, str]:
    """(packaging, media type of each window's document) for this request."""
    if packaging is None:
        wanted = best_media_type(accept, ["multipart/mixed", "text/event-stream"]) if accept else None
        explicit = wanted is not None and wanted in (accept or "")
        packaging = {"multipart/mixed": "multipart", "text/event-stream": "event-stream"}.get(
            wanted or "", "chunked") if explicit else "chunked"
    if packaging not in PACKAGINGS:
        raise BadRequest(f"packaging={packaging!r}: use one of {', '.join(PACKAGINGS)}")
    offered = list(OFFERED[kind].keys())
    if packaging == "lines":
        if kind not in LINE_DEFAULT:
            raise BadRequest("packaging=lines is a continuous N-Quads / N-Triples stream: it needs the window "
                             "dataset or a CONSTRUCT; use chunked, multipart or event-stream for SELECT / ASK")
        return packaging, LINE_DEFAULT[kind]
    if format_ is not None:
        if format_ not in offered:
            raise NotAcceptable(f"format={format_!r}: this result is available as {', '.join(offered)}")
        return packaging, format_
    if packaging == "event-stream" and kind in LINE_DEFAULT:
        return packaging, LINE_DEFAULT[kind]  # one line per data: field
    if packaging == "chunked":
        media_type = best_media_type(accept, offered)
        if media_type is None:
            raise NotAcceptable(f"this result is available as {', '.join(offered)} (one document per window)")
        return packaging, media_type
    return packaging, offered[0]


@dataclass
class Packager:
    packaging: str
    media_type: str
    boundary: str = field(default_factory=lambda: f"window-{uuid.uuid4().hex}")

    @property
    def content_type(self) -> str:
        if self.packaging == "multipart":
            return f"multipart/mixed; boundary={self.boundary}"
        if self.packaging == "event-stream":
            return "text/event-stream; charset=utf-8"
        return self.media_type

    def opening(self) -> bytes:
        """Sent when the response starts (before any window; the headers go before it, see ``HeadersAtOnce``):
        multipart's first delimiter, so that every part can end with the next delimiter and be complete as soon as
        it is sent; an SSE comment. Nothing for bare documents, whose every chunk is a window's document."""
        if self.packaging == "multipart":
            return f"--{self.boundary}".encode()
        if self.packaging == "event-stream":
            return b": window results follow\n\n"
        return b""

    def part(self, headers: dict[str, str], body: bytes) -> bytes:
        if self.packaging == WEBSOCKET:  # the window's headers, its media type and its document (text: UTF-8)
            return json.dumps({**headers, "Content-Type": self.media_type, "body": body.decode("utf-8")}).encode()
        if self.packaging == "multipart":
            head = "".join(f"{k}: {v}\r\n" for k, v in {"Content-Type": self.media_type, **headers}.items())
            return f"\r\n{head}\r\n".encode() + body + f"\r\n--{self.boundary}".encode()
        if self.packaging == "event-stream":
            lines = body.decode("utf-8").splitlines() or [""]
            data = "".join(f"data: {line}\n" for line in lines)
            return f"event: window\nid: {headers.get('Window-Index', '')}\n{data}\n".encode()
        return body

    def closing(self) -> bytes:
        """Ends a multipart body (after the last part's delimiter)."""
        return b"--\r\n" if self.packaging == "multipart" else b""

    def notice(self, message: str) -> bytes:
        """A closing remark where the packaging has room for one (none in a bare document stream)."""
        if self.packaging == WEBSOCKET:
            return json.dumps({"notice": message}).encode()
        if self.packaging == "multipart":
            return f"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{message}\r\n--{self.boundary}--\r\n".encode()
        if self.packaging == "event-stream":
            return f"event: end\ndata: {message}\n\n".encode()
        return b""

    def keepalive(self) -> bytes:
        return b": keep-alive\n\n" if self.packaging == "event-stream" else b""
