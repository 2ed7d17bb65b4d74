"""Following a Linked Data Event Stream into a stream: ``ldes-source=URL`` in a stream's configuration. An LDES client
in ordered ascending mode (the SEMIC LDES specification, §"Synchronization algorithm").

* **Initialization.** The URL is the view (``?s tree:view <URL>``) or the event stream (``<URL> tree:view ?o``); its
  ``ldes:timestampPath`` orders the members (``ldes-timestamp-path`` overrides it; one predicate).
* **A synchronization run** fetches every pending page once — the pages found but not yet read, and the pages that
  were not immutable when last read — lowest timestamp bound first (``tree:GreaterThan[OrEqualTo]Relation`` on
  the timestamp path; other relations first); it emits the members it has not emitted, in timestamp order, as
  elements of the stream, and queues the nodes of the pages' relations. Immutable pages (``ldes:immutable true``
  or ``Cache-Control: immutable``) are read once; the others are polled with ``If-None-Match`` (304: nothing new)
  every ``ldes-poll``. A 410 is a page with no members and no relations; a 404 or 410 leaving nothing pending
  starts again from the view (the bookmark skips what was emitted).
* **Exactly once.** The state — the pending pages and their ETags, the latest immutable pages read (so that a
  view whose first page moves with retention does not send the client down the whole chain again), the bookmark
  (the latest member time emitted and the members at that time) — is written to ``<stream>/ldes-follower.json`` at
  the end of every run and every ``SAVE_EVERY`` seconds within one: a restart resumes from the pending pages. It
  only spares work: a member emitted before a crash and met again is recognised whatever the state says (its graph
  name is an element already, or its time is before the bookmark, or not after the stream's time in a distinct
  time series).
* **Back-off.** 408, 425, 429, 500, 502, 503, 504 and connection failures are retried after ``Retry-After`` or an
  exponential back-off (1 s … 60 s); any other 4xx/5xx stops the run, and a member the stream refuses stops the
  follower: both are shown in ``/status`` (``connectors.ldes``) and retried after the back-off.
* Every URL fetched (redirects included) must be on the server's ``--service-allow`` list.

Only ``concentrator.compose`` starts followers (``LdesFollowers``); nothing else imports this package.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from pyoxigraph import RdfFormat

from connectors.errors import ConnectorSettingInvalid, LdesError
from connectors.ldes_pages import Context, Page, context, find_view, load, read_page
from engine.errors import ServiceNotAllowed
from engine.remote import host_allowed
from sparql_ext.errors import ConcentratorError
from sparql_ext.windowing import format_micros
from store.durable import now_micros, write_json
from store.elements import ParsedElement
from store.stream import Stream
from store.stream_config import LdesConfig, StreamConfig
from store.streams import StreamCatalog

log = logging.getLogger(__name__)

STATE_FILE = "ldes-follower.json"
ACCEPT = ("application/trig, application/n-quads;q=0.9, text/turtle;q=0.8, application/n-triples;q=0.7, "
          "application/ld+json;q=0.6")
RETRIED = frozenset({408, 425, 429, 500, 502, 503, 504})
MAX_BACKOFF = 60.0
TIMEOUT = (5.0, 60.0)  # connect, read (seconds)
MAX_REDIRECTS = 10
DONE_KEPT = 1_000  # immutable pages remembered: a view whose first page moves (retention) leads to one of them
SAVE_EVERY = 2.0  # seconds between writes of the state during a run (and at its end)


@dataclass
class PendingPage:
    url: str
    bound: int | None = None  # the lowest timestamp its relation promises (None: unknown, read first)
    etag: str | None = None


@dataclass
class FollowerState:
    """What survives a restart (``<stream>/ldes-follower.json``)."""

    source: str
    event_stream: str | None = None
    root: str | None = None
    timestamp_path: str | None = None
    pending: list[PendingPage] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # the latest immutable pages read (DONE_KEPT), oldest first
    last_time: int | None = None
    last_members: list[str] = field(default_factory=list)
    emitted: int = 0

    @classmethod
    def read(cls, path: Path, source: str) -> FollowerState:
        if path.exists():
            data = json.loads(path.read_text())
            if data.get("source") == source:  # another source starts afresh
                data["pending"] = [PendingPage(**p) for p in data.get("pending", [])]
                return cls(**data)
        return cls(source)

    def write(self, path: Path) -> None:
        write_json(path, asdict(self))


class _Stopped(Exception):
    """The follower was asked to stop while it waited."""


class LdesFollower:
    """One stream following one LDES, in a thread of its own."""

    def __init__(self, stream: Stream, catalog: StreamCatalog, allow_hosts: frozenset[str] | None) -> None:
        self.stream = stream
        self.source = stream.config.ldes.source or ""
        self._catalog = catalog
        self._allow = allow_hosts
        self._path = stream.directory / STATE_FILE
        self.state = FollowerState.read(self._path, self.source)
        self._stop = threading.Event()
        self._session = requests.Session()
        self._thread = threading.Thread(target=self._run, name=f"ldes-{stream.config.name}", daemon=True)
        self._context: Context | None = None
        self._backoff = 1.0
        self.counters = {"runs": 0, "pages_fetched": 0, "not_modified": 0, "retries": 0, "gone": 0,
                         "skipped_duplicates": 0}
        self.phase = "starting"
        self.error: str | None = None
        self.last_run: int | None = None
        self.timestamp_override = stream.config.ldes.timestamp_path
        self._saved = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._session.close()

    def status(self) -> dict[str, object]:
        state = self.state
        return {
            "source": self.source, "event_stream": state.event_stream, "view": state.root,
            "timestamp_path": state.timestamp_path, "phase": self.phase, "error": self.error,
            "members_emitted": state.emitted,
            "last_member_time": None if state.last_time is None else format_micros(state.last_time),
            "pending_pages": [p.url for p in state.pending],
            "last_run": None if self.last_run is None else format_micros(self.last_run),
            "retention_policy": None if self._context is None else self._context.retention,
            **self.counters,
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._catalog.find(self.stream.config.name) is not self.stream:
                return  # the stream was deleted (or replaced)
            try:
                self.phase = "syncing"
                self._synchronize()
                self.counters["runs"] += 1
                self.last_run = now_micros()
                self.error = None
                self._backoff = 1.0
                self.phase = "polling"
                self._wait(self.stream.config.ldes.poll)
            except _Stopped:
                return
            except (ConcentratorError, requests.RequestException, OSError, ValueError) as error:
                self.error = error.message if isinstance(error, ConcentratorError) else str(error)
                self.phase = "failed"
                log.warning("stream %s: following %s: %s", self.stream.config.name, self.source, self.error)
                try:
                    self._wait(self._next_backoff())
                except _Stopped:
                    return

    def _wait(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise _Stopped()

    def _next_backoff(self) -> float:
        delay, self._backoff = self._backoff, min(self._backoff * 2, MAX_BACKOFF)
        return delay

    # -- one synchronization run -------------------------------------------------------------------------------------

    def _synchronize(self) -> None:
        state = self.state
        if state.root is None or self._context is None:
            self._initialize()
        if not state.pending:  # nothing left to poll (pages gone): walk again from the view
            assert state.root is not None
            state.pending.append(PendingPage(state.root))
        read: set[str] = set()
        try:
            while True:
                due = [p for p in state.pending if p.url not in read]
                if not due:
                    break
                entry = min(due, key=lambda p: (p.bound is not None, p.bound or 0))
                read.add(entry.url)
                self._visit(entry)
        finally:
            self._save(now=True)

    def _initialize(self) -> None:
        """Find the event stream, its view and timestamp path (LDES §"Initialization run")."""
        response = self._fetch(self.source, None)
        assert response is not None
        document = load(response.content, _format(response), response.url)
        event_stream, root = find_view(document, response.url, self.source)
        if root is not None:
            response = self._fetch(root, None)
            assert response is not None
            document = load(response.content, _format(response), response.url)
        root = response.url
        found = context(document, event_stream, root)
        path = self.stream.config.ldes.timestamp_path or found.timestamp_path
        if path is None:
            raise LdesError(f"the event stream <{event_stream}> has no ldes:timestampPath, so its members have no "
                            "order: give the stream an ldes-timestamp-path")
        self._context = found
        state = self.state
        if state.root is None:  # first run: start at the view
            state.event_stream, state.root, state.timestamp_path = event_stream, root, path
            state.pending = [PendingPage(root)]
            state.write(self._path)
        state.timestamp_path = path

    def _visit(self, entry: PendingPage) -> None:
        state = self.state
        response = self._fetch(entry.url, entry.etag)
        self.counters["pages_fetched"] += 1
        if response is None:  # 304: nothing new
            self.counters["not_modified"] += 1
            return
        if response.status_code in (404, 410) and entry.url != state.root:
            # 410: a page retention removed, read as no members and no relations (LDES §"HTTP requests"); 404: the
            # source rebalanced its pages. Either way the view is walked again once nothing else is pending.
            self.counters["gone"] += 1
            state.pending = [p for p in state.pending if p.url != entry.url]
            self._save()
            return
        if response.status_code != 200:
            raise LdesError(f"GET <{entry.url}> answered {response.status_code}: {response.text[:300].strip()}")
        assert state.event_stream is not None and state.timestamp_path is not None
        document = load(response.content, _format(response), response.url)
        immutable = "immutable" in response.headers.get("Cache-Control", "").lower()
        page = read_page(document, response.url, state.event_stream, state.timestamp_path,
                         self.stream.config.timestamp_predicate, immutable_header=immutable)
        self._emit(page)
        known = {p.url for p in state.pending} | set(state.done)
        for relation in page.relations:
            if relation.node not in known:
                state.pending.append(PendingPage(relation.node, relation.lower_bound))
                known.add(relation.node)
        if page.immutable:
            state.pending = [p for p in state.pending if p is not entry]
            state.done = [*state.done[-(DONE_KEPT - 1):], entry.url]
        else:
            entry.etag = response.headers.get("ETag")
        self._save()

    def _save(self, *, now: bool = False) -> None:
        """Write the state, at most every ``SAVE_EVERY`` seconds unless ``now``: it only saves work after a crash
        (what was emitted is recognised anyway, see ``_emitted``)."""
        if now or time.monotonic() - self._saved >= SAVE_EVERY:
            self.state.write(self._path)
            self._saved = time.monotonic()

    # -- members -------------------------------------------------------------------------------------------------------

    def _emit(self, page: Page) -> None:
        """Append the page's new members to the stream, in timestamp order; commit; move the bookmark."""
        stream = self.stream
        accepted: list[ParsedElement] = []
        try:
            for element in page.members:
                if self._emitted(element):
                    self.counters["skipped_duplicates"] += 1
                    continue
                if self._catalog.find(stream.config.name) is not stream:
                    raise _Stopped()
                stream.accept(element, now_micros())
                accepted.append(element)
        except ConcentratorError as error:
            raise LdesError(f"member {element.graph} of <{page.url}>: {error.message}") from None
        finally:
            if accepted:
                stream.flush(timeout=60)
                self._bookmark(accepted)

    def _emitted(self, element: ParsedElement) -> bool:
        state = self.state
        assert element.time is not None
        graph = str(element.graph)
        if state.last_time is not None and (element.time < state.last_time or
                                            (element.time == state.last_time and graph in state.last_members)):
            return True
        if self.stream.ordinal_of_graph(graph) is not None:
            return True
        # a distinct time series refuses what is not after its time: only a member committed before a crash can be
        stream_time = self.stream.stream_time
        return self.stream.config.lateness == 0 and stream_time is not None and element.time <= stream_time

    def _bookmark(self, accepted: list[ParsedElement]) -> None:
        state = self.state
        for element in accepted:
            assert element.time is not None
            if state.last_time is None or element.time > state.last_time:
                state.last_time, state.last_members = element.time, []
            if element.time == state.last_time:
                state.last_members.append(str(element.graph))
        state.emitted += len(accepted)

    # -- HTTP ------------------------------------------------------------------------------------------------------

    def _fetch(self, url: str, etag: str | None) -> requests.Response | None:
        """GET a page following redirects (each URL on the allowlist), retrying what LDES says to retry; None on
        304. The response's ``url`` is the page's final URL."""
        headers = {"Accept": ACCEPT}
        if etag:
            headers["If-None-Match"] = etag
        target = url
        redirects = 0
        while True:
            if not host_allowed(target, self._allow):
                raise LdesError(f"<{target}> is not on this server's allowlist: the operator adds its host with "
                                "--service-allow")
            try:
                response = self._session.get(target, headers=headers, timeout=TIMEOUT, allow_redirects=False)
            except requests.RequestException as error:
                self._retry(f"GET <{target}>: {error}", None)
                continue
            if response.status_code in RETRIED:
                self._retry(f"GET <{target}> answered {response.status_code}", response.headers.get("Retry-After"))
                continue
            if response.is_redirect and "Location" in response.headers:
                redirects += 1
                if redirects > MAX_REDIRECTS:
                    raise LdesError(f"GET <{url}>: more than {MAX_REDIRECTS} redirects")
                target = urljoin(target, response.headers["Location"])
                continue
            self._backoff = 1.0
            if response.status_code == 304:
                return None
            return response

    def _retry(self, what: str, retry_after: str | None) -> None:
        """Wait before trying again: ``Retry-After`` (seconds or an HTTP date) or the back-off."""
        self.counters["retries"] += 1
        delay = _retry_after(retry_after)
        if delay is None:
            delay = self._next_backoff()
        self.phase = "retrying"
        self.error = f"{what}; retrying in {delay:g} s"
        self._wait(min(delay, 3600.0))


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _format(response: requests.Response) -> RdfFormat:
    media = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    found = RdfFormat.from_media_type(media) if media else None
    if found is None:
        raise LdesError(f"<{response.url}> answered Content-Type {media or '(none)'!r}: not an RDF format")
    return found


def check_settings(config: StreamConfig, allow_hosts: frozenset[str] | None) -> None:
    """A stream's LDES to follow, before the catalog takes it: an http(s) URL on a host the operator allows (as for
    SERVICE: ``--service-allow``), polled between every 0.1 s and once a day; no other setting without a source."""
    ldes, parts = config.ldes, urlsplit(config.ldes.source or "")
    if ldes.source is None:
        if (ldes.timestamp_path, ldes.poll) != (LdesConfig.timestamp_path, LdesConfig.poll):
            raise ConnectorSettingInvalid("ldes-timestamp-path and ldes-poll apply to a stream that follows an LDES: "
                                          "give ldes-source")
        return
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConnectorSettingInvalid(f"ldes-source={ldes.source!r} is not an http(s) URL of an LDES (its view, or "
                                      "its event stream)")
    if not host_allowed(ldes.source, allow_hosts):
        raise ServiceNotAllowed(f"ldes-source={ldes.source!r}: {parts.netloc} is not on this server's allowlist ("
                                f"{', '.join(sorted(allow_hosts or ())) or 'empty'}); the operator adds hosts with "
                                "--service-allow")
    if not 0.1 <= ldes.poll <= 86_400:
        raise ConnectorSettingInvalid(f"ldes-poll is {ldes.poll:g} s: poll between every 0.1 s (PT0.1S) and once a day")


class LdesFollowers:
    """The followers of a server's streams: one per stream with ``ldes-source``, started, replaced and stopped as
    streams are configured (``StreamCatalog.on_change``)."""

    def __init__(self, catalog: StreamCatalog, allow_hosts: frozenset[str] | None) -> None:
        self._catalog = catalog
        self._allow = allow_hosts
        self._lock = threading.Lock()
        self._followers: dict[str, LdesFollower] = {}
        self._started = False

    def start(self) -> None:
        with self._lock:
            self._started = True
        for name in self._catalog.names():
            stream = self._catalog.find(name)
            if stream is not None:
                self.on_change(stream)

    def on_change(self, stream: Stream) -> None:
        """A stream was created or reconfigured: follow its source, if any (afresh if the source changed)."""
        name = stream.config.name
        wanted = stream.config.ldes.source
        with self._lock:
            if not self._started:
                return
            current = self._followers.get(name)
            if current is not None and current.stream is stream and current.source == wanted and \
                    current.timestamp_override == stream.config.ldes.timestamp_path:
                return  # the same source: the poll interval is read afresh each time
            if current is not None:
                del self._followers[name]
        if current is not None:
            current.stop()
        if wanted:
            follower = LdesFollower(stream, self._catalog, self._allow)
            with self._lock:
                self._followers[name] = follower
            follower.start()

    def status(self) -> dict[str, Any]:
        with self._lock:
            followers = dict(self._followers)
        return {name: follower.status() for name, follower in sorted(followers.items())
                if self._catalog.find(name) is follower.stream}

    def close(self) -> None:
        with self._lock:
            followers, self._followers = list(self._followers.values()), {}
            self._started = False
        for follower in followers:
            follower.stop()
