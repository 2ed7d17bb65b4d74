"""Which of this server's datasets a query part reads, under an evaluation context: a SERVICE IRI of this server
(``BASE/sparql``, ``BASE/streams/NAME?WINDOWS=…``, a stream alias IRI), a window copied in (an executor's
``preloaded``), a ``REVISION`` designator, a ``WINDOWS`` ref of the stream being queried, an ``EVENT``'s stream.

A repeating ref reads the window the context pins (the window a rule fires on), else the latest complete window of
the context's sequence for it (a rule's own), else the freshest of that ref (``engine.selection``)."""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from engine.context import EvaluationContext, QueryTarget
from engine.errors import EventSourceInvalid
from engine.selection import SelectedWindow, elements_key, revision_selection, select_window
from sparql_ext.windowed import windowed_params
from sparql_ext.windowref import parse_window_ref
from store.errors import QueryFailed
from store.stream import Stream


class Datasets:
    """The datasets of this server an evaluation under ``context`` reads (see the module docstring)."""

    def __init__(self, context: EvaluationContext) -> None:
        self.context = context

    def is_local(self, iri: str) -> bool:
        """Whether a SERVICE IRI is evaluated in-process (this server's /sparql, streams and stream aliases)."""
        if any(iri == f"{base}/sparql" or iri.startswith(f"{base}/sparql?") for base in self.context.local_bases):
            return True
        return self.local_stream(iri)[0] is not None

    def local_stream(self, iri: str) -> tuple[str | None, str]:
        """The name of the stream of this server ``iri`` addresses (None if none) and the IRI's query string."""
        catalog = self.context.catalog
        if catalog is None:
            return None, ""
        for base in self.context.local_bases:
            if iri.startswith(f"{base}/streams/"):
                parts = urlsplit(iri)
                return parts.path.rsplit("/", 1)[-1], parts.query
        address, _, query_string = iri.partition("?")
        stream = catalog.by_alias(address)
        return (stream.config.name, query_string) if stream is not None else (None, "")

    def windowed_input(self, iri: str) -> tuple[str, str] | None:
        """(stream name, canonical WindowRef) when ``iri`` is a repeating windowed IRI of this server's stream
        (``BASE/streams/NAME?WINDOWS=R…`` or ``ALIAS?WINDOWS=R…``): what a rule reading it fires on."""
        stream, query_string = self.local_stream(iri)
        if stream is None:
            return None
        windows = windowed_params(query_string).windows
        if windows is None:
            return None
        ref = parse_window_ref(windows)
        return (stream, str(ref)) if ref.repeating else None

    def local_target(self, iri: str) -> QueryTarget | None:
        """The in-process dataset a SERVICE IRI names, or None when it is not this server's."""
        context = self.context
        if iri in context.preloaded:
            return context.preloaded[iri]
        for base in context.local_bases:
            if iri == f"{base}/sparql" or iri.startswith(f"{base}/sparql?"):
                return self._pinned(QueryTarget(base_iri=iri))
        name, query_string = self.local_stream(iri)
        if name is None or context.catalog is None:
            return None
        stream = context.catalog.get(name)
        return self._stream_target(stream, self._selection(stream, query_string), iri)

    def local_window(self, iri: str) -> tuple[Stream, SelectedWindow] | None:
        """The stream and the elements a SERVICE IRI of this server's streams names (pins applied, as
        ``local_target`` selects them), without building their dataset; None for any other IRI."""
        if iri in self.context.preloaded:
            return None
        name, query_string = self.local_stream(iri)
        if name is None or self.context.catalog is None:
            return None
        stream = self.context.catalog.get(name)
        return stream, self._selection(stream, query_string)

    @functools.cached_property
    def pinned_addresses(self) -> frozenset[str]:
        """The IRIs (before ``?``) of the pinned windows' streams: ``BASE/streams/NAME`` and the streams' aliases
        (once per evaluator: its context, pins included, never changes)."""
        context = self.context
        names = {stream for stream, _ in context.pins}
        streams = [context.catalog.find(name) for name in names] if context.catalog is not None else []
        return frozenset([f"{base}/streams/{name}" for base in context.local_bases for name in names]
                         + [alias for stream in streams if stream is not None for alias in stream.config.aliases])

    def _selection(self, stream: Stream, query_string: str) -> SelectedWindow:
        windows = _windows_param(query_string)
        return revision_selection(stream, None) if windows is None else self._window_of(stream, windows)

    def _window_of(self, stream: Stream, text: str) -> SelectedWindow:
        context = self.context
        if not (context.pins or context.sequences):
            return select_window(stream, text, context.window_timeout)
        key = (stream.config.name, _canonical_ref(text))
        pinned = context.pins.get(key)
        if pinned is not None:
            return pinned
        return select_window(stream, text, context.window_timeout, context.sequences.get(key))

    def _event_stream(self, iri: str | None, target: QueryTarget) -> Stream:
        """The stream an EVENT of a query reads: its IRI's, or the stream being queried when it names none."""
        if iri is None:
            if target.stream is None:
                raise EventSourceInvalid("an EVENT without a stream IRI reads the stream being queried: query a "
                                         "stream (/streams/NAME), or name it: EVENT <streams/NAME?WINDOWS=…> { … }")
            return target.stream
        name, _ = self.local_stream(iri)
        catalog = self.context.catalog
        stream = catalog.find(name) if name is not None and catalog is not None else None
        if stream is None:
            raise EventSourceInvalid(f"EVENT <{iri}> is not a stream of this server (BASE/streams/NAME or a stream "
                                     "alias)")
        return stream

    # -- targets ------------------------------------------------------------------------------------------------

    def _pinned(self, target: QueryTarget) -> QueryTarget:
        """``target`` with its revision of the dataset fixed (HEAD now, when it names none) and its THEN() time."""
        if target.store is not None or (target.revision is not None and target.then_time is not None):
            return target
        dataset = self.context.dataset
        ordinal = dataset.head if target.revision is None else target.revision
        then_time = target.then_time
        if then_time is None:
            revision = dataset.revision(ordinal)
            if revision is not None:
                then_time = int(revision.committed_at.timestamp() * 1_000_000)
        # (built whole: dataclasses.replace costs several µs, and every rule firing pins its target)
        return QueryTarget(None, target.default_graph, target.named_graphs, then_time, target.base_iri, ordinal,
                           target.stream, target.elements_key)

    def _revision_target(self, text: str, target: QueryTarget) -> QueryTarget:
        if target.stream is not None:
            return self._stream_target(target.stream, revision_selection(target.stream, text), target.base_iri)
        dataset = self.context.dataset
        ordinal = dataset.resolve(text)
        return self._pinned(QueryTarget(None, target.default_graph, target.named_graphs, None, target.base_iri,
                                        ordinal if ordinal is not None else dataset.head))

    def _window_target(self, text: str, target: QueryTarget) -> QueryTarget:
        if target.stream is None:
            raise QueryFailed(f"WINDOWS {text}: the dataset being queried is not a stream (query a stream IRI, "
                              "or use SERVICE <…/streams/NAME?WINDOWS=…>)")
        return self._stream_target(target.stream, self._window_of(target.stream, text), target.base_iri)

    @staticmethod
    def _stream_target(stream: Stream, selected: SelectedWindow, base_iri: str | None) -> QueryTarget:
        return QueryTarget(stream.window_store(selected.ordinals), None, None, selected.commit, base_iri, None,
                           stream, elements_key(stream, selected))


@functools.lru_cache(maxsize=4096)
def _windows_param(query_string: str) -> str | None:
    """The WindowRef text of a windowed IRI's query string (rules ask for the same few IRIs on every firing)."""
    return windowed_params(query_string).windows


@functools.lru_cache(maxsize=4096)
def _canonical_ref(text: str) -> str:
    """A WindowRef text in canonical form (the key of rule pins and sequences)."""
    return str(parse_window_ref(text))
