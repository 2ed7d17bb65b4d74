"""The options of an event rule (docs/events.md), pure: when it evaluates, where it starts, how deep it recurses.

- ``evaluate=Rn/T/β`` (:class:`EvaluationTimes`): RSEP-QL's evaluation at chosen times t0 = T, T + β, T + 2β, … (seed
  001 §4, Examples 10 and 11 evaluate at 8 and 10) instead of at every arriving element;
- ``from=`` (:func:`parse_replay_start`): the rule's matching starts at an ordinal or a time of its streams' history
  instead of after their HEAD;
- ``depth=`` (:func:`parse_depth`): the bound on the derivation depth of the events a recursive rule derives.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from sparql_ext.errors import ConcentratorError, SparqlExtError
from sparql_ext.revision import Instant, parse_instant
from sparql_ext.windowing import format_micros, to_micros
from sparql_ext.windowref import format_duration, parse_window_ref

DEFAULT_DEPTH = 8  # derivation steps a recursive event rule may take from its external elements
MAX_DEPTH = 1_000
#: evaluation times evaluated between two elements at the most (``EvaluationTimes.due``)
MAX_EVALUATIONS = 10_000


class EventRuleOptionError(SparqlExtError):
    """An event rule option (``evaluate=``, ``from=``, ``depth=``) that is not well formed (400)."""


@dataclass(frozen=True)
class EvaluationTimes:
    """RSEP-QL's evaluation times of a rule: ``start + k·step`` for k = 0, 1, … (fewer than ``count`` when given)."""

    start: int  # µs
    step: int  # µs, > 0
    count: int | None = None

    def __str__(self) -> str:
        repeat = "R" if self.count is None else f"R{self.count}"
        return f"{repeat}/{format_micros(self.start)}/{format_duration(timedelta(microseconds=self.step))}"

    def between(self, after: int | None, before: int) -> Iterator[int]:
        """The evaluation times t with ``after`` < t < ``before`` (``after`` None: from the first), in order."""
        k = 0 if after is None or after < self.start else (after - self.start) // self.step + 1
        while self.count is None or k < self.count:
            t = self.start + k * self.step
            if t >= before:
                return
            yield t
            k += 1

    def due(self, after: int | None, before: int, limit: int = MAX_EVALUATIONS) -> tuple[list[int], int]:
        """``between(after, before)`` bounded: at most ``limit`` times (the first ``limit - 1`` and the last), and how
        many were left out, so that a short β across a long gap between two elements cannot hold the rule's worker
        (and Python's lock) for billions of evaluations.

        >>> EvaluationTimes(0, 1).due(None, 10, limit=4)
        ([0, 1, 2, 9], 6)
        """
        times = list(itertools.islice(self.between(after, before), limit))
        if len(times) < limit:
            return times, 0
        k_last = (before - 1 - self.start) // self.step
        if self.count is not None:
            k_last = min(k_last, self.count - 1)
        last = self.start + k_last * self.step
        if last <= times[-1]:
            return times, 0
        return [*times[:-1], last], (last - times[-2]) // self.step - 1

    def skipped_before(self, before: int) -> int:
        """The latest evaluation time strictly before ``before`` (just before the first when there is none): where
        a rule whose first element is at ``before`` starts (no evaluation before an element has anything to see)."""
        if before <= self.start:
            return self.start - 1
        k = (before - self.start - 1) // self.step
        if self.count is not None:
            k = min(k, self.count - 1)
        return self.start + k * self.step


def parse_evaluation_times(text: str) -> EvaluationTimes:
    """``R/T/β`` or ``Rn/T/β`` (ISO 8601's repeating interval: T an ``xsd:dateTime``, β a positive duration).

    >>> str(parse_evaluation_times("R/1970-01-01T00:00:08Z/PT2S"))
    'R/1970-01-01T00:00:08Z/PT2S'
    >>> list(parse_evaluation_times("R2/1970-01-01T00:00:08Z/PT2S").between(None, 20_000_000))
    [8000000, 10000000]
    """
    hint = "evaluate= is R/T/β or Rn/T/β: evaluations at T, T+β, T+2β, … (e.g. R/2024-01-01T00:00:08Z/PT2S)"
    try:
        ref = parse_window_ref(text)
    except ConcentratorError as error:
        raise EventRuleOptionError(f"{hint}; {error.message}") from None
    if not ref.repeating or not isinstance(ref.start, Instant) or ref.width is None or ref.step is not None \
            or ref.width <= timedelta(0):
        raise EventRuleOptionError(f"{hint}; {text!r} is not of that form")
    step = ref.width // timedelta(microseconds=1)
    return EvaluationTimes(to_micros(ref.start.at), step, ref.count)


def parse_replay_start(text: str) -> tuple[int, int | None]:
    """``from=``: an element ordinal (≥ 1), or an ``xsd:dateTime`` (µs: from the first element at or after it), as
    (ordinal, None) or (0, time)."""
    value = text.strip()
    if value.isdigit():
        if int(value) < 1:
            raise EventRuleOptionError("from= is an element ordinal (1 is the first) or an xsd:dateTime")
        return int(value), None
    try:
        return 0, to_micros(parse_instant(value, f"from={value!r}").at)
    except ConcentratorError as error:
        raise EventRuleOptionError(f"from= is an element ordinal or an xsd:dateTime: {error.message}") from None


def parse_depth(text: str | None) -> int:
    """``depth=``: how many derivation steps a recursive rule may take (default ``DEFAULT_DEPTH``)."""
    if text is None or text == "":
        return DEFAULT_DEPTH
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_DEPTH:
        raise EventRuleOptionError(f"depth= is a number of derivation steps from 1 to {MAX_DEPTH}, not {text!r}")
    return int(text)

