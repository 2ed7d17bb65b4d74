"""Extended SPARQL (seed 003): parsing and rewriting to SPARQL 1.1. Pure: no I/O."""

from sparql_ext.errors import (
    ProtocolConflict,
    QuerySyntaxError,
    RevisionSyntaxError,
    SparqlExtError,
    UnsupportedOperation,
)
from sparql_ext.revision import (
    Head,
    Instant,
    Ordinal,
    RevisionDesignator,
    RevisionId,
    parse_revision,
)
from sparql_ext.update import DEFAULT_GRAPH, Operation, split_update

__all__ = [
    "DEFAULT_GRAPH", "Head", "Instant", "Operation", "Ordinal", "ProtocolConflict",
    "QuerySyntaxError", "RevisionDesignator", "RevisionId", "RevisionSyntaxError",
    "SparqlExtError", "UnsupportedOperation", "parse_revision", "split_update",
]
