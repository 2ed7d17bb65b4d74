"""Reading a request body as its bytes arrive, so an element is committed before the upload ends.

A WSGI input's ``read(n)`` blocks until n bytes (or the end) have arrived; a parser asking for 8 KiB
would hold a sensor's 300-byte elements back until 8 KiB more came. gunicorn exposes no public
"read what is there" call, so for its chunked bodies we take the chunk data its chunk parser yields,
piece by piece (the attributes used are checked, and anything else falls back to plain reads).
"""

from __future__ import annotations

import select
import socket
import time
from typing import IO, Any

#: Bytes of a chunked body that must wait on the socket for ``arriving``: more than a chunk's framing can be
#: (gunicorn refuses chunk-size lines over 8,190 bytes), so some of them are data.
ARRIVING_BYTES = 16 << 10


class AvailableReader:
    """A file-like object whose ``read(n)`` returns as soon as any body bytes are available."""

    def __init__(self, body: Any) -> None:
        self._body = body
        reader = getattr(body, "reader", None)
        parser = getattr(reader, "parser", None)
        usable = hasattr(body, "buf") and hasattr(reader, "buf") and parser is not None and hasattr(parser, "__next__")
        self._chunked = reader if usable else None

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = 1 << 16
        chunked = self._chunked
        if chunked is None:
            return self._body.read(size)  # type: ignore[no-any-return]
        for buffered in (self._body, chunked):  # bytes already read ahead by gunicorn come first
            if buffered.buf.tell():
                data = buffered.buf.getvalue()
                buffered.buf.seek(0)
                buffered.buf.truncate()
                if len(data) > size:
                    buffered.buf.write(data[size:])
                return data[:size]  # type: ignore[no-any-return]
        if chunked.parser is None:
            return b""
        data = b""
        while not data:  # gunicorn's chunk parser yields b"" when a chunk's header ends a packet: not the end
            try:
                data = next(chunked.parser)
            except StopIteration:
                chunked.parser = None
                return b""
        if len(data) > size:
            chunked.buf.write(data[size:])
        return data[:size]  # type: ignore[no-any-return]

    def arriving(self) -> bool:
        """Whether the next ``read`` returns body bytes without waiting for the client: some are buffered, or at least
        ``ARRIVING_BYTES`` wait on the socket. A few bytes are not enough: they may be only a chunk's closing CRLF
        and the next chunk's header, and reading them would wait for that chunk's data. A body of known length:
        True (its ``read`` waits for a full block anyway)."""
        chunked = self._chunked
        if chunked is None or self._body.buf.tell() or chunked.buf.tell():
            return True
        unreader = getattr(getattr(chunked, "req", None), "unreader", None)
        sock = getattr(unreader, "sock", None)
        if sock is None or unreader is None:
            return True
        waiting: int = unreader.buf.tell()
        if waiting < ARRIVING_BYTES:
            poller = select.poll()  # not select(): descriptors past 1024 are common on a busy server
            poller.register(sock, select.POLLIN)
            if not poller.poll(0):  # (a socket with a timeout would wait for it in recv, whatever its flags)
                return False
            try:
                waiting += len(sock.recv(ARRIVING_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except OSError:  # nothing after all, or a broken connection (the read will say so)
                return False
        return waiting >= ARRIVING_BYTES

    def readable(self) -> bool:
        return True


def available_reader(environ: dict[str, Any]) -> IO[bytes]:
    return AvailableReader(environ["wsgi.input"])  # type: ignore[return-value]


def drain(stream: IO[bytes], limit: int = 16 << 20, seconds: float = 2.0) -> None:
    """Read and discard what remains of a refused upload (up to ``limit`` bytes or ``seconds``), so a client
    still sending reads our answer instead of a reset connection. A live upload that never ends is not
    waited for: after ``seconds`` the answer goes out with ``Connection: close``. A client that went away
    leaves nothing to drain."""
    left = limit
    deadline = time.monotonic() + seconds
    while left > 0 and time.monotonic() < deadline:
        try:
            data = stream.read(min(left, 1 << 16))
        except OSError:  # gunicorn's NoMoreData and friends: the client closed the connection
            return
        if not data:
            return
        left -= len(data)
