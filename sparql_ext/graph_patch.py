"""A SPARQL Update made to change one graph: the body of a Graph Store ``PATCH`` (GSP §5.7) to ``/store?graph=G``.

The target graph takes the place of the default graph: triples of ``INSERT DATA`` / ``DELETE DATA`` go into G, and
``DELETE WHERE`` and ``INSERT``/``DELETE … WHERE`` read and write G where they name no graph (as ``WITH <G>``). An
operation may name G itself, and its ``WHERE`` clause may read any graph, but it may write no other graph: a
template naming another graph (or a ``GRAPH ?g`` template, which could name any), or an operation on whole graphs
(``CLEAR``, ``DROP``, ``ADD`` …), is refused. Pure text rewriting, at the user's token positions: the rewritten
update keeps the user's prologue and operations in place and only inserts ``GRAPH <G> { … }`` and ``WITH <G>``.
"""

from __future__ import annotations

from sparql_ext.errors import ProtocolConflict
from sparql_ext.lexer import Token, matching_close, tokenize
from sparql_ext.update import DEFAULT_GRAPH, Operation, split_update

_KINDS = ("INSERT DATA", "DELETE DATA", "DELETE WHERE", "MODIFY")


def retarget_update(text: str, graph: str, base_iri: str | None = None) -> str:
    """``text`` with graph ``graph`` (an absolute IRI, or ``DEFAULT_GRAPH``) as its default graph; a
    ``ProtocolConflict`` (400) names an operation that would change another graph.

    >>> retarget_update("INSERT DATA { <s> <p> 1 . GRAPH <http://ex/g> { <s> <p> 2 } }", "http://ex/g", "http://x/")
    'INSERT DATA { GRAPH <http://ex/g> { <s> <p> 1 . } GRAPH <http://ex/g> { <s> <p> 2 } }'
    >>> retarget_update("DELETE WHERE { ?s ?p 1 }", "http://ex/g")
    'WITH <http://ex/g> DELETE  { ?s ?p 1 } WHERE { ?s ?p 1 }'
    """
    operations = split_update(text, base_iri)
    for number, operation in enumerate(operations, 1):
        _check(operation, number, graph)
    if graph == DEFAULT_GRAPH:
        return text  # the update's default graph is the store's already
    tokens = list(tokenize(text))
    at = {token.start: index for index, token in enumerate(tokens)}
    target = f"<{graph}>"
    edits: list[tuple[int, int, str]] = []  # (offset, characters replaced, text put there)
    for operation in operations:
        first = at[operation.offset]
        if operation.kind in ("INSERT DATA", "DELETE DATA"):
            edits += _wrap_triples(tokens, first + 2, text, target)
        elif operation.kind == "DELETE WHERE":  # DELETE WHERE Q is DELETE Q WHERE Q, which takes a WITH
            where, close = tokens[first + 1], matching_close(tokens, first + 2, text)
            block = text[tokens[first + 2].start:tokens[close].end]
            edits += [(tokens[first].start, 0, f"WITH {target} "), (where.start, where.end - where.start, ""),
                      (tokens[close].end, 0, f" WHERE {block}")]
        elif not tokens[first].is_keyword("WITH"):
            edits.append((tokens[first].start, 0, f"WITH {target} "))
    for offset, length, inserted in sorted(edits, reverse=True):  # from the end: earlier offsets stay valid
        text = text[:offset] + inserted + text[offset + length:]
    return text


def _check(operation: Operation, number: int, graph: str) -> None:
    what = f"update operation {number} ({operation.kind})"
    target = "the default graph" if graph == DEFAULT_GRAPH else f"<{graph}>"
    if operation.kind not in _KINDS:
        raise ProtocolConflict(f"{what}: a PATCH of one graph takes INSERT DATA, DELETE DATA, DELETE WHERE and "
                               f"DELETE/INSERT … WHERE operations; send {operation.kind} to /sparql")
    if operation.graph_vars:
        raise ProtocolConflict(f"{what} writes GRAPH ?{operation.graph_vars[0]}, which may name any graph, but a "
                               f"PATCH changes only its target graph, {target}; send it to /sparql")
    others = sorted(operation.graphs - {DEFAULT_GRAPH, graph})
    if others:
        named = "the default graph" if others[0] == DEFAULT_GRAPH else f"<{others[0]}>"
        raise ProtocolConflict(f"{what} writes {named}, but a PATCH changes only its target graph, {target}; "
                               "send it to /sparql")


def _wrap_triples(tokens: list[Token], open_index: int, text: str, target: str) -> list[tuple[int, int, str]]:
    """The edits that put each run of triples of the quad data block opened at ``open_index`` into ``GRAPH target``
    (``GRAPH`` blocks stay as they are)."""
    close = matching_close(tokens, open_index, text)
    edits: list[tuple[int, int, str]] = []
    run: int | None = None  # index of the first token of the current run of triples

    def end_run(stop: int) -> None:
        if run is not None:
            edits.extend([(tokens[run].start, 0, f"GRAPH {target} {{ "), (tokens[stop - 1].end, 0, " }")])

    index = open_index + 1
    while index < close:
        token = tokens[index]
        if token.is_keyword("GRAPH"):
            end_run(index)
            run = None
            index = matching_close(tokens, index + 2, text) + 1
            continue
        if run is None and token.text != ".":  # the '.' that may follow a GRAPH block begins no triple
            run = index
        index += 1
    end_run(close)
    return edits
