"""The durable state, and only that: the revisioned dataset (``dataset``: HEAD on disk in pyoxigraph, reverse
deltas as history: ``history``, ``revlog``, ``staging``; past revisions read: ``past``), the streams and their
elements (``streams``: the catalog;
``stream``: one stream's elements, index, group commit and retention; ``elements``: framing elements out of upload
bodies; ``log_reading`` and ``log_contents``: the element logs' records and contents as other packages read them),
and the window log (``windows``: registered sequences, window revisions, the pipeline's state). No evaluation, no
rules, no Spark, no HTTP.

The names below are imported on first use: Spark's Python processes import ``store.log_reading`` (the window
pipeline's source reads the element logs with it) and must not pay for the dataset, pyoxigraph and the SPARQL parser
each time one starts (≈ 0.13 s of imports, in ≈ 8 processes per Spark start)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.dataset import Commit, RevisionedDataset
    from store.errors import (
        BodyTooLarge,
        GraphNotFound,
        QueryFailed,
        RdfSyntaxError,
        RevisionNotFound,
        RevisionNotRetained,
        StorageFailure,
        StoreError,
        UnsupportedMediaType,
    )
    from store.revlog import Revision, RevisionLog
    from store.staging import StagedQuads

_MODULE_OF = {
    "Commit": "store.dataset", "RevisionedDataset": "store.dataset",
    "BodyTooLarge": "store.errors", "GraphNotFound": "store.errors", "QueryFailed": "store.errors",
    "RdfSyntaxError": "store.errors", "RevisionNotFound": "store.errors", "RevisionNotRetained": "store.errors",
    "StorageFailure": "store.errors", "StoreError": "store.errors", "UnsupportedMediaType": "store.errors",
    "Revision": "store.revlog", "RevisionLog": "store.revlog", "StagedQuads": "store.staging",
}
__all__ = [
    "BodyTooLarge", "Commit", "GraphNotFound", "QueryFailed", "RdfSyntaxError", "Revision",
    "RevisionLog", "RevisionNotFound", "RevisionNotRetained", "RevisionedDataset", "StagedQuads",
    "StorageFailure", "StoreError", "UnsupportedMediaType",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once
    return value
