"""The durable state, and only that: the revisioned dataset (``dataset``: HEAD on disk in pyoxigraph, reverse
deltas as history: ``history``, ``revlog``, ``staging``), the streams and their elements (``streams``: the catalog;
``stream``: one stream's elements, index, group commit and retention; ``elements``: framing elements out of upload
bodies), and the window log (``windows``: registered sequences, window revisions, the pipeline's state). No
evaluation, no rules, no Spark, no HTTP."""

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

__all__ = [
    "BodyTooLarge", "Commit", "GraphNotFound", "QueryFailed", "RdfSyntaxError", "Revision",
    "RevisionLog", "RevisionNotFound", "RevisionNotRetained", "RevisionedDataset", "StagedQuads",
    "StorageFailure", "StoreError", "UnsupportedMediaType",
]
