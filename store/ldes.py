"""A stream as a Linked Data Event Stream (LDES, the SEMIC living standard on the W3C TREE hypermedia
specification): the stream IRI is an ``ldes:EventStream`` whose members are the stream's elements.

* **Members.** Each element is a member named by its graph: ``<stream> tree:member <g>``; the member's quads are
  exactly the element as it was uploaded — its timestamp triple ``<g> <timestamp-predicate> "…"`` in the default
  graph (so ``ldes:timestampPath`` is the stream's timestamp predicate) and its named graph ``<g>``, which is what
  the LDES member extraction algorithm collects (the star pattern of ``<g>`` in the default graph and the named
  graph ``<g>``). Contents come from the element log, every literal and blank node label as uploaded.
* **Pages.** Stream time is cut into fragments of ``ldes.page`` µs aligned on the Unix epoch; every fragment holding a
  published element is a page (``tree:Node``) identified by its start. The root node (the view) links to the oldest
  retained page, and each page to the next one, with a ``tree:GreaterThanOrEqualToRelation`` on the timestamp
  path whose value is the next page's start (a chain: everything reachable from it is at or after that value).
* **Published** elements are those no later element can precede: timestamps at or before stream time minus the
  stream's lateness (all of them without a lateness). So members appear in timestamp order, as LDES requires.
* **Immutable** pages: a page is immutable once the next page exists — no element can land in it or between it and
  the next page any more (its relation is final). The last page is open: members may still be added to it, and its
  relation appears when a later page does.
* **Retention.** A page that lost an element to the stream's retention is gone (410, as LDES has compacted pages
  answer), so are the pages before it; the root node's ``ldes:retentionPolicy`` says so (``ldes:startingFrom``: the
  first wholly retained page) and gives the configured retention (``ldes:fullLogDuration`` and the older
  ``ldes:DurationAgoPolicy`` with ``tree:value``) — measured in stream time, not wall-clock time.

Documents are TriG: the hypermedia controls as N-Triples lines, then the members' contents from the log.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

import isodate

from sparql_ext.windowing import Element, format_micros
from store.errors import PageGone, PageNotFound, StreamSettingInvalid
from store.stream import Stream
from store.stream_config import StreamConfig

LDES = "https://w3id.org/ldes#"
TREE = "https://w3id.org/tree#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
XSD = "http://www.w3.org/2001/XMLSchema#"


@dataclass(frozen=True)
class Names:
    """The IRIs of a stream's LDES, as the HTTP layer serves them: the event stream (the stream IRI) and its view
    (the root node); page IRIs are the root's followed by ``/`` and the page's start."""

    stream: str
    root: str

    def page(self, start: int) -> str:
        return f"{self.root}/{format_micros(start)}"


@dataclass(frozen=True)
class Page:
    """One page: the fragment [start, end) of stream time, its published members in timestamp order, the start of
    the next page (None: none yet), and a tag that changes whenever the page's document would."""

    start: int
    end: int
    members: list[int]
    next_start: int | None
    tag: str

    @property
    def immutable(self) -> bool:
        return self.next_start is not None


MIN_PAGE = 1_000_000  # µs: an LDES page spans at least a second


def check_pages(config: StreamConfig) -> None:
    """The stream's LDES pages as configured (``ldes-page``): at least ``MIN_PAGE`` long (the catalog's check)."""
    if config.ldes.page < MIN_PAGE:
        raise StreamSettingInvalid(f"ldes-page is {config.ldes.page / 1e6:g} s: an LDES page spans at least a "
                                   "second (PT1S)")


def fragment_start(time: int, width: int) -> int:
    return time - time % width


def published_until(stream: Stream) -> int | None:
    """The latest timestamp published: stream time minus the lateness (no later element can come before it)."""
    return None if stream.stream_time is None else stream.stream_time - stream.config.lateness


def retained_from(stream: Stream) -> int | None:
    """The start of the oldest page retention left whole (None: nothing expired)."""
    width = stream.config.ldes.page
    expired = stream.expired_time
    if expired is None and stream.first_ordinal > 1:  # a cut made before the expired time was kept
        first = stream.time_of(stream.first_ordinal)
        expired = (first if first is not None else stream.stream_time or 0) - 1
    return None if expired is None else fragment_start(expired, width) + width


def _first_published(stream: Stream, at_or_after: int | None) -> Element | None:
    until = published_until(stream)
    found = stream.first_at_or_after(at_or_after if at_or_after is not None else -(1 << 62))
    return found if found is not None and until is not None and found.time <= until else None


def first_page(stream: Stream) -> int | None:
    """The start of the oldest retained page (None: nothing is published yet)."""
    found = _first_published(stream, retained_from(stream))
    return None if found is None else fragment_start(found.time, stream.config.ldes.page)


def page(stream: Stream, start: int) -> Page:
    """The page of the stream starting at ``start``; ``PageNotFound`` or ``PageGone`` (expired) when there is none."""
    width = stream.config.ldes.page
    duration = isodate.duration_isoformat(timedelta(microseconds=width))
    if start % width:
        raise PageNotFound(f"stream {stream.config.name!r} has no LDES page starting at {format_micros(start)}: pages "
                           f"start at multiples of its page duration {duration} since 1970-01-01T00:00:00Z")
    floor = retained_from(stream)
    if floor is not None and start < floor:
        raise PageGone(f"the LDES page of stream {stream.config.name!r} starting at {format_micros(start)} is gone: "
                       f"retention expired elements up to {format_micros(stream.expired_time or floor - 1)}; the "
                       f"oldest page kept starts at or after {format_micros(floor)}")
    until = published_until(stream)
    end = start + width
    members = sorted((e for e in stream.between(start, end, backward=False) if until is not None and e.time <= until),
                     key=lambda e: (e.time, e.ordinal))
    if not members:
        raise PageNotFound(f"stream {stream.config.name!r} has no LDES page starting at {format_micros(start)}: no "
                           f"published element has a timestamp in [{format_micros(start)}, {format_micros(end)})")
    following = _first_published(stream, end)
    next_start = None if following is None else fragment_start(following.time, width)
    ordinals = [e.ordinal for e in members]
    tag = _tag(stream, start, len(ordinals), max(ordinals), next_start)
    return Page(start, end, ordinals, next_start, tag)


def page_document(stream: Stream, view: Page, names: Names) -> bytes:
    """The page as TriG: ``tree:member`` of each member, the page's relation and immutability, the members."""
    graphs = [stream.graph_of(o) for o in view.members]
    lines = [f"<{names.stream}> <{TREE}member> {graph} .\n" for graph in graphs if graph is not None]
    iri = names.page(view.start)
    lines.append(f"<{iri}> <{RDF_TYPE}> <{TREE}Node> .\n")
    if view.next_start is not None:
        lines += _relation(stream, iri, names.page(view.next_start), view.next_start)
        lines.append(f'<{iri}> <{LDES}immutable> "true"^^<{XSD}boolean> .\n')
    return "".join(lines).encode() + stream.contents(view.members)


def root_document(stream: Stream, names: Names) -> tuple[bytes, str]:
    """The view (root node) as TriG, and a tag that changes whenever it would: the event stream's description
    (``ldes:timestampPath``), its retention policy, and the relation to the oldest retained page."""
    config = stream.config
    root = names.root
    lines = [f"<{names.stream}> <{RDF_TYPE}> <{LDES}EventStream> .\n",
             f"<{names.stream}> <{LDES}timestampPath> <{config.timestamp_predicate}> .\n",
             f"<{names.stream}> <{TREE}view> <{root}> .\n",
             f"<{root}> <{RDF_TYPE}> <{TREE}Node> .\n"]
    floor = retained_from(stream)
    if config.retention is not None or floor is not None:
        policy = f"{root}#retention"
        lines.append(f"<{root}> <{LDES}retentionPolicy> <{policy}> .\n")
        if config.retention is not None:
            kept = isodate.duration_isoformat(timedelta(microseconds=config.retention))
            lines += [f"<{policy}> <{RDF_TYPE}> <{LDES}DurationAgoPolicy> .\n",
                      f'<{policy}> <{TREE}value> "{kept}"^^<{XSD}duration> .\n',
                      f'<{policy}> <{LDES}fullLogDuration> "{kept}"^^<{XSD}duration> .\n']
        if floor is not None:
            lines.append(f'<{policy}> <{LDES}startingFrom> "{format_micros(floor)}"^^<{XSD}dateTime> .\n')
    first = first_page(stream)
    if first is not None:
        lines += _relation(stream, root, names.page(first), first)
    text = "".join(lines)
    return text.encode(), hashlib.sha256(text.encode()).hexdigest()[:32]


def _relation(stream: Stream, source: str, target: str, value: int) -> list[str]:
    relation = f"{source}#next"
    return [f"<{source}> <{TREE}relation> <{relation}> .\n",
            f"<{relation}> <{RDF_TYPE}> <{TREE}GreaterThanOrEqualToRelation> .\n",
            f"<{relation}> <{TREE}node> <{target}> .\n",
            f"<{relation}> <{TREE}path> <{stream.config.timestamp_predicate}> .\n",
            f'<{relation}> <{TREE}value> "{format_micros(value)}"^^<{XSD}dateTime> .\n']


def _tag(stream: Stream, start: int, count: int, last: int, next_start: int | None) -> str:
    # Elements never change and only ever join a page: its count and latest ordinal tell its members apart.
    config = stream.config
    text = f"{stream.uuid_of(0)}|{config.ldes.page}|{config.timestamp_predicate}|{start}|{count}|{last}|{next_start}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]
