"""Errors of the store layer; each carries the HTTP status it should become at the boundary."""

from __future__ import annotations

import re

from sparql_ext.errors import ConcentratorError


class StoreError(ConcentratorError):
    """Base of every error raised by ``store``."""


class RdfSyntaxError(StoreError):
    """A request body that is not valid RDF in its declared format (pyoxigraph gives the place)."""

    status_hint = 400


class InvalidIri(StoreError):
    """A value that should be an IRI (a graph name, a stream setting) and is not."""

    status_hint = 400


class UnsupportedMediaType(StoreError):
    status_hint = 415


class BodyTooLarge(StoreError):
    status_hint = 413


class GraphNotFound(StoreError):
    status_hint = 404


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
    def from_pyoxigraph(cls, what: str, error: Exception) -> QueryFailed:
        """Spell pyoxigraph's "error at L:C" as "line L column C"."""
        text = re.sub(r"\bat (\d+):(\d+)", r"at line \1 column \2", str(error))
        return cls(f"{what}: {text}")


class StorageFailure(StoreError):
    """The disk or the storage engine failed; the transaction was rolled back."""

    status_hint = 500


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


class StreamConflict(StoreError):
    """A stream configuration that cannot be applied (e.g. an alias another stream holds)."""

    status_hint = 409


class PageNotFound(StoreError):
    """An LDES page IRI that names no page of the stream (not a page start, or no member in its time)."""

    status_hint = 404


class PageGone(StoreError):
    """An LDES page whose members retention expired (LDES: compacted pages answer 410 Gone)."""

    status_hint = 410
