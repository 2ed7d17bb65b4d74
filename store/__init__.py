"""A revisioned RDF dataset on pyoxigraph: HEAD on disk, reverse deltas as history."""

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
