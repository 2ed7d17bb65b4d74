"""RSP-QL (seed 004, RSP4J/YASPER) and C-SPARQL (seed 002) registrations, compiled onto the project's WindowRef
form (docs/rsp-ql.md).

- **RSP-QL**: ``REGISTER {RSTREAM|ISTREAM|DSTREAM} <out> AS`` then a ``SELECT``, ``CONSTRUCT`` or ``ASK`` with
  ``FROM NAMED WINDOW <w> ON [STREAM] <s> [RANGE d (STEP d)?]`` (or ``[ELEMENTS n (STEP m)?]``, a count window)
  and ``WINDOW <w> { … }`` / ``WINDOW ?w { … }`` in its pattern, next to ``GRAPH`` and the default graph
  (``FROM`` / ``FROM NAMED``: the dataset). ``SELECT ISTREAM …`` names the operator too.
- **C-SPARQL**: ``REGISTER {QUERY|STREAM} name [COMPUTED EVERY d] AS`` then a query with ``FROM STREAM <s>
  [RANGE d (STEP|SLIDE) d]``, ``[RANGE d TUMBLING]`` or ``[RANGE TRIPLES n]``; its window is the default graph, so
  the whole pattern but its top-level ``GRAPH`` blocks and ``FILTER``s reads the window; ``timestamp(s p o)`` is
  the timestamp of the element holding that triple.

``parse_registration`` reads the text (pure, no stream known); ``compile_registration`` writes the extended SPARQL
the project evaluates, once the I/O layer has resolved each window to a windowed IRI of this server: each window
block becomes ``SERVICE <BASE/streams/NAME?WINDOWS=R/…> { SELECT vars WHERE { … } }`` over the merge of the
window's elements (``sparql_ext.rspql_blocks``). ``window_ref`` gives each window's WindowRef: time windows on the
grid whose ends are t0 + k·STEP with t0 the epoch (YASPER's t0 = 0), from the window open at registration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from sparql_ext.errors import QuerySyntaxError, SparqlExtError
from sparql_ext.lexer import Kind, Token, matching_close, tokenize
from sparql_ext.rspql_blocks import Rewriter, variables
from sparql_ext.windowing import format_micros
from sparql_ext.windowref import format_duration

RSPQL, CSPARQL = "rsp-ql", "c-sparql"
OPERATORS = ("RSTREAM", "ISTREAM", "DSTREAM")
_MICRO = timedelta(microseconds=1)
_UNITS = {"ms": 1_000, "msec": 1_000, "millisecond": 1_000, "milliseconds": 1_000, "s": 1_000_000,
          "sec": 1_000_000, "secs": 1_000_000, "second": 1_000_000, "seconds": 1_000_000, "m": 60_000_000,
          "min": 60_000_000, "mins": 60_000_000, "minute": 60_000_000, "minutes": 60_000_000, "h": 3_600_000_000,
          "hour": 3_600_000_000, "hours": 3_600_000_000, "d": 86_400_000_000, "day": 86_400_000_000,
          "days": 86_400_000_000}
_XSD = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,6})?)S)?)?", re.IGNORECASE)
_PEER = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
_DURATION = r"(?:P[0-9DTHMS.]+|\d+(?:\.\d+)?\s*[A-Za-z]*)"
_TIME_WINDOW = re.compile(rf"RANGE\s+({_DURATION})(?:\s+(?:(?:STEP|SLIDE)\s+({_DURATION})|(TUMBLING)))?",
                          re.IGNORECASE)
_COUNT_WINDOW = re.compile(r"(?:RANGE\s+(?:TRIPLES|BGP)\s+(\d+)|RANGE\s+(\d+)\s+TRIPLES|TRIPLES\s+(\d+)"
                           r"|ELEMENTS\s+(\d+)(?:\s+STEP\s+(\d+))?)", re.IGNORECASE)


class RegistrationError(SparqlExtError):
    """A registration this server cannot take as written (400), naming the construct."""


@dataclass(frozen=True)
class WindowDecl:
    """One declared window: its name (None: a C-SPARQL window, read as the default graph), its stream IRI as
    written (prefixes expanded), its width and step (a duration, or a number of elements)."""

    name: str | None
    stream: str
    width: timedelta | int
    step: timedelta | int
    offset: int  # where it is declared in the user's text (for messages)


@dataclass(frozen=True)
class Registration:
    language: str  # rsp-ql | c-sparql
    name: str | None  # C-SPARQL's REGISTER QUERY name
    output: str | None  # RSP-QL's <out> (expanded), C-SPARQL's REGISTER STREAM name
    operator: str | None  # rstream | istream | dstream, when the text says
    form: str  # SELECT | CONSTRUCT | ASK
    windows: tuple[WindowDecl, ...]
    text: str
    cuts: tuple[tuple[int, int], ...]  # spans of the text that are not SPARQL (REGISTER, window declarations)
    blocks: tuple[tuple[int, int, str], ...]  # WINDOW blocks: index of WINDOW, of its '{', window name/variable
    where: int | None  # token index of the WHERE group's '{'
    timestamps: tuple[tuple[int, int], ...]  # C-SPARQL timestamp( … ): token indexes of 'timestamp' and its ')'


@dataclass(frozen=True)
class Resolved:
    """A window as the I/O layer resolved it: the windowed IRI to read (``BASE/streams/NAME?WINDOWS=ref``) and
    its stream's timestamp predicate (C-SPARQL's ``timestamp()``)."""

    iri: str
    timestamp_predicate: str


def parse_registration(text: str) -> Registration:
    """Read a registration; raises ``QuerySyntaxError`` (line and column in ``text``) or ``RegistrationError``."""
    tokens = list(tokenize(text))
    if not tokens:
        raise QuerySyntaxError("an empty registration: expected REGISTER … AS followed by a query", text, 0)
    prefixes: dict[str, str] = {}
    cuts: list[tuple[int, int]] = []
    windows: list[WindowDecl] = []
    language = name = output = operator = form = None
    where: int | None = None
    i, depth = 0, 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind is Kind.PUNCT and tok.text in "{}":
            if tok.text == "{" and depth == 0 and form is not None and (form != "CONSTRUCT" or _after_where(
                    tokens, i)) and where is None:
                where = i
            depth += 1 if tok.text == "{" else -1
        elif depth == 0 and tok.is_keyword("PREFIX") and i + 2 < len(tokens):
            prefixes[tokens[i + 1].text[:-1]] = tokens[i + 2].text[1:-1]
            i += 3
            continue
        elif depth == 0 and tok.is_keyword("REGISTER") and form is None:
            language, name, output, operator, end = _register(tokens, i, text, prefixes)
            cuts.append((tok.start, tokens[end].end))
            i = end + 1
            continue
        elif depth == 0 and form is None and tok.is_keyword("SELECT", "CONSTRUCT", "ASK", "DESCRIBE"):
            form = tok.text.upper()
            if form == "DESCRIBE":
                raise RegistrationError("DESCRIBE is not supported in a registration: use CONSTRUCT")
            if i + 1 < len(tokens) and tokens[i + 1].is_keyword(*OPERATORS):
                operator = _operator(operator, tokens[i + 1], text)
                cuts.append((tokens[i + 1].start, tokens[i + 1].end))
                i += 2
                continue
        elif depth == 0 and tok.is_keyword("FROM") and i + 1 < len(tokens):
            declared = _from(tokens, i, text, prefixes)
            if declared is not None:
                window, end = declared
                windows.append(window)
                cuts.append((tok.start, tokens[end].end))
                i = end + 1
                continue
        i += 1
    if form is None:
        raise QuerySyntaxError("expected SELECT, CONSTRUCT or ASK after the registration", text, len(text))
    if where is None:
        raise QuerySyntaxError("the query has no WHERE { … } pattern", text, len(text))
    unnamed = [w for w in windows if w.name is None]
    language = language or (CSPARQL if unnamed else RSPQL)
    if language == RSPQL and unnamed:
        raise RegistrationError("FROM STREAM is C-SPARQL's: register with REGISTER QUERY name AS, or declare "
                                "FROM NAMED WINDOW <w> ON <stream> [RANGE …] and read it with WINDOW <w> { … }")
    if language == CSPARQL and len(unnamed) > 1:
        raise RegistrationError("several FROM STREAM windows merged into one default graph are not supported: "
                                "declare FROM NAMED WINDOW <w> ON <stream> [RANGE …] for each (RSP-QL) and read "
                                "each with WINDOW <w> { … }")
    if language == CSPARQL and unnamed and any(_static_from(tokens, text)):
        raise RegistrationError("FROM <graph> merges a static graph with the window in the default graph, which "
                                "is not supported: declare it FROM NAMED and read it with GRAPH <graph> { … }")
    blocks, stamps = _blocks(tokens, text, prefixes, {w.name for w in windows}, language)
    return Registration(language, name, output, operator, form, tuple(windows), text, tuple(cuts), tuple(blocks),
                        where, tuple(stamps))


def window_ref(window: WindowDecl, registered_at: int | None, t0: int | None = None) -> str:
    """The WindowRef of a window (µs times): a time window on the grid whose ends are t0 + k·STEP (t0: the epoch
    unless given), starting with the window open at ``registered_at`` (None: the epoch itself, an empty stream);
    with ``t0`` given, the first window starts at t0. A count window: ``R/HEAD~(n-1)/HEAD/STEP``."""
    if isinstance(window.width, int):
        return f"R/HEAD~{window.width - 1}/HEAD/{window.step}"
    assert isinstance(window.step, timedelta)
    width, step = window.width // _MICRO, window.step // _MICRO
    if t0 is not None:
        start = t0
    else:
        at = registered_at if registered_at is not None else 0
        start = (at // step + 1) * step - width  # ends on the epoch's grid: the first window holding ``at``
    ref = f"R/{format_micros(start)}/{format_duration(window.width)}"
    return ref if width == step else f"{ref}/{format_duration(window.step)}"


def compile_registration(reg: Registration, resolved: Mapping[str | None, Resolved]) -> str:
    """The extended SPARQL of a registration, each window (by name; None: C-SPARQL's) read through its windowed
    IRI. Raises ``RegistrationError`` for a ``WINDOW`` naming no declared window."""
    tokens = list(tokenize(reg.text))
    rewriter = Rewriter(reg.text, tokens)
    edits: list[tuple[int, int, str]] = [(start, end, "") for start, end in reg.cuts]
    if reg.language == CSPARQL and None in resolved:
        edits.append(_default_window(reg, tokens, rewriter, resolved[None]))
    for keyword, brace, target in reg.blocks:
        close = matching_close(tokens, brace, reg.text)
        if target.startswith("?"):
            branches = [f"{{ {_service(rewriter, brace, resolved[w.name])} BIND(<{w.name}> AS {target}) }}"
                        for w in reg.windows if w.name is not None]
            replacement = " UNION ".join(branches) if branches else "{ FILTER(false) }"
        else:
            replacement = _service(rewriter, brace, resolved[target])
        edits.append((tokens[keyword].start, tokens[close].end, replacement))
    return _apply(reg.text, edits)


# -- the clauses ----------------------------------------------------------------------------------------------------

def _register(tokens: list[Token], i: int, text: str, prefixes: dict[str, str]
              ) -> tuple[str, str | None, str | None, str | None, int]:
    """``REGISTER …`` at ``i``: (language, name, output, operator, index of its AS)."""
    kind = tokens[i + 1] if i + 1 < len(tokens) else tokens[i]
    target = tokens[i + 2] if i + 2 < len(tokens) else kind
    name: str | None
    output: str | None
    operator: str | None
    if kind.is_keyword(*OPERATORS):
        if target.kind not in (Kind.IRI, Kind.PNAME):
            raise QuerySyntaxError(f"REGISTER {kind.text.upper()} must name its output stream: <IRI>", text,
                                   target.start)
        language, name, output, operator = RSPQL, None, _iri(target, prefixes, text), kind.text.lower()
    elif kind.is_keyword("QUERY", "STREAM"):
        if target.kind not in (Kind.WORD, Kind.PNAME, Kind.IRI):
            raise QuerySyntaxError(f"REGISTER {kind.text.upper()} must be followed by a name", text, target.start)
        label = target.text.strip("<>").rstrip(":")
        language, name, operator = CSPARQL, label, None
        output = label if kind.is_keyword("STREAM") else None
    else:
        raise QuerySyntaxError("REGISTER must be followed by RSTREAM, ISTREAM or DSTREAM <out> (RSP-QL) or QUERY "
                               "name / STREAM name (C-SPARQL)", text, kind.start)
    end = i + 3
    if end < len(tokens) and tokens[end].is_keyword("COMPUTED"):
        raise RegistrationError(f"line {_line(text, tokens[end].start)}: COMPUTED EVERY is not supported: a query "
                                "is evaluated as its windows close (choose another report policy with report=)")
    if end >= len(tokens) or not tokens[end].is_keyword("AS"):
        where = tokens[min(end, len(tokens) - 1)]
        raise QuerySyntaxError(f"expected AS after REGISTER {kind.text} {target.text}", text, where.start)
    return language, name, output, operator, end


def _operator(current: str | None, tok: Token, text: str) -> str:
    chosen = tok.text.lower()
    if current is not None and current != chosen:
        raise QuerySyntaxError(f"{tok.text.upper()} contradicts REGISTER {current.upper()}", text, tok.start)
    return chosen


def _from(tokens: list[Token], i: int, text: str, prefixes: dict[str, str]) -> tuple[WindowDecl, int] | None:
    """A window declared at ``FROM`` (``i``): (window, index of its ``]``); None for a dataset clause."""
    at = i + 1
    if tokens[at].is_keyword("STREAM"):  # C-SPARQL
        stream = tokens[at + 1] if at + 1 < len(tokens) else tokens[at]
        if stream.kind not in (Kind.IRI, Kind.PNAME):
            raise QuerySyntaxError("FROM STREAM must name a stream: <IRI>", text, stream.start)
        width, step, end = _spec(tokens, at + 2, text)
        return WindowDecl(None, _iri(stream, prefixes, text), width, step, tokens[i].start), end
    if not (tokens[at].is_keyword("NAMED") and at + 1 < len(tokens)):
        return None
    if tokens[at + 1].is_keyword("STREAM"):
        raise RegistrationError(f"line {_line(text, tokens[i].start)}: FROM NAMED STREAM (SPARQLstream) is not "
                                "supported: declare FROM NAMED WINDOW <w> ON <stream> [RANGE …]")
    if not tokens[at + 1].is_keyword("WINDOW"):
        return None
    name, on = tokens[at + 2], at + 3
    if name.kind not in (Kind.IRI, Kind.PNAME):
        raise QuerySyntaxError("FROM NAMED WINDOW must name its window: <IRI>", text, name.start)
    if on >= len(tokens) or not tokens[on].is_keyword("ON"):
        raise QuerySyntaxError("expected ON <stream> after FROM NAMED WINDOW <w>", text, name.end)
    stream_at = on + 2 if on + 1 < len(tokens) and tokens[on + 1].is_keyword("STREAM") else on + 1
    stream = tokens[stream_at]
    if stream.kind not in (Kind.IRI, Kind.PNAME):
        raise QuerySyntaxError("expected the stream's <IRI> after ON", text, stream.start)
    width, step, end = _spec(tokens, stream_at + 1, text)
    return WindowDecl(_iri(name, prefixes, text), _iri(stream, prefixes, text), width, step, tokens[i].start), end


def _spec(tokens: list[Token], at: int, text: str) -> tuple[timedelta | int, timedelta | int, int]:
    """The window specification ``[ … ]`` at ``at``: (width, step, index of ``]``)."""
    if at >= len(tokens) or tokens[at].text != "[":
        where = tokens[min(at, len(tokens) - 1)]
        raise QuerySyntaxError("expected a window specification [RANGE duration STEP duration] (a window without "
                               "one has no width here)", text, where.start)
    end = matching_close(tokens, at, text)
    spec = re.sub(r"\s+", " ", text[tokens[at].end:tokens[end].start].replace(",", " ")).strip()
    offset = tokens[at].end
    if (count := _COUNT_WINDOW.fullmatch(spec)) is not None:
        elements = int(next(g for g in count.groups()[:4] if g is not None))
        every = int(count[5]) if count[5] is not None else (elements if count[4] is not None else 1)
        if elements < 1 or every < 1:
            raise QuerySyntaxError(f"[{spec}]: a count window needs at least one element", text, offset)
        return elements, every, end
    if (time := _TIME_WINDOW.fullmatch(spec)) is None:
        raise QuerySyntaxError(f"[{spec}] is not a window specification this server reads: RANGE duration "
                               "[STEP duration | TUMBLING], RANGE TRIPLES n or ELEMENTS n [STEP m]", text, offset)
    width = duration(time[1], text, offset)
    step = duration(time[2], text, offset) if time[2] is not None else width
    return width, step, end


def duration(value: str, text: str = "", offset: int = 0) -> timedelta:
    """An xsd:duration (``PT10S``) or a peer's (``10s``, ``5m``, ``1h``, ``500ms``, ``3 sec``; a bare number is
    milliseconds, as rsp-js writes it). Years and months have no fixed length and are refused."""
    value = value.strip()
    micros: float
    if value[:1] in ("P", "p"):
        match = _XSD.fullmatch(value)
        if match is None or value.upper() in ("P", "PT"):
            raise QuerySyntaxError(f"{value!r} is not an xsd:duration of days, hours, minutes and seconds "
                                   "(e.g. PT10S, PT5M)", text, offset)
        days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        micros = ((days * 24 + hours) * 60 + minutes) * 60_000_000 + round(seconds * 1_000_000)
    else:
        match = _PEER.fullmatch(value)
        unit = match[2].lower() if match is not None else ""
        if match is None or (unit and unit not in _UNITS):
            raise QuerySyntaxError(f"{value!r} is not a duration (PT10S, 10s, 5m, 1h, 500ms)", text, offset)
        micros = float(match[1]) * (_UNITS[unit] if unit else 1_000)
    if micros <= 0:
        raise QuerySyntaxError(f"{value!r} is a zero duration: a window needs a width and a step", text, offset)
    return timedelta(microseconds=round(micros))


def _static_from(tokens: list[Token], text: str) -> list[int]:
    """Token indexes of ``FROM <graph>`` clauses (static graphs in the default graph)."""
    return [i for i, tok in enumerate(tokens[:-1])
            if tok.is_keyword("FROM") and tokens[i + 1].kind in (Kind.IRI, Kind.PNAME)]


def _blocks(tokens: list[Token], text: str, prefixes: dict[str, str], names: set[str | None], language: str
            ) -> tuple[list[tuple[int, int, str]], list[tuple[int, int]]]:
    blocks, stamps = [], []
    for i, tok in enumerate(tokens[:-2]):
        if tok.is_keyword("WINDOW") and tokens[i + 2].text == "{" and tokens[i - 1].text != "NAMED":
            target = tokens[i + 1]
            if target.kind is Kind.VAR:
                blocks.append((i, i + 2, "?" + target.text[1:]))
                continue
            if target.kind not in (Kind.IRI, Kind.PNAME):
                raise QuerySyntaxError("WINDOW must be followed by a window's <IRI> or a variable", text, target.start)
            name = _iri(target, prefixes, text)
            if name not in names:
                declared = ", ".join(f"<{n}>" for n in names if n is not None) or "none"
                raise RegistrationError(f"line {_line(text, target.start)}: WINDOW <{name}> names no window "
                                        f"declared with FROM NAMED WINDOW (declared: {declared})")
            blocks.append((i, i + 2, name))
        elif tok.kind is Kind.WORD and tok.text.lower() == "timestamp" and tokens[i + 1].text == "(":
            if language != CSPARQL:
                raise RegistrationError(f"line {_line(text, tok.start)}: timestamp( … ) is C-SPARQL's, for a "
                                        "registration with FROM STREAM")
            stamps.append((i, matching_close(tokens, i + 1, text)))
    return blocks, stamps


def _default_window(reg: Registration, tokens: list[Token], rewriter: Rewriter, resolved: Resolved
                    ) -> tuple[int, int, str]:
    """C-SPARQL: the WHERE group read over the window, but its top-level GRAPH blocks (static named graphs) and
    FILTERs (which apply to the whole group wherever they are); ``timestamp(s p o)`` becomes a variable bound in
    the window."""
    assert reg.where is not None
    close = matching_close(tokens, reg.where, reg.text)
    outside, inside_ranges, i = [], [], reg.where + 1
    while i < close:
        tok = tokens[i]
        if tok.is_keyword("GRAPH", "FILTER"):
            j = i + 1
            while tokens[j].text not in ("{", "("):
                j += 1
            end = matching_close(tokens, j, reg.text)
            outside.append((i, end))
            i = end + 1
        elif tok.kind is Kind.PUNCT and tok.text in "{[(":
            end = matching_close(tokens, i, reg.text)
            inside_ranges.append((i, end + 1))
            i = end + 1
        else:
            inside_ranges.append((i, i + 1))
            i += 1
    stamps: dict[int, str] = {}
    extra: list[str] = []
    for start, end in reg.timestamps:
        name = rewriter.fresh("ts")
        graph = rewriter.fresh("g")
        stamps[start] = name
        triple = reg.text[tokens[start + 2].start:tokens[end - 1].end]
        extra.append(f"GRAPH {graph} {{ {triple} }} {graph} <{resolved.timestamp_predicate}> {name} .")
    inside = [rewriter.content(a, b) for a, b in _merged(inside_ranges)]
    kept = []
    for start, end in outside:
        piece, at = [], tokens[start].start
        for s, e in reg.timestamps:
            if start <= s and e <= end:
                piece.append(reg.text[at:tokens[s].start] + stamps[s])
                at = tokens[e].end
        kept.append("".join(piece) + reg.text[at:tokens[end].end])
    names = variables(tokens, reg.where + 1, close, rewriter.generated) + list(stamps.values())
    projection = " ".join(names) if names else "*"
    body = " ".join([*inside, *extra])
    service = f"SERVICE <{resolved.iri}> {{ SELECT {projection} WHERE {{ {body} }} }}"
    return tokens[reg.where].start, tokens[close].end, "{ " + " ".join([service, *kept]) + " }"


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in ranges:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _service(rewriter: Rewriter, brace: int, resolved: Resolved) -> str:
    """``SERVICE <windowed IRI> { SELECT vars WHERE { group, rewritten } }`` for the group opened at ``brace``."""
    tokens = rewriter.tokens
    close = matching_close(tokens, brace, rewriter.text)
    if brace + 1 < close and tokens[brace + 1].is_keyword("SELECT"):
        return f"SERVICE <{resolved.iri}> {{ {rewriter.content(brace + 1, close)} }}"
    body = rewriter.content(brace + 1, close)
    names = variables(tokens, brace + 1, close, rewriter.generated)
    return f"SERVICE <{resolved.iri}> {{ SELECT {' '.join(names) if names else '*'} WHERE {{ {body} }} }}"


def _iri(tok: Token, prefixes: dict[str, str], text: str) -> str:
    if tok.kind is Kind.IRI:
        return tok.text[1:-1]
    prefix, _, local = tok.text.partition(":")
    if prefix not in prefixes:
        raise QuerySyntaxError(f"prefix {prefix}: is not declared (PREFIX {prefix}: <…>)", text, tok.start)
    return prefixes[prefix] + local


def _after_where(tokens: list[Token], i: int) -> bool:
    """Whether the ``{`` at ``i`` follows ``WHERE`` (a CONSTRUCT's first group is its template)."""
    return i > 0 and tokens[i - 1].is_keyword("WHERE")


def _line(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"{line} column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    out, at = [], 0
    for start, end, replacement in sorted(edits):
        out.append(text[at:start])
        out.append(replacement)
        at = end
    out.append(text[at:])
    return "".join(out)


Resolver = Callable[[WindowDecl], Resolved]
__all__ = ["CSPARQL", "RSPQL", "Registration", "RegistrationError", "Resolved", "Resolver", "WindowDecl",
           "compile_registration", "duration", "parse_registration", "window_ref"]
