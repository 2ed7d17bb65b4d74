"""Errors of the store layer; each carries the HTTP status it should become at the boundary."""

from __future__ import annotations

import re

from sparql_ext.errors import ConcentratorError
from sparql_ext.syntax_messages import explain


class StoreError(ConcentratorError):
    """Base of every error raised by ``store``."""


class RdfSyntaxError(StoreError):
    """A request body that is not valid RDF in its declared format (pyoxigraph gives the place)."""

    status_hint = 400


class InvalidIri(StoreError):
    """A value that should be an IRI (a graph name, a stream setting) and is not."""

    status_hint = 400


class UnsupportedMediaType(StoreError):
    """A body, message or ``format=`` in a media type (or charset) this server does not read; the one 415 of every
    layer."""

    status_hint = 415


class BodyTooLarge(StoreError):
    status_hint = 413


class StatementTooLarge(BodyTooLarge):
    """A statement over ``store.limits.STATEMENT_LIMIT`` as N-Quads, or a token too long for pyoxigraph's parsers."""


class ElementTooLarge(BodyTooLarge):
    """A stream element over ``store.limits.ELEMENT_LIMIT``, as sent or as stored."""


class GraphNotFound(StoreError):
    status_hint = 404


class QuadOutsideTarget(StoreError):
    """A quad of a body sent to one graph that names another graph (a TriG, N-Quads or JSON-LD body to
    ``/store?graph=G``): the write is refused rather than the quad moved or dropped."""

    status_hint = 400


class RevisionNotFound(StoreError):
    """A well-formed revision designator that names no revision of this dataset."""

    status_hint = 400


class RevisionNotRetained(StoreError):
    """A revision whose history was dropped by the retention policy."""

    status_hint = 410


class QueryFailed(StoreError):
    """pyoxigraph refused a query or update (syntax, or an error while evaluating it)."""

    status_hint = 400

    @classmethod
    def from_pyoxigraph(cls, what: str, error: Exception, text: str | None = None, *,
                        update: bool = False) -> QueryFailed:
        """pyoxigraph's syntax error about ``text`` (the user's query or update) in one line: where, what was found,
        what was likely meant (``sparql_ext.syntax_messages``); without ``text``, its "error at L:C" spelt
        "line L column C"."""
        if text is not None:
            return cls(f"{what}: {explain(text, str(error), update=update)}")
        return cls(f"{what}: " + re.sub(r"\bat (\d+):(\d+)", r"at line \1 column \2", str(error)))


class StorageFailure(StoreError):
    """The disk or the storage engine failed; the transaction was rolled back."""

    status_hint = 500


class DatasetUnavailable(StoreError):
    """A failed write could not be undone: the dataset refuses reads and writes until a restart completes the undo."""

    status_hint = 503


class ElementRejected(StoreError):
    """A stream element that is malformed (bad timestamp, stray default-graph triple, …)."""

    status_hint = 400


class ElementOutOfOrder(StoreError):
    """An element that breaks the stream's time order (or its lateness) or reuses a graph name."""

    status_hint = 409


class DuplicateElement(ElementOutOfOrder):
    """An element whose graph name is already an element of the stream: an HTTP upload refuses it (409); a
    transport that may deliver a message twice (MQTT QoS 1, a resumed WebSocket upload) counts it as delivered."""


class StreamNotFound(StoreError):
    status_hint = 404


class InvalidStreamName(StoreError):
    """A stream (or rule) name outside 1-128 letters, digits, '.', '_', '-'."""

    status_hint = 400


class StreamSettingInvalid(StoreError):
    """A stream setting the store cannot take (an LDES page shorter than a second)."""

    status_hint = 400


class StreamConflict(StoreError):
    """A stream configuration that cannot be applied (e.g. an alias another stream holds)."""

    status_hint = 409


class PageNotFound(StoreError):
    """An LDES page IRI that names no page of the stream (not a page start, or no member in its time)."""

    status_hint = 404


class PageGone(StoreError):
    """An LDES page whose members retention expired (LDES: compacted pages answer 410 Gone)."""

    status_hint = 410


class NestedTooDeep(RdfSyntaxError):
    """RDF nested deeper than its syntax's limit in ``store.limits`` (a body, a message, an LDES page, SERVICE
    results): refused before pyoxigraph's parsers, which recurse per level and overflow a thread's stack a few
    thousand levels down, killing the process. ``offset``: the byte where the limit is passed."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class EntityExpansionTooLarge(BodyTooLarge):
    """An RDF/XML document whose DTD entities expand to more than ``store.limits.ENTITY_EXPANSION`` bytes beyond its
    own size ("billion laughs")."""


class XmlEntityRefused(RdfSyntaxError):
    """An RDF/XML DTD declaring an entity the server does not read: an external one (``SYSTEM``, ``PUBLIC``) or a
    parameter entity (``%``)."""
