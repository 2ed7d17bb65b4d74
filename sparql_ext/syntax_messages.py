"""pyoxigraph's SPARQL syntax errors told in the user's words: where (line and column), what was found there, and
what the user likely meant, in one line.

pyoxigraph reports the furthest position its PEG parser reached and a sample of the tokens it would have taken
there (``error at 1:10: expected CONSTRUCT``, ``expected one of "\\"", "\\\\", "\\\\U", "\\\\u", [_]``): right about
where, often cryptic about what. ``explain`` looks at the user's text for the usual causes first — a misspelt query
form, a string or a bracket never closed, a bracket closing nothing — and otherwise names what was found and what
could come there, without the parser's escapes.
"""

from __future__ import annotations

import difflib
import re

from sparql_ext.errors import QuerySyntaxError, line_and_column
from sparql_ext.lexer import Kind, Token, tokenize

_POSITION = re.compile(r"\bat (\d+):(\d+):?\s*")
_FORMS = ("SELECT", "CONSTRUCT", "ASK", "DESCRIBE", "PREFIX", "BASE")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {close: open_ for open_, close in _OPEN.items()}
_QUOTE = re.compile(r"(\"\"\"|'''|\"|')")
_ESCAPE = re.compile(r"\\(?:[^tbnrf\"'\\uU]|u(?![0-9A-Fa-f]{4})|U(?![0-9A-Fa-f]{8}))")  # none of ECHAR, UCHAR


def explain(text: str, message: str, *, update: bool = False) -> str:
    """One line for pyoxigraph's syntax error ``message`` about ``text`` (a query, or an update with ``update``):
    ``line L column C: …``.

    >>> explain("SELEC * {}", "error at 1:10: expected CONSTRUCT")
    'line 1 column 1: SELEC is not a query form; did you mean SELECT?'
    >>> explain('SELECT * { ?s ?p "broken }', 'error at 1:27: expected one of "\\\\"", "\\\\\\\\", [_]')
    'line 1 column 18: the string that starts here is never closed (a " is missing)'
    >>> explain("SELECT * { ?s ?p ?o FILTER(?o > 3 }", "error at 1:36: expected one of PREDICATE, STRBEFORE")
    "line 1 column 27: '(' is never closed (a ')' is missing before line 1 column 35)"
    >>> explain("SELECT * WHERE { ?s ?p }", "error at 1:24: expected one of LATERAL, SERVICE, [_]")
    "line 1 column 24: found '}'; expected one of LATERAL, SERVICE"
    """
    match = _POSITION.search(message)
    if match is None:
        return message
    offset, words = explain_at(text, offset_of(text, int(match[1]), int(match[2])), message[match.end():],
                               update=update)
    line, column = line_and_column(text, offset)
    return f"line {line} column {column}: {words}"


def explain_at(text: str, at: int, expected: str, *, update: bool = False) -> tuple[int, str]:
    """Where the problem pyoxigraph found at offset ``at`` of ``text`` is, and what it is, in words; ``expected``:
    pyoxigraph's "expected …" part."""
    # an update's first word was judged already (sparql_ext.update.split_update names a misspelt operation)
    hint = (None if update else _misspelt_form(text)) or _unclosed(text, at) or _bad_escape(text)
    if hint is not None:
        return hint
    wanted = _expected(expected)
    return at, f"found {_found(text, at)}" + (f"; expected {wanted}" if wanted else "")


def offset_of(text: str, line: int, column: int) -> int:
    """The offset of a 1-based line and column (columns count characters)."""
    start = 0
    for _ in range(line - 1):
        newline = text.find("\n", start)
        if newline < 0:
            return len(text)
        start = newline + 1
    return min(len(text), start + max(0, column - 1))


def _expected(rest: str) -> str:
    """pyoxigraph's "expected one of A, B, [_]" as "one of A, B" (its whitespace class and escapes dropped)."""
    rest = rest.strip().removeprefix("expected").strip()
    items = [item.strip() for item in re.split(r",\s*", rest.removeprefix("one of").strip()) if item.strip()]
    readable = []
    for item in items:
        if item.startswith("[") or "\\" in item:  # a character class, an escape inside a string: not a word to type
            continue
        readable.append(item.strip('"') if item.startswith('"') and item.endswith('"') and len(item) > 2 else item)
    if not readable:
        return ""
    return readable[0] if len(readable) == 1 else "one of " + ", ".join(readable[:8])


def _misspelt_form(text: str) -> tuple[int, str] | None:
    """The first word, when it is not a query form (or a prologue's keyword)."""
    first = re.match(r"\s*(?:#[^\n]*\n\s*)*([A-Za-z]+)", text)
    if first is None or first[1].upper() in _FORMS:
        return None
    return first.start(1), f"{first[1]} is not a query form{did_you_mean(first[1], _FORMS)}"


def did_you_mean(word: str, choices: tuple[str, ...]) -> str:
    """"; did you mean X?" for the choice closest to ``word``, else the choices listed.

    >>> did_you_mean("SELEC", ("SELECT", "ASK")), did_you_mean("FOO", ("SELECT", "ASK"))
    ('; did you mean SELECT?', ' (SELECT, ASK)')
    """
    close = difflib.get_close_matches(word.upper(), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f" ({', '.join(choices)})"


def _unclosed(text: str, at: int) -> tuple[int, str] | None:
    """A string never closed, a bracket never closed or closing nothing: where it is, in words."""
    try:
        tokens = list(tokenize(text))
    except QuerySyntaxError as error:
        quote = _QUOTE.match(text, error.offset)
        if quote is None:
            return None
        return error.offset, f"the string that starts here is never closed (a {quote[1]} is missing)"
    stack: list[Token] = []
    for token in tokens:
        if token.kind is not Kind.PUNCT:
            continue
        if token.text in _OPEN:
            stack.append(token)
        elif token.text in _CLOSE:
            if not stack:
                return token.start, f"{token.text!r} closes nothing"
            opener = stack.pop()
            if _OPEN[opener.text] != token.text:
                line, column = line_and_column(text, token.start)
                return opener.start, (f"{opener.text!r} is never closed (a {_OPEN[opener.text]!r} is missing before "
                                      f"line {line} column {column})")
    if stack:
        return stack[-1].start, f"{stack[-1].text!r} is never closed (a {_OPEN[stack[-1].text]!r} is missing)"
    return None


def _bad_escape(text: str) -> tuple[int, str] | None:
    r"""A backslash in a string that starts no SPARQL escape (``\t``, ``\n``, ``\"``, ``\uXXXX`` …).

    >>> _bad_escape(r'SELECT * { ?s ?p "a\qb" }')
    (19, '\\q is not an escape in a SPARQL string (a backslash itself is written \\\\)')
    """
    try:
        tokens = list(tokenize(text))
    except QuerySyntaxError:
        return None
    for token in tokens:
        if token.kind is Kind.STRING and (bad := _ESCAPE.search(token.text)) is not None:
            return token.start + bad.start(), (f"{bad[0]} is not an escape in a SPARQL string (a backslash itself is "
                                               "written \\\\)")
    return None


def _found(text: str, at: int) -> str:
    """What is at ``at``: the token there, quoted, or the end of the text."""
    if at >= len(text.rstrip()):
        return "the end of the text"
    try:
        token = next(tokenize(text, at), None)
    except QuerySyntaxError:
        token = None
    if token is None:
        return repr(text[at])
    shown = token.text if len(token.text) <= 40 else token.text[:37] + "…"
    return repr(shown)
