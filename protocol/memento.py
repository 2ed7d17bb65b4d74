"""Memento (RFC 7089) for revisions, as Dydra serves it: a graph, the dataset and a stream are *original resources*
(URI-R) that are their own TimeGates (200-style negotiation, RFC 7089 §4.1.2) and, with ``Accept:
application/link-format``, their own TimeMaps.

* A **memento** (URI-M) is the resource at one revision: its URL with ``revision-id=<revision UUID>``. The dataset
  has one per revision; a graph one per revision that changed it (and after which it exists); a stream one per
  retained element, dated by the element's timestamp (as ``revision-id=<dateTime>`` selects stream revisions).
* ``Accept-Datetime`` on a GET selects the memento at or before that instant and answers it with
  ``Memento-Datetime``, ``Content-Location`` (its URI-M), ``Vary: accept-datetime`` and ``Link`` (``original
  timegate``, ``timemap``). HTTP dates count whole seconds, so the instant is the end of the second given: every
  datetime read off a TimeMap selects its memento.
* A GET with ``revision-id=`` is a memento too: it carries ``Memento-Datetime`` and ``Link``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC
from urllib.parse import quote

from flask import Response, request
from werkzeug.http import http_date, parse_date

from protocol.errors import BadRequest, Gone, NotFound
from sparql_ext.windowing import from_micros, to_micros
from store import GraphNotFound, RevisionedDataset
from store.revlog import Revision
from store.stream import Stream
from store.terms import GraphName, graph_to_text

LINK_FORMAT = "application/link-format"
_SECOND = 1_000_000


@dataclass(frozen=True)
class Memento:
    """One memento: the revision it shows (an ordinal of the dataset or the stream), its URI-M and its datetime."""

    ordinal: int
    url: str
    at: int  # µs since the epoch


def accept_datetime() -> int | None:
    """The instant ``Accept-Datetime`` asks for — the last µs of the second it names — or None without the header."""
    text = request.headers.get("Accept-Datetime")
    if text is None:
        return None
    parsed = parse_date(text)
    if parsed is None:
        raise BadRequest(f"Accept-Datetime {text!r} is not an HTTP date (RFC 7231), e.g. "
                         "'Mon, 20 Jun 2016 10:00:00 GMT'")
    return to_micros(parsed.astimezone(UTC)) + _SECOND - 1


def original_url() -> str:
    """The URI-R of this request: its URL without ``revision-id``."""
    kept = [part for part in request.query_string.decode("latin-1").split("&")
            if part and not part.startswith("revision-id=")]
    return request.base_url + (("?" + "&".join(kept)) if kept else "")


def memento_url(original: str, revision_id: str) -> str:
    return f"{original}{'&' if '?' in original else '?'}revision-id={quote(revision_id, safe='')}"


def date_of(micros: int) -> str:
    return http_date(from_micros(micros))


def _date_text(micros: int) -> str:
    """An instant as the user wrote it (the end of a second, for messages): that second, as an HTTP date."""
    return date_of(micros - micros % _SECOND)


# -- responses --------------------------------------------------------------------------------------------------------

def timemap_response(original: str, mementos: Sequence[Memento]) -> Response:
    """The TimeMap of ``original`` (RFC 7089 §5, application/link-format): original, self, timegate, then each
    memento with its datetime, oldest first; written as it is sent (a stream's TimeMap has a line per element)."""

    def lines() -> Iterator[bytes]:
        span = f'; from="{date_of(mementos[0].at)}"; until="{date_of(mementos[-1].at)}"' if mementos else ""
        yield f'<{original}>; rel="original",\n'.encode()
        yield f'<{original}>; rel="self"; type="{LINK_FORMAT}"{span},\n'.encode()
        yield f'<{original}>; rel="timegate"'.encode()
        last = len(mementos) - 1
        for index, memento in enumerate(mementos):
            rel = "first last memento" if last == 0 else "first memento" if index == 0 else \
                "last memento" if index == last else "memento"
            yield f',\n<{memento.url}>; rel="{rel}"; datetime="{date_of(memento.at)}"'.encode()
        yield b"\n"

    return Response(lines(), mimetype=LINK_FORMAT, headers={"Vary": "accept"})


def memento_headers(original: str, memento: Memento, *, negotiated: bool) -> dict[str, str]:
    """The headers of a memento; ``negotiated``: chosen by Accept-Datetime at the original (the TimeGate)."""
    headers = {
        "Memento-Datetime": date_of(memento.at),
        "Link": f'<{original}>; rel="original timegate", <{original}>; rel="timemap"; type="{LINK_FORMAT}"',
    }
    if negotiated:
        headers["Content-Location"] = memento.url
        headers["Vary"] = "accept-datetime"
    return headers


def revision_memento(original: str, revision: Revision) -> Memento:
    return Memento(revision.ordinal, memento_url(original, str(revision.uuid)), to_micros(revision.committed_at))


# -- the dataset and its graphs -----------------------------------------------------------------------------------

def dataset_mementos(dataset: RevisionedDataset, original: str) -> list[Memento]:
    """One memento per readable revision."""
    first = max(dataset.oldest_readable, 1)
    return [revision_memento(original, r) for r in dataset.revisions_since(first - 1)]


def graph_mementos(dataset: RevisionedDataset, graph: GraphName, original: str) -> list[Memento]:
    return [revision_memento(original, r) for r in dataset.graph_revisions(graph)]


def select_revision(dataset: RevisionedDataset, target: GraphName | None, wanted: int, original: str) -> Memento:
    """The memento of a graph (``target``) or the dataset (None) at or before ``wanted``."""
    if target is None:
        ordinal = dataset.resolve(from_micros(wanted).isoformat())  # 410 when older than the retained history
        revision = None if ordinal is None else dataset.revision(ordinal)
        if revision is None:
            raise NotFound(f"the dataset has no revision at or before {_date_text(wanted)}")
        return revision_memento(original, revision)
    candidates = [m for m in graph_mementos(dataset, target, original) if m.at <= wanted]
    if candidates:
        # the graph may have been deleted since its last change: then it did not exist at that moment, the answer
        # revision-id= gives for the same moment (a deletion is no memento of the graph)
        at = dataset.resolve(from_micros(wanted).isoformat())
        if at is not None and dataset.graph_quads(target, at) is None:
            raise GraphNotFound(f"graph {graph_to_text(target)} does not exist at revision {at}")
        return candidates[-1]
    oldest = dataset.revision(dataset.oldest_readable)
    if oldest is not None and to_micros(oldest.committed_at) > wanted:
        raise Gone(f"the history at {_date_text(wanted)} is no longer kept; the oldest readable "
                                  f"revision is {oldest.ordinal}, committed {date_of(to_micros(oldest.committed_at))}")
    raise GraphNotFound(f"graph {graph_to_text(target)} did not exist at or before {_date_text(wanted)}")


# -- streams --------------------------------------------------------------------------------------------------------

def stream_mementos(stream: Stream, original: str) -> list[Memento]:
    """One memento per retained element, dated by its timestamp."""
    found = []
    for ordinal in range(stream.first_ordinal, stream.head() + 1):
        time = stream.time_of(ordinal)
        if time is not None:
            found.append(Memento(ordinal, memento_url(original, str(stream.uuid_of(ordinal))), time))
    return found


def select_element(stream: Stream, wanted: int, original: str) -> Memento:
    """The stream's memento at or before ``wanted``: after its last element with a timestamp at or before it."""
    ordinal = stream.last_at_or_before(wanted)
    time = None if ordinal is None else stream.time_of(ordinal)
    if ordinal is None or time is None:
        if stream.first_ordinal > 1:
            raise Gone(f"stream {stream.config.name!r} keeps no element at or before {_date_text(wanted)}: older "
                       "elements were expired by its retention")
        raise NotFound(f"stream {stream.config.name!r} has no element at or before {_date_text(wanted)}")
    return Memento(ordinal, memento_url(original, str(stream.uuid_of(ordinal))), time)


def stream_memento(stream: Stream, ordinal: int, original: str) -> Memento | None:
    """The memento an explicit ``revision-id=`` selected (None for the empty state)."""
    time = stream.time_of(ordinal)
    return None if time is None else Memento(ordinal, memento_url(original, str(stream.uuid_of(ordinal))), time)
