"""Report policies and stream operators over a sequence of window results (RSP-QL / SECRET vocabulary).

Pure: no I/O. A ``Reporter`` is fed every window of one continuous response (or rule) in order, with
the window's end time (µs) and its *content* — the window's result: solutions as hashable rows, or
triples/quads. It answers, per window, what to emit (after the stream operator) or ``None`` when the
report policy says not to report that window.

Stream operators (CQL's R2S: Rstream, Istream, Dstream)
-------------------------------------------------------
The operator compares a window's content with the content of the **previous window** — not with the
previous *report*: a window that is not reported still becomes "the previous window" of the next
one. The previous window of the first window is empty.

- ``rstream``: the content;
- ``istream``: content − previous (what entered);
- ``dstream``: previous − content (what left).

Contents are sets (``frozenset``), as in the CSRBench oracle, whose relations are Java ``HashSet``\\ s.
A caller that needs bag semantics numbers equal rows, ``(row, 1), (row, 2), …``, so that set
difference becomes multiset difference (``conformance/csrbench.py`` does this).

Report policies
---------------
``Reporter.on_window`` is called once per window, when the window closes. ``window-close`` is the
base policy: every window is a candidate for a report. The other policies are conditions; a window
is reported when **all** the selected conditions hold (a conjunction, as SECRET describes
combinations such as "window close and non-empty content"):

- ``window-close``: always holds;
- ``content-change``: the window's content differs from the previous window's content;
- ``non-empty-content``: the window holds at least one stream element (its *input*, not its result).
  A window without elements is not evaluated at all: it is not reported and does **not** become the
  previous window of the next one (the CSRBench oracle's ``nonemptycontent``). The caller passes the
  window's element count (``on_window(…, elements=n)``); without it the condition holds;
- ``non-empty``: what would be emitted (after the operator) is non-empty;
- ``periodic:P``: with e0 the first window's end, the window is the first one to close at or after the
  next due time e0 + k·P (e0 itself is the first due time). Once a window is reported, the next due
  time is the first multiple after its end; a window that is due but not reported (another condition
  failed) leaves the due time pending, so ``periodic`` + ``non-empty`` reports the first *non-empty*
  window at or after each due time.

Worked example (windows ending at 10, 20, 30, 40, 50 s with contents {}, {a}, {a}, {a,b}, {}):

=============================== ====== ====== ====== ======= ======
policies / operator              10 s   20 s   30 s   40 s    50 s
=============================== ====== ====== ====== ======= ======
window-close, rstream            {}     {a}    {a}    {a,b}   {}
window-close, istream            {}     {a}    {}     {b}     {}
window-close, dstream            {}     {}     {}     {}      {a,b}
content-change, rstream          —      {a}    —      {a,b}   {}
non-empty, rstream               —      {a}    {a}    {a,b}   —
non-empty, istream               —      {a}    —      {b}     —
content-change+non-empty         —      {a}    —      {a,b}   —
periodic:PT20S, rstream          {}     —      {a}    —       {}
=============================== ====== ====== ====== ======= ======

How the CSRBench oracle's configuration maps onto this (``resources/*.properties``)
-------------------------------------------------------------------------------------
The oracle (Dell'Aglio et al., ISWC 2013) has four switches; here is where each one goes, and where
we had to choose:

- ``system.policy.windowclose = true`` (C-SPARQL, SPARQLstream): the windows are the query's windows,
  each evaluated when it closes → ``window-close``.
- ``system.policy.contentchange = true`` (CQELS): the oracle evaluates the query again at **every
  arrival of stream content**, over the content of the oldest open window so far; it does not compare
  contents itself — with ``istream`` and no empty relations an unchanged content emits nothing. That
  is a different sequence of "windows" (one per arrival), which the caller produces and feeds to the
  ``Reporter`` (``conformance/csrbench.py``; continuous responses with ``report=content-change``,
  ``protocol/continuous.py``); ``content-change`` then also drops unchanged contents
  explicitly, which with ``istream`` + ``non-empty`` changes nothing and with ``rstream`` removes
  repeated reports. The oracle refuses windowclose and contentchange together; we allow it (a window
  close reported only if its content changed).
- ``system.policy.nonemptycontent = true``: the oracle skips a window whose **input** (the stream
  elements in it) is empty — it is not evaluated and does not become the operator's previous window
  → our ``non-empty-content`` (the caller gives the element count, or does not call ``on_window``
  for windows without elements).
- ``system.output.emptyrelation = false``: the oracle drops a relation that is empty after the
  operator → our ``non-empty``. ``true`` (C-SPARQL) → no ``non-empty``: empty relations are
  reported.

So C-SPARQL's configuration is ``window-close,non-empty-content`` + ``rstream``, and CQELS's is
``content-change,non-empty-content,non-empty`` + ``istream`` over per-arrival windows (each of which holds
at least the arriving element).
``periodic`` is not in the oracle; it follows SECRET's periodic report (reported at most once per
period, at a window close).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

import isodate

from sparql_ext.errors import ReportSyntaxError


class ReportPolicy(StrEnum):  # a (str, Enum)
    """When a window is reported (SECRET's report strategies)."""

    WINDOW_CLOSE = "window-close"
    CONTENT_CHANGE = "content-change"
    NON_EMPTY = "non-empty"
    NON_EMPTY_CONTENT = "non-empty-content"
    PERIODIC = "periodic"


class StreamOperator(StrEnum):  # a (str, Enum)
    """What a report holds, relative to the previous window (CQL's relation-to-stream operators)."""

    RSTREAM = "rstream"
    ISTREAM = "istream"
    DSTREAM = "dstream"


@dataclass(frozen=True)
class ReportSpec:
    """Parsed report policies and operator; ``period`` is in µs, set exactly when PERIODIC is."""

    policies: frozenset[ReportPolicy]
    operator: StreamOperator
    period: int | None = None


DEFAULT_SPEC = ReportSpec(frozenset({ReportPolicy.WINDOW_CLOSE}), StreamOperator.RSTREAM, None)
_MICROSECOND = timedelta(microseconds=1)


@functools.lru_cache(maxsize=1024)  # pure, and immutable results: asked per firing and per rule listed
def parse_report(report: str | None, operator: str | None) -> ReportSpec:
    """Parse a comma-separated policy list (``periodic`` written ``periodic:PT10S``) and an operator.

    ``None`` means the default: ``window-close`` and ``rstream``. Names are case-insensitive.

    >>> parse_report("non-empty, periodic:PT10S", "istream").period
    10000000
    >>> parse_report(None, None) == DEFAULT_SPEC
    True
    """
    policies: set[ReportPolicy] = set()
    period: int | None = None
    if report is None:
        policies.add(ReportPolicy.WINDOW_CLOSE)
    else:
        if not report.strip():
            raise ReportSyntaxError(f"report={report!r}: names no policy (use e.g. window-close,non-empty)")
        for raw in report.split(","):
            part = raw.strip()
            name, colon, argument = part.partition(":")
            policy = _policy(report, part, name.strip().lower())
            if policy in policies:
                raise ReportSyntaxError(f"report={report!r}: policy {policy.value!r} is given twice")
            if policy is ReportPolicy.PERIODIC:
                if not colon or not argument.strip():
                    raise ReportSyntaxError(
                        f"report={report!r}: {part!r} needs a period, e.g. periodic:PT10S")
                period = _period(report, argument.strip())
            elif colon:
                raise ReportSyntaxError(f"report={report!r}: {part!r}: only periodic takes an argument")
            policies.add(policy)
    return ReportSpec(frozenset(policies), _operator(operator), period)


def _policy(report: str, part: str, name: str) -> ReportPolicy:
    if not name:
        raise ReportSyntaxError(f"report={report!r}: an empty policy name (stray comma?)")
    try:
        return ReportPolicy(name)
    except ValueError:
        known = ", ".join(policy.value for policy in ReportPolicy)
        raise ReportSyntaxError(f"report={report!r}: {part!r} is not a report policy ({known})") from None


def _period(report: str, text: str) -> int:
    try:
        value = isodate.parse_duration(text)
    except (ValueError, isodate.ISO8601Error):
        raise ReportSyntaxError(
            f"report={report!r}: period {text!r} is not an ISO 8601 duration (e.g. PT10S)") from None
    if not isinstance(value, timedelta):
        raise ReportSyntaxError(
            f"report={report!r}: period {text!r} has years or months, which have no fixed length")
    micros = value // _MICROSECOND
    if micros <= 0:
        raise ReportSyntaxError(f"report={report!r}: period {text!r} must be positive")
    return micros


def _operator(operator: str | None) -> StreamOperator:
    if operator is None:
        return StreamOperator.RSTREAM
    try:
        return StreamOperator(operator.strip().lower())
    except ValueError:
        known = ", ".join(op.value for op in StreamOperator)
        raise ReportSyntaxError(f"operator={operator!r} is not a stream operator ({known})") from None


@dataclass
class Reporter:
    """The report state of one continuous response or rule: feed it every window, in order."""

    spec: ReportSpec
    _previous: frozenset = field(default=frozenset(), init=False, repr=False)  # type: ignore[type-arg]
    _first_end: int | None = field(default=None, init=False, repr=False)
    _next_due: int | None = field(default=None, init=False, repr=False)
    _last_end: int | None = field(default=None, init=False, repr=False)
    _previous_items: list = field(default_factory=list, init=False, repr=False)  # type: ignore[type-arg]
    _everything: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        # RStream at every window close (the default): each window's items as they are, with nothing to compare,
        # so none of them is hashed (a rule's every firing goes through here)
        self._everything = self.spec == DEFAULT_SPEC

    def report(self, end: int, items: list, elements: int | None = None) -> list | None:  # type: ignore[type-arg]
        """``on_window`` for an ordered result: the items to emit in their order (the window's for RStream and
        IStream, the previous window's for DStream), or None when the window is not reported."""
        if self._everything:
            self._in_order(end)
            return items
        previous = self._previous_items
        emitted = self.on_window(end, items, elements)
        if not (ReportPolicy.NON_EMPTY_CONTENT in self.spec.policies and elements == 0):
            self._previous_items = items  # a window skipped for having no elements is not the previous one
        if emitted is None:
            return None
        source = previous if self.spec.operator is StreamOperator.DSTREAM else items
        return [item for item in source if item in emitted]

    def on_window(self, end: int, content: Iterable[Hashable],
                  elements: int | None = None) -> frozenset[Hashable] | None:
        """What to emit for the window ending at ``end`` (µs), or None when it is not reported. ``elements``:
        how many stream elements the window holds (``non-empty-content``; None = not known, the condition
        holds)."""
        self._in_order(end)
        if ReportPolicy.NON_EMPTY_CONTENT in self.spec.policies and elements == 0:
            return None  # not evaluated: not reported, not the previous window of the next one
        if self._first_end is None:
            self._first_end = self._next_due = end  # e0: the first window's end, reported or not
        current = frozenset(content)
        previous, self._previous = self._previous, current
        match self.spec.operator:
            case StreamOperator.RSTREAM:
                emitted = current
            case StreamOperator.ISTREAM:
                emitted = current - previous
            case StreamOperator.DSTREAM:
                emitted = previous - current
        policies = self.spec.policies
        if ReportPolicy.CONTENT_CHANGE in policies and current == previous:
            return None
        if ReportPolicy.NON_EMPTY in policies and not emitted:
            return None
        if ReportPolicy.PERIODIC in policies:
            period = self.spec.period
            if period is None:
                raise ValueError("a periodic report spec needs a period")
            assert self._first_end is not None and self._next_due is not None
            if end < self._next_due:
                return None
            self._next_due = self._first_end + ((end - self._first_end) // period + 1) * period
        return emitted

    def _in_order(self, end: int) -> None:
        if self._last_end is not None and end < self._last_end:
            raise ValueError(f"windows must come in order: end {end} after {self._last_end}")
        self._last_end = end
