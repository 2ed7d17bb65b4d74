"""Revision designators (seed 003, Fig. 1): ``Revision ::= UUID | HEAD(~[0-9]+)? | XPathDateTime | Integer``.

Pure parsing; resolving a designator against a dataset's log is ``store.revlog``'s job.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import isodate

from sparql_ext.errors import InstantSyntaxError, RevisionSyntaxError


@dataclass(frozen=True)
class Head:
    """``HEAD`` (back = 0) or ``HEAD~n``: n revisions before the latest."""

    back: int = 0


@dataclass(frozen=True)
class RevisionId:
    """A revision's UUID."""

    uuid: uuid.UUID


@dataclass(frozen=True)
class Ordinal:
    """A revision's ordinal: 1 is the first transaction; 0 is the empty state before it."""

    number: int


@dataclass(frozen=True)
class Instant:
    """An ``xsd:dateTime`` with timezone: the last revision committed at or before it."""

    at: datetime


RevisionDesignator = Head | RevisionId | Ordinal | Instant

_HEAD = re.compile(r"HEAD(?:~(?P<back>[0-9]+))?")
_UUID = re.compile(r"(?:urn:uuid:)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_INTEGER = re.compile(r"[0-9]+")
_DATETIME = re.compile(r"-?[0-9]{4,}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.(?P<fraction>[0-9]+))?"
                       r"(?P<tz>Z|[+-][0-9]{2}:[0-9]{2})?")
# The form almost every timestamp has (at most microseconds, a timezone): read by the standard library's C parser
# alone, once this shape is checked (fromisoformat also reads forms XSD does not have, such as 20160620T1000Z).
_COMMON_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
                              r"(?:Z|[+-][0-9]{2}:[0-9]{2})")
# A '+' of a timezone offset that a form decoder turned into a space (Jena sends it raw).
_SPACE_FOR_PLUS = re.compile(r"(T[0-9:.]+) ([0-9]{2}:[0-9]{2})$")


MAX_OFFSET = timedelta(hours=14)  # XSD's timezone range
#: Stream times and windows are kept to the microsecond (``sparql_ext.windowing`` works on integer µs).
FRACTION_DIGITS_KEPT = 6
#: The instants every part of the server can represent (Python's datetime and Spark's timestamps: years 1 to 9999
#: in UTC), a day inside each end so that a window, an LDES page or a Memento of up to a day around one stays in.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)


def parse_datetime_stamp(lexical: str, label: str, *, finer: str = "refuse") -> datetime:
    """An ``xsd:dateTimeStamp`` (an ``xsd:dateTime`` with a timezone), refused rather than changed: a value finer
    than a microsecond is an ``InstantSyntaxError`` (it would be truncated silently otherwise), as is a missing
    timezone or an offset beyond ±14:00. ``label`` names the value as the caller calls it ("timestamp '…'",
    "punctuation='…'"). With ``finer="ceil"`` a finer value is moved up to the next microsecond instead (for times
    the server makes itself, such as a rule's ``NOW()``, which has nanoseconds; see ``is_finer_than_micros``).

    >>> parse_datetime_stamp("2020-06-01T12:00:00.5+02:00", "t").isoformat()
    '2020-06-01T12:00:00.500000+02:00'
    >>> parse_datetime_stamp("2020-06-01T12:00:01.0000001Z", "timestamp '2020-06-01T12:00:01.0000001Z'")
    Traceback (most recent call last):
    ...
    sparql_ext.errors.InstantSyntaxError: timestamp '2020-06-01T12:00:01.0000001Z' is finer than a microsecond; \
stream times are kept to the microsecond (at most 6 fractional digits of a second that are not zero)
    """
    if _COMMON_DATETIME.fullmatch(lexical) is not None:  # the fast path (a timestamp per element of an upload)
        try:
            common = datetime.fromisoformat(lexical)
        except ValueError:
            pass  # e.g. month 13: the general path says what is wrong
        else:
            offset = common.utcoffset()
            if offset is not None and -MAX_OFFSET <= offset <= MAX_OFFSET:
                return _in_range(common, label)
    match = _DATETIME.fullmatch(lexical)
    if match is None:
        raise InstantSyntaxError(f"{label} is not an xsd:dateTime with timezone such as 2016-06-20T10:00:00Z")
    if match["tz"] is None:
        raise InstantSyntaxError(f"{label} is a dateTime without a timezone; add 'Z' or an offset such as '+01:00' "
                                 "(percent-encoded as %2B in a URL)")
    fraction = match["fraction"] or ""
    beyond = bool(fraction[FRACTION_DIGITS_KEPT:].strip("0"))
    if beyond and finer != "ceil":
        raise InstantSyntaxError(
            f"{label} is finer than a microsecond; stream times are kept to the microsecond (at most "
            f"{FRACTION_DIGITS_KEPT} fractional digits of a second that are not zero)")
    # Python reads at most 6 fractional digits: the zeros past them were just checked to be zeros.
    normalized = lexical[:match.start("fraction")] + fraction[:FRACTION_DIGITS_KEPT] + lexical[match.end("fraction"):] \
        if fraction else lexical
    try:
        # the standard library's C parser reads the common forms (a timestamp per element is on the upload path);
        # isodate the rest (and says what is wrong)
        moment: datetime = datetime.fromisoformat(normalized)
    except ValueError:
        try:
            moment = isodate.parse_datetime(normalized)
            moment.utcoffset()  # isodate's offsets are checked lazily (±24:00 raises here)
        except (ValueError, OverflowError, isodate.ISO8601Error) as error:
            raise InstantSyntaxError(f"{label} is not a valid dateTime: {error}") from None
    offset = moment.utcoffset()
    if offset is None or abs(offset) > MAX_OFFSET:
        raise InstantSyntaxError(f"{label}: the timezone offset must be between -14:00 and +14:00 (xsd:dateTime)")
    return _in_range(moment + timedelta(microseconds=1) if beyond else moment, label)


def _in_range(moment: datetime, label: str) -> datetime:
    """``moment`` (aware), or an ``InstantSyntaxError`` when it is outside ``EARLIEST``..``LATEST``. Compared as
    aware datetimes: no conversion to UTC, which overflows at the ends (9999-12-31T23:59:59-14:00 is in year 10000).

    >>> _in_range(datetime.fromisoformat("9999-12-31T23:59:59-14:00"), "timestamp")
    Traceback (most recent call last):
    ...
    sparql_ext.errors.InstantSyntaxError: timestamp is outside the instants this server keeps: from \
0001-01-02T00:00:00Z to 9999-12-30T23:59:59.999999Z
    """
    if not EARLIEST <= moment <= LATEST:
        raise InstantSyntaxError(f"{label or 'the dateTime'} is outside the instants this server keeps: from "
                                 "0001-01-02T00:00:00Z to 9999-12-30T23:59:59.999999Z")
    return moment


def parse_instant(text: str, label: str | None = None) -> Instant:
    """Parse an ``xsd:dateTime`` with timezone (a revision, a punctuation, a timestamp parameter), raising
    ``InstantSyntaxError`` that calls the value ``label`` (default ``revision 'TEXT'``).

    >>> parse_instant("2016-06-20T10:00:00 02:00").at.isoformat()  # a '+' a form decoder made a space
    '2016-06-20T10:00:00+02:00'
    >>> parse_instant("2016-06-20T10:00:00", "punctuation='2016-06-20T10:00:00'")
    Traceback (most recent call last):
    ...
    sparql_ext.errors.InstantSyntaxError: punctuation='2016-06-20T10:00:00' is a dateTime without a timezone; \
add 'Z' or an offset such as '+01:00' (percent-encoded as %2B in a URL)
    """
    value = _SPACE_FOR_PLUS.sub(r"\1+\2", text.strip())
    return Instant(parse_datetime_stamp(value, label or f"revision {text!r}"))


def is_finer_than_micros(lexical: str) -> bool:
    """Whether an xsd:dateTime lexical form has non-zero digits past the microsecond.

    >>> is_finer_than_micros("2026-11-24T02:11:41.539255579Z"), is_finer_than_micros("2026-11-24T02:11:41.5392550Z")
    (True, False)
    """
    match = _DATETIME.fullmatch(lexical)
    return bool(match and (match["fraction"] or "")[FRACTION_DIGITS_KEPT:].strip("0"))


def parse_revision(text: str) -> RevisionDesignator:
    """Parse a revision designator, raising ``RevisionSyntaxError`` that names the bad value.

    >>> parse_revision("HEAD~2")
    Head(back=2)
    >>> parse_revision("3")
    Ordinal(number=3)
    >>> parse_revision("2016-06-20T10:00:00Z").at.isoformat()
    '2016-06-20T10:00:00+00:00'
    """
    value = text.strip()
    if match := _HEAD.fullmatch(value):
        return Head(int(match["back"] or 0))
    if _UUID.fullmatch(value):
        return RevisionId(uuid.UUID(value.removeprefix("urn:uuid:")))
    if _INTEGER.fullmatch(value):
        return Ordinal(int(value))
    if _DATETIME.fullmatch(_SPACE_FOR_PLUS.sub(r"\1+\2", value)):
        return parse_instant(text)
    if "--" in value:
        raise RevisionSyntaxError(f"revision {text!r} is a revision range (A--B), which only GET /store reads; "
                                  "give one revision here")
    if value.startswith("HEAD"):
        raise RevisionSyntaxError(
            f"revision {text!r} is malformed: after HEAD only '~' and a number of revisions "
            "may follow (e.g. HEAD~2)"
        )
    raise RevisionSyntaxError(
        f"revision {text!r} is not a revision designator: use HEAD, HEAD~n, a revision UUID, "
        "an ordinal (1 = first transaction) or an xsd:dateTime with timezone"
    )


@dataclass(frozen=True)
class RevisionRange:
    """Dydra's revision range ``A--B``: the revisions from ``first`` to ``last``, each a designator as the user wrote
    it (checked), or None for ``*`` (the oldest readable revision at the start, HEAD at the end)."""

    first: str | None
    last: str | None


def parse_revision_range(text: str) -> RevisionRange | None:
    """A revision range ``A--B`` (``*`` for an open end), or None when ``text`` is one revision (no ``--``). A
    dateTime has single hyphens only, so the first ``--`` splits the two ends.

    >>> parse_revision_range("*--HEAD~1")
    RevisionRange(first=None, last='HEAD~1')
    >>> parse_revision_range("2016-06-20T10:00:00Z--*")
    RevisionRange(first='2016-06-20T10:00:00Z', last=None)
    >>> parse_revision_range("HEAD") is None
    True
    """
    if "--" not in text:
        return None
    ends = [end.strip() for end in text.strip().split("--", 1)]
    for end in ends:
        if end != "*":
            try:
                parse_revision(end)
            except RevisionSyntaxError as error:
                raise RevisionSyntaxError(f"revision range {text!r}: {error}") from None
    first, last = (None if end == "*" else end for end in ends)
    return RevisionRange(first, last)
