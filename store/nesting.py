"""How deep an RDF document nests, read as pyoxigraph's parsers read it, before they do (the limits: ``store.limits``).

pyoxigraph's parsers recurse per level of nesting, and a few thousand levels overflow a thread's stack (8 MiB): the
process dies (SIGSEGV), with every request in it. Measured in an 8 MiB thread: Turtle-family triple terms
``<<( … )>>`` at ≈ 10,070 levels (when the parsed quads are dropped; parsing at ≈ 18,000), JSON-LD objects at ≈ 3,229,
a SERVICE's SPARQL JSON results at a triple term nested below 20,000. A scanner per syntax reads a document's bytes
as they come (a chunked upload may last days: a few bytes are kept between chunks, nothing more) and raises
``NestedTooDeep`` at the first place deeper than its limit. Pure: bytes in, depth out; ``store.xml_nesting`` reads
RDF/XML.
"""

from __future__ import annotations

import re

_HELD_BYTES = 1 << 13  # bytes of small chunks held unscanned at most (a large one is scanned as it comes)


class DepthScanner:
    """``feed`` a document's chunks in order; ``depth``: the levels open after them. A subclass reads its syntax with
    one regular expression match per token that changes the depth or how what follows is read; what cannot (text,
    IRIs, most strings) is skipped inside the match, at C speed."""

    what: str  # what nests, as the refusal says it
    openers: tuple[bytes, ...] = ()  # every byte string that may open a level (none: every chunk is scanned)

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.depth = 0  # after the chunks scanned: small ones are held while their openers cannot reach the limit
        self._base = 0  # offset in the document of the buffer being scanned (carried bytes first)
        self._carry = b""  # the end of the last chunk, when it may begin a token the next one completes
        self._held: list[bytes] = []
        self._held_size = self._held_openers = 0

    def feed(self, data: bytes) -> None:
        if self.openers and self._held_size + len(data) <= _HELD_BYTES:  # a message, a small body: a count or two
            # ('+ 1': a '<<' the chunk's start may complete)
            openers = self._held_openers + sum(map(data.count, self.openers)) + 1
            if self.depth + openers <= self.limit:
                self._held.append(data)
                self._held_size, self._held_openers = self._held_size + len(data), openers
                return
        if self._held:
            data = b"".join((*self._held, data))
            self._held, self._held_size, self._held_openers = [], 0, 0
        buffer = self._carry + data if self._carry else data
        kept = self._scan(buffer)
        self._carry = buffer[len(buffer) - kept:] if kept else b""
        self._base += len(buffer) - kept

    def _scan(self, buffer: bytes) -> int:
        """Read ``buffer`` on from the state the last one left; how many bytes at its end to read again with the
        next (a token it cuts short)."""
        raise NotImplementedError

    def _deeper(self, buffer: bytes, at: int) -> None:
        """One more level opens at ``buffer[at]``."""
        self.depth += 1
        if self.depth > self.limit:
            from store.errors import NestedTooDeep  # here: a framing process imports the limits, not the errors

            raise NestedTooDeep(f"{self.what} nested more than {self.limit} deep at byte {self._base + at + 1:,}: "
                                "this server refuses deeper documents", self._base + at)

    def _bounded(self, reduced: bytes) -> tuple[int, int] | None:
        """(closed, opened): what a run of brackets ``reduced`` (as '(' and ')', nothing else) does to the depth,
        when byte operations alone prove it stays within the limit (else None: its tokens then say where it does
        not). Its innermost pairs are taken out round after round; what is left is ')' * closed + '(' * opened, and no
        place in it is deeper than rounds + opened above where it began."""
        rounds, room = 0, self.limit - self.depth
        while b"()" in reduced:
            reduced, rounds = reduced.replace(b"()", b""), rounds + 1
            if rounds > room:
                return None
        closed = reduced.count(b")")
        if rounds + len(reduced) - closed > room:
            return None
        return closed, len(reduced) - closed


# -- Turtle, TriG, N-Triples, N-Quads ------------------------------------------------------------------------------

_CODE, _LONG_QUOTE, _LONG_APOSTROPHE, _QUOTE, _APOSTROPHE, _COMMENT, _IRI = range(7)
_OPENS, _CLOSES, _SKIPPED, _LONG, _CUT = range(1, 6)  # the groups of a token match


def _turtle_tokens(line_based: bool) -> re.Pattern[bytes]:
    """A token that changes the depth or the lexical state, after what cannot, as oxttl's lexer reads them (N-Triples,
    N-Quads: ``line_based``, without single-quoted or long strings)."""
    quotes = b'"' if line_based else b"\"'"
    if line_based:  # '"""' is an empty string, then a quote
        plain, strings = [rb'"[^"\\\n\r()\[\]{}]*+"'], [rb'"(?:[^"\\\n\r]|\\.)*+"']
    else:  # neither '""' nor "''" is a whole string when the buffer's end may cut a long string's opening
        plain = [rb'"(?!""|"\Z)[^"\\\n\r()\[\]{}]*+"', rb"'(?!''|'\Z)[^'\\\n\r()\[\]{}]*+'"]
        strings = [rb'"(?!""|"\Z)(?:[^"\\\n\r]|\\.)*+"', rb"'(?!''|'\Z)(?:[^'\\\n\r]|\\.)*+'"]
    skipped = [
        rb"[^" + quotes + rb"<>\#()\[\]{}\\]++",  # not a bracket, nor what begins a string, an IRI or a comment
        *plain,  # a string without brackets or escapes
        rb"<(?!<)[^>]*+>",  # an IRI: never code, whatever it holds (oxttl reads one up to the first '>')
        rb">(?=[^>])",  # a '>' that is not half of a '>>'
    ]
    return re.compile(
        rb"(?:" + b"|".join(skipped) + rb")*+(?:"
        rb"(<<|[(\[{])"  # 1: opens a level (a triple term's '<<(' is '<<' and '(')
        rb"|(>>|[)\]}])"  # 2: closes one
        rb"|(" + b"|".join(strings) + rb"|\#[^\r\n]*+[\r\n]|\\.)"  # 3: a string with brackets, a comment, an escape
        + (rb"|((?!))" if line_based else rb"|(\"\"\"|''')")  # 4: a long string begins
        + rb"|([" + quotes + rb"\#<>\\]))?",  # 5: a token the buffer's end (or a line end) cuts short
        re.S)


_TURTLE_TOKENS, _LINE_TOKENS = _turtle_tokens(False), _turtle_tokens(True)
_STATES = {b"#": _COMMENT, b"<": _IRI, b'"': _QUOTE, b"'": _APOSTROPHE, b'"""': _LONG_QUOTE, b"'''": _LONG_APOSTROPHE}
_RUNS = {  # a token's content, by state: what follows it is its end, a line end, or the buffer's end
    _LONG_QUOTE: re.compile(rb'(?:[^"\\]++|\\.|""?(?=[^"]))*+', re.S),
    _LONG_APOSTROPHE: re.compile(rb"(?:[^'\\]++|\\.|''?(?=[^']))*+", re.S),
    _QUOTE: re.compile(rb'(?:[^"\\\n\r]++|\\.)*+', re.S),
    _APOSTROPHE: re.compile(rb"(?:[^'\\\n\r]++|\\.)*+", re.S),
    _COMMENT: re.compile(rb"[^\r\n]*+"),
    _IRI: re.compile(rb"[^>]*+"),
}
_ENDS = {_LONG_QUOTE: b'"""', _LONG_APOSTROPHE: b"'''", _QUOTE: b'"', _APOSTROPHE: b"'", _COMMENT: b"", _IRI: b">"}
_DOUBLE_ANGLE = re.compile(rb"<<")
_NOT_TURTLE_SYNTAX = bytes(sorted(set(range(256)) - set(b'"\'#<>()[]{},;')))
_QUOTED = re.compile(rb'"[^"]*+"')
_IRI_TOKEN = re.compile(rb"<[^<>]*+>")
_AS_PARENTHESES = bytes.maketrans(b"[{]}", b"(())")


class TurtleScanner(DepthScanner):
    """Turtle, TriG, N-Triples, N-Quads: ``(`` ``[`` ``{`` ``<<`` open a level and ``)`` ``]`` ``}`` ``>>`` close one,
    outside strings, IRIs and comments, as pyoxigraph's lexer (oxttl) reads them. N-Triples and N-Quads nest only
    triple terms: lines without ``<<`` are skipped with one byte search.

    >>> scanner = TurtleScanner(3, line_based=False)
    >>> scanner.feed(b'<s> <p> ( "((((" <http://x/((((> [ <p> ( ) ] ) . # ((((\\n')
    >>> scanner.feed(b'<s> <p> <<( <a> <b> <<( <a> <b> <c> )>> )>> .')
    Traceback (most recent call last):
    ...
    store.errors.NestedTooDeep: Turtle brackets ( [ { << nested more than 3 deep at byte 79: this server refuses \
deeper documents
    """

    openers = (b"(", b"[", b"{", b"<<")

    def __init__(self, limit: int, *, line_based: bool) -> None:
        super().__init__(limit)
        self.what = "N-Triples / N-Quads triple terms" if line_based else "Turtle brackets ( [ { <<"
        self._line_based = line_based
        self._tokens = _LINE_TOKENS if line_based else _TURTLE_TOKENS
        self._state = _CODE

    def _scan(self, buffer: bytes) -> int:
        position, end = 0, len(buffer)
        if not self._line_based:  # quotes or a '<' at the end are read with the next chunk ('"""', '<<')
            plain = buffer[:-1] if buffer.endswith(b"<") and not buffer.endswith(b"<<") else buffer
            plain = plain.rstrip(b'"') if plain.endswith(b'"') else plain
            if end - len(plain) <= 3 and self._plain(plain):
                return end - len(plain)
        if self._line_based and not self.depth:  # from the line of the first '<<' on (or the last line only)
            found = _DOUBLE_ANGLE.search(buffer)  # (re: bytes.find is slow where every IRI begins with '<')
            position = buffer.rfind(b"\n", 0, end if found is None else found.start()) + 1
            if position:  # a line begins in code (a string, an IRI or a comment holding a line end is an error, and
                self._state = _CODE  # pyoxigraph's parsers stop at the first one)
        match = self._tokens.match
        while position < end:
            if self._state != _CODE:
                position, kept = self._resume(buffer, position)
                if self._state != _CODE:
                    return kept
                continue
            token = match(buffer, position)
            assert token is not None  # it matches the empty string
            group, position = token.lastindex, token.end()
            if group == _OPENS:
                self._deeper(buffer, token.start(_OPENS))
            elif group == _CLOSES:
                self.depth = max(0, self.depth - 1)
            elif group == _CUT or group == _LONG:
                rest = buffer[token.start(group):]
                if len(rest) < 3 and rest == rest[:1] * len(rest):  # '<' '>' '\\' '#', or quotes: the next chunk
                    return len(rest)  # says what they begin ('<<', '>>', a long string's '"""')
                self._state = _STATES[rest[:3] if group == _LONG else rest[:1]]
            elif group is None:
                break
        return 0

    def _plain(self, buffer: bytes) -> bool:
        """Read plain Turtle or TriG with byte operations alone: no escape, comment, single quote or long string, no
        string holding a bracket, no IRI holding one, no triple term. Its brackets, IRIs taken out, are then a run
        for ``_bounded``. False, nothing changed, when the buffer is not plain, or not shallow enough by that bound."""
        start = 0
        if b"\\" in buffer or buffer.endswith((b'"', b"<")):  # the end may begin '\"', '\"\"\"' or '<<'
            return False
        if self._state == _QUOTE:  # a string the last buffer cut ends at the first '"'
            start = buffer.find(b'"') + 1
            if not start:
                return True
        elif self._state != _CODE:
            return False
        reduced = buffer[start:].translate(None, _NOT_TURTLE_SYNTAX)  # quotes, brackets, and what separates strings
        if b"'" in reduced or b'"""' in reduced:  # (two strings are never adjacent in Turtle: a ',' or ';' between)
            return False
        quotes = reduced.count(b'"')
        end = reduced.rfind(b'"') if quotes % 2 else len(reduced)  # an odd one opens a string the buffer's end cuts
        if 2 * reduced.count(b'""', 0, end) != quotes - quotes % 2:  # a string holding syntax
            return False
        code = _IRI_TOKEN.sub(b"", reduced[:end])  # one pass: a '<<' (no IRI begins at its first '<') is left
        if b"<" in code or b">" in code or b"#" in code:  # triple terms, comments, IRIs the buffer's end cuts
            return False
        bounded = self._bounded(code.translate(_AS_PARENTHESES, b'",;'))
        if bounded is None:
            return False
        self.depth = max(self.depth - bounded[0], 0) + bounded[1]
        self._state = _QUOTE if quotes % 2 else _CODE
        return True

    def _resume(self, buffer: bytes, position: int) -> tuple[int, int]:
        """Read on in the token the state is in: where code goes on after it, or (the buffer's end, how many of its
        bytes to read again: a backslash, or quotes that may begin the token's end), the state kept."""
        state, end = self._state, len(buffer)
        stop = _RUNS[state].match(buffer, position).end()  # type: ignore[union-attr]  # matches the empty string
        closing = _ENDS[state]
        if stop == end:
            return end, 0
        if state == _COMMENT or buffer.startswith(closing, stop):
            self._state = _CODE
            return stop + (len(closing) or 1), 0
        if buffer[stop] in b"\r\n":  # a line end in a short string: pyoxigraph's parsers stop there
            self._state = _CODE
            return stop, 0
        return end, end - stop


# -- JSON ------------------------------------------------------------------------------------------------------

_JSON_TOKENS = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+(?:([\[{])|([\]}])|("))?', re.S)
_JSON_STRING = re.compile(rb'(?:[^"\\]++|\\.)*+', re.S)
_NOT_JSON_SYNTAX = bytes(sorted(set(range(256)) - set(b'"[]{}')))


class JsonScanner(DepthScanner):
    """JSON: ``{`` and ``[`` open a level, outside strings.

    >>> JsonScanner(2).feed(b'{"@id": "x", "p": [{"@value": "[[[{{{"}]}')
    Traceback (most recent call last):
    ...
    store.errors.NestedTooDeep: JSON objects and arrays nested more than 2 deep at byte 20: this server refuses \
deeper documents
    """

    what = "JSON objects and arrays"
    openers = (b"{", b"[")

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._in_string = False

    def _scan(self, buffer: bytes) -> int:
        if b"\\" not in buffer and self._plain(buffer):
            return 0
        position, end = 0, len(buffer)
        match = _JSON_TOKENS.match
        while position < end:
            if self._in_string:
                stop = _JSON_STRING.match(buffer, position).end()  # type: ignore[union-attr]  # matches ""
                if stop == end or buffer[stop] != ord('"'):
                    return end - stop  # still in it: a backslash at the very end is read again with what follows
                self._in_string, position = False, stop + 1
                continue
            token = match(buffer, position)
            assert token is not None
            group, position = token.lastindex, token.end()
            if group == 1:
                self._deeper(buffer, position - 1)
            elif group == 2:
                self.depth = max(0, self.depth - 1)
            elif group == 3:  # a string the buffer's end cuts
                self._in_string = True
            else:
                break
        return 0

    def _plain(self, buffer: bytes) -> bool:
        """Read a buffer without escapes (each '"' begins or ends a string) with byte operations alone: its strings
        taken out of its brackets and quotes, what is left is brackets (``_bounded``). False, nothing changed, when
        that is not shallow enough by that bound."""
        start, in_string = 0, self._in_string
        if in_string:
            start = buffer.find(b'"') + 1
            if not start:
                return True
            in_string = False
        # an empty string, or the end of one and the start of the next (no bracket between): their brackets stay in
        reduced = buffer[start:].translate(None, _NOT_JSON_SYNTAX).replace(b'""', b"")
        if b'"' in reduced:
            reduced = _QUOTED.sub(b"", reduced)
            cut = reduced.find(b'"')
            if cut >= 0:  # a string the buffer's end cuts
                reduced, in_string = reduced[:cut], True
        bounded = self._bounded(reduced.translate(_AS_PARENTHESES))
        if bounded is None:
            return False
        self.depth = max(self.depth - bounded[0], 0) + bounded[1]
        self._in_string = in_string
        return True
