"""``concentrator upload FILE URL``: a recorded stream (TriG or N-Quads) sent to a stream element by element, with a
progress bar on a terminal, surviving dropped connections and server restarts.

The file is framed here, on the client, with the server's own framer (``store.framing.ElementFramer``, the stream's
timestamp predicate): each element becomes one item of canonical TriG (its timestamp triple and its graph block), so
``concentrator.client.upload(resume=True)`` can tell from the stream's HEAD which items were committed and re-send
only the others. Items go in batches (one chunked request each, ``--batch`` elements): a batch's answer confirms its
commit, so what is held in memory for resuming stays one batch.

The same command run again after an interruption continues after what the stream holds: when the stream's HEAD
element is an element of the file, the elements up to it are skipped (``skip_committed``), so every element is
committed once.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from pyoxigraph import DefaultGraph, NamedNode, Quad, RdfFormat, serialize

from concentrator.client import ClientError, upload
from sparql_ext.errors import ConcentratorError
from store.elements import PROV_GENERATED_AT_TIME, ParsedElement
from store.framing import ElementFramer

FORMATS = {".trig": RdfFormat.TRIG, ".nq": RdfFormat.N_QUADS, ".nquads": RdfFormat.N_QUADS}
FORMAT_NAMES = {"trig": RdfFormat.TRIG, "nquads": RdfFormat.N_QUADS}


class UploadProblem(Exception):
    """What stops an upload, in one line; ``committed`` elements of the file were committed before it (None: it
    stopped before sending anything)."""

    def __init__(self, message: str, committed: int | None = None) -> None:
        super().__init__(message)
        self.committed = committed


class UploadInterrupted(Exception):
    """The user interrupted the upload (Ctrl-C): ``committed`` elements of the file are in the stream (those of an
    earlier run included), whose HEAD is ordinal ``head``."""

    def __init__(self, committed: int, head: int | None) -> None:
        super().__init__(f"{committed} element(s) committed")
        self.committed = committed
        self.head = head


@dataclass
class Progress:
    """How far an upload got: for the progress bar (``read`` of ``size`` bytes framed) and the summary."""

    size: int
    read: int = 0
    sent: int = 0  # elements handed to the connection
    committed: int = 0  # elements the server confirmed
    started: float = 0.0
    skipped: int = 0  # elements of the file the stream held before (an earlier, interrupted run)

    @property
    def rate(self) -> float:
        """Elements committed per second so far."""
        elapsed = time.monotonic() - self.started
        return self.committed / elapsed if elapsed > 0 else 0.0


@dataclass(frozen=True)
class Summary:
    elements: int
    first_ordinal: int | None
    last_ordinal: int | None
    head: int
    stream_time: str | None
    seconds: float
    skipped: int = 0  # elements the stream already held (committed by an earlier run)


def rdf_format_of(path: Path, given: str | None) -> RdfFormat:
    if given is not None:
        return FORMAT_NAMES[given]
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise UploadProblem(f"{path}: cannot tell its format from {path.suffix or 'no extension'!r}: give --format "
                            "trig or --format nquads")
    return found


def elements_of(path: Path, rdf_format: RdfFormat, predicate: str, base_iri: str,
                progress: Progress) -> Iterator[tuple[str, bytes]]:
    """The file's elements, each as its graph name (N-Triples form, as the server's element records give it) and one
    TriG item; ``progress.read`` follows the bytes framed."""
    with path.open("rb") as source:
        framer = ElementFramer(source, rdf_format, predicate, base_iri=base_iri)
        for element in framer:
            if element.is_punctuation:
                raise UploadProblem(f"{path}: element {framer.next_label} is punctuation (a timestamp without a "
                                    "graph): resuming needs one element per item; send punctuations with "
                                    "POST URL?punctuation=TIME")
            progress.read = framer.bytes_read
            yield str(element.graph), _item(element, predicate)
        progress.read = progress.size


def skip_committed(elements: Callable[[], Iterator[tuple[str, bytes]]], head_graph: str | None,
                   progress: Progress) -> Iterator[bytes]:
    """The items still to send: after the element whose graph is the stream's HEAD (``head_graph``) when the file
    has it (an earlier run committed up to there), else all of them. ``elements`` opens the file's elements anew
    (the search reads the file once more when the HEAD is not in it)."""
    if head_graph is not None:
        found = 0
        for count, (graph, _) in enumerate(elements(), 1):
            if graph == head_graph:
                found = count
                break
        if found:
            progress.skipped = found
            yield from (item for _, item in itertools.islice(elements(), found, None))
            return
    yield from (item for _, item in elements())


def _item(element: ParsedElement, predicate: str) -> bytes:
    """One element as TriG: its timestamp triple (as it was written) and its graph."""
    if element.block is not None:  # framed on the fast path: canonical TriG already
        return (element.stamp_line or b"") + element.block
    quads = list(element.quads)
    if element.stamp is not None:
        quads.append(Quad(element.graph, NamedNode(predicate), element.stamp, DefaultGraph()))
    return serialize(quads, format=RdfFormat.TRIG) or b""


def upload_file(path: Path, url: str, *, rdf_format: RdfFormat, session: requests.Session, batch: int,
                give_up: float, create: bool, on_progress: Callable[[Progress], None]) -> Summary:
    """Upload every element of ``path`` to the stream at ``url``; raises ``UploadProblem`` (one line) when it
    cannot. ``requests``' connection errors before the first answer mean no server answers at ``url``."""
    stream = _stream(session, url, create)
    progress = Progress(size=path.stat().st_size, started=time.monotonic())
    predicate = stream.get("timestamp_predicate") or PROV_GENERATED_AT_TIME
    head_record = stream.get("head") or {}
    items = skip_committed(lambda: elements_of(path, rdf_format, predicate, url, progress), head_record.get("graph"),
                           progress)
    first: int | None = None
    head: int = head_record.get("ordinal", 0)
    start = head
    stream_time: str | None = stream.get("stream_time")
    problem: UploadProblem | None = None
    try:
        while problem is None:
            chunk: list[bytes] = []
            try:
                chunk.extend(itertools.islice(items, batch))
            except (ConcentratorError, UploadProblem) as error:  # the file is wrong here: send what came before it
                problem = UploadProblem(str(error))
            if not chunk:
                break
            progress.sent += len(chunk)
            on_progress(progress)
            try:
                answer = upload(url, chunk, "application/trig", session=session, resume=True, give_up=give_up)
            except ClientError as error:  # the server refused (after committing what came before), or stayed away
                raise UploadProblem(str(error), progress.skipped + _committed_since(session, url, start,
                                                                                    progress.committed)) from None
            if answer["committed"] and first is None:
                first = int(answer["first_ordinal"])
            progress.committed += int(answer["committed"])
            head, stream_time = int(answer["head"]), answer["stream_time"]
            on_progress(progress)
    except KeyboardInterrupt:  # a batch may have been committed without its answer: the server says how far it got
        committed = _committed_since(session, url, start, progress.committed)
        raise UploadInterrupted(progress.skipped + committed, start + committed) from None
    if problem is not None:
        problem.committed = progress.skipped + progress.committed
        raise problem
    last = first + progress.committed - 1 if first is not None else None
    return Summary(progress.committed, first, last, head, stream_time, round(time.monotonic() - progress.started, 3),
                   progress.skipped)


def _committed_since(session: requests.Session, url: str, start: int, known: int) -> int:
    """Elements committed since HEAD was ``start`` (one uploader: all ours); ``known`` if HEAD cannot be read."""
    try:
        head = session.get(url, headers={"Accept": "application/json"}, timeout=30).json().get("head")
    except (requests.RequestException, ValueError, AttributeError):
        return known
    return int(head["ordinal"]) - start if head else known


def _stream(session: requests.Session, url: str, create: bool) -> dict[str, Any]:
    """The stream's description (its timestamp predicate, HEAD); created first with ``create``."""
    response = session.get(url, headers={"Accept": "application/json"}, timeout=30)
    if response.status_code == 404 and create:
        made = session.put(url, timeout=30)
        if not made.ok:
            raise UploadProblem(f"could not create the stream: {made.status_code}: {made.text.strip()}")
        response = session.get(url, headers={"Accept": "application/json"}, timeout=30)
    if response.status_code == 404:
        raise UploadProblem(f"{url}: {response.text.strip()} (or give --create)")
    if not response.ok:
        raise UploadProblem(f"{url} answered {response.status_code}: {response.text.strip()}")
    try:
        description = response.json()
    except ValueError:
        description = None
    if not isinstance(description, dict) or "elements" not in description:
        raise UploadProblem(f"{url} is not a stream of this server (give http://HOST:PORT/streams/NAME)")
    return description
