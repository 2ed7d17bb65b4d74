"""What an evaluation reads besides its query: the dataset a query runs over (``QueryTarget``), and everything else
(``EvaluationContext``): the server's dataset and streams, the names it serves under, how it reaches other
endpoints, and, in a rule firing or an executor, the windows and IRIs fixed in advance.

A context is one frozen value in one of three modes, each made by a named constructor; a copy is made with
``dataclasses.replace``, so it keeps every field it does not change:

- **requests** (``for_requests``): ``/sparql``, the streams' IRIs, continuous responses, rule registration. A
  repeating WindowRef reads the latest complete window of its ref, waiting up to ``window_timeout`` for one; a
  request arriving at other base IRIs adds them (``with_local_bases``).
- **rule firing** (``for_rule``, from a requests context): ``pins`` the window that fired, ``sequences`` the rule's
  own sequence of each of its refs; no waiting (``window_timeout`` 0).
- **executor** (``for_executor``, rules/tasks.py): a firing in a Spark executor, which has no catalog and no HTTP:
  the windows it reads are copied in (``preloaded``), and each ``SERVICE ?var``'s IRIs are those the driver resolved
  (``targets``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyoxigraph import Store

from engine.cache import StaticResults
from engine.remote import HttpSession
from engine.results import Solutions
from engine.selection import SelectedWindow
from store.dataset import RevisionedDataset
from store.stream import Stream
from store.streams import StreamCatalog

#: (stream name, canonical repeating WindowRef): how rule pins and rule sequences name a ref of a stream
StreamRef = tuple[str, str]


@dataclass(frozen=True)
class QueryTarget:
    """The dataset a query is evaluated over.

    ``store`` None means the evaluator's RevisionedDataset at ``revision`` (None: HEAD when the query
    starts): the evaluator then takes the read lock itself, once per query it runs. ``stream`` is set
    when the dataset is (a window or a revision of) a stream: ``WINDOWS`` and ``REVISION`` apply to it.
    """

    store: Store | None = None
    default_graph: list[Any] | None = None
    named_graphs: list[Any] | None = None
    then_time: int | None = None  # µs: what THEN() returns
    base_iri: str | None = None
    revision: int | None = None
    stream: Stream | None = None
    #: which elements ``store`` holds, when it is a window or revision of ``stream``: the same elements always give
    #: the same dataset (elements never change), so static queries over it are cached under this key
    elements_key: str | None = None


@dataclass(frozen=True)
class EvaluationContext:
    """Everything an evaluation reads besides its query and its target (the modes: the module docstring)."""

    dataset: RevisionedDataset
    catalog: StreamCatalog | None  # None in an executor: its windows are ``preloaded``
    #: this server's base IRIs (no trailing "/"): a SERVICE to ``BASE/sparql`` or ``BASE/streams/…`` is in-process
    local_bases: tuple[str, ...]
    http: HttpSession | None = None  # None: SERVICE to other endpoints fails (SILENT: the join identity)
    #: hosts ("host" or "host:port") SERVICE may reach over HTTP; None: any (this server is in-process anyway)
    allow_hosts: frozenset[str] | None = None
    window_timeout: float = 30.0  # seconds a one-shot or first window may be waited for
    http_timeout: float = 60.0
    #: static parts' solutions per dataset revision or window (engine/cache.py), shared by every copy
    cache: StaticResults[Solutions] = field(default_factory=StaticResults)
    #: (stream, ref) -> the window to read instead of the latest (the window a rule fires on)
    pins: Mapping[StreamRef, SelectedWindow] = field(default_factory=dict)
    #: (stream, ref) -> the sequence to read its latest window from: a rule's own (a HEAD ref names another sequence
    #: for every registration); without it, the freshest of that ref
    sequences: Mapping[StreamRef, str] = field(default_factory=dict)
    #: SERVICE IRI -> the dataset it names, copied in already (an executor's windows)
    preloaded: Mapping[str, QueryTarget] = field(default_factory=dict)
    #: a top-level ``SERVICE ?var`` part (by ident) -> the IRIs it reads, resolved by the driver (an executor)
    targets: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def for_requests(cls, dataset: RevisionedDataset, catalog: StreamCatalog | None, local_bases: Iterable[str],
                     http: HttpSession | None = None, *, allow_hosts: frozenset[str] | None = None,
                     window_timeout: float = 30.0, http_timeout: float = 60.0) -> EvaluationContext:
        """The server's context for requests (the composition root makes one; each request copies it with its own
        base IRIs)."""
        return cls(dataset, catalog, _bases(local_bases), http, allow_hosts, window_timeout, http_timeout)

    @classmethod
    def for_executor(cls, dataset: RevisionedDataset, base: str, windows: Mapping[str, QueryTarget],
                     targets: Mapping[int, tuple[str, ...]], cache: StaticResults[Solutions] | None = None
                     ) -> EvaluationContext:
        """A firing in an executor: ``windows`` by the SERVICE IRI that names each, ``targets`` by part; ``cache``:
        the static parts the firings of its chunk share."""
        return cls(dataset, None, _bases([base]), cache=StaticResults() if cache is None else cache,
                   preloaded=windows, targets=targets)

    def with_local_bases(self, local_bases: Iterable[str]) -> EvaluationContext:
        """The same context for a request arriving at other base IRIs (e.g. ``request.host_url``), which are this
        server's besides those it knew already (the names it serves under: a request's ``Host`` is the client's
        word, so a SERVICE to ``localhost`` is in-process whatever ``Host`` said)."""
        return replace(self, local_bases=_bases([*local_bases, *self.local_bases]))

    def for_rule(self, local_bases: Iterable[str], pins: Mapping[StreamRef, SelectedWindow],
                 sequences: Mapping[StreamRef, str] | None = None) -> EvaluationContext:
        """A rule firing's context: repeating refs named in ``pins`` resolve to the pinned window, the others to the
        latest complete window of the rule's own sequence (``sequences``) without waiting."""
        return replace(self, local_bases=_bases([*local_bases, *self.local_bases]), pins=pins,
                       sequences={} if sequences is None else sequences, window_timeout=0.0)


def _bases(local_bases: Iterable[str]) -> tuple[str, ...]:
    """Base IRIs without their trailing "/", each once, in order."""
    return tuple(dict.fromkeys(base.rstrip("/") for base in local_bases))
