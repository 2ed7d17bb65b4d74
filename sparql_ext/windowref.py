"""WindowRef (seed 003, Fig. 1).

``WindowRef ::= ('R' Integer? '/')? Revision ('/' (Revision | XPathDuration) ('/' (XPathDuration | Integer))?)?``,
and a window kind named with its duration: ``('R' Integer? '/')? Revision '/' Kind '/' XPathDuration``, ``Kind`` an
upper-case word (``R/HEAD/SESSION/PT5M``; the kinds are ``sparql_ext.window_kinds.NAMED_KINDS``).

Pure parsing into a typed value; what the windows are (resolution against a stream, bounds,
completeness) is ``sparql_ext.windowing``'s job. isodate cannot parse ISO 8601 repeating intervals,
so the ``/``-separated structure is parsed here and only the parts are handed to isodate.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import isodate

from sparql_ext.errors import InstantSyntaxError, RevisionSyntaxError, WindowRefSyntaxError
from sparql_ext.revision import Head, Instant, Ordinal, RevisionDesignator, RevisionId, parse_revision

_REPEAT = re.compile(r"R(?P<count>[0-9]+)?")
_KIND = re.compile(r"[A-Z]+")  # a window kind's name: not HEAD (a revision), not starting with P (a duration)
_INTEGER = re.compile(r"[0-9]+")
# XPath xs:duration lexical form; years/months are matched so that they can be refused by name.
_DURATION = re.compile(
    r"-?P(?=[0-9]|T[0-9])(?:(?P<years>[0-9]+)Y)?(?:(?P<months>[0-9]+)M)?(?:[0-9]+D)?"
    r"(?:T(?=[0-9])(?:[0-9]+H)?(?:[0-9]+M)?(?:[0-9]+(?:\.[0-9]+)?S)?)?"
)
_LOOKS_LIKE_DURATION = re.compile(r"[-+]?P", re.IGNORECASE)
_REVISION_FORMS = "HEAD, HEAD~n, UUID, ordinal or xsd:dateTime with timezone"
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class WindowRef:
    """A parsed WindowRef; ``str()`` gives its canonical text and ``parse_window_ref(str(ref)) == ref``.

    Exactly one of ``end``, ``width`` and ``kind`` is set when there is a second component. A step is only
    present with a second component; a duration step only with a time width (duration, or a
    range with an ``xsd:dateTime`` end). A named kind (``SESSION``) has its ``duration`` and no step.
    """

    repeating: bool  # 'R' prefix present
    count: int | None  # Rn -> n; 'R' alone -> None (unbounded); no R -> 1
    start: RevisionDesignator  # first component
    end: RevisionDesignator | None = None  # second component when it is a Revision
    width: timedelta | None = None  # second component when a duration (negative = backward)
    step: timedelta | int | None = None  # third component (duration or element count)
    kind: str | None = None  # second component when it names a window kind
    duration: timedelta | None = None  # third component after a named kind

    def __str__(self) -> str:
        parts = []
        if self.repeating:
            parts.append("R" if self.count is None else f"R{self.count}")
        parts.append(format_revision(self.start))
        if self.end is not None:
            parts.append(format_revision(self.end))
        if self.width is not None:
            parts.append(format_duration(self.width))
        if self.kind is not None and self.duration is not None:
            parts += [self.kind, format_duration(self.duration)]
        if self.step is not None:
            parts.append(str(self.step) if isinstance(self.step, int) else format_duration(self.step))
        return "/".join(parts)

    @property
    def is_time_range(self) -> bool:
        """``a/b`` with an ``xsd:dateTime`` at either end: a time interval rather than an element range."""
        return self.end is not None and (isinstance(self.start, Instant) or isinstance(self.end, Instant))


def parse_window_ref(text: str) -> WindowRef:
    """Parse a WindowRef, raising ``WindowRefSyntaxError`` that names the bad part and the whole ref.

    >>> parse_window_ref("R/HEAD/PT05M/PT01M")
    WindowRef(repeating=True, count=None, start=Head(back=0), end=None, width=datetime.timedelta(seconds=300), \
step=datetime.timedelta(seconds=60), kind=None, duration=None)
    >>> parse_window_ref("R/HEAD/SESSION/PT05M").kind
    'SESSION'
    >>> str(parse_window_ref("R5/HEAD~9/HEAD/1"))
    'R5/HEAD~9/HEAD/1'
    >>> str(parse_window_ref("HEAD/-PT05M"))
    'HEAD/-PT5M'
    >>> parse_window_ref("r/head/pt05m")
    Traceback (most recent call last):
    ...
    sparql_ext.errors.WindowRefSyntaxError: WINDOWS=r/head/pt05m: 'r', 'head', 'pt05m' must be upper case: R/HEAD/PT05M
    """
    try:
        return _parsed(text)
    except WindowRefSyntaxError:
        hint = _case_hint(text.strip())
        if hint is None:
            raise
        raise WindowRefSyntaxError(hint) from None


def _case_hint(ref: str) -> str | None:
    """The message for a ref that is valid once upper-cased (keywords, durations and dateTimes are upper case;
    a UUID may be either), naming the parts written in lower case; None if upper case would not help."""
    parts = ref.split("/")
    lower = [part for part in parts if part != part.upper() and not _is_revision(part)]
    if not lower:
        return None
    suggestion = "/".join(part.upper() if part in lower else part for part in parts)
    try:
        _parse(suggestion)
    except WindowRefSyntaxError:
        return None
    return f"WINDOWS={ref}: {', '.join(repr(part) for part in lower)} must be upper case: {suggestion}"


def _is_revision(part: str) -> bool:
    try:
        parse_revision(part)
    except RevisionSyntaxError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> WindowRef:
    """``_parse``, remembered: every rule firing parses the refs of its windowed IRIs (a WindowRef is immutable)."""
    return _parse(text)


def _parse(text: str) -> WindowRef:
    ref = text.strip()
    if not ref:
        raise WindowRefSyntaxError("WINDOWS='': a WindowRef is required (e.g. HEAD/-PT05M or R/HEAD/PT05M/PT01M)")
    parts = [part.strip() for part in ref.split("/")]
    repeating = False
    count: int | None = 1
    if match := _REPEAT.fullmatch(parts[0]):
        repeating, count = True, int(match["count"]) if match["count"] is not None else None
        if count == 0:
            _fail(ref, f"{parts[0]!r} repeats zero times; use R (unbounded) or Rn with n ≥ 1")
        parts = parts[1:]
        if not parts:
            _fail(ref, "'R' must be followed by '/' and a window (e.g. R/HEAD/PT05M)")
    elif parts[0].startswith("R"):
        _fail(ref, f"{parts[0]!r} is not a repetition: use R (unbounded) or Rn with n ≥ 1")
    if len(parts) > 3:
        _fail(ref, f"{'/'.join(parts[3:])!r} is beyond the third component: at most revision/(revision|duration)/step")
    for part in parts:
        if not part:
            _fail(ref, "empty component between '/' separators")

    if _LOOKS_LIKE_DURATION.match(parts[0]):
        _fail(ref, f"{parts[0]!r} is a duration where the window must start with a revision ({_REVISION_FORMS})")
    start = _revision(ref, parts[0])
    end: RevisionDesignator | None = None
    width: timedelta | None = None
    step: timedelta | int | None = None
    if len(parts) >= 2 and _KIND.fullmatch(parts[1]) and parts[1] != "HEAD" and not parts[1].startswith("P"):
        if len(parts) != 3 or not _LOOKS_LIKE_DURATION.match(parts[2]):
            _fail(ref, f"{parts[1]!r} names a window kind and is followed by a duration (e.g. R/HEAD/SESSION/PT5M)")
        return WindowRef(repeating, count, start, kind=parts[1], duration=_duration(ref, parts[2]))
    if len(parts) >= 2:
        if _LOOKS_LIKE_DURATION.match(parts[1]):
            width = _duration(ref, parts[1])
        else:
            end = _revision(ref, parts[1])
            _check_range(ref, start, end)
    if len(parts) == 3:
        step = _step(ref, parts[2])
        if end is not None and isinstance(step, timedelta) and not (isinstance(start, Instant) or
                                                                    isinstance(end, Instant)):
            _fail(ref, f"a duration step {parts[2]!r} after an element range {parts[0]}/{parts[1]} is not "
                       "supported: step a count window by a number of elements (e.g. /1)")
    return WindowRef(repeating, count, start, end, width, step)


def format_revision(revision: RevisionDesignator) -> str:
    """Canonical text of a revision designator (UTC instants with 'Z')."""
    match revision:
        case Head(back=0):
            return "HEAD"
        case Head(back=back):
            return f"HEAD~{back}"
        case RevisionId(uuid=value):
            return str(value)
        case Ordinal(number=number):
            return str(number)
        case Instant(at=at):
            text = at.isoformat()
            return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text
    raise TypeError(f"not a revision designator: {revision!r}")


def format_duration(duration: timedelta) -> str:
    """Canonical XPath dayTimeDuration of a timedelta, e.g. ``PT5M``, ``-P1DT2H``, ``PT0.5S``."""
    micros = abs(duration) // _MICROSECOND
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    text = "-P" if duration < timedelta(0) else "P"
    if days:
        text += f"{days}D"
    if hours or minutes or seconds or fraction or not days:
        text += "T"
        if hours:
            text += f"{hours}H"
        if minutes:
            text += f"{minutes}M"
        if fraction:
            text += f"{seconds}.{fraction:06d}".rstrip("0") + "S"
        elif seconds or not (hours or minutes):
            text += f"{seconds}S"
    return text


def _fail(ref: str, message: str) -> NoReturn:
    raise WindowRefSyntaxError(f"WINDOWS={ref}: {message}")


def _revision(ref: str, part: str) -> RevisionDesignator:
    try:
        return parse_revision(part)
    except InstantSyntaxError as error:  # a dateTime, wrong in a way its message says
        raise WindowRefSyntaxError(f"WINDOWS={ref}: {error.message}") from None
    except RevisionSyntaxError:
        raise WindowRefSyntaxError(f"WINDOWS={ref}: {part!r} is not a revision ({_REVISION_FORMS})") from None


def _duration(ref: str, part: str) -> timedelta:
    match = _DURATION.fullmatch(part)
    if match is None:
        _fail(ref, f"{part!r} is not an xsd:duration (e.g. PT05M, -PT30S, P1DT2H)")
    if match["years"] is not None or match["months"] is not None:
        _fail(ref, f"{part!r} has years or months, which have no fixed length; use days, hours, minutes, seconds")
    try:
        value = isodate.parse_duration(part)
    except (ValueError, isodate.ISO8601Error) as error:
        raise WindowRefSyntaxError(f"WINDOWS={ref}: {part!r} is not an xsd:duration: {error}") from None
    except OverflowError:
        raise WindowRefSyntaxError(f"WINDOWS={ref}: {part!r} is longer than a window can be "
                                   "(at most 999,999,999 days)") from None
    if not isinstance(value, timedelta):  # defensive: isodate.Duration means calendar units
        _fail(ref, f"{part!r} is not a fixed-length duration")
    if value == timedelta(0):
        _fail(ref, f"{part!r} is a zero duration; a window needs a non-zero width or step")
    return value


def _step(ref: str, part: str) -> timedelta | int:
    if _INTEGER.fullmatch(part):
        if int(part) == 0:
            _fail(ref, f"step {part!r} is zero elements; a window sequence must advance")
        return int(part)
    if not _LOOKS_LIKE_DURATION.match(part):
        _fail(ref, f"step {part!r} is neither an xsd:duration nor a number of elements")
    value = _duration(ref, part)
    if value < timedelta(0):
        _fail(ref, f"step {part!r} is negative; the direction of a window is given by its width (e.g. -PT05M)")
    return value


def _check_range(ref: str, start: RevisionDesignator, end: RevisionDesignator) -> None:
    """Refuse ranges that are backwards whatever the stream (mixed forms are checked on resolution)."""
    backwards = (
        (isinstance(start, Instant) and isinstance(end, Instant) and end.at <= start.at)
        or (isinstance(start, Ordinal) and isinstance(end, Ordinal) and end.number < start.number)
        or (isinstance(start, Head) and isinstance(end, Head) and end.back > start.back)
    )
    if backwards:
        kind = "is not after" if isinstance(start, Instant) else "is before"
        _fail(ref, f"range end {format_revision(end)!r} {kind} its start {format_revision(start)!r}")

