"""The fan-out: every continuous response's connection, held in one event loop instead of a thread each.

Once a request for a continuous response is validated and its headers are sent, its socket is handed to the
``Fanout`` (``subscribe``). The fan-out's event loop (asyncio, one thread) holds every such connection: a waiting
subscriber costs a socket and a few KB, no thread. Feeds (``delivery.feeds``) are advanced by a small pool of
threads when their stream commits windows or elements (``WindowLog.on_windows``, ``Stream.on_commit``), and
once a second besides; each item a feed gives is framed once per packaging and written to every subscriber of
the feed by the loop, without blocking (a subscriber whose unsent bytes pass ``MAX_BUFFERED`` is ended with a
notice: it reads slower than its windows come).

Subscribers share a feed when what they get cannot differ (``share_key``): the same sequence, query, media type
and a stateless report (RStream at window close), with no ``Rn`` end. The others (IStream/DStream, content-change,
resumed, ``Rn``) get a feed of their own, advanced the same way: still no thread while they wait.

A subscriber that closes its connection is noticed by the loop at once (end of file or reset): its registration is
removed from ``/status`` and its sequence released.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import logging
import socket
import threading
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Ping, Request

from delivery.feeds import Item, Notice, Step
from delivery.subscriptions import Registration, Registrations
from store.stream import Stream

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0  # every feed is advanced at least this often (retirement, lag, a t0 being bound)
KEEPALIVE_SECONDS = 15.0  # an idle subscriber gets a keep-alive (SSE comment, WebSocket ping) this often
MAX_BUFFERED = 16 << 20  # unsent bytes a subscriber may have before it is ended as too slow
STEPS_PER_RUN = 64  # items a feed gives per run of a pool thread, before other feeds get their turn
DRIVER_THREADS = 2
WEBSOCKET_GOING_AWAY = 1001
FD_SETSIZE = 1024


class Framing(Protocol):
    """How a subscriber's parts are framed (``protocol.packaging.Packager``)."""

    packaging: str

    def part(self, headers: dict[str, str], body: bytes) -> bytes: ...
    def keepalive(self) -> bytes: ...
    def closing(self) -> bytes: ...
    def notice(self, message: str) -> bytes: ...


@dataclass
class Feed:
    """A generator of steps and the subscribers it gives them to. ``position`` is the index of the next window
    the feed will look at (``share_key`` feeds only: a new subscriber joins if it starts at or after it)."""

    key: Hashable
    stream: Stream
    steps: Iterator[Step]
    position: Callable[[], int] | None
    subscribers: list[Subscriber] = field(default_factory=list)
    busy: bool = False
    again: bool = False
    ended: bool = False
    parts: dict[tuple[int, str], bytes] = field(default_factory=dict)  # (id(item), packaging) -> framed part


@dataclass
class Subscription:
    """What ``Fanout.subscribe`` needs to serve one validated continuous response."""

    stream: Stream
    sequence: str
    registration: Registration
    framing: Framing
    opening: bytes  # the first bytes of the body (multipart's first delimiter, an SSE comment, the WebSocket's headers)
    start: int  # items with a lower index are not this subscriber's (a shared feed that started earlier)
    last: int | None  # the last window index of an Rn ref
    make_steps: Callable[[], Iterator[Step]]  # a feed of its own (wait=0)
    share_key: Hashable | None = None  # subscribers with the same key may share one feed
    position: Callable[[], int] | None = None  # with share_key: the feed's next window index


class Subscriber(asyncio.Protocol):
    """One subscriber's connection, in the loop: HTTP (chunked or not) or a WebSocket (``websocket``)."""

    def __init__(self, fanout: Fanout, subscription: Subscription, chunked: bool,
                 websocket: WSConnection | None) -> None:
        self.fanout = fanout
        self.subscription = subscription
        self.chunked = chunked
        self.websocket = websocket
        self.transport: asyncio.Transport | None = None
        self.unconnected: list[bytes] = []  # written before the loop made its transport (a feed may be quicker)
        self.close_when_connected = False
        self.feed: Feed | None = None
        self.finished = False
        self.slow = False  # ended because it read more slowly than its windows came
        self.idle_ticks = 0.0

    # -- asyncio.Protocol --------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.websocket is not None:
            transport.write(self.websocket.send(Message(data=self.subscription.opening.decode("utf-8"))))
        elif self.subscription.opening:
            transport.write(self._framed(self.subscription.opening))
        for data in self.unconnected:
            transport.write(data)
        self.unconnected.clear()
        if self.close_when_connected:
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self.websocket is None:
            return  # an HTTP client sends nothing more on a continuous response's connection
        self.websocket.receive_data(data)
        for event in self.websocket.events():
            if isinstance(event, Ping):
                self._send_raw(self.websocket.send(event.response()))
            elif isinstance(event, CloseConnection):
                self._send_raw(self.websocket.send(event.response()))
                self._close()

    def eof_received(self) -> bool:
        return False  # the client closed its side: close ours (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.finished = True
        self.fanout.detach(self)

    # -- writing -------------------------------------------------------------------------------------------
    def give(self, item: Item, feed: Feed) -> None:
        """Send one item of the feed, if it is this subscriber's."""
        if self.finished or item.index < self.subscription.start:
            return
        last = self.subscription.last
        if last is not None and item.index > last:
            self.finish()
            return
        framing = self.subscription.framing
        if framing.packaging == "multipart":  # its boundary is this subscriber's own
            part = framing.part(item.headers, item.body)
        else:
            key = (id(item), framing.packaging)
            part = feed.parts.get(key) or feed.parts.setdefault(key, framing.part(item.headers, item.body))
        self.write(self.subscription.registration.delivered(item.index, part))
        self.idle_ticks = 0.0
        if last is not None and item.index >= last:
            self.finish()
        elif self.transport is not None and self.transport.get_write_buffer_size() > MAX_BUFFERED:
            self.slow = True
            self.finish(f"this response's client read more slowly than its windows came ({MAX_BUFFERED} bytes "
                        "unsent) and it was ended: reconnect to continue")

    def write(self, data: bytes) -> None:
        if self.finished or not data:
            return
        if self.websocket is not None:
            self._send_raw(self.websocket.send(Message(data=data.decode("utf-8"))))
        else:
            self._send_raw(self._framed(data))

    def _framed(self, data: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data

    def keepalive(self) -> None:
        if self.websocket is not None:
            self._send_raw(self.websocket.send(Ping()))
        else:
            self.write(self.subscription.framing.keepalive())

    def finish(self, notice: str | None = None) -> None:
        """End the response: its notice, multipart's closing, the last chunk or the WebSocket's close."""
        if self.finished:
            return
        framing = self.subscription.framing
        if notice is not None:
            self.write(framing.notice(notice))
        elif framing.packaging == "multipart":
            self.write(framing.closing())
        if self.websocket is not None:
            self._send_raw(self.websocket.send(CloseConnection(code=1000)))
        elif self.chunked:
            self._send_raw(b"0\r\n\r\n")
        self._close()

    def _send_raw(self, data: bytes) -> None:
        if self.transport is None:
            self.unconnected.append(data)
        elif not self.transport.is_closing():
            self.transport.write(data)

    def _close(self) -> None:
        self.finished = True
        if self.transport is not None:
            self.transport.close()  # after what is buffered is sent; connection_lost follows
        else:
            self.close_when_connected = True
        self.fanout.detach(self)


class Fanout:
    """The event loop holding every continuous response's connection, and the threads advancing their feeds."""

    def __init__(self, registrations: Registrations, driver_threads: int = DRIVER_THREADS) -> None:
        self.registrations = registrations
        self.loop = asyncio.new_event_loop()
        self._drivers = ThreadPoolExecutor(driver_threads, thread_name_prefix="feed")
        self._feeds: dict[Hashable, Feed] = {}  # by share key, or a key of their own
        self._hooked: dict[int, Stream] = {}  # streams whose commits wake feeds (by id: a stream object each)
        self._private = itertools.count()
        self._subscribers: set[Subscriber] = set()
        self.subscribed_total = 0
        self.slow_ended = 0
        self._thread = threading.Thread(target=self._run, name="fanout", daemon=True)
        self._thread.start()

    # -- from request threads --------------------------------------------------------------------------------
    def subscribe(self, sock: socket.socket, subscription: Subscription, chunked: bool,
                  websocket: WSConnection | None = None) -> None:
        """Take over a connection whose response headers are sent (or whose WebSocket is open): from now on the
        loop writes to it and closes it. The sequence is held and the registration listed until it ends."""
        subscription.stream.windows.hold(subscription.sequence)
        self.registrations.add(subscription.registration)
        self.loop.call_soon_threadsafe(self._attach, above_select_range(sock), subscription, chunked, websocket)

    def status(self) -> dict[str, int]:
        return {"subscribers": len(self._subscribers), "feeds": len(self._feeds),
                "subscribed_total": self.subscribed_total, "ended_too_slow": self.slow_ended}

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._close_all)
        self._thread.join(5)
        self._drivers.shutdown(wait=False, cancel_futures=True)

    # -- in the loop -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_later(TICK_SECONDS, self._tick)
        self.loop.run_forever()

    def _close_all(self) -> None:
        for subscriber in list(self._subscribers):
            if subscriber.websocket is not None:
                subscriber._send_raw(subscriber.websocket.send(CloseConnection(code=WEBSOCKET_GOING_AWAY)))
            subscriber._close()
        self.loop.stop()

    def _attach(self, sock: socket.socket, subscription: Subscription, chunked: bool,
                websocket: WSConnection | None) -> None:
        subscriber = Subscriber(self, subscription, chunked, websocket)
        self._subscribers.add(subscriber)
        self.subscribed_total += 1
        feed = self._feed_for(subscription)
        subscriber.feed = feed
        feed.subscribers.append(subscriber)
        self.loop.create_task(self._connect(sock, subscriber))
        self._schedule(feed)

    async def _connect(self, sock: socket.socket, subscriber: Subscriber) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: subscriber, sock)
        except OSError:
            subscriber.finished = True
            self.detach(subscriber)
            sock.close()

    def _feed_for(self, subscription: Subscription) -> Feed:
        key = subscription.share_key
        if key is not None:
            feed = self._feeds.get(key)
            position = None if feed is None or feed.position is None else feed.position()
            if feed is not None and not feed.ended and position is not None and position <= subscription.start:
                return feed
            if feed is not None:  # not joinable (ahead of this subscriber): this one gets its own
                key = ("private", next(self._private))
        else:
            key = ("private", next(self._private))
        feed = Feed(key, subscription.stream, subscription.make_steps(), subscription.position)
        self._feeds[key] = feed
        self._hook(subscription.stream)
        return feed

    def _hook(self, stream: Stream) -> None:
        if id(stream) in self._hooked:
            return
        self._hooked[id(stream)] = stream

        def moved() -> None:  # in the committing thread
            self.loop.call_soon_threadsafe(self._stream_moved, stream)

        stream.windows.on_windows.append(moved)
        stream.on_commit.append(moved)

    def _stream_moved(self, stream: Stream) -> None:
        for feed in list(self._feeds.values()):
            if feed.stream is stream:
                self._schedule(feed)

    def _tick(self) -> None:
        for feed in list(self._feeds.values()):
            self._schedule(feed)
        for subscriber in list(self._subscribers):
            subscriber.idle_ticks += TICK_SECONDS
            if subscriber.idle_ticks >= KEEPALIVE_SECONDS:
                subscriber.idle_ticks = 0.0
                subscriber.keepalive()
        self.loop.call_later(TICK_SECONDS, self._tick)

    def _schedule(self, feed: Feed) -> None:
        if feed.ended:
            return
        if feed.busy:
            feed.again = True
            return
        feed.busy = True
        self._drivers.submit(self._advance, feed)

    def _advance(self, feed: Feed) -> None:
        """In a pool thread: the steps the feed has now (never waits), handed to the loop."""
        items: list[Item] = []
        notice: str | None = None
        ended = False
        try:
            for step in itertools.islice(feed.steps, STEPS_PER_RUN):
                if step is None:
                    break
                if isinstance(step, Notice):
                    notice, ended = step.message, True
                    break
                items.append(step)
            else:
                ended = len(items) < STEPS_PER_RUN  # islice stopped early: the generator ended
        except Exception as error:  # noqa: BLE001 - an evaluation that fails ends its subscribers, visibly
            log.exception("a continuous response's feed failed")
            notice, ended = f"this response ended: {error}", True
        more = len(items) == STEPS_PER_RUN
        self.loop.call_soon_threadsafe(self._deliver, feed, items, notice, ended, more)

    def _deliver(self, feed: Feed, items: list[Item], notice: str | None, ended: bool, more: bool) -> None:
        feed.busy = False
        for item in items:
            for subscriber in list(feed.subscribers):
                subscriber.give(item, feed)
        feed.parts.clear()
        if ended:
            feed.ended = True
            for subscriber in list(feed.subscribers):
                subscriber.finish(notice)
            self._feeds.pop(feed.key, None)
            return
        if not feed.subscribers:
            self._feeds.pop(feed.key, None)
            feed.ended = True
            return
        if feed.again or more:
            feed.again = False
            self._schedule(feed)

    def detach(self, subscriber: Subscriber) -> None:
        """A subscriber ended (its client left, or its response is complete): forget it, once."""
        if subscriber not in self._subscribers:
            return
        self._subscribers.discard(subscriber)
        subscription = subscriber.subscription
        self.registrations.remove(subscription.registration.id)
        subscription.stream.windows.release(subscription.sequence)
        if subscriber.slow:
            self.slow_ended += 1
        feed = subscriber.feed
        if feed is not None and subscriber in feed.subscribers:
            feed.subscribers.remove(subscriber)
            if not feed.subscribers and not feed.busy:
                feed.ended = True
                self._feeds.pop(feed.key, None)


def above_select_range(sock: socket.socket) -> socket.socket:
    """The same connection on a file descriptor ≥ ``FD_SETSIZE`` (1024) when there is one: thousands of held
    connections must not take the low descriptors, which libraries that still call ``select()`` need (PySpark's
    accumulator server and py4j refuse a descriptor past 1024: the pipeline would not start after a restart that
    thousands of subscribers reconnect to). The original descriptor is closed; the connection stays open."""
    try:
        high = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, FD_SETSIZE)
    except OSError:  # no descriptor free above it (a low limit): keep this one
        return sock
    moved = socket.socket(sock.family, sock.type, sock.proto, fileno=high)
    sock.close()
    return moved


def accept_websocket(headers: dict[str, str]) -> tuple[WSConnection, bytes]:
    """Complete a WebSocket handshake from a request's headers: the connection's state and the bytes to send."""
    connection = WSConnection(ConnectionType.SERVER)
    request = "GET / HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    connection.receive_data(request.encode("latin-1"))
    for event in connection.events():
        if isinstance(event, Request):
            return connection, connection.send(AcceptConnection())
    raise ValueError("not a WebSocket handshake")

