"""A SPARQL 1.1 tokenizer: just enough structure to find operations, blocks and keywords.

It never evaluates anything; pyoxigraph remains the parser of record. The token rules follow the
SPARQL 1.1 grammar's terminals (§19.8), simplified where a simplification cannot change where a
token starts or ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import Enum
from typing import NamedTuple

from sparql_ext.errors import NestingTooDeep, QuerySyntaxError

#: The deepest bracket nesting accepted in a query, update or rule. pyoxigraph's SPARQL parser recurses per level
#: and overflows a server thread's stack at a few thousand (measured: 5,000 nested groups kill the process with
#: SIGSEGV), and nested collections ``((( … )))`` take cubic time (measured: 64 levels 0.16 s, 128 levels 1.3 s,
#: 256 levels ≈ 10 s of one core); hand-written queries stay far below this.
MAX_NESTING = 64


class Kind(Enum):
    IRI = "iri"  # IRIREF ::= '<' ([^<>"{}|^`\]-[#x00-#x20])* '>'
    PNAME = "pname"  # PNAME_NS | PNAME_LN
    VAR = "var"  # VAR1 | VAR2
    STRING = "string"  # STRING_LITERAL1 | 2 | LONG1 | LONG2
    BNODE = "bnode"  # BLANK_NODE_LABEL
    LANGTAG = "langtag"
    NUMBER = "number"
    WORD = "word"  # keywords, 'a', function names, true/false
    PUNCT = "punct"


class Token(NamedTuple):
    """A token (a named tuple: a rule's text has dozens, and building a frozen dataclass costs twice as much)."""

    kind: Kind
    text: str
    start: int  # offset of the first character in the source text
    end: int

    def is_keyword(self, *words: str) -> bool:
        return self.kind is Kind.WORD and self.text.upper() in words


_PN_CHARS_BASE = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd"
)
_PN_CHARS_U = _PN_CHARS_BASE + "_"
_PN_CHARS = _PN_CHARS_U + r"\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_PLX = r"%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%]"
_PN_PREFIX = rf"[{_PN_CHARS_BASE}](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?"
_PN_LOCAL = (
    rf"(?:[{_PN_CHARS_U}:0-9]|{_PLX})(?:(?:[{_PN_CHARS}.:]|{_PLX})*(?:[{_PN_CHARS}:]|{_PLX}))?"
)

#: Whitespace and comments, skipped before each token (possessive: a failed token match never backtracks into it).
_SKIP = r"(?:\s+|#[^\n\r]*)*+"
_TOKEN_RULES: list[tuple[Kind, str]] = [
    (Kind.STRING, r'"""(?:[^"\\]|\\.|"(?!""))*"""' r"|'''(?:[^'\\]|\\.|'(?!''))*'''"),
    (Kind.STRING, r'"(?:[^"\\\n\r]|\\.)*"' r"|'(?:[^'\\\n\r]|\\.)*'"),
    (Kind.IRI, r'<[^<>"{}|^`\\\x00-\x20]*>'),
    (Kind.VAR, rf"[?$][{_PN_CHARS_U}0-9][{_PN_CHARS_U}0-9\u00b7\u0300-\u036f\u203f-\u2040]*"),
    (Kind.BNODE, rf"_:[{_PN_CHARS_U}0-9](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?"),
    (Kind.PNAME, rf"(?:{_PN_PREFIX})?:(?:{_PN_LOCAL})?"),
    (Kind.LANGTAG, r"@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*"),
    (Kind.NUMBER, r"[+-]?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
                  r"|[0-9]+(?:[eE][+-]?[0-9]+)?)"),
    (Kind.WORD, rf"[{_PN_CHARS_BASE}][{_PN_CHARS_U}0-9\-]*"),
    (Kind.PUNCT, r"\^\^|&&|\|\||!=|<=|>=|[{}()\[\];,.*+\-/!=<>|^]"),
]
# One match per token: the whitespace before it, then the first rule that matches, as capturing group i + 1 (the
# rules themselves capture nothing), so ``match.lastindex`` names the rule. Half the matches of a separate
# whitespace token, and no group name to look up.
_MASTER = re.compile(_SKIP + "(?:" + "|".join(f"({rule})" for _, rule in _TOKEN_RULES) + ")")
_SKIPPED = re.compile(_SKIP)
_KINDS: list[Kind] = [Kind.WORD, *(kind for kind, _ in _TOKEN_RULES)]  # by group number; 0 is never a lastindex
assert _MASTER.groups == len(_TOKEN_RULES), "a token rule must not capture"


def tokenize(text: str, start: int = 0) -> Iterator[Token]:
    """Tokens of ``text`` from offset ``start`` in order, whitespace and comments dropped; offsets are ``text``'s.

    >>> [t.text for t in tokenize('SELECT ?x { ?x a <y> } # done')]
    ['SELECT', '?x', '{', '?x', 'a', '<y>', '}']
    >>> [(t.text, t.start) for t in tokenize('ASK { # c\\n  ?s ?p ?o }', 4)]
    [('{', 4), ('?s', 12), ('?p', 15), ('?o', 18), ('}', 21)]
    >>> list(tokenize('ASK {\\n  ?s ` }'))
    Traceback (most recent call last):
    ...
    sparql_ext.errors.QuerySyntaxError: Syntax error at line 2 column 6: unexpected character '`'
    """
    pos, match_at, make = start, _MASTER.match, tuple.__new__  # make: a Token without namedtuple's Python __new__
    while True:
        match = match_at(text, pos)
        if match is None:
            pos = _SKIPPED.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string
            if pos == len(text):
                return
            raise QuerySyntaxError(f"unexpected character {text[pos]!r}", text, pos)
        group: int = match.lastindex  # type: ignore[assignment]  # one rule's group always matched
        pos = match.end()
        yield make(Token, (_KINDS[group], match.group(group), match.start(group), pos))


def check_nesting(tokens: list[Token], text: str, limit: int = MAX_NESTING) -> None:
    """Raise ``NestingTooDeep`` at the first bracket that opens level ``limit + 1``.

    >>> check_nesting(list(tokenize("SELECT * {{{ ?s ?p ?o }}}")), "…", limit=3)
    >>> check_nesting(list(tokenize("ASK {{{ }}}")), "ASK {{{ }}}", limit=2)
    Traceback (most recent call last):
    ...
    sparql_ext.errors.NestingTooDeep: Syntax error at line 1 column 7: brackets ({, ( or [) are nested more than 2 \
deep here; this server refuses deeper queries, updates and rules
    """
    depth = 0
    for tok in tokens:
        if tok.kind is not Kind.PUNCT:
            continue
        if tok.text in "{([":
            depth += 1
            if depth > limit:
                raise NestingTooDeep(text, tok.start, limit)
        elif tok.text in "})]":
            depth -= 1


def check_raw_nesting(text: str, limit: int = MAX_NESTING) -> None:
    """``check_nesting`` for text the tokenizer cannot read (it is passed to pyoxigraph for its own message):
    brackets inside strings and IRIs count too, which can only refuse text that is invalid anyway."""
    depth = 0
    for offset, char in enumerate(text):
        if char in "{([":
            depth += 1
            if depth > limit:
                raise NestingTooDeep(text, offset, limit)
        elif char in "})]":
            depth -= 1


_OPENERS = {"{": "}", "(": ")", "[": "]"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}


def matching_close(tokens: list[Token], open_index: int, text: str) -> int:
    """Index of the token that closes the bracket opened at ``open_index``."""
    stack: list[Token] = []
    for i in range(open_index, len(tokens)):
        tok = tokens[i]
        if tok.kind is not Kind.PUNCT:
            continue
        if tok.text in _OPENERS:
            stack.append(tok)
        elif tok.text in _CLOSERS:
            if not stack or stack[-1].text != _CLOSERS[tok.text]:
                raise QuerySyntaxError(f"unbalanced {tok.text!r}", text, tok.start)
            stack.pop()
            if not stack:
                return i
    opener = tokens[open_index]
    raise QuerySyntaxError(f"{opener.text!r} is never closed", text, opener.start)


def tokenize_window_refs(text: str) -> list[Token]:
    """``tokenize``, plus the '~' of ``HEAD~n`` (a WindowRef character, not a SPARQL 1.1 one) as a PUNCT token.

    >>> [t.text for t in tokenize_window_refs("WINDOWS HEAD~9/HEAD { }")]
    ['WINDOWS', 'HEAD', '~', '9', '/', 'HEAD', '{', '}']
    """
    out: list[Token] = []
    position = 0
    while True:
        try:
            for tok in tokenize(text, position):
                out.append(tok)  # kept when a later character fails: the loop goes on after a '~'
            return out
        except QuerySyntaxError as error:
            at = error.offset
            if text[at] != "~":
                raise QuerySyntaxError(f"unexpected character {text[at]!r}", text, at) from None
            out.append(Token(Kind.PUNCT, "~", at, at + 1))
            position = at + 1
