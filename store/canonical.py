"""Step 2 of framing (``store.framing``): a segment of an upload, cut at a statement boundary and written back as
canonical TriG by pyoxigraph in one pass, ``serialize(parse(segment))``.

pyoxigraph's parser hands each statement to Python as a ``Quad`` on its way to the serializer, so this step holds
the GIL for about a microsecond per statement: half of what an upload's request thread did, while the commit
thread, Spark's driver and the other uploads wait for the same lock. Segments of at least ``REMOTE_BYTES`` are
therefore written in a *framing process* (``FramingProcesses``, ``python -m store.canonical``), and the request
thread frames the previous segment's elements meanwhile. Smaller ones (a sensor's element, an MQTT or WebSocket
message) are written in the caller's thread: a round trip to another process would only add latency.

This module imports nothing of the project but its limits, so a framing process starts with pyoxigraph alone.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Protocol

from pyoxigraph import RdfFormat, parse, serialize

from store.limits import ELEMENT_LIMIT

MAX_PENDING = ELEMENT_LIMIT  # bytes of a body read without a statement boundary: beyond, no element can be that long
REMOTE_BYTES = 16 << 10  # segments this large go to a framing process
_CANDIDATES = 4  # TriG cut candidates tried from the end of what has arrived
_TRIG_END = re.compile(rb"(?:\}|\.)[ \t]*\r?\n")
_LINE_END = re.compile(rb"[ \t]*\r?\n")
_TAIL = 64 << 10  # bytes searched for the last candidates first (the search widens when lines are longer)
_BRACES = 64  # "}" looked at from the end for the end of a graph block (others are inside literals or comments)


@dataclass(frozen=True)
class Syntax:
    """What a TriG segment is read with: the prefixes and base IRI declared before it."""

    prefixes: dict[str, str] = field(default_factory=dict)
    base_iri: str | None = None


@dataclass(frozen=True)
class Segment:
    """The canonical TriG of ``buffer[:cut]``. ``cut`` is 0 when no statement boundary has arrived yet, and None
    when what has arrived cannot be framed on the fast path (an error somewhere in it: the precise path says
    where). ``syntax`` is what the text after the cut is read with."""

    cut: int | None
    canonical: bytes
    syntax: Syntax


def canonical_segment(buffer: bytes, eof: bool, media_type: str, syntax: Syntax) -> Segment:
    """The longest prefix of ``buffer`` that ends at a statement boundary, as canonical TriG (see ``Segment``).

    N-Quads is cut after its last newline. TriG is cut after a top-level ``}`` or ``.`` at a line end: the last
    such candidate, then the last ``}`` at a line end (the end of a graph block, however long the block), then a
    few more from the end, until one parses."""
    rdf_format = RdfFormat.from_media_type(media_type)
    assert rdf_format is not None, media_type
    if rdf_format == RdfFormat.N_QUADS:
        cut = len(buffer) if eof else buffer.rfind(b"\n") + 1
        if not cut:
            return Segment(0, b"", syntax)
        written = _canonical(buffer[:cut], rdf_format, syntax)
        return Segment(None, b"", syntax) if written is None else Segment(cut, *written)
    for cut in _trig_cuts(buffer, eof):
        written = _canonical(buffer[:cut], rdf_format, syntax)
        if written is not None:
            return Segment(cut, *written)
    if eof or len(buffer) > MAX_PENDING:
        return Segment(None, b"", syntax)
    return Segment(0, b"", syntax)


def _trig_cuts(buffer: bytes, eof: bool) -> list[int]:
    """Where a TriG segment may end, in the order they are tried (see ``canonical_segment``): C-speed searches from
    the end, so a long element costs no Python work per line."""
    window = _TAIL
    while True:
        start = max(0, len(buffer) - window)
        ends = [m.end() for m in _TRIG_END.finditer(buffer, start)][-_CANDIDATES:]
        if len(ends) == _CANDIDATES or start == 0:
            break
        window *= 16
    cuts = ([len(buffer)] if eof else []) + ends[::-1][:1] + _block_end(buffer) + ends[::-1][1:]
    return list(dict.fromkeys(cuts))


def _block_end(buffer: bytes) -> list[int]:
    """The end of the line of the last ``}`` that ends a line, if one of the last ``_BRACES`` ``}`` does."""
    end = len(buffer)
    for _ in range(_BRACES):
        brace = buffer.rfind(b"}", 0, end)
        if brace < 0:
            return []
        line_end = _LINE_END.match(buffer, brace + 1)
        if line_end is not None:
            return [line_end.end()]
        end = brace
    return []


def _canonical(segment: bytes, rdf_format: RdfFormat, syntax: Syntax) -> tuple[bytes, Syntax] | None:
    """``segment`` written back as canonical TriG, and the syntax after it; None if it does not parse as it is (or
    holds a token too long for the parser: the precise path says which element)."""
    declarations = "".join(f"@prefix {name}: <{iri}> .\n" for name, iri in syntax.prefixes.items()).encode()
    parser = parse(declarations + segment, rdf_format, base_iri=syntax.base_iri, rename_blank_nodes=False)
    try:
        canonical = serialize(parser, format=RdfFormat.TRIG)
    except (SyntaxError, MemoryError):
        return None
    if rdf_format == RdfFormat.N_QUADS:
        return canonical or b"", syntax
    return canonical or b"", Syntax(dict(parser.prefixes), parser.base_iri or syntax.base_iri)


# -- where segments are written ------------------------------------------------------------------------------------


class SegmentJob(Protocol):
    """A segment being written; ``result`` waits for it."""

    remote: bool  # written in a framing process (the caller may do other work until ``result``)

    def result(self) -> Segment: ...


class SegmentWriter(Protocol):
    def submit(self, buffer: bytes, eof: bool, media_type: str, syntax: Syntax) -> SegmentJob: ...


class _Done:
    remote = False

    def __init__(self, segment: Segment) -> None:
        self._segment = segment

    def result(self) -> Segment:
        return self._segment


class InThisThread:
    """Every segment written in the caller's thread (a client framing a file, a test)."""

    def submit(self, buffer: bytes, eof: bool, media_type: str, syntax: Syntax) -> SegmentJob:
        return _Done(canonical_segment(buffer, eof, media_type, syntax))


IN_THIS_THREAD = InThisThread()


class _Process:
    """One framing process and the connection to it."""

    def __init__(self) -> None:
        ours, theirs = Pipe()
        root = str(Path(__file__).resolve().parents[1])  # this checkout's packages, whatever the working directory
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.process = subprocess.Popen([sys.executable, "-m", "store.canonical", str(theirs.fileno())],
                                        pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        theirs.close()  # the process holds the only other end: it sees the end of input when this process dies
        self.connection = ours

    def close(self) -> None:
        self.connection.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _Remote:
    remote = True

    def __init__(self, pool: FramingProcesses, process: _Process, request: tuple[bytes, bool, str, Syntax]) -> None:
        self._pool, self._process, self._request = pool, process, request
        self._segment: Segment | None = None
        try:
            process.connection.send(request)
        except OSError:  # the process is gone: this segment is written here
            self._lost()

    def result(self) -> Segment:
        if self._segment is None:
            try:
                answer = self._process.connection.recv()
            except (EOFError, OSError):
                self._lost()
            else:
                assert isinstance(answer, Segment)
                self._segment = answer
                self._pool.release(self._process)
        assert self._segment is not None
        return self._segment

    def _lost(self) -> None:
        self._pool.discard(self._process)
        self._segment = canonical_segment(*self._request)


class FramingProcesses:
    """Up to ``processes`` framing processes, started when a large segment first needs one, shared by the uploads
    (an upload waits for a free one). A process that dies is replaced; its segment is written in the caller's
    thread. ``processes`` 0: every segment in the caller's thread."""

    def __init__(self, processes: int) -> None:
        if processes < 0:
            raise ValueError(f"framing processes: {processes} (give 0 or more)")
        self.processes = processes
        self._idle: queue.LifoQueue[_Process] = queue.LifoQueue()
        self._started: list[_Process] = []
        self._lock = threading.Lock()
        self._closed = False
        self.segments = 0  # written in a framing process
        self.inline_segments = 0
        self.wait_seconds = 0.0  # uploads' time waiting for a free framing process, in all

    def submit(self, buffer: bytes, eof: bool, media_type: str, syntax: Syntax) -> SegmentJob:
        if len(buffer) < REMOTE_BYTES or not self.processes:
            self.inline_segments += 1
            return IN_THIS_THREAD.submit(buffer, eof, media_type, syntax)
        process = self._take()
        if process is None:
            self.inline_segments += 1
            return IN_THIS_THREAD.submit(buffer, eof, media_type, syntax)
        self.segments += 1
        return _Remote(self, process, (buffer, eof, media_type, syntax))

    def _take(self) -> _Process | None:
        """An idle framing process; else a new one while fewer than ``processes`` run; else the next one freed.
        None once closed, or when no process can be started (the caller frames the segment itself)."""
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            with self._lock:
                if self._closed:
                    return None
                if len(self._started) < self.processes:
                    try:
                        process = _Process()
                    except OSError:
                        return None
                    self._started.append(process)
                    return process
            started = time.perf_counter()
            try:  # all busy: wait for one (looking again now and then: one that died leaves room for a new one)
                return self._idle.get(timeout=0.5)
            except queue.Empty:
                continue
            finally:
                self.wait_seconds += time.perf_counter() - started

    def release(self, process: _Process) -> None:
        self._idle.put(process)

    def discard(self, process: _Process) -> None:
        with self._lock:
            if process in self._started:
                self._started.remove(process)
        process.close()

    def status(self) -> dict[str, int | float]:
        return {"processes": len(self._started), "segments": self.segments, "inline_segments": self.inline_segments,
                "wait_seconds": round(self.wait_seconds, 3)}

    def close(self) -> None:
        with self._lock:
            self._closed, started, self._started = True, self._started, []
        for process in started:
            process.close()


def serve(connection: Connection) -> None:
    """A framing process: write each segment asked for until the server's end of the connection closes."""
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        connection.send(canonical_segment(*request))


if __name__ == "__main__":  # the segments it sends back must unpickle as store.canonical's, not __main__'s
    from store.canonical import serve as serve_segments

    serve_segments(Connection(int(sys.argv[1])))
