"""Content codings (RFC 9110 §8.4): request bodies sent with ``Content-Encoding: gzip`` or ``deflate`` are decoded as
they are read, any other coding is refused with 415 and ``Accept-Encoding`` (RFC 7694); responses are gzipped when
the request's ``Accept-Encoding`` asks for it (docs/http.md, "Content codings").

Decoding happens before anything reads the body (the access check reads a form's): the request's input stream is
replaced by a decoding one, so every reader — forms, queries, Graph Store bodies, stream uploads — sees the decoded
bytes, and the limits on bodies count them decoded (a small gzip body cannot expand past a limit unnoticed).

Compression is written chunk by chunk as the body is sent, never held whole. Continuous responses (whose headers go
at once and whose chunks must reach the client as each window completes), server-sent events, ``multipart/mixed``,
bodiless answers and ``HEAD`` are sent as they are.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterable, Iterator
from typing import IO

from flask import Flask, Response, request
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from protocol.continuous import HeadersAtOnce
from protocol.errors import BadRequest, HttpProblem

DECODED = ("gzip", "x-gzip", "deflate")
READ_SIZE = 1 << 16
RAW_READ = 1 << 13
#: below this many bytes a body is sent as it is (gzip's own framing would make it larger, or barely smaller)
SMALLEST_COMPRESSED = 1024
_NOT_COMPRESSED = ("text/event-stream", "multipart/")


class UnsupportedContentEncoding(HttpProblem):
    status_hint = 415

    def __init__(self, coding: str) -> None:
        super().__init__(f"Content-Encoding {coding!r} is not supported: send the body as it is, or gzip or deflate it",
                         headers={"Accept-Encoding": "gzip, deflate"})


class DecodedBody(io.RawIOBase):
    """The body as read through ``codings`` (in the order they were applied), ``RAW_READ`` bytes of it at a time (at
    most ≈ 1,000 times that decoded: deflate's largest ratio); a body that is not what its coding says is a 400 where
    it stops making sense."""

    def __init__(self, raw: IO[bytes], codings: list[str]) -> None:
        self.raw = raw
        self.codings = " then ".join(codings)
        self.decoders = [_decoder(coding) for coding in reversed(codings)]  # the last applied is undone first
        self.pending = b""
        self.ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        while not self.pending and not self.ended:
            self.pending = self._decode()
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def _decode(self) -> bytes:
        data = self.raw.read(RAW_READ)
        last = not data
        try:
            for decoder in self.decoders:
                data = decoder.decompress(data) + (decoder.flush() if last else b"")
        except zlib.error as error:
            raise BadRequest(f"the body is not valid {self.codings} (Content-Encoding): {error}") from None
        if last:
            self.ended = True
            if not all(decoder.eof for decoder in self.decoders):
                raise BadRequest(f"the body ends before its {self.codings} stream does (Content-Encoding): it was "
                                 "cut short")
        return data


def _decoder(coding: str) -> zlib._Decompress:
    """gzip, or deflate: the zlib format (RFC 9110 §8.4.1.2)."""
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    return zlib.decompressobj(zlib.MAX_WBITS)


def codings_of(header: str) -> list[str]:
    """The codings of a ``Content-Encoding`` header, in the order they were applied (``identity`` left out); one this
    server does not decode is a 415."""
    codings = [part.strip().lower() for part in header.split(",") if part.strip()]
    for coding in codings:
        if coding not in (*DECODED, "identity"):
            raise UnsupportedContentEncoding(coding)
    return [coding for coding in codings if coding != "identity"]


def decode_request_body() -> None:
    """Before anything reads the body: replace the input stream by a decoding one (see the module docstring)."""
    header = request.headers.get("Content-Encoding")
    if header is None:
        return
    codings = codings_of(header)
    if not codings:
        return
    environ = request.environ
    decoded = io.BufferedReader(DecodedBody(request.stream, codings), READ_SIZE)
    environ["wsgi.input"] = decoded
    environ["wsgi.input_terminated"] = True  # read to its end: its decoded length is not known
    environ.pop("CONTENT_LENGTH", None)
    environ.pop("HTTP_CONTENT_ENCODING", None)
    for cached in ("stream", "content_length", "input_stream"):  # werkzeug's cached properties, if already read
        request.__dict__.pop(cached, None)


def wants_gzip(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` accepts gzip (named, or ``*``, with a quality above 0)."""
    if not accept_encoding:
        return False
    accepted = parse_accept_header(accept_encoding, MIMEAccept)
    return any(value.lower() in ("gzip", "x-gzip", "*") and quality > 0 for value, quality in accepted)


def compress_response(response: Response) -> Response:
    """Gzip the response's body as it is sent, when the request accepts gzip and the response may be compressed."""
    if isinstance(response, HeadersAtOnce) or request.method == "HEAD" or response.status_code < 200 \
            or response.status_code in (204, 304) or "Content-Encoding" in response.headers \
            or (response.mimetype or "").startswith(_NOT_COMPRESSED):
        return response
    response.vary.add("Accept-Encoding")
    size = response.content_length
    if not wants_gzip(request.headers.get("Accept-Encoding")) or (size is not None and size < SMALLEST_COMPRESSED):
        return response
    body = response.iter_encoded()
    response.direct_passthrough = False
    response.response = _gzipped(body)
    response.headers["Content-Encoding"] = "gzip"
    del response.headers["Content-Length"]
    etag, weak = response.get_etag()
    if etag and not weak:  # another representation of the same resource: no longer byte for byte the same
        response.set_etag(etag, weak=True)
    return response


def _gzipped(chunks: Iterable[bytes]) -> Iterator[bytes]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    try:
        for chunk in chunks:
            if compressed := compressor.compress(chunk):
                yield compressed
        yield compressor.flush()
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def install(app: Flask) -> None:
    """Decode request bodies before any other check reads them; compress responses after everything else."""
    app.before_request(decode_request_body)
    app.after_request(compress_response)
