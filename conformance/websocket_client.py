"""simple-websocket's client, mended: the tests' and benchmarks' WebSocket client.

simple-websocket 1.1.0's ``Client`` reads the server's handshake answer with one ``recv`` and takes only the first
event from it. When the server's first message arrives in that same read (it does when the server sends it at once
and the client is slow to read, e.g. on a loaded machine), the message stays in the protocol buffer until the next
read from the socket: the server's next ping, 25 s later. The same class of bug is known in other clients (netty,
websocket-sharp, faye); a browser's ``WebSocket`` and the ``websockets`` library do not have it.
"""

from __future__ import annotations

from simple_websocket import Client as _Client


class Client(_Client):  # type: ignore[misc]  # simple-websocket ships no type information
    def handshake(self) -> None:
        super().handshake()
        self._handle_events()  # the frames read together with the handshake's answer, if any
