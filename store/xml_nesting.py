"""How deep RDF/XML nests, and what its DTD's entities expand to, read as pyoxigraph reads them (quick-xml, then
oxrdfxml), before it does (the limits: ``store.limits``).

Deep elements cost pyoxigraph quadratic time (16,384 levels 1.5 s, 65,536 levels 40 s), and it expands the entities
of a document's internal DTD subset in memory: "billion laughs" (647 bytes, entities of ten references to the one
before, nine times over) made it raise ``MemoryError`` at 300 MB. It reads no external entity (its parser refuses
``SYSTEM`` and ``PUBLIC`` declarations), and reads a parameter entity's declaration as a general entity.
"""

from __future__ import annotations

import re

from store.nesting import DepthScanner

# One match per element tag, or markup to read on from (a DOCTYPE, or what the buffer's end cuts); text, comments,
# processing instructions and CDATA sections are skipped inside it. Tags and DOCTYPEs as quick-xml reads them.
_XML_TOKENS = re.compile(
    rb"(?:[^<]++|<!--.*?-->|<\?.*?\?>|<!\[CDATA\[.*?\]\]>)*+"
    rb"(?:(<[^\s/>!?](?:[^>\"']++|\"[^\"]*+\"|'[^']*+')*+>)"  # 1: a start tag (an empty element's too)
    rb"|(</[^>]*+>)"  # 2: an end tag
    rb"|(<))?", re.S)  # 3: other markup, or markup cut short
_TEXT, _DOCTYPE, _XML_COMMENT, _PI, _CDATA, _TAG, _TAG_QUOTE, _TAG_APOSTROPHE = range(8)
_MARKUP = {b"<!--": _XML_COMMENT, b"<![CDATA[": _CDATA, b"<?": _PI, b"<!D": _DOCTYPE, b"<!d": _DOCTYPE}
_XML_ENDS = {_XML_COMMENT: b"-->", _PI: b"?>", _CDATA: b"]]>"}
_TAG_RUN = re.compile(rb"(?:[^>\"']++|\"[^\"]*+\"|'[^']*+')*+")
_ANGLES = re.compile(rb"[<>]")
# oxrdfxml reads '<!ENTITY name "value">' alone (as a piece of the DTD split at '<'); a declaration of another shape
# is refused here, so that the names counted below are the ones pyoxigraph expands
_ENTITY = re.compile(rb'!ENTITY[ \t\r\n]+([A-Za-z_:\x80-\xff][-.\w:\x80-\xff]*)[ \t\r\n]+"([^"]*)"[ \t\r\n]*>')
_REFERENCE = re.compile(rb"&([^;]*);")
_PREDEFINED = frozenset({b"lt", b"gt", b"amp", b"apos", b"quot"})


class XmlScanner(DepthScanner):
    """RDF/XML: a start tag opens a level and an end tag closes it (an empty element ``<a/>`` both). DTD entities
    (``<!DOCTYPE … [<!ENTITY name "value">]>``), which pyoxigraph expands, are read as it reads them: an external
    (``SYSTEM``, ``PUBLIC``) or parameter (``%``) entity, or a declaration of another shape, is refused
    (``XmlEntityRefused``); the text they expand to, at their declarations and at every reference, may exceed the
    document read so far by ``expansion`` bytes at most (``EntityExpansionTooLarge``).

    >>> scanner = XmlScanner(2, expansion=1000)
    >>> scanner.feed(b'<!DOCTYPE rdf:RDF [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">')
    >>> scanner.feed(b']><rdf:RDF><rdf:Description rdf:about="&b;"/><p>&a;<![CDATA[<x>&b;]]></p></rdf:RDF>')
    >>> scanner.expanded  # declared: a 10 bytes, b 100; then b 100, a 10, b 100 more (CDATA is counted too)
    320
    >>> scanner.feed(b'<rdf:RDF><p><q/></p></rdf:RDF>')
    Traceback (most recent call last):
    ...
    store.errors.NestedTooDeep: RDF/XML elements nested more than 2 deep at byte 183: this server refuses deeper \
documents
    """

    what = "RDF/XML elements"

    def __init__(self, limit: int, *, expansion: int) -> None:
        super().__init__(limit)
        self._state = _TEXT
        self._start = False  # the tag being read is a start tag (a level counted: an empty element's is taken back)
        self._slash = False  # what it holds so far ends with '/'
        self._doctype = bytearray()  # the DOCTYPE being read
        self._balance = 0  # its '<' less its '>' so far (a '>' that balances it ends it)
        self._allowance = expansion
        self.expanded = 0  # bytes of text the entities expand to so far
        self._entities: dict[bytes, int] = {}  # declared -> the bytes it expands to
        self._references: re.Pattern[bytes] | None = None  # a reference to one of them
        self._tail = b""  # the end of what was read, where a reference may begin
        self._declared = -1  # where in the buffer being scanned the last DOCTYPE ended

    def feed(self, data: bytes) -> None:
        before, carried = self._references, len(self._carry)
        super().feed(data)
        if self._references is not None:
            if self._references is not before:  # entities declared in this chunk: references after the DOCTYPE
                self._tail, data = b"", data[max(0, self._declared - carried):]
            self._count(data)

    def _scan(self, buffer: bytes) -> int:
        position, end = 0, len(buffer)
        match = _XML_TOKENS.match
        while position < end:
            state = self._state
            if state == _TAG or state == _TAG_QUOTE or state == _TAG_APOSTROPHE:
                position = self._tag(buffer, position)
            elif state == _DOCTYPE:
                position = self._doctype_part(buffer, position)
            elif state != _TEXT:
                closing = _XML_ENDS[state]
                found = buffer.find(closing, position)
                if found < 0:  # the bytes that may begin its end are read again with what follows
                    return min(len(closing) - 1, end - position)
                self._state, position = _TEXT, found + len(closing)
            else:
                token = match(buffer, position)
                assert token is not None
                group, position = token.lastindex, token.end()
                if group == 1:
                    self._deeper(buffer, token.start(1))
                    if buffer[position - 2] == ord("/"):  # an empty element: a level opened and closed
                        self.depth -= 1
                elif group == 2:
                    self.depth = max(0, self.depth - 1)
                elif group == 3:
                    start = token.start(3)
                    head = buffer[start:start + 9]
                    kind = next((_MARKUP[p] for p in _MARKUP if head.startswith(p)), None)
                    if kind is None and start + len(head) == end and any(p.startswith(head) for p in _MARKUP):
                        return end - start  # the next chunk says which markup begins here
                    if kind is None:  # a tag the buffer's end cuts (or markup the parser refuses)
                        self._start, self._slash, kind = head[1:2] not in (b"/", b"!", b"?"), False, _TAG
                        if self._start:
                            self._deeper(buffer, start)
                        elif head[1:2] == b"/":
                            self.depth = max(0, self.depth - 1)
                        position = start + 1
                    else:
                        position = start + next(len(p) for p in _MARKUP if head.startswith(p))
                        self._doctype, self._balance = bytearray(), 0
                    self._state = kind
                else:
                    break
        return 0

    def _tag(self, buffer: bytes, position: int) -> int:
        """Read on in a tag: after its '>', or the buffer's end (quoted attribute values may hold '>')."""
        end = len(buffer)
        while True:
            if self._state != _TAG:
                found = buffer.find(b'"' if self._state == _TAG_QUOTE else b"'", position)
                if found < 0:
                    return end
                self._state, self._slash, position = _TAG, False, found + 1
            stop = _TAG_RUN.match(buffer, position).end()  # type: ignore[union-attr]  # matches the empty string
            if stop > position:
                self._slash = buffer[stop - 1] == ord("/")
            if stop == end:
                return end
            if buffer[stop] == ord(">"):
                if self._start and self._slash:  # '<a …/>': the level counted at '<a' was none
                    self.depth -= 1
                self._state = _TEXT
                return stop + 1
            self._state, position = (_TAG_QUOTE if buffer[stop] == ord('"') else _TAG_APOSTROPHE), stop + 1

    def _doctype_part(self, buffer: bytes, position: int) -> int:
        """Read on in a DOCTYPE (its declarations held): after its end, where its entities are declared, or the
        buffer's end."""
        for angle in _ANGLES.finditer(buffer, position):
            if angle[0] == b"<":
                self._balance += 1
            elif self._balance:
                self._balance -= 1
            else:
                self._doctype += buffer[position:angle.start()]
                self._state, self._declared = _TEXT, angle.end()
                self._declare(bytes(self._doctype), self._base + angle.end())
                return angle.end()
        self._doctype += buffer[position:]
        return len(buffer)

    def _declare(self, doctype: bytes, read: int) -> None:
        from store.errors import XmlEntityRefused  # here: a framing process imports the limits, not the errors

        for piece in doctype.split(b"<")[1:]:
            if not piece.startswith(b"!ENTITY"):
                continue
            declared = _ENTITY.match(piece)
            if declared is None:
                kind = ("a parameter entity (%)" if re.match(rb"!ENTITY\s*%", piece) else
                        "an external entity (SYSTEM or PUBLIC)" if re.search(rb"\b(?:SYSTEM|PUBLIC)\b", piece) else
                        'an entity declaration of another shape than <!ENTITY name "value">')
                raise XmlEntityRefused(f"RDF/XML: the DTD declares {kind} (by byte {read}): this server reads only "
                                       'internal entities, <!ENTITY name "value">')
            name, value = declared[1], declared[2]
            size = len(value)
            for reference in _REFERENCE.finditer(value):
                named = reference[1]
                size += (1 if named in _PREDEFINED else 4 if named.startswith(b"#") else
                         self._entities.get(named, 0)) - len(reference[0])
            self._entities[name] = size
            self._expand(size, read)
        names = sorted((n for n in self._entities if n not in _PREDEFINED), key=len, reverse=True)
        self._references = re.compile(b"&(" + b"|".join(map(re.escape, names)) + b");") if names else None

    def _count(self, data: bytes) -> None:
        """Add the references ``data`` holds (and those the end of the last chunk began) to the expansion."""
        assert self._references is not None
        text, sizes = self._tail + data, self._entities
        found = self._references.findall(text)
        if found:
            self._expand(sum(sizes[n] for n in found) - sum(sizes[n] for n in self._references.findall(self._tail)),
                         self._base + len(self._carry))
        self._tail = text[-max(map(len, sizes)) - 1:]

    def _expand(self, size: int, read: int) -> None:
        self.expanded += size
        if self.expanded > self._allowance + read:
            from store.errors import EntityExpansionTooLarge

            raise EntityExpansionTooLarge(
                f"RDF/XML: the DTD's entities expand to {self.expanded:,} bytes of text by byte {read:,} of the "
                f"document, more than {self._allowance:,} bytes beyond its own size: this server refuses such "
                "documents (an entity that expands to others, over and over, is a \"billion laughs\" attack)")
