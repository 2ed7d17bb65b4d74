"""Reading one page (``tree:Node``) of a Linked Data Event Stream: its members, as stream elements, its relations,
whether it is immutable, and the event stream's context on the root node (LDES §"Initialization run", §"Emitting
members", §"Context information"; TREE §"Traversing the search tree"). Pure: bytes in, values out.

A member becomes an element named by the member (``tree:member`` object):

* its **timestamp** is the object of the timestamp path (``ldes:timestampPath``, or the stream's
  ``ldes-timestamp-path``) on the member in the default graph, kept as the literal it is;
* its **graph** holds what the LDES member extraction algorithm gives: the quads of the named graph of the member,
  and the member's description in the default graph (``<m> ?p ?o``, recursively through blank nodes), moved into
  the member's graph — except the timestamp triple itself when its predicate is the stream's own timestamp
  predicate: then it *is* the element's timestamp triple, as in this server's own LDES, and stays in the default
  graph.

Blank node labels are scoped to the page (renamed when it is parsed), as RDF documents scope them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from pyoxigraph import BlankNode, DefaultGraph, Literal, NamedNode, Quad, RdfFormat, parse

from connectors.errors import LdesError
from sparql_ext.errors import ConcentratorError
from store.elements import ParsedElement, parse_timestamp
from store.errors import StoreError
from store.limits import check_nesting

LDES = "https://w3id.org/ldes#"
TREE = "https://w3id.org/tree#"
RDF_TYPE = NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
TREE_VIEW = NamedNode(f"{TREE}view")
TREE_MEMBER = NamedNode(f"{TREE}member")
TREE_RELATION = NamedNode(f"{TREE}relation")
LOWER_BOUNDS = frozenset({f"{TREE}GreaterThanRelation", f"{TREE}GreaterThanOrEqualToRelation"})
_DATETIME_TYPES = frozenset({"http://www.w3.org/2001/XMLSchema#dateTime",
                             "http://www.w3.org/2001/XMLSchema#dateTimeStamp"})


@dataclass(frozen=True)
class Relation:
    """A relation to another node; ``lower_bound`` (µs) when it says every member there is at or after a time on the
    timestamp path (``tree:GreaterThan[OrEqualTo]Relation``), None otherwise (to be followed first)."""

    node: str
    lower_bound: int | None


@dataclass
class Page:
    url: str
    members: list[ParsedElement] = field(default_factory=list)  # in timestamp order (document order among equals)
    relations: list[Relation] = field(default_factory=list)
    immutable: bool = False


@dataclass(frozen=True)
class Context:
    """The event stream's context, found on its root node."""

    event_stream: str
    root: str
    timestamp_path: str | None
    polling_interval: int | None = None
    retention: str | None = None  # the retention policy, as N-Triples lines (for the status)


Term = NamedNode | BlankNode


class Document:
    """A page's quads in document order, with the look-ups the client makes. Not a pyoxigraph ``Store``: a store
    gives typed literals back in their canonical form (``"22.50"^^xsd:decimal`` as ``"22.5"``), and members must
    reach the stream as they were published."""

    def __init__(self, quads: list[Quad]) -> None:
        self.quads = quads
        self._by_subject: defaultdict[object, list[Quad]] = defaultdict(list)  # the default graph's triples
        self._by_graph: defaultdict[object, list[Quad]] = defaultdict(list)
        for quad in quads:
            if isinstance(quad.graph_name, DefaultGraph):
                self._by_subject[quad.subject].append(quad)
            else:
                self._by_graph[quad.graph_name].append(quad)

    def triples(self, subject: object = None, predicate: NamedNode | None = None, obj: object = None) -> list[Quad]:
        """The default graph's triples matching a pattern (None: any)."""
        if subject is not None:
            candidates = self._by_subject.get(subject, [])
        else:
            candidates = [quad for quads in self._by_subject.values() for quad in quads]
        return [q for q in candidates if (predicate is None or q.predicate == predicate) and (obj is None or
                                                                                             q.object == obj)]

    def objects(self, subject: object, predicate: NamedNode) -> list[object]:
        return [q.object for q in self.triples(subject, predicate)]

    def graph(self, name: Term) -> list[Quad]:
        return list(self._by_graph.get(name, []))


def load(data: bytes, rdf_format: RdfFormat, url: str) -> Document:
    """The page's quads, blank nodes renamed (their labels are the document's own)."""
    try:
        check_nesting(data, rdf_format.media_type)  # never too deep for the parser
        return Document(list(parse(data, rdf_format, base_iri=url, rename_blank_nodes=True)))
    except SyntaxError as error:
        raise LdesError(f"the LDES page <{url}> is not valid {rdf_format.name}: {error}") from None
    except StoreError as error:  # nested too deep, entities expanding too far, N3
        raise LdesError(f"the LDES page <{url}>: {error.message}") from None


def find_view(document: Document, url: str, given: str) -> tuple[str, str | None]:
    """(event stream, root node) from the document fetched at ``url`` for the IRI ``given``: ``?s tree:view <url>``
    (exactly once) makes ``url`` the root; otherwise ``<given> tree:view ?o`` (exactly once) names the root to fetch
    (returned; None when ``url`` is the root)."""
    here = [q.subject for q in document.triples(None, TREE_VIEW, NamedNode(url))]
    if len(here) == 1 and isinstance(here[0], NamedNode):
        return here[0].value, None
    if len(here) > 1:
        raise LdesError(f"<{url}> is the view of {len(here)} event streams: give the URL of one view")
    views = document.objects(NamedNode(given), TREE_VIEW)
    if len(views) == 1 and isinstance(views[0], NamedNode):
        return given, views[0].value
    raise LdesError(f"<{given}> is neither an LDES view (no ?s tree:view <{url}>) nor an event stream with one "
                    f"tree:view ({len(views)} found)")


def context(document: Document, event_stream: str, root: str) -> Context:
    es = NamedNode(event_stream)
    paths = document.objects(es, NamedNode(f"{LDES}timestampPath"))
    if paths and not isinstance(paths[0], NamedNode):
        raise LdesError(f"the ldes:timestampPath of <{event_stream}> is a SHACL path other than one predicate: not "
                        "supported (give ldes-timestamp-path)")
    polling = document.objects(es, NamedNode(f"{LDES}pollingInterval"))
    retention = None
    policies = document.objects(NamedNode(root), NamedNode(f"{LDES}retentionPolicy"))
    if policies:
        retention = " ; ".join(f"{q.predicate} {q.object}" for q in document.triples(policies[0])) or "(empty)"
    return Context(event_stream, root, paths[0].value if paths and isinstance(paths[0], NamedNode) else None,
                   int(polling[0].value) if polling and isinstance(polling[0], Literal) and
                   polling[0].value.isdigit() else None, retention)


def read_page(document: Document, url: str, event_stream: str, timestamp_path: str, stream_predicate: str,
              *, immutable_header: bool = False) -> Page:
    """The members (as elements), relations and immutability of the page at ``url``."""
    immutable = any(isinstance(o, Literal) and o.value in ("true", "1")
                    for o in document.objects(NamedNode(url), NamedNode(f"{LDES}immutable")))
    page = Page(url, immutable=immutable_header or immutable)
    path = NamedNode(timestamp_path)
    order: dict[Term, int] = {}
    for quad in document.triples(NamedNode(event_stream), TREE_MEMBER):
        if isinstance(quad.object, NamedNode | BlankNode):
            order.setdefault(quad.object, len(order))
    members = [_member(document, term, path, NamedNode(stream_predicate), url) for term in order]
    page.members = [m for _, _, m in sorted(((m.time or 0, order[m.graph], m) for m in members),
                                            key=lambda item: item[:2])]
    for relation in document.objects(NamedNode(url), TREE_RELATION):
        page.relations.extend(_relation(document, relation, path))
    return page


def _relation(document: Document, relation: object, path: NamedNode) -> list[Relation]:
    if not isinstance(relation, NamedNode | BlankNode):
        return []
    nodes = document.objects(relation, NamedNode(f"{TREE}node"))
    kinds = {o.value for o in document.objects(relation, RDF_TYPE) if isinstance(o, NamedNode)}
    paths = document.objects(relation, NamedNode(f"{TREE}path"))
    values = document.objects(relation, NamedNode(f"{TREE}value"))
    bound = None
    value = values[0] if len(values) == 1 else None
    if kinds & LOWER_BOUNDS and paths == [path] and isinstance(value, Literal) and \
            value.datatype.value in _DATETIME_TYPES:
        try:
            bound = parse_timestamp(value.value, "tree:value")
        except ConcentratorError:
            bound = None  # a bound that cannot be read is no bound: the node is followed early
    return [Relation(node.value, bound) for node in nodes if isinstance(node, NamedNode)]


def _member(document: Document, term: Term, path: NamedNode, predicate: NamedNode, url: str) -> ParsedElement:
    description = _describe(document, term)
    stamps = [q for q in description if q.subject == term and q.predicate == path]
    label = f"member {term} of <{url}>"
    stamp = stamps[0].object if len(stamps) == 1 else None
    if not isinstance(stamp, Literal) or stamp.datatype.value not in _DATETIME_TYPES:
        found = ", ".join(str(q.object) for q in stamps) or "none"
        raise LdesError(f"{label}: its timestamp path <{path.value}> must give one xsd:dateTime (found {found})")
    time = parse_timestamp(stamp.value, label)
    if path == predicate:  # the element's own timestamp triple: it stays in the default graph
        description = [q for q in description if q != stamps[0]]
    content = [Quad(q.subject, q.predicate, q.object, term) for q in description] + document.graph(term)
    if not content:  # a member with nothing but its timestamp is still a member, not punctuation
        content = [Quad(term, path, stamp, term)]
    return ParsedElement(term, content, time, stamp=stamp)


def _describe(document: Document, term: Term) -> list[Quad]:
    """The member's description in the default graph: ``<m> ?p ?o``, recursively for blank node objects, each blank
    node once (LDES §"Emitting members")."""
    found: list[Quad] = []
    seen: set[Term] = {term}
    todo: list[Term] = [term]
    while todo:
        for quad in document.triples(todo.pop()):
            found.append(quad)
            if isinstance(quad.object, BlankNode) and quad.object not in seen:
                seen.add(quad.object)
                todo.append(quad.object)
    return found
