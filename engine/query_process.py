"""A query process: what it is asked (``QueryTask``), what it answers, and its loop (``serve``): evaluate a plain
query over a snapshot, write the serialized result into a file, answer with its media type or the query's own error.
Started by ``engine.workers.QueryPool`` from a ``forkserver``, at lower CPU priority."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from typing import IO

from pyoxigraph import NamedNode, QueryResultsFormat, QueryTriples, RdfFormat, Store

from engine import plain
from engine.budget import NICE, WORKER_GRACE
from store.errors import QueryFailed

# --- what a worker is asked and answers -----------------------------------------------------------------------


@dataclass(frozen=True)
class QueryTask:
    """One plain query for a worker. ``formats``: for each result form (``solutions``: SELECT and ASK; ``graph``:
    CONSTRUCT and DESCRIBE), the media type to answer and the canonical media type of pyoxigraph's format for it,
    or the 406 message when ``Accept`` offers none (chosen by the protocol, which knows the request)."""

    text: str
    base_iri: str | None
    default_graph: tuple[str, ...] | None
    named_graphs: tuple[str, ...] | None
    formats: Mapping[str, tuple[str, str] | str]
    snapshot: str = ""  # the store to read (a snapshot directory)
    output: str = ""  # the file to write the result into
    seconds: float = 0.0  # how long the worker may take before it ends itself (its parent kills it earlier)


@dataclass(frozen=True)
class Written:
    media_type: str


@dataclass(frozen=True)
class Refused:
    """The query's own error: ``not_acceptable`` (406) or pyoxigraph's refusal (``QueryFailed``, 400)."""

    message: str
    not_acceptable: bool = False


@dataclass(frozen=True)
class Crashed:
    message: str


@dataclass(frozen=True)
class Release:
    """Close the store of ``snapshot`` if it is the one open: its directory is being deleted."""

    snapshot: str


@dataclass
class QueryOutput:
    """A result written by a worker: the open file (positioned at its end, as ``spooled_response`` wants it; its
    name is already unlinked) and its media type."""

    file: IO[bytes]
    media_type: str



# --- the worker process ---------------------------------------------------------------------------------------


def serve(connection: Connection) -> None:
    """A worker: evaluate each ``QueryTask`` received, answer, until the server's end of ``connection`` closes."""
    # A query is the one thing here that may burn CPU for its whole budget: at nice 10 the kernel gives the server's
    # own threads (uploads and their commits, /status, Spark) about ten times a worker's share when they compete, so
    # heavy queries take the CPU that is left over
    os.nice(NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the server stops us
    deadline: list[float | None] = [None]
    threading.Thread(target=watch_deadline, args=(deadline,), name="watch", daemon=True).start()
    store: Store | None = None
    opened = ""
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Release):
            if message.snapshot == opened:
                store, opened = None, ""  # the last reference: pyoxigraph closes it
            continue
        assert isinstance(message, QueryTask)
        deadline[0] = time.monotonic() + message.seconds
        try:
            if message.snapshot != opened:
                store, opened = None, ""  # closed before the next is opened: one store's memory at a time
                store, opened = Store.read_only(message.snapshot), message.snapshot
            assert store is not None
            answer: Written | Refused | Crashed = evaluate_task(store, message)
        except Exception as error:  # noqa: BLE001 - whatever it is, the parent answers it (500)
            answer = Crashed(f"{type(error).__name__}: {error}")
        deadline[0] = None
        try:
            connection.send(answer)
        except OSError:
            return


def watch_deadline(deadline: list[float | None]) -> None:
    """End this worker when the server process is gone (nobody will read its answer) or when its query is well past
    its deadline (the server failed to kill it)."""
    parent = multiprocessing.parent_process()
    while True:
        if parent is not None and wait_for([parent.sentinel], timeout=1.0):
            os._exit(1)
        if parent is None:
            time.sleep(1.0)
        limit = deadline[0]
        if limit is not None and time.monotonic() > limit + WORKER_GRACE:
            os._exit(1)


def evaluate_task(store: Store, task: QueryTask) -> Written | Refused:
    default_graph = None if task.default_graph is None else [NamedNode(iri) for iri in task.default_graph]
    named_graphs = None if task.named_graphs is None else [NamedNode(iri) for iri in task.named_graphs]
    try:
        result = plain.run(store, task.text, base_iri=task.base_iri, default_graph=default_graph,
                           named_graphs=named_graphs)
        kind = "graph" if isinstance(result, QueryTriples) else "solutions"
        chosen = task.formats[kind]
        if isinstance(chosen, str):
            return Refused(chosen, not_acceptable=True)
        media_type, format_type = chosen
        rdf_format = (RdfFormat.from_media_type(format_type) if kind == "graph"
                      else QueryResultsFormat.from_media_type(format_type))
        with open(task.output, "wb") as output:
            plain.write(result, output, rdf_format)
    except QueryFailed as error:
        return Refused(error.message)
    return Written(media_type)


