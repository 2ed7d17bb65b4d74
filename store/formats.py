"""Media types and the pyoxigraph formats they name: one table per use, each derived from the same entries.

``RESULTS_FORMATS`` (SELECT / ASK results), ``GRAPH_FORMATS`` (triples), ``DATASET_FORMATS`` (quads),
``BODY_FORMATS`` (what a Graph Store body may be sent as), ``STREAM_BODY_FORMATS`` (a stream upload's body),
``MESSAGE_FORMATS`` (an element that comes alone: an MQTT message), ``UPLOAD_FORMATS`` (a WebSocket upload: one
element per message, framed) and ``LDES_FORMATS`` (the pages of a stream's LDES).
"""

from __future__ import annotations

from pyoxigraph import QueryResultsFormat, RdfFormat

RESULTS_FORMATS: dict[str, QueryResultsFormat] = {
    "application/sparql-results+json": QueryResultsFormat.JSON,
    "application/json": QueryResultsFormat.JSON,
    "application/sparql-results+xml": QueryResultsFormat.XML,
    "application/xml": QueryResultsFormat.XML,
    "text/csv": QueryResultsFormat.CSV,
    "text/tab-separated-values": QueryResultsFormat.TSV,
}
GRAPH_FORMATS: dict[str, RdfFormat] = {
    "text/turtle": RdfFormat.TURTLE,
    "application/n-triples": RdfFormat.N_TRIPLES,
    "application/rdf+xml": RdfFormat.RDF_XML,
    "application/ld+json": RdfFormat.JSON_LD,
    "text/plain": RdfFormat.N_TRIPLES,  # N-Triples' historical media type
}
DATASET_FORMATS: dict[str, RdfFormat] = {
    "application/trig": RdfFormat.TRIG,
    "application/n-quads": RdfFormat.N_QUADS,
}
BODY_FORMATS: dict[str, RdfFormat] = {
    **{k: v for k, v in GRAPH_FORMATS.items() if k != "text/plain"},
    **DATASET_FORMATS,
    "application/x-turtle": RdfFormat.TURTLE,
    "application/json": RdfFormat.JSON_LD,
}
# each named graph one element (TriG, N-Quads, JSON-LD), or the whole body one element (Turtle, N-Triples); no RDF/XML
STREAM_BODY_FORMATS: dict[str, RdfFormat] = {k: v for k, v in BODY_FORMATS.items() if v != RdfFormat.RDF_XML}
# TriG / N-Quads / JSON-LD with the element's graph name and timestamp triple; Turtle / N-Triples / plain JSON-LD as
# the content of one element
MESSAGE_FORMATS: dict[str, RdfFormat] = {
    **DATASET_FORMATS,
    "text/turtle": RdfFormat.TURTLE,
    "application/n-triples": RdfFormat.N_TRIPLES,
    "application/ld+json": RdfFormat.JSON_LD,
}
UPLOAD_FORMATS: dict[str, RdfFormat] = dict(DATASET_FORMATS)
LDES_FORMATS: dict[str, RdfFormat] = {**DATASET_FORMATS, "application/ld+json": RdfFormat.JSON_LD}
