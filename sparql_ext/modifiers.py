"""What a request's options say in SPARQL's own words, written into the operation's text (docs/http.md, "Query
parameters"): ``limit=`` / ``offset=`` become the query's outermost ``LIMIT`` and ``OFFSET``, applied after the
query's own; the ``Silent`` header becomes ``SILENT`` on every operation that takes it. Pure: tokens in, text out;
the result is read by pyoxigraph (or the extended parser) like any text, and errors are theirs.
"""

from __future__ import annotations

from sparql_ext.lexer import Kind, Token, tokenize

_OPEN, _CLOSE = frozenset("{(["), frozenset("})]")
#: the update operations that take SILENT (SPARQL 1.1 Update §3.2); LOAD too, but this server refuses LOAD anyway
_SILENCEABLE = ("CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY")


def _outermost(tokens: list[Token]) -> list[tuple[int, Token]]:
    """The tokens outside every bracket, with their indexes."""
    depth, found = 0, []
    for index, token in enumerate(tokens):
        if token.kind is Kind.PUNCT and token.text in _OPEN:
            depth += 1
        elif token.kind is Kind.PUNCT and token.text in _CLOSE:
            depth -= 1
        elif depth == 0:
            found.append((index, token))
    return found


def _edited(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with each span ``[start, end)`` replaced (spans in order, not overlapping)."""
    pieces, at = [], 0
    for start, end, replacement in sorted(edits):
        pieces += [text[at:start], replacement]
        at = end
    return "".join(pieces) + text[at:]


def slice_query(text: str, limit: int | None, offset: int | None) -> str:
    """``text`` answering at most ``limit`` of its solutions after skipping ``offset`` of them, counted within the
    query's own ``LIMIT`` and ``OFFSET``: its outermost ones are replaced by the combination (subqueries are left
    alone). The result is the same query when both are None.

    >>> slice_query("SELECT * { ?s ?p ?o }", 10, None)
    'SELECT * { ?s ?p ?o }\\nLIMIT 10\\n'
    >>> slice_query("SELECT * { ?s ?p ?o } ORDER BY ?s LIMIT 5 OFFSET 2 VALUES ?s { <a> }", 10, 3)
    'SELECT * { ?s ?p ?o } ORDER BY ?s   \\nLIMIT 2 OFFSET 5\\nVALUES ?s { <a> }'
    """
    if limit is None and offset is None:
        return text
    tokens = list(tokenize(text))
    own_limit: int | None = None
    own_offset = 0
    edits: list[tuple[int, int, str]] = []
    values_at = len(text)
    for index, token in _outermost(tokens):
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token.is_keyword("LIMIT", "OFFSET") and following is not None and following.text.isdigit():
            if token.is_keyword("LIMIT"):
                own_limit = int(following.text)
            else:
                own_offset = int(following.text)
            edits.append((token.start, following.end, ""))
        elif token.is_keyword("VALUES"):  # the trailing VALUES clause follows the solution modifiers
            values_at = token.start
    skip = offset or 0
    bounds = [bound for bound in (limit, None if own_limit is None else max(0, own_limit - skip)) if bound is not None]
    clause = (f"LIMIT {min(bounds)}" if bounds else "") + (" " if bounds and own_offset + skip else "") + \
        (f"OFFSET {own_offset + skip}" if own_offset + skip else "")
    edits.append((values_at, values_at, f"\n{clause}\n" if clause else ""))  # a newline: after a final # comment
    return _edited(text, edits)


def silence_update(text: str) -> str:
    """``text`` with ``SILENT`` on each operation that takes it and lacks it (``DROP GRAPH <g>`` → ``DROP SILENT
    GRAPH <g>``): a missing graph then fails nothing.

    >>> silence_update("DROP GRAPH <g> ; CLEAR SILENT ALL ; INSERT DATA { <a> <b> <c> }")
    'DROP SILENT GRAPH <g> ; CLEAR SILENT ALL ; INSERT DATA { <a> <b> <c> }'
    """
    tokens = list(tokenize(text))
    edits = [(token.end, token.end, " SILENT") for index, token in _outermost(tokens)
             if token.is_keyword(*_SILENCEABLE) and not _silent_after(tokens, index)]
    return _edited(text, edits)


def silence_query(text: str) -> str:
    """``text`` with every ``SERVICE`` made ``SERVICE SILENT``: a service that fails answers no solution.

    >>> silence_query("SELECT * { SERVICE <http://x/sparql> { ?s ?p ?o } }")
    'SELECT * { SERVICE SILENT <http://x/sparql> { ?s ?p ?o } }'
    """
    tokens = list(tokenize(text))
    edits = [(token.end, token.end, " SILENT") for index, token in enumerate(tokens)
             if token.is_keyword("SERVICE") and not _silent_after(tokens, index)]
    return _edited(text, edits)


def _silent_after(tokens: list[Token], index: int) -> bool:
    return index + 1 < len(tokens) and tokens[index + 1].is_keyword("SILENT")
