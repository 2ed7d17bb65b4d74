"""Many long-lived subscribers on continuous responses (issue 31): 10,000 server-sent-event subscribers and 1,000
WebSockets held on one server while a stream ingests, every window fanned out to every one of them.

One server (``concentrator serve`` on 127.0.0.1, a free port, an on-disk data directory in a temporary folder; its
default settings, plus any ``--server-arg``) and client processes that hold the subscribers (one asyncio loop each,
raw sockets: h11 reads the SSE responses, wsproto the WebSockets; no thread per subscriber). Every stream gets the
same ``--sequences`` window sequences: ``R/HEAD/<width>`` (tumbling, ``--window`` seconds wide) registered at
``--sequences`` different HEADs (seed elements ``width / sequences`` apart), so each has its own t0 and their
windows complete in turn; a subscriber names its sequence with ``sequence=`` (the ``Window-Sequence`` of its
registration) and asks ``SELECT (COUNT(*) AS ?n) …`` as CSV (the same text for all: one evaluation per window).
Subscriber k reads sequence k mod ``--sequences``. Phases, in one run:

1. **warm-up**: stream ``warmup``, sequences registered, a short upload (Spark's first batches; with ``--rate 0``
   it measures the flood rate that sets the element spacing of the next uploads).
2. **baseline**: stream ``baseline``, the same sequences, one chunked upload of ``--seconds`` × ``--rate``
   elements (paced at ``--rate`` elements/s; ``--rate 0``: as fast as it goes), nobody subscribed. ``GET
   /status`` every 100 ms meanwhile (``--status-every``; 0: never).
3. **subscribed**: stream ``subscribed``, the same sequences; server RSS (VmRSS of its whole process tree, and of
   the gunicorn worker alone) before; ``--subscribers`` SSE responses (``Accept: text/event-stream``) and
   ``--websockets`` WebSockets attach (each counted once its response headers, or its first message, arrived);
   RSS after; ``--hold`` seconds held; then the same upload. ``GET /status`` every 100 ms from the end of the
   attach to the end. Once the server lists every window the upload completed, each subscriber is checked: the
   windows it got (``id:`` of each ``window`` event, ``Window-Index`` of each message) are exactly the sequence's
   windows from its ``Window-From`` on, in order, once each.

Fan-out time of a window = the last of its subscribers' receive time (client clock, taken when the bytes were read)
− the window revision's commit time (server clock, same machine): SSE events carry only ``id:``, so commit times come
from ``GET /streams/NAME/windows`` (the WebSocket messages' ``Window-Committed`` are checked against it).

    .venv/bin/python -m bench.subscribers --quick                 # 200 SSE + 50 WebSockets, 10 s upload
    .venv/bin/python -m bench.subscribers                         # 10,000 SSE + 1,000 WebSockets, 10 sequences
    .venv/bin/python -m bench.subscribers --quick --subscribers 40 --websockets 10 --server-arg '--threads 64'

Prints a table; writes ``bench/results/NAME.json`` (default ``subscribers``), ``NAME.png`` (memory, registrations,
/status latency and fan-out over the run) and ``NAME_latency.png`` (their distributions).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import multiprocessing
import os
import resource
import selectors
import shlex
import shutil
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import h11
import requests
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from bench.cpu import TICK
from bench.harness import (
    Measurement,
    Panel,
    Series,
    distribution_plot,
    environment,
    percentile,
    print_table,
    replot,
    time_series_plot,
    write_json,
    write_plots,
)
from conformance.server import REPO_ROOT, children_of, process_tree, running_server, tail

BENCH_NAME = "subscribers"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z (µs): the first seed element, t0 of the first sequence
QUERY = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"
RESULT_FORMAT = "text/csv"
TARGET_INGEST_RATIO = 0.8
STATUS_EVERY = 0.1  # s between two GET /status
MEMORY_EVERY = 1.0  # s between two RSS samples
SERVER_FILES = ("concentrator/server.py", "protocol/continuous.py", "protocol/websocket.py", "protocol/packaging.py")
QUICK = {"subscribers": 200, "websockets": 50, "seconds": 10.0, "warmup_seconds": 3.0}
FULL = {"subscribers": 10_000, "websockets": 1_000, "seconds": 30.0, "warmup_seconds": 5.0}


# --- pure parts -------------------------------------------------------------------------------------------------


def stamp(micros: int) -> str:
    """µs since the epoch as an xsd:dateTime in UTC, to the microsecond (integer arithmetic: no float rounding).

    >>> stamp(T0 + 1_500)
    '2016-06-20T10:00:00.001500Z'
    """
    seconds, rest = divmod(micros, 1_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{rest:06d}Z"


def epoch_seconds(text: str) -> float:
    """An xsd:dateTime (``Window-Committed``, a listing's ``committed``) as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def duration_text(seconds: float) -> str:
    """A WindowRef duration: ``PT01S`` for whole seconds (as the docs write them), ``PT0.5S`` otherwise.

    >>> duration_text(2), duration_text(0.5), duration_text(1.25)
    ('PT02S', 'PT0.5S', 'PT1.25S')
    """
    if float(seconds).is_integer():
        return f"PT{int(seconds):02d}S"
    return f"PT{seconds:g}S"


def window_ref(width_seconds: float) -> str:
    return f"R/HEAD/{duration_text(width_seconds)}"


def seed_times(sequences: int, width_us: int) -> list[int]:
    """The seed elements' times: sequence j is registered at the HEAD of seed j, so its t0 is ``T0 + j·width/n``
    and the sequences' windows end in turn, ``width/n`` apart.

    >>> seed_times(4, 2_000_000)[1] - T0
    500000
    """
    return [T0 + j * width_us // sequences for j in range(sequences)]


def last_complete_index(t0_us: int, width_us: int, stream_time_us: int) -> int:
    """The last window of the tumbling sequence ``[t0 + k·w, t0 + (k+1)·w)`` that a stream time completes (a window
    is complete when stream time reaches its end); -1 when none.

    >>> last_complete_index(0, 10, 9), last_complete_index(0, 10, 10), last_complete_index(0, 10, 35)
    (-1, 0, 2)
    """
    return (stream_time_us - t0_us) // width_us - 1


def subscriber_target(stream: str, ref: str, sequence_id: str) -> str:
    """The request target of a subscriber of one sequence: its windowed IRI with ``sequence=`` and the query."""
    params = {"WINDOWS": ref, "sequence": sequence_id, "format": RESULT_FORMAT, "query": QUERY}
    return f"/streams/{stream}?" + urlencode(params, quote_via=quote, safe="/")


def element(name: str, n: int, at_us: int) -> str:
    """One element as N-Quads: its timestamp triple (default graph) and one statement in its graph."""
    graph = f"<urn:{name}:e{n}>"
    return (f'{graph} <{PROV}> "{stamp(at_us)}"^^<{XSD_DT}> .\n'
            f'<urn:{name}:s{n}> <urn:v> "{n % 100}" {graph} .\n')


def element_batches(name: str, count: int, first_us: int, spacing_us: int, per_batch: int) -> list[bytes]:
    """``count`` elements ``spacing_us`` apart from ``first_us``, ``per_batch`` to a chunk; built before an upload
    so that the upload times the server, not the client's string building."""
    return ["".join(element(name, n, first_us + n * spacing_us)
                    for n in range(start, min(start + per_batch, count))).encode()
            for start in range(0, count, per_batch)]


class EventStream:
    """Server-sent events cut from a response body's bytes as they arrive: ``feed`` returns the complete events
    as ``(event type, id, data)``; comment-only blocks (``: keep-alive``) are counted in ``comments``.

    >>> parser = EventStream()
    >>> parser.feed(b": window results follow\\n\\nevent: window\\nid: 0\\ndata: n\\ndata: 3\\n\\nevent: win")
    [('window', '0', 'n\\n3')]
    >>> parser.feed(b"dow\\nid: 1\\ndata: n\\n\\n: keep-alive\\n\\n"), parser.comments
    ([('window', '1', 'n')], 2)
    """

    def __init__(self) -> None:
        self.buffer = b""
        self.comments = 0

    def feed(self, data: bytes) -> list[tuple[str, str, str]]:
        self.buffer += data
        events: list[tuple[str, str, str]] = []
        while (end := self.buffer.find(b"\n\n")) >= 0:
            block, self.buffer = self.buffer[:end], self.buffer[end + 2:]
            kind, ident, lines, fields = "message", "", [], 0
            for line in block.split(b"\n"):
                if not line or line.startswith(b":"):
                    continue
                name, _, value = line.partition(b":")
                text = value[1:] if value.startswith(b" ") else value
                fields += 1
                if name == b"event":
                    kind = text.decode()
                elif name == b"id":
                    ident = text.decode()
                elif name == b"data":
                    lines.append(text.decode())
            if fields:
                events.append((kind, ident, "\n".join(lines)))
            else:
                self.comments += 1
        return events


def check_windows(received: Sequence[int], listed: Sequence[int], window_from: int | None) -> dict[str, Any]:
    """Whether one subscriber got every window of its sequence from its first one: ``received`` (the indexes it
    got, in order) must be the ``listed`` windows (those the server materialized, up to the last one checked) from
    its ``Window-From`` on (or from its first window if it had no such header), in order, once each.

    >>> check_windows([0, 1, 2], [0, 1, 2], 0)["complete"]
    True
    >>> result = check_windows([0, 2, 2], [0, 1, 2], 0)
    >>> result["complete"], result["missing"], result["duplicates"], result["out_of_order"]
    (False, 1, 1, 1)
    >>> check_windows([], [0, 1], 0)["complete"], check_windows([3], [0, 1, 2, 3], None)["complete"]
    (False, True)
    """
    start = window_from if window_from is not None else (received[0] if received else None)
    expected = [i for i in listed if start is not None and i >= start]
    got = set(received)
    missing = [i for i in expected if i not in got]
    duplicates = len(received) - len(got)
    out_of_order = sum(1 for a, b in zip(received, received[1:], strict=False) if b <= a)
    unexpected = sorted(got - set(listed))
    complete = bool(received) and not missing and not duplicates and not out_of_order
    return {"complete": complete, "received": len(received), "first": received[0] if received else None,
            "last": received[-1] if received else None, "expected": len(expected), "missing": len(missing),
            "missing_sample": missing[:5], "duplicates": duplicates, "out_of_order": out_of_order,
            "beyond_listed": len(unexpected)}


def summary(values: Sequence[float], unit: str = "ms", digits: int = 1) -> dict[str, Any]:
    """n, p50, p90, p99, max and mean of ``values`` (nearest rank), as the other benchmarks write them.

    >>> summary([1.0, 2.0, 3.0, 4.0])
    {'n': 4, 'p50_ms': 3.0, 'p90_ms': 4.0, 'p99_ms': 4.0, 'max_ms': 4.0, 'mean_ms': 2.5}
    >>> summary([])
    {'n': 0}
    """
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(ordered), **{f"{q}_{unit}": round(percentile(ordered, f), digits)
                                  for q, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
            f"max_{unit}": round(ordered[-1], digits), f"mean_{unit}": round(sum(ordered) / len(ordered), digits)}


@dataclass(frozen=True)
class WindowFanout:
    """One window: its sequence and index, its commit time (epoch s), how many of its subscribers had it, of how
    many, and the first and last of them (ms after the commit; None when nobody had it)."""

    sequence: int
    index: int
    committed: float
    received: int
    subscribers: int
    first_ms: float | None
    last_ms: float | None

    @property
    def complete(self) -> bool:
        return self.received >= self.subscribers > 0


def fanout(commits: Mapping[tuple[int, int], float], receipts: Mapping[tuple[int, int], Sequence[float]],
           subscribers: Mapping[int, int]) -> list[WindowFanout]:
    """Per window ``(sequence, index)`` with a commit time: when its first and last subscriber had it.

    >>> [w.last_ms for w in fanout({(0, 0): 10.0}, {(0, 0): [10.002, 10.010]}, {0: 2})]
    [10.0]
    >>> fanout({(0, 0): 10.0}, {(0, 0): [10.002]}, {0: 2})[0].complete
    False
    """
    result = []
    for (sequence, index), committed in sorted(commits.items()):
        times = receipts.get((sequence, index), ())
        first = round((min(times) - committed) * 1000, 2) if times else None
        last = round((max(times) - committed) * 1000, 2) if times else None
        result.append(WindowFanout(sequence, index, committed, len(times), subscribers.get(sequence, 0), first, last))
    return result


def deliveries_ms(commits: Mapping[tuple[int, int], float],
                  receipts: Mapping[tuple[int, int], Sequence[float]]) -> list[float]:
    """Every delivery's latency (a subscriber's receive time − its window's commit), in ms."""
    return [(t - commits[key]) * 1000 for key, times in receipts.items() if key in commits for t in times]


# --- the server's processes (/proc) -------------------------------------------------------------------------------



def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def rss_bytes(pid: int) -> int:
    """VmRSS of one process (0 when it is gone)."""
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (0 when it is gone)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK


def server_memory(pid: int) -> dict[str, float]:
    """RSS (MB) of the server's process tree: in all, the gunicorn worker (the master's child with its command
    line), the JVM (Spark), the rest (master, framing processes, Spark's Python workers)."""
    tree = process_tree(pid)
    master_cmd = _read(f"/proc/{pid}/cmdline")
    children = children_of().get(pid, [])
    worker = next((p for p in children if _read(f"/proc/{p}/cmdline") == master_cmd), None)
    rss = {p: rss_bytes(p) for p in tree}
    jvm = sum(v for p, v in rss.items() if _read(f"/proc/{p}/comm").strip() == "java")
    worker_rss = rss.get(worker, 0) if worker is not None else 0
    mb = 1024 * 1024
    return {"total_mb": round(sum(rss.values()) / mb, 1), "worker_mb": round(worker_rss / mb, 1),
            "jvm_mb": round(jvm / mb, 1), "other_mb": round((sum(rss.values()) - worker_rss - jvm) / mb, 1),
            "processes": len(tree)}


def server_cpu(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (a connection is a file); the new soft limit.
    The server started afterwards inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def server_version() -> dict[str, Any]:
    """Which server this ran against, without git: whether the fan-out (``delivery/``) is there and is used, and a
    hash of the files that serve continuous responses."""
    delivery = REPO_ROOT / "delivery"
    files = [REPO_ROOT / f for f in SERVER_FILES] + sorted(delivery.glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        if path.exists():
            digest.update(path.name.encode() + path.read_bytes())
    server_py = REPO_ROOT / "concentrator" / "server.py"
    return {"delivery_package": delivery.is_dir(),
            "server_uses_delivery": server_py.exists() and "delivery" in server_py.read_text(encoding="utf-8"),
            "files_sha256": digest.hexdigest()[:16]}


# --- the client processes: subscribers in one asyncio loop each --------------------------------------------------


@dataclass(eq=False)
class Subscriber:
    """One subscriber as the client sees it."""

    ident: int
    kind: str  # "sse" or "ws"
    sequence: int  # which of the run's sequences (0 … n-1)
    target: str
    status: int | None = None
    sequence_id: str | None = None
    window_from: int | None = None
    indexes: list[int] = field(default_factory=list)
    error: str | None = None
    notice: str | None = None
    asked: float = 0.0
    answered: float | None = None
    ended: bool = False  # the server ended the response (or the connection was lost)
    transport: asyncio.Transport | None = None
    ready: asyncio.Future[None] | None = None

    def settle(self, error: str | None = None) -> None:
        if error is not None and self.error is None:
            self.error = error
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(None)


class SseProtocol(asyncio.Protocol):
    """An SSE subscriber's connection: a GET, its response read with h11, its body cut into events."""

    def __init__(self, client: Client, subscriber: Subscriber, host: str) -> None:
        self.client = client
        self.sub = subscriber
        self.host = host
        self.http = h11.Connection(h11.CLIENT)
        self.events = EventStream()
        self.refusal = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.sub.transport = transport
        request = h11.Request(method="GET", target=self.sub.target,
                              headers=[("Host", self.host), ("Accept", "text/event-stream"),
                                       ("User-Agent", "bench.subscribers")])
        transport.write(self.http.send(request) + self.http.send(h11.EndOfMessage()))

    def data_received(self, data: bytes) -> None:
        now = self.client.received_at()
        try:
            self.http.receive_data(data)
            self._events(now)
        except h11.RemoteProtocolError as error:
            self.client.lost(self.sub, f"HTTP: {error}")

    def eof_received(self) -> bool:
        with contextlib.suppress(h11.RemoteProtocolError):
            self.http.receive_data(b"")
            self._events(time.time())
        return False

    def _events(self, now: float) -> None:
        while True:
            event = self.http.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Response):
                self.sub.status = event.status_code
                headers = {name.decode().lower(): value.decode() for name, value in event.headers}
                self.sub.sequence_id = headers.get("window-sequence")
                window_from = headers.get("window-from")
                self.sub.window_from = int(window_from) if window_from and window_from.isdigit() else None
                if event.status_code == 200:
                    self.client.opened(self.sub, now)
            elif isinstance(event, h11.Data):
                if self.sub.status != 200:
                    self.refusal += bytes(event.data)[:500]
                    continue
                for kind, ident, data in self.events.feed(bytes(event.data)):
                    if kind == "window" and ident.isdigit():
                        self.client.window(self.sub, int(ident), now, None)
                    elif kind == "end":
                        self.sub.notice = data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                if self.sub.status != 200:
                    self.client.refused(self.sub, f"{self.sub.status}: {self.refusal.decode(errors='replace')}")
                else:
                    self.client.lost(self.sub, None)
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost(self.sub, None if exc is None else f"connection lost: {exc}")


class WebSocketProtocol(asyncio.Protocol):
    """A WebSocket subscriber's connection (wsproto): the handshake, the headers message, one message a window;
    pings answered."""

    def __init__(self, client: Client, subscriber: Subscriber, host: str) -> None:
        self.client = client
        self.sub = subscriber
        self.host = host
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.text: list[str] = []
        self.refusal = b""
        self.headers_seen = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.sub.transport = transport
        transport.write(self.ws.send(Request(host=self.host, target=self.sub.target)))

    def send(self, event: Any) -> None:
        if self.sub.transport is not None and not self.sub.transport.is_closing():
            with contextlib.suppress(LocalProtocolError):
                self.sub.transport.write(self.ws.send(event))

    def data_received(self, data: bytes) -> None:
        now = self.client.received_at()
        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    self.sub.status = 101
                elif isinstance(event, RejectConnection):
                    self.sub.status = event.status_code
                    if not event.has_body:
                        self.client.refused(self.sub, f"{event.status_code}")
                elif isinstance(event, RejectData):
                    self.refusal += event.data[:500]
                    if event.body_finished:
                        self.client.refused(self.sub, f"{self.sub.status}: {self.refusal.decode(errors='replace')}")
                elif isinstance(event, TextMessage):
                    self.text.append(event.data)
                    if event.message_finished:
                        message, self.text = "".join(self.text), []
                        self._message(message, now)
                elif isinstance(event, Ping):
                    self.send(event.response())
                elif isinstance(event, CloseConnection):
                    self.sub.notice = self.sub.notice or f"closed by the server: {event.code} {event.reason or ''}"
                    self.send(event.response())
                    self.client.lost(self.sub, None)
        except Exception as error:  # noqa: BLE001 - any protocol error ends this subscriber, not the client
            self.client.lost(self.sub, f"WebSocket: {type(error).__name__}: {error}")

    def _message(self, text: str, now: float) -> None:
        message = json.loads(text)
        if not self.headers_seen:
            self.headers_seen = True
            self.sub.sequence_id = message.get("Window-Sequence")
            window_from = str(message.get("Window-From", ""))
            self.sub.window_from = int(window_from) if window_from.isdigit() else None
            self.client.opened(self.sub, now)
        elif "Window-Index" in message:
            self.client.window(self.sub, int(message["Window-Index"]), now, message.get("Window-Committed"))
        elif "notice" in message:
            self.sub.notice = str(message["notice"])

    def close(self) -> None:
        self.send(CloseConnection(code=1000))

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.lost(self.sub, None if exc is None else f"connection lost: {exc}")


class StampingSelector(selectors.EpollSelector):
    """The client loop's selector, noting when each ``select`` returned: the time a subscriber's bytes were known to
    have arrived, before the loop handles the sockets found ready one after the other (a window reaches thousands of
    a client's subscribers at once; stamping each in its callback would add the client's own queue to the fan-out)."""

    woke = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        self.woke = time.time()
        return ready


class Client:
    """The subscribers of one client process, driven by the parent over a pipe: ``attach`` (open them, answer
    ``attached`` with counts once each has its headers, failed or timed out), ``progress``, ``drain`` (wait until
    each has its sequence's last window, close them all, answer ``result``) and ``stop``."""

    def __init__(self, conn: Connection, number: int, selector: StampingSelector | None = None) -> None:
        self.conn = conn
        self.number = number
        self.selector = selector
        self.queued = 0.0  # seconds between a select's return and the callbacks of its sockets, summed
        self.queued_max = 0.0
        self.callbacks = 0
        self.subscribers: list[Subscriber] = []
        self.protocols: dict[int, SseProtocol | WebSocketProtocol] = {}
        self.receipts: dict[str, dict[tuple[int, int], array[float]]] = {"sse": {}, "ws": {}}
        self.ws_commits: dict[tuple[int, int], str] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.done: asyncio.Future[None] | None = None
        self.open = 0

    # -- events from the protocols ------------------------------------------------------------------------
    def received_at(self) -> float:
        """When the bytes now being handled were known to have arrived: the loop's last select (see
        ``StampingSelector``); the time now without it."""
        now = time.time()
        if self.selector is None or not self.selector.woke:
            return now
        queued = now - self.selector.woke
        self.queued += queued
        self.queued_max = max(self.queued_max, queued)
        self.callbacks += 1
        return self.selector.woke

    def opened(self, sub: Subscriber, now: float) -> None:
        sub.answered = now
        self.open += 1
        sub.settle()

    def refused(self, sub: Subscriber, reason: str) -> None:
        sub.settle(reason[:300])
        if sub.transport is not None:
            sub.transport.close()

    def lost(self, sub: Subscriber, reason: str | None) -> None:
        if not sub.ended:
            sub.ended = True
            if sub.answered is not None:
                self.open -= 1
        sub.settle(reason or "the server closed the connection before its headers")
        if sub.transport is not None and not sub.transport.is_closing():
            sub.transport.close()

    def window(self, sub: Subscriber, index: int, now: float, committed: str | None) -> None:
        sub.indexes.append(index)
        key = (sub.sequence, index)
        times = self.receipts[sub.kind].get(key)
        if times is None:
            times = self.receipts[sub.kind][key] = array("d")
        times.append(now)
        if committed is not None and key not in self.ws_commits:
            self.ws_commits[key] = committed

    # -- commands --------------------------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        loop.add_reader(self.conn.fileno(), self.command)
        try:
            await self.done
        finally:
            loop.remove_reader(self.conn.fileno())

    def command(self) -> None:
        try:
            verb, args = self.conn.recv()
        except (EOFError, OSError):
            verb, args = "stop", {}
        if verb == "stop":
            if self.done is not None and not self.done.done():
                self.done.set_result(None)
            return
        if verb == "progress":
            self.conn.send(("progress", self.counts()))
            return
        work = self.attach(**args) if verb == "attach" else self.drain(**args)
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def counts(self) -> dict[str, int]:
        answered = sum(1 for s in self.subscribers if s.answered is not None)
        failed = sum(1 for s in self.subscribers if s.answered is None and s.error is not None)
        return {"subscribers": len(self.subscribers), "open": self.open, "answered": answered, "failed": failed}

    async def attach(self, host: str, port: int, specs: list[tuple[str, int, str]], concurrency: int,
                     timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        semaphore = asyncio.Semaphore(concurrency)
        fresh = [Subscriber(len(self.subscribers) + i, kind, sequence, target)
                 for i, (kind, sequence, target) in enumerate(specs)]
        self.subscribers += fresh
        address = f"{host}:{port}"

        async def one(sub: Subscriber) -> None:
            async with semaphore:
                sub.ready = loop.create_future()
                sub.asked = time.time()
                protocol: SseProtocol | WebSocketProtocol = (
                    SseProtocol(self, sub, address) if sub.kind == "sse" else WebSocketProtocol(self, sub, address))
                self.protocols[sub.ident] = protocol
                try:
                    await asyncio.wait_for(loop.create_connection(lambda: protocol, host, port),
                                           max(0.1, deadline - loop.time()))
                    await asyncio.wait_for(asyncio.shield(sub.ready), max(0.1, deadline - loop.time()))
                except TimeoutError:
                    sub.settle(f"no answer within {timeout:g} s of the start of the attach")
                    if sub.transport is not None:
                        sub.transport.close()
                except OSError as error:
                    sub.settle(f"connect: {error}")

        await asyncio.gather(*(one(sub) for sub in fresh))
        self.conn.send(("attached", self.counts()))

    async def drain(self, finals: dict[int, int], listed: dict[int, list[int]], timeout: float) -> None:
        """Wait until every open subscriber has its sequence's final window (or ``timeout``), then close them all
        and send the results."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waited_from = time.time()

        def behind() -> list[Subscriber]:
            return [s for s in self.subscribers if s.answered is not None and not s.ended
                    and (not s.indexes or s.indexes[-1] < finals.get(s.sequence, -1))]

        while behind() and loop.time() < deadline:
            await asyncio.sleep(0.1)
        late = behind()
        drained = time.time() - waited_from
        for sub in self.subscribers:
            protocol = self.protocols.get(sub.ident)
            if isinstance(protocol, WebSocketProtocol):
                protocol.close()
            if sub.transport is not None:
                sub.transport.close()
        await asyncio.sleep(0.5)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        records = []
        for sub in self.subscribers:
            check = check_windows(sub.indexes, listed.get(sub.sequence, []), sub.window_from)
            records.append({"kind": sub.kind, "sequence": sub.sequence, "sequence_id": sub.sequence_id,
                            "status": sub.status, "window_from": sub.window_from, "error": sub.error,
                            "notice": sub.notice, "attach_ms": None if sub.answered is None else
                            round((sub.answered - sub.asked) * 1000, 1), "ended_early": sub.ended, **check})
        self.conn.send(("result", {
            "client": self.number, "subscribers": records, "late": len(late), "drain_seconds": round(drained, 2),
            "receipts": {kind: {key: list(times) for key, times in found.items()}
                         for kind, found in self.receipts.items()},
            "ws_commits": self.ws_commits, "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "queued_ms": {"mean": round(self.queued / self.callbacks * 1000, 3) if self.callbacks else None,
                          "max": round(self.queued_max * 1000, 1), "callbacks": self.callbacks}}))


def client_process(conn: Connection, number: int) -> None:
    """A client process's entry point (multiprocessing, spawn)."""
    raise_fd_limit()
    selector = StampingSelector()
    loop = asyncio.SelectorEventLoop(selector)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(Client(conn, number, selector).run())
    finally:
        loop.close()


class Clients:
    """The client processes, as the parent drives them."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.pending: list[list[tuple[str, Any]]] = []  # answers read while waiting for another kind
        self.processes = []
        for number in range(count):
            parent, child = context.Pipe()
            process = context.Process(target=client_process, args=(child, number), daemon=True,
                                      name=f"bench-subscribers-{number}")
            process.start()
            child.close()
            self.pipes.append(parent)
            self.pending.append([])
            self.processes.append(process)

    def send(self, verb: str, args: list[dict[str, Any]]) -> None:
        for pipe, arguments in zip(self.pipes, args, strict=True):
            pipe.send((verb, arguments))

    def _take(self, number: int, wanted: str, wait: float) -> tuple[bool, Any]:
        """Client ``number``'s next answer ``wanted``, if it comes within ``wait`` s; other answers are kept."""
        pending = self.pending[number]
        for k, (verb, payload) in enumerate(pending):
            if verb == wanted:
                del pending[k]
                return True, payload
        pipe = self.pipes[number]
        deadline = time.monotonic() + wait
        while pipe.poll(max(0.0, deadline - time.monotonic())):
            verb, payload = pipe.recv()
            if verb == wanted:
                return True, payload
            pending.append((verb, payload))
        return False, None

    def gather(self, wanted: str, timeout: float, progress: Callable[[], None] | None = None) -> list[Any]:
        """Each client's answer ``wanted``, waiting up to ``timeout`` s; ``progress`` is called every 5 s."""
        answers: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        last_progress = time.monotonic()
        while len(answers) < len(self.pipes):
            for number in range(len(self.pipes)):
                if number not in answers:
                    found, payload = self._take(number, wanted, 0.05)
                    if found:
                        answers[number] = payload
            if progress is not None and time.monotonic() - last_progress > 5:
                progress()
                last_progress = time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(f"client processes did not answer {wanted!r} within {timeout:g} s")
        return [answers[n] for n in range(len(self.pipes))]

    def counts(self) -> dict[str, int]:
        """The clients' current counts (answers to ``progress``)."""
        for pipe in self.pipes:
            pipe.send(("progress", {}))
        totals: dict[str, int] = {}
        for number in range(len(self.pipes)):
            found, payload = self._take(number, "progress", 60.0)
            for key, value in (payload if found else {}).items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def stop(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("stop", {}))
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()


# --- the parent: server, streams, uploads, samplers -------------------------------------------------------------


class Sampler(threading.Thread):
    """Calls ``sample`` every ``every`` seconds in a thread, keeping ``(seconds since origin, phase, value)``."""

    def __init__(self, every: float, sample: Callable[[], Any], origin: float) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.sample = sample
        self.origin = origin
        self.phase = ""
        self.samples: list[tuple[float, str, Any]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            began = time.monotonic()
            value = self.sample()
            self.samples.append((round(began - self.origin, 3), self.phase, value))
            self.halt.wait(max(0.0, self.every - (time.monotonic() - began)))

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(30)

    def of(self, phase: str) -> list[Any]:
        return [value for _, p, value in self.samples if p == phase]


def status_probe(url: str) -> Callable[[], dict[str, Any]]:
    """One ``GET /status``: its latency, answer, size and the registrations it lists (``continuous``)."""
    session = requests.Session()

    def probe() -> dict[str, Any]:
        began = time.perf_counter()
        try:
            response = session.get(f"{url}/status", timeout=60)
            ms = (time.perf_counter() - began) * 1000
            registrations = len(response.json().get("continuous", [])) if response.ok else None
            return {"ms": round(ms, 2), "status": response.status_code, "bytes": len(response.content),
                    "registrations": registrations}
        except (requests.RequestException, ValueError) as error:
            return {"ms": round((time.perf_counter() - began) * 1000, 2), "status": None, "error": str(error)[:200]}

    return probe


@dataclass
class Plan:
    """What the run's streams share: their sequences (one ref at n HEADs), the elements' spacing and count."""

    sequences: int
    width_us: int
    spacing_us: int
    elements: int
    rate: float  # elements/s the upload is paced at; 0: as fast as the server takes them

    @property
    def ref(self) -> str:
        return window_ref(self.width_us / 1e6)

    @property
    def first_element_us(self) -> int:
        return T0 + self.width_us  # after every seed

    def last_indexes(self, elements: int) -> list[int]:
        """Each sequence's last window that an upload of ``elements`` completes."""
        stream_time = self.first_element_us + (elements - 1) * self.spacing_us
        return [last_complete_index(t0, self.width_us, stream_time) for t0 in seed_times(self.sequences,
                                                                                          self.width_us)]


def prepare_stream(url: str, name: str, plan: Plan) -> list[str]:
    """Create stream ``name`` and register its sequences: seed element j, then a continuous response opened and
    closed at once (its ``Window-Sequence`` header names the sequence registered at that HEAD). Returns their ids."""
    requests.put(f"{url}/streams/{name}", timeout=30).raise_for_status()
    ids = []
    for j, at in enumerate(seed_times(plan.sequences, plan.width_us)):
        seed = f'<urn:{name}:seed{j}> <{PROV}> "{stamp(at)}"^^<{XSD_DT}> .\n<urn:{name}:x> <urn:seed> "{j}" ' \
               f'<urn:{name}:seed{j}> .\n'
        requests.post(f"{url}/streams/{name}", data=seed.encode(), timeout=30,
                      headers={"Content-Type": "application/n-quads"}).raise_for_status()
        with requests.get(f"{url}/streams/{name}", params={"WINDOWS": plan.ref, "query": QUERY,
                                                           "format": RESULT_FORMAT},
                          headers={"Accept": "text/event-stream"}, stream=True, timeout=30) as response:
            response.raise_for_status()
            ids.append(response.headers["Window-Sequence"])
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"stream {name}: the {plan.ref} registrations at {len(ids)} HEADs gave the sequences "
                           f"{ids}, not one each")
    return ids


def paced(batches: list[bytes], rate: float, per_batch: int, started: list[float]) -> Iterator[bytes]:
    """The batches, each sent when its first element is due at ``rate`` elements/s (0: at once)."""
    begin = time.monotonic()
    started.append(begin)
    for k, data in enumerate(batches):
        if rate > 0:
            delay = begin + k * per_batch / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        yield data


def upload(url: str, name: str, plan: Plan, elements: int) -> Measurement:
    """One chunked upload of ``elements`` to stream ``name``: elements committed / the time from its first byte to
    its answer."""
    per_batch = max(1, int(plan.rate / 50)) if plan.rate > 0 else 500
    batches = element_batches(name, elements, plan.first_element_us, plan.spacing_us, per_batch)
    started: list[float] = []
    response = requests.post(
        f"{url}/streams/{name}", data=paced(batches, plan.rate, per_batch, started),
        headers={"Content-Type": "application/n-quads"}, timeout=900)
    seconds = time.monotonic() - started[0]
    if not response.ok:
        raise RuntimeError(f"upload to {name}: {response.status_code} {response.text[:500]}")
    return Measurement(name, seconds, int(response.json()["committed"]), unit="elements")


def listed_windows(url: str, name: str) -> dict[str, list[tuple[int, float]]]:
    """Every sequence's window revisions: id → [(index, commit time in epoch s)]."""
    answer = requests.get(f"{url}/streams/{name}/windows", timeout=60).json()
    return {s["id"]: [(w["index"], epoch_seconds(w["committed"])) for w in s["windows"]] for s in answer["sequences"]}


def wait_for_windows(url: str, name: str, ids: list[str], last: list[int], timeout: float,
                     ) -> dict[str, list[tuple[int, float]]]:
    """The stream's windows once each sequence lists its expected last window (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        windows = listed_windows(url, name)
        done = all(max((i for i, _ in windows.get(ident, [])), default=-1) >= want for ident, want in zip(ids, last,
                                                                                                           strict=True))
        if done or time.monotonic() > deadline:
            return windows
        time.sleep(0.25)


def specs_for(stream: str, plan: Plan, ids: list[str], sse: int, ws: int, clients: int,
              ) -> list[list[tuple[str, int, str]]]:
    """Each client's subscribers ``(kind, sequence, target)``: subscriber k of a kind reads sequence k mod n and is
    held by client k mod clients."""
    shares: list[list[tuple[str, int, str]]] = [[] for _ in range(clients)]
    for kind, count in (("sse", sse), ("ws", ws)):
        for k in range(count):
            sequence = k % plan.sequences
            shares[k % clients].append((kind, sequence, subscriber_target(stream, plan.ref, ids[sequence])))
    return shares


def run(args: argparse.Namespace) -> dict[str, Any]:
    fd_limit = raise_fd_limit()
    total = args.subscribers + args.websockets
    if total + 200 > fd_limit:
        raise SystemExit(f"{total:,} subscribers need about as many open files; the limit here is {fd_limit:,}")
    server_args = [part for text in args.server_arg for part in shlex.split(text)]
    width_us = int(round(args.window * 1_000_000))
    client_count = args.clients or (2 if total > 2_000 else 1)
    origin, origin_epoch = time.monotonic(), time.time()
    load_before = list(os.getloadavg())  # a shared machine: other work shows here
    phases: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def phase(label: str, *samplers: Sampler) -> Iterator[None]:
        for sampler in samplers:
            sampler.phase = label
        began = time.monotonic() - origin
        print(f"[{began:7.1f} s] {label} …", flush=True)
        try:
            yield
        finally:
            phases[label] = [round(began, 2), round(time.monotonic() - origin, 2)]

    clients = Clients(client_count)
    try:
        with running_server(server_args) as server, keep_log(server.log_path):
            url = server.url
            pid = server.process.pid
            memory = Sampler(MEMORY_EVERY, lambda: server_memory(pid), origin)
            memory.start()
            status = Sampler(args.status_every, status_probe(url), origin)
            cpu: dict[str, float] = {}

            # 1. warm-up (and, for a flood, the rate that sets the spacing)
            warm_rate = args.rate or 20_000.0
            plan = Plan(args.sequences, width_us, int(1_000_000 / warm_rate), 0, args.rate)
            with phase("warm-up", memory):
                warm_ids = prepare_stream(url, "warmup", plan)
                warm_elements = max(plan.sequences, int(warm_rate * args.warmup_seconds))
                warm = upload(url, "warmup", plan, warm_elements)
                warm_last = plan.last_indexes(warm_elements)
                warm_windows = wait_for_windows(url, "warmup", warm_ids, warm_last, 120)
                if any(max((i for i, _ in warm_windows.get(ident, [])), default=-1) < want
                       for ident, want in zip(warm_ids, warm_last, strict=True)):
                    raise RuntimeError(f"the warm-up's windows were not all materialized within 120 s (load average "
                                       f"{os.getloadavg()[0]:.1f}): is Spark's pipeline running? (the server's log)")
            spacing = int(1_000_000 / (args.rate or warm.rate))
            elements = int((args.rate or warm.rate) * args.seconds)
            plan = Plan(args.sequences, width_us, spacing, elements, args.rate)
            print(f"    warm-up: {warm.items:,} elements at {warm.rate:,.0f}/s; uploads of {elements:,} elements "
                  f"{spacing} µs apart in stream time, {plan.sequences} sequences of {plan.ref}", flush=True)

            # 2. baseline: the same upload, nobody subscribed
            baseline_ids = prepare_stream(url, "baseline", plan)
            if args.status_every > 0:
                status.start()
            with phase("baseline upload", memory, status):
                cpu_before = server_cpu(pid)
                baseline = upload(url, "baseline", plan, elements)
                cpu["baseline upload"] = round(server_cpu(pid) - cpu_before, 2)
            status.phase = "idle"
            baseline_windows = wait_for_windows(url, "baseline", baseline_ids, plan.last_indexes(elements), 60)

            # 3. subscribers attach, are held, and the same upload runs
            ids = prepare_stream(url, "subscribed", plan)
            time.sleep(2.0)
            memory_before = server_memory(pid)
            shares = specs_for("subscribed", plan, ids, args.subscribers, args.websockets, client_count)
            host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 80
            with phase("attach", memory, status):
                attach_began = time.monotonic()
                clients.send("attach", [{"host": host, "port": port, "specs": share, "concurrency": args.concurrency,
                                         "timeout": args.attach_timeout} for share in shares])

                def progress() -> None:
                    counts = clients.counts()
                    print(f"    {counts.get('open', 0):,} of {total:,} subscribers attached, "
                          f"{counts.get('failed', 0):,} failed", flush=True)

                attached = clients.gather("attached", args.attach_timeout + 60, progress)
                attach_seconds = time.monotonic() - attach_began
            opened = sum(a["open"] for a in attached)
            failed = sum(a["failed"] for a in attached)
            print(f"    {opened:,} of {total:,} subscribers attached in {attach_seconds:.1f} s ({failed:,} failed)",
                  flush=True)
            time.sleep(2.0)
            memory_after = server_memory(pid)
            registered = status_probe(url)()
            with phase("held", memory, status):
                time.sleep(args.hold)
            with phase("subscribed upload", memory, status):
                cpu_before = server_cpu(pid)
                try:
                    subscribed = upload(url, "subscribed", plan, elements)
                except RuntimeError:
                    if "filedescriptor out of range in select()" in tail(server.log_path, 400):
                        print(f"the upload failed: the server called select() on the upload's socket, whose file "
                              f"descriptor was past 1,023 with {opened:,} subscribers connected (bench/README.md)",
                              flush=True)
                    raise
                cpu["subscribed upload"] = round(server_cpu(pid) - cpu_before, 2)
            with phase("drain", memory, status):
                windows = wait_for_windows(url, "subscribed", ids, plan.last_indexes(elements), 120)
                finals = {j: max((i for i, _ in windows.get(ident, [])), default=-1) for j, ident in enumerate(ids)}
                listed = {j: [i for i, _ in windows.get(ident, [])] for j, ident in enumerate(ids)}
                clients.send("drain", [{"finals": finals, "listed": listed, "timeout": args.drain_timeout}
                                       for _ in clients.pipes])
                results = clients.gather("result", args.drain_timeout + 120)
            status.stop()
            memory.stop()
            memory_end = server_memory(pid)
            log_tail = server.log_tail(15)
    finally:
        clients.stop()
    document = assemble(args, plan, ids, baseline, subscribed, warm, windows, baseline_windows, results,
                        memory_before, memory_after, memory_end, memory, status, phases, cpu, attach_seconds,
                        registered, client_count, log_tail)
    return {**document, "origin_epoch": round(origin_epoch, 6), "loadavg_before": load_before,
            "loadavg_after": list(os.getloadavg())}


@contextlib.contextmanager
def keep_log(path: Path) -> Iterator[None]:
    """On an error, the server's log (its temporary folder goes with the server) is copied next to the system's
    temporary files and its end is shown."""
    try:
        yield
    except BaseException:
        kept = Path(tempfile.gettempdir()) / f"bench-subscribers-server-{os.getpid()}.log"
        with contextlib.suppress(OSError):
            shutil.copy(path, kept)
            print(f"the server's log: {kept}; its end:\n{tail(path, 40)}", flush=True)
        raise


def assemble(args: argparse.Namespace, plan: Plan, ids: list[str], baseline: Measurement, subscribed: Measurement,
             warm: Measurement, windows: dict[str, list[tuple[int, float]]],
             baseline_windows: dict[str, list[tuple[int, float]]], results: list[dict[str, Any]],
             memory_before: dict[str, float], memory_after: dict[str, float], memory_end: dict[str, float],
             memory: Sampler, status: Sampler, phases: dict[str, list[float]], cpu: dict[str, float],
             attach_seconds: float, registered: dict[str, Any], client_count: int, log_tail: str) -> dict[str, Any]:
    """The JSON document of a run, from what the phases measured."""
    records = [record for result in results for record in result["subscribers"]]
    attached = [r for r in records if r["attach_ms"] is not None]
    per_sequence = {kind: {j: sum(1 for r in attached if r["kind"] == kind and r["sequence"] == j)
                           for j in range(plan.sequences)} for kind in ("sse", "ws")}
    commits = {(j, index): committed for j, ident in enumerate(ids) for index, committed in windows.get(ident, [])}
    receipts: dict[str, dict[tuple[int, int], list[float]]] = {"sse": {}, "ws": {}}
    for result in results:
        for kind, found in result["receipts"].items():
            for key, times in found.items():
                receipts[kind].setdefault(tuple(key), []).extend(times)
    both = {key: receipts["sse"].get(key, []) + receipts["ws"].get(key, []) for key in commits}
    all_subscribers = {j: per_sequence["sse"][j] + per_sequence["ws"][j] for j in range(plan.sequences)}
    per_window = fanout(commits, both, all_subscribers)
    complete = [w for w in per_window if w.complete]
    ws_commits = {tuple(k): v for result in results for k, v in result["ws_commits"].items()}
    commit_skew_ms = [abs(epoch_seconds(v) - commits[k]) * 1000 for k, v in ws_commits.items() if k in commits]

    def by_kind(kind: str) -> list[float]:
        rows = fanout(commits, receipts[kind], per_sequence[kind])
        return [w.last_ms for w in rows if w.complete and w.last_ms is not None]

    held = [s for p in ("held", "subscribed upload", "drain") for s in status.of(p)]
    without = status.of("baseline upload")
    held_ok = [s["ms"] for s in held if s.get("status") == 200]
    without_ok = [s["ms"] for s in without if s.get("status") == 200]
    opened = len(attached)
    listed_last = {j: max((i for i, _ in windows.get(ident, [])), default=-1) for j, ident in enumerate(ids)}
    expected_last = plan.last_indexes(plan.elements)
    gaps_in_listing = {j: sorted(set(range(max(0, min((i for i, _ in windows.get(ident, [])), default=0)),
                                           listed_last[j] + 1)) - {i for i, _ in windows.get(ident, [])})[:5]
                       for j, ident in enumerate(ids)}
    incomplete = [r for r in attached if not r["complete"]]
    sse_attached = sum(1 for r in attached if r["kind"] == "sse")
    ws_attached = opened - sse_attached
    delta = {key: round(memory_after[key] - memory_before[key], 1) for key in ("total_mb", "worker_mb", "jvm_mb",
                                                                               "other_mb")}
    per_subscriber_kb = {key.replace("_mb", "_kb"): round(value * 1024 / opened, 2) if opened else None
                         for key, value in delta.items()}
    ratio = subscribed.rate / baseline.rate if baseline.rate else 0.0
    deliveries = deliveries_ms(commits, both)
    fan = summary([w.last_ms for w in complete if w.last_ms is not None])
    return {
        "settings": {"subscribers": args.subscribers, "websockets": args.websockets, "sequences": plan.sequences,
                     "window": plan.ref, "query": QUERY, "format": RESULT_FORMAT, "rate": args.rate,
                     "seconds": args.seconds, "elements": plan.elements, "spacing_us": plan.spacing_us,
                     "hold_seconds": args.hold, "server_args": args.server_arg, "client_processes": client_count,
                     "attach_concurrency": args.concurrency, "quick": args.quick,
                     "status_every": args.status_every},
        "server": server_version(),
        "phases": phases,
        "ingest": {"warmup": warm.to_dict(), "baseline": baseline.to_dict(), "subscribed": subscribed.to_dict(),
                   "ratio": round(ratio, 3), "target": TARGET_INGEST_RATIO, "met": ratio >= TARGET_INGEST_RATIO,
                   "server_cpu_seconds": cpu},
        "subscribers": {
            "asked": {"sse": args.subscribers, "ws": args.websockets},
            "attached": {"sse": sse_attached, "ws": ws_attached}, "attach_seconds": round(attach_seconds, 1),
            "attach_ms": summary([r["attach_ms"] for r in attached]),
            "failed": len(records) - opened,
            "failures_sample": sorted({str(r["error"]) for r in records if r["attach_ms"] is None})[:5],
            "every_window": len(attached) - len(incomplete), "incomplete": len(incomplete),
            "incomplete_sample": incomplete[:10],
            "ended_early": sum(1 for r in attached if r["ended_early"]),
            "notices": sorted({str(r["notice"]) for r in records if r["notice"]})[:5],
            "sequence_ids_as_registered": all(r["sequence_id"] == ids[r["sequence"]] for r in attached),
            "registrations_in_status": registered.get("registrations"),
            "late_at_drain": sum(result["late"] for result in results),
        },
        "windows": {"sequence_ids": ids, "expected_last_index": expected_last, "listed_last_index":
                    list(listed_last.values()), "gaps_in_listing": {str(k): v for k, v in gaps_in_listing.items() if v},
                    "count": len(per_window), "complete": len(complete),
                    "baseline_listed": sum(len(v) for k, v in baseline_windows.items()),
                    "ws_committed_header_skew_ms": round(max(commit_skew_ms), 3) if commit_skew_ms else None},
        "fanout_ms": {"last_subscriber": fan, "first_subscriber":
                      summary([w.first_ms for w in complete if w.first_ms is not None]),
                      "last_sse": summary(by_kind("sse")), "last_ws": summary(by_kind("ws")),
                      "every_delivery": summary(deliveries)},
        "per_window": [[w.sequence, w.index, round(w.committed, 6), w.received, w.subscribers, w.first_ms, w.last_ms]
                       for w in per_window],
        "memory": {"before_attach": memory_before, "after_attach": memory_after, "end": memory_end,
                   "delta_mb": delta, "per_subscriber": per_subscriber_kb,
                   "series": [[t, p, v["total_mb"], v["worker_mb"], v["jvm_mb"]] for t, p, v in memory.samples]},
        "status_ms": {"with_subscribers": summary(held_ok), "without_subscribers": summary(without_ok),
                      "errors_with": sum(1 for s in held if s.get("status") != 200),
                      "errors_without": sum(1 for s in without if s.get("status") != 200),
                      "bytes_with": max((s.get("bytes", 0) for s in held), default=0),
                      "series": [[t, p, v.get("ms"), v.get("status"), v.get("registrations")]
                                 for t, p, v in status.samples]},
        "clients": {"cpu_seconds": [r["cpu_seconds"] for r in results],
                    "max_rss_mb": [r["max_rss_mb"] for r in results],
                    "drain_seconds": max(r["drain_seconds"] for r in results),
                    "queued_ms": [r["queued_ms"] for r in results]},
        "server_log_tail": log_tail.splitlines()[-15:],
    }


# --- output -------------------------------------------------------------------------------------------------------


def report(document: dict[str, Any]) -> None:
    """The table and the issue's "must show" lines."""
    ingest, subs, fan, status = document["ingest"], document["subscribers"], document["fanout_ms"], \
        document["status_ms"]
    settings = document["settings"]
    table = [Measurement("baseline (no subscribers)", ingest["baseline"]["seconds"], ingest["baseline"]["items"],
                         unit="elements"),
             Measurement(f"with {subs['attached']['sse']:,} SSE + {subs['attached']['ws']:,} WS",
                         ingest["subscribed"]["seconds"], ingest["subscribed"]["items"], unit="elements")]
    pace = f"paced at {settings['rate']:,.0f}/s" if settings["rate"] else "as fast as it goes"
    print_table(f"one chunked upload of {settings['elements']:,} elements ({pace}), {settings['sequences']} "
                f"sequences of {settings['window']}", table, "baseline (no subscribers)")
    memory = document["memory"]
    windows = document["windows"]

    def mark(ok: bool) -> str:
        return "[x]" if ok else "[ ]"

    sse_ok = subs["attached"]["sse"] == subs["asked"]["sse"]
    ws_ok = subs["attached"]["ws"] == subs["asked"]["ws"]
    every = subs["incomplete"] == 0 and subs["every_window"] > 0
    print(f"\n{mark(sse_ok)} SSE subscribers attached: {subs['attached']['sse']:,} of {subs['asked']['sse']:,}; "
          f"{mark(ws_ok)} WebSockets: {subs['attached']['ws']:,} of {subs['asked']['ws']:,} "
          f"(attach {subs['attach_seconds']} s, p99 {subs['attach_ms'].get('p99_ms')} ms each)")
    print(f"{mark(every)} every window to every subscriber, no gaps from its first: {subs['every_window']:,} of "
          f"{subs['attached']['sse'] + subs['attached']['ws']:,} subscribers; windows {windows['complete']} of "
          f"{windows['count']} reached all their subscribers")
    print(f"    memory per subscriber: {memory['per_subscriber']['worker_kb']} KB (the gunicorn worker's RSS "
          f"{memory['before_attach']['worker_mb']:,} → {memory['after_attach']['worker_mb']:,} MB); the whole server "
          f"tree {memory['before_attach']['total_mb']:,} → {memory['after_attach']['total_mb']:,} MB "
          f"({memory['per_subscriber']['total_kb']} KB each: Spark's Python workers come and go)")
    print(f"    fan-out, commit → last subscriber: p50 {fan['last_subscriber'].get('p50_ms')} ms, "
          f"p99 {fan['last_subscriber'].get('p99_ms')} ms, max {fan['last_subscriber'].get('max_ms')} ms "
          f"({fan['last_subscriber']['n']} windows; SSE p99 {fan['last_sse'].get('p99_ms')}, WS p99 "
          f"{fan['last_ws'].get('p99_ms')}; every delivery p50 {fan['every_delivery'].get('p50_ms')} ms)")
    if status["with_subscribers"]["n"]:
        print(f"    GET /status while held: p50 {status['with_subscribers'].get('p50_ms')} ms, p99 "
              f"{status['with_subscribers'].get('p99_ms')} ms ({status['with_subscribers']['n']} polls, "
              f"{status['errors_with']} errors, {status['bytes_with']:,} bytes); without subscribers p99 "
              f"{status['without_subscribers'].get('p99_ms')} ms")
    else:
        print("    GET /status: not polled (--status-every 0)")
    print(f"{mark(ingest['met'])} upload with subscribers {ingest['ratio']:.2f}× its rate without "
          f"(target ≥ {TARGET_INGEST_RATIO}); server CPU during the uploads: {ingest['server_cpu_seconds']}")
    queued = [q.get("max") for q in document["clients"].get("queued_ms", [])]
    print(f"    client processes' CPU: {document['clients']['cpu_seconds']} s (longest wait between a select and a "
          f"socket's callback: {queued} ms, not counted in the fan-out); server: "
          f"{'fan-out (delivery/)' if document['server']['server_uses_delivery'] else 'a thread per subscriber'}")


def plots(document: dict[str, Any], name: str) -> list[Path]:
    """``NAME.png``: over the run, the server's RSS, the registrations ``/status`` lists, its latency, and each
    window's fan-out (to its first and last subscriber, at its commit); ``NAME_latency.png``: the distributions."""
    phases = document["phases"]
    memory = document["memory"]["series"]
    status = document["status_ms"]["series"]
    origin_epoch = _origin_epoch(document)
    windows = document["per_window"]
    spans = [f"{label} {b:.0f}–{e:.0f} s" for label, (b, e) in phases.items()]
    phase_text = ", ".join(spans[:3]) + ("\n" + ", ".join(spans[3:]) if spans[3:] else "")
    settings, subs = document["settings"], document["subscribers"]
    title = (f"{subs['attached']['sse']:,} SSE + {subs['attached']['ws']:,} WebSocket subscribers on "
             f"{settings['sequences']} sequences of {settings['window']}\n{phase_text}")
    ok = [row for row in status if row[2] is not None and row[3] == 200]
    panels = [
        Panel("server RSS (MB)", [Series("whole tree", [r[0] for r in memory], [r[2] for r in memory]),
                                  Series("gunicorn worker", [r[0] for r in memory], [r[3] for r in memory]),
                                  Series("Spark JVM", [r[0] for r in memory], [r[4] for r in memory])]),
    ]
    if len(ok) > 1:  # --status-every 0: no polls
        panels += [Panel("registrations (/status)", [Series("continuous responses", [r[0] for r in ok],
                                                            [r[4] or 0 for r in ok])]),
                   Panel("GET /status (ms)", [Series("latency", [r[0] for r in ok], [r[2] for r in ok], points=True)],
                         log=True)]
    if origin_epoch is not None and windows:
        at = [w[2] - origin_epoch for w in windows]
        panels.append(Panel("fan-out (ms after commit)", [
            Series("last subscriber", [a for a, w in zip(at, windows, strict=True) if w[6] is not None],
                   [max(w[6], 0.1) for w in windows if w[6] is not None], points=True),
            Series("first subscriber", [a for a, w in zip(at, windows, strict=True) if w[5] is not None],
                   [max(w[5], 0.1) for w in windows if w[5] is not None], points=True)], log=True))
    drawn = [time_series_plot(name, title, panels, xlabel="seconds since the run began")]
    held = [r[2] for r in ok if r[1] in ("held", "subscribed upload", "drain")]
    without = [r[2] for r in ok if r[1] == "baseline upload"]
    samples = {"fan-out: window commit → last subscriber": [max(w[6], 0.01) for w in windows if w[6] is not None
                                                              and w[3] >= w[4] > 0],
               "fan-out: window commit → first subscriber": [max(w[5], 0.01) for w in windows if w[5] is not None],
               "GET /status, subscribers held": held, "GET /status, no subscribers (baseline upload)": without}
    drawn.append(distribution_plot(f"{name}_latency", f"Fan-out and /status latency ({title.splitlines()[0]})",
                                   samples, marks={"100 ms": 100.0, "1 s": 1000.0}))
    return drawn


def _origin_epoch(document: dict[str, Any]) -> float | None:
    """The epoch time of the run's origin (for placing window commits on the run's time axis)."""
    value = document.get("origin_epoch")
    return float(value) if isinstance(value, int | float) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.subscribers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=None, help="SSE subscribers (10,000; --quick 200)")
    parser.add_argument("--websockets", type=int, default=None, help="WebSocket subscribers (1,000; --quick 50)")
    parser.add_argument("--sequences", type=int, default=10, help="window sequences the subscribers spread over")
    parser.add_argument("--window", type=float, default=1.0, help="window width in seconds (tumbling; default 1)")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="elements/s the upload is paced at (stream time runs at wall-clock speed); 0: as fast as "
                             "the server takes them (the warm-up's rate sets the spacing)")
    parser.add_argument("--seconds", type=float, default=None, help="upload length (30; --quick 10)")
    parser.add_argument("--warmup-seconds", type=float, default=None)
    parser.add_argument("--hold", type=float, default=5.0, help="seconds the subscribers are held before the upload")
    parser.add_argument("--clients", type=int, default=None,
                        help="client processes holding the subscribers (default 2 above 2,000 subscribers, else 1)")
    parser.add_argument("--concurrency", type=int, default=64, help="connections each client opens at once")
    parser.add_argument("--attach-timeout", type=float, default=300.0,
                        help="seconds every subscriber may take to get its response headers")
    parser.add_argument("--drain-timeout", type=float, default=60.0,
                        help="seconds after the last window for every subscriber to have it")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra arguments for concentrator serve (repeatable, split like a shell), e.g. "
                             "--server-arg '--threads 64'")
    parser.add_argument("--status-every", type=float, default=STATUS_EVERY,
                        help="seconds between two GET /status (default 0.1; 0: none, to see what polling costs)")
    parser.add_argument("--quick", action="store_true", help="200 SSE + 50 WebSockets, a 10 s upload")
    parser.add_argument("--name", default=BENCH_NAME, help="result file name (bench/results/NAME.json)")
    parser.add_argument("--plot-only", action="store_true",
                        help="measure nothing: draw the plots of bench/results/NAME.json again")
    args = parser.parse_args(argv)
    if args.plot_only:
        replot(plots, args.name)
        return 0
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    result = run(args)
    document = {"environment": environment(), "parameters": {k: v for k, v in vars(args).items()
                                                             if k != "plot_only"}, **result}
    report(document)
    path = write_json(args.name, document)
    print(f"wrote {path}")
    write_plots(plots, {"benchmark": BENCH_NAME, **document}, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
