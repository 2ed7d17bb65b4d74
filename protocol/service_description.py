"""The SPARQL 1.1 Service Description (W3C, §2) of ``/sparql``: what ``GET /sparql`` without a query answers, in the
RDF format the request's ``Accept`` prefers (docs/http.md). Built as triples with pyoxigraph, never as text.

The extended syntax (docs/extended-sparql.md, docs/events.md) is described as ``sd:languageExtension``s named by
fragments of the endpoint's own IRI (``<…/sparql#WINDOWS>``), each labelled and explained here, so that dereferencing
one gives its description.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyoxigraph import BlankNode, DefaultGraph, Literal, NamedNode, Quad, RdfFormat, Triple, serialize

from protocol.negotiation import DATASET_FORMATS, GRAPH_FORMATS, RESULTS_FORMATS
from store import RevisionedDataset

SD = "http://www.w3.org/ns/sparql-service-description#"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
FORMATS = "http://www.w3.org/ns/formats/"
PREFIXES = {"sd": SD, "rdfs": RDFS, "formats": FORMATS}
#: the formats this description is available in: a graph's, and a dataset's (its triples in the default graph)
OFFERED: dict[str, RdfFormat] = {**GRAPH_FORMATS, **DATASET_FORMATS}
#: named graphs listed in ``sd:defaultDataset`` at most (a store may hold millions; the list is then cut)
NAMED_GRAPHS_LISTED = 1000

#: the W3C's IRIs of the media types the endpoint answers in (http://www.w3.org/ns/formats/)
_W3C_FORMATS = {
    "application/sparql-results+json": "SPARQL_Results_JSON", "application/sparql-results+xml": "SPARQL_Results_XML",
    "text/csv": "SPARQL_Results_CSV", "text/tab-separated-values": "SPARQL_Results_TSV", "text/turtle": "Turtle",
    "application/n-triples": "N-Triples", "application/rdf+xml": "RDF_XML", "application/ld+json": "JSON-LD",
    "application/trig": "TriG", "application/n-quads": "N-Quads",
}
#: the extended syntax: (fragment, label, what it does)
EXTENSIONS = (
    ("REVISION", "REVISION", "a group evaluated over a past revision of the dataset: REVISION <designator> { … }"),
    ("WINDOWS", "WINDOWS", "a stream's window (or a sequence of windows) as a dataset: SERVICE <…/streams/NAME?"
                "WINDOWS=WindowRef> or WINDOWS <ref> inside SERVICE"),
    ("MATCH", "MATCH", "event patterns over a stream (RSEP-QL / EP-SPARQL): MATCH, EVENT, SEQ, …"),
    ("THEN", "THEN()", "the time of the next element or window after a given one"),
    ("SERVICE-var", "SERVICE ?var", "SERVICE to an IRI bound by the query (windowed IRIs among them)"),
    ("quad-templates", "quad templates", "CONSTRUCT { GRAPH ?g { … } }: a dataset, answered as TriG or N-Quads"),
)
#: what the endpoint does beside the language: (fragment, label, what it is)
FEATURES = (
    ("revision-id", "revision-id", "every query may read a past revision: revision-id=HEAD~n, an ordinal, a UUID or "
                                   "an xsd:dateTime"),
    ("Memento", "Memento", "Accept-Datetime and TimeMaps (RFC 7089) on graphs, the dataset and streams"),
    ("slices", "limit and offset", "limit=, offset= (or response-limit=) slice a query's solutions; a Silent header "
                                   "makes SERVICE and the update operations that take it SILENT"),
)


def service_description(endpoint: str, dataset: RevisionedDataset) -> Iterator[Triple]:
    """The description of the SPARQL endpoint at ``endpoint`` over ``dataset`` (its HEAD's named graphs)."""
    service, default_dataset, default_graph = BlankNode(), BlankNode(), BlankNode()
    here = NamedNode(endpoint)
    yield Triple(service, RDF_TYPE, NamedNode(SD + "Service"))
    yield Triple(service, NamedNode(SD + "endpoint"), here)
    for language in ("SPARQL11Query", "SPARQL11Update"):
        yield Triple(service, NamedNode(SD + "supportedLanguage"), NamedNode(SD + language))
    for media_type in dict.fromkeys([*RESULTS_FORMATS, *GRAPH_FORMATS, *DATASET_FORMATS]):
        if media_type in _W3C_FORMATS:
            yield Triple(service, NamedNode(SD + "resultFormat"), NamedNode(FORMATS + _W3C_FORMATS[media_type]))
    yield Triple(service, NamedNode(SD + "feature"), NamedNode(SD + "BasicFederatedQuery"))
    for property_name, kind, items in (("languageExtension", "LanguageExtension", EXTENSIONS),
                                       ("feature", "Feature", FEATURES)):
        for fragment, label, comment in items:
            term = NamedNode(f"{endpoint}#{fragment}")
            yield Triple(service, NamedNode(SD + property_name), term)
            yield Triple(term, RDF_TYPE, NamedNode(SD + kind))
            yield Triple(term, NamedNode(RDFS + "label"), Literal(label))
            yield Triple(term, NamedNode(RDFS + "comment"), Literal(comment))
    yield Triple(service, NamedNode(SD + "defaultDataset"), default_dataset)
    yield Triple(default_dataset, RDF_TYPE, NamedNode(SD + "Dataset"))
    yield Triple(default_dataset, NamedNode(SD + "defaultGraph"), default_graph)
    yield Triple(default_graph, RDF_TYPE, NamedNode(SD + "Graph"))
    with dataset.reading() as store:
        names = [graph for _, graph in zip(range(NAMED_GRAPHS_LISTED), store.named_graphs(), strict=False)]
    for name in names:
        if isinstance(name, NamedNode):
            named = BlankNode()
            yield Triple(default_dataset, NamedNode(SD + "namedGraph"), named)
            yield Triple(named, RDF_TYPE, NamedNode(SD + "NamedGraph"))
            yield Triple(named, NamedNode(SD + "name"), name)


def serialized(triples: Iterator[Triple], media_type: str) -> bytes:
    """The description in ``media_type`` (one of ``OFFERED``): a dataset format holds it in its default graph."""
    rdf_format = OFFERED[media_type]
    items: list[Triple] | list[Quad] = list(triples)
    if media_type in DATASET_FORMATS:
        items = [Quad(t.subject, t.predicate, t.object, DefaultGraph()) for t in items]
    return serialize(items, format=rdf_format, prefixes=PREFIXES) or b""
