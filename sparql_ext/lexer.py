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
    """Raise ``NestingTooDeep`` where ``text`` nests deeper than ``limit`` as pyoxigraph reads it (``nesting``): not
    as ``tokens`` are (the tokenizer reads ``<((((…))))>`` as one IRI, pyoxigraph may read real parentheses).

    >>> check_nesting(list(tokenize("SELECT * {{{ ?s ?p ?o }}}")), "SELECT * {{{ ?s ?p ?o }}}", limit=4)
    >>> check_nesting(list(tokenize("ASK {{{ }}}")), "ASK {{{ }}}", limit=2)
    Traceback (most recent call last):
    ...
    sparql_ext.errors.NestingTooDeep: Syntax error at line 1 column 7: brackets ({, (, [ or <<) and ! are nested \
more than 2 deep here; this server refuses deeper queries, updates and rules
    """
    check_raw_nesting(text, limit)


def check_raw_nesting(text: str, limit: int = MAX_NESTING) -> None:
    """Raise ``NestingTooDeep`` where a reading of ``text`` that pyoxigraph may take opens level ``limit + 1`` (see
    ``nesting``): for any text, the tokenizer's or not.

    >>> check_raw_nesting("SELECT * { FILTER(1 <((((1))))> 0) }", limit=5)
    Traceback (most recent call last):
    ...
    sparql_ext.errors.NestingTooDeep: Syntax error at line 1 column 25: brackets ({, (, [ or <<) and ! are nested \
more than 5 deep here; this server refuses deeper queries, updates and rules
    >>> check_raw_nesting('ASK { FILTER(?x = "((((((") } # ((((((', limit=2)
    >>> check_raw_nesting("ASK { FILTER(1 <a> 0)\\n((((1)))) }", limit=5)
    >>> check_raw_nesting("ASK { FILTER(1 <(#> 0)\\n((((1)))) }", limit=5)  # read as code, '(#' opens a comment
    Traceback (most recent call last):
    ...
    sparql_ext.errors.NestingTooDeep: Syntax error at line 2 column 3: brackets ({, (, [ or <<) and ! are nested \
more than 5 deep here; this server refuses deeper queries, updates and rules
    """
    if sum(map(text.count, "([{<!")) > limit:  # else no reading can nest that deep: nothing to read
        _Nesting(text, limit).check()


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



# -- nesting as pyoxigraph reads it --------------------------------------------------------------------------------
#
# pyoxigraph's parser reads the text itself (rust-peg, no tokens), and '<' is an IRI's start in one alternative and
# the operator '<' or '<=' in another: '<((((…))))>' is an IRI in one reading and nested parentheses in the other,
# and a '#' or "'" inside it begins a comment or a string there, which changes how the rest of the text is read. So
# nesting is counted on the text, in every reading pyoxigraph may take: an IRI-like '<…>' is read both ways (its
# content as code, when that nests; as a reading of its own from there on, when it holds '#', "'" or '\' before a
# '//', at which code is a syntax error), and readings that reach the same token go on as one, as deep as the deeper.
# Strings are read as pyoxigraph reads them (a long string with an escape it refuses is an empty string '""' then a
# short one).

_ESCAPE = r"""\\[tbnrf"'\\]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"""
# One match per token that nests, or may change how what follows is read, after what does neither and what is never
# code: long strings without \u (first: '""' begins one), strings, comments, escapes, IRIs that neither nest nor fork.
_NESTING_TOKENS = re.compile(
    r"""(?:[^"'<>#!(){}\[\]\\]++|>(?!>)|!="""
    r"""|"{3}(?:(?:""|")?(?:[^"\\]|\\[tbnrf"'\\]))*+"{3}|'{3}(?:(?:''|')?(?:[^'\\]|\\[tbnrf"'\\]))*+'{3}"""
    rf"""|'(?!'')(?:[^'\\\n\r]|{_ESCAPE})*+'""" rf'''|"(?!"")(?:[^"\\\n\r]|{_ESCAPE})*+"'''
    r"""|\#[^\n\r]*+|\\.|<[^<>"{}|^`\\\x00-\x20()\[\]!#']*+>)*+"""
    rf"""(?:("{{3}}(?:(?:""|")?(?:[^"\\]|{_ESCAPE}))*+"{{3}}|'{{3}}(?:(?:''|')?(?:[^'\\]|{_ESCAPE}))*+'{{3}})"""  # 1
    r"""|(<+)(?:((?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*+)>)?"""  # 2: '<'s; 3: an IRI?
    r"""|(>>+)|([(\[{])|([)\]}])"""  # 4: '>>'s (each closes a '<<'), 5: opens, 6: closes
    r"""|(!(?:(?:\s|\#[^\n\r]*+)*+!(?!=))*+)"""  # 7: '!'s in a row: pyoxigraph recurses for each ("!!!!true")
    r"""|(["']))?""",  # 8: a string pyoxigraph cannot read: this reading ends there
    re.S)
_STRING_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|.)", re.S)
_IRI_AS_CODE = re.compile(r"(?:[^/#'\\]|/(?!/))*+")  # an IRI's content read as code, up to '//' or what forks
_NESTS = re.compile(r"[()\[\]!]")
_IN_IRI = re.compile(r"[(\[]|[)\]]|!+(?!=)")
# an IRI-like token a reading may fork at: in the text a query is rewritten from, it makes the rewritten text read
# otherwise (``check_derived``)
_FORKS = re.compile(r"""<(?:[^<>"{}|^`\\\x00-\x20/#']|/(?!/))*+[#'\\]""")


def check_derived(text: str, source: str, limit: int = MAX_NESTING) -> None:
    """``check_raw_nesting`` for ``text`` made of ``source``'s tokens and fixed text (a rewritten query, an update's
    operation), ``source`` checked already: read only when a reading of ``source`` forks (else ``text`` has
    ``source``'s one reading, as deep, give or take the levels of the fixed text)."""
    if _FORKS.search(source):
        check_raw_nesting(text, limit)


class _Reading:
    """One way of reading the text: its depth, the depths each open bracket returns to, and the '!'s just read (the
    bracket after them is that much deeper)."""

    __slots__ = ("depth", "stack", "pending")

    def __init__(self, depth: int = 0, stack: list[int] | None = None, pending: int = 0) -> None:
        self.depth, self.stack, self.pending = depth, [] if stack is None else stack, pending

    def copy(self) -> _Reading:
        return _Reading(self.depth, list(self.stack), self.pending)

    def merge(self, other: _Reading) -> None:
        """Be at least as deep as both, now and after any number of closing brackets."""
        mine, theirs = self.stack, other.stack
        if len(mine) < len(theirs):
            mine[:0] = [0] * (len(theirs) - len(mine))
        for i in range(1, len(theirs) + 1):
            mine[-i] = max(mine[-i], theirs[-i])
        self.depth, self.pending = max(self.depth, other.depth), max(self.pending, other.pending)


class _Nesting:
    def __init__(self, text: str, limit: int) -> None:
        self.text, self.limit = text, limit

    def check(self) -> None:
        position, reading = 0, _Reading()
        while True:
            readings: dict[int, tuple[int, _Reading]] = {}  # where each reading's next token begins -> from where, how
            for found in self._alone(position, reading):
                self._add(readings, *found)
            while len(readings) > 1:
                for found in self._token(*readings.pop(min(readings))):
                    self._add(readings, *found)
            if not readings:
                return
            [(position, reading)] = readings.values()

    def _add(self, readings: dict[int, tuple[int, _Reading]], position: int, reading: _Reading) -> None:
        token = _NESTING_TOKENS.match(self.text, position)
        assert token is not None  # it matches the empty string
        group = token.lastindex
        at = len(self.text) if group is None else token.start(2 if group == 3 else group)
        if at in readings:  # readings that reach the same token go on as one
            readings[at][1].merge(reading)
        else:
            readings[at] = (position, reading)

    def _alone(self, position: int, reading: _Reading) -> list[tuple[int, _Reading]]:
        """Read on while there is one reading: the readings an IRI forks it into, or none at the end. (``_token``,
        inlined for brackets: most of the tokens left of a rule, registered by the thousand.)"""
        text, limit, end, match = self.text, self.limit, len(self.text), _NESTING_TOKENS.match
        while position < end:
            token = match(text, position)
            assert token is not None  # it matches the empty string
            group = token.lastindex
            if group == 5:
                reading.stack.append(reading.depth)
                reading.depth, reading.pending = reading.depth + 1 + reading.pending, 0
                if reading.depth > limit:
                    raise NestingTooDeep(text, token.start(5), limit)
            elif group == 6:
                reading.depth, reading.pending = reading.stack.pop() if reading.stack else 0, 0
            elif group is None:
                break
            else:
                found = self._token(position, reading)
                if len(found) != 1:
                    return found
                position, reading = found[0]
                continue
            position = token.end()
        return []

    def _token(self, position: int, reading: _Reading) -> list[tuple[int, _Reading]]:
        """Read the next token from ``position``: where the reading goes on (two places when an IRI forks it), or
        nowhere at the end."""
        text = self.text
        token = _NESTING_TOKENS.match(text, position)
        assert token is not None
        group, after = token.lastindex, token.end()
        if group == 5:
            self._open(reading, 1, token.start(5))
        elif group == 6 or group == 4:
            for _ in range(1 if group == 6 else len(token[4]) // 2):
                reading.depth = reading.stack.pop() if reading.stack else 0
            reading.pending = 0
        elif group == 7:
            reading.pending = token[7].count("!")
            if reading.depth + reading.pending > self.limit:
                raise NestingTooDeep(text, token.start(7), self.limit)
        elif group == 2 or group == 3:  # '<'s, then an IRI's content or not
            self._open(reading, len(token[2]) // 2, token.start(2))  # '<<' (a reified or triple term) or '<'
            if group == 3:
                start, stop = token.span(3)
                code = _IRI_AS_CODE.match(text, start, stop).end()  # type: ignore[union-attr]  # matches ""
                as_code = reading.copy()
                if _NESTS.search(text, start, code):  # read as code, it nests
                    for inside in _IN_IRI.finditer(text, start, code):
                        self._in_iri(as_code, inside)
                if code < stop and text[code] != "/":  # read as code, a '#', "'" or '\' changes what follows
                    return [(after, reading), (code, as_code)]
                reading.merge(as_code)
        elif group == 1 and not self._escapes_read(token[1]) or group == 8 and text.startswith(token[8] * 3, after - 1):
            after = token.start(group) + 2  # not a long string: '""' (an empty string), then what follows is read
        elif group is None or group == 8:
            return []
        return [(after, reading)]

    def _in_iri(self, reading: _Reading, found: re.Match[str]) -> None:
        char = found[0][0]
        if char == "!":
            reading.pending = len(found[0])
            if reading.depth + reading.pending > self.limit:
                raise NestingTooDeep(self.text, found.start(), self.limit)
        elif char in "([":
            self._open(reading, 1, found.start())
        else:
            reading.depth, reading.pending = reading.stack.pop() if reading.stack else 0, 0

    def _open(self, reading: _Reading, count: int, at: int) -> None:
        for _ in range(count):
            reading.stack.append(reading.depth)
            reading.depth += 1 + reading.pending
            reading.pending = 0
            if reading.depth > self.limit:
                raise NestingTooDeep(self.text, at, self.limit)

    @staticmethod
    def _escapes_read(string: str) -> bool:
        """Whether pyoxigraph reads a long string's escapes: each ``\\u`` and ``\\U`` a Unicode scalar value."""
        for escape in _STRING_ESCAPE.finditer(string):
            code = escape[1] or escape[2]
            if code is not None and (int(code, 16) > 0x10FFFF or 0xD800 <= int(code, 16) <= 0xDFFF):
                return False
        return True
