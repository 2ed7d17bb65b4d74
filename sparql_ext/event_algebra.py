"""The operators of event patterns over a set of live events (seed 001 Eqs. 4–11, seed 000 §3): one evaluation at
one time, as ``event_matching.EventMatcher`` runs it. Each method is the transcription of one definition:

- EVENT (Eq. 4): the solutions of P on each element of the EVENT's window at t, each an event (µ, t_k, t_k);
- E1 SEQ E2 (Eq. 7): for each (µ2, t3, t4) of E2, the events (µ1, t1, t2) of µ2(E1) within W ⊔ [0, t3 − 1] • W —
  E2's bindings substituted (a compatible join) and E1 ending before E2 starts — give (µ1 ∪ µ2, t1, t4);
- FIRST / LAST (Eqs. 5–6) for the order ``(t1, t2) ≺ (t3, t4)`` iff ``t2 < t3`` (*ends strictly before the other
  starts*: the same "before" as SEQ's; the seed leaves ≺ to the application);
- SEQn (Eq. 9): LAST E1 and LAST E2, joined when the first is ≺ the second; SEQc / SEQr (Eqs. 10–11): the ≺-first
  (≺-last) E2 events that have a partner, each with its FIRST (LAST) partner;
- EQUALS, OPTIONALSEQ, EQUALSOPTIONAL, AND, UNION, OPTIONAL, FILTER: EP-SPARQL's EqJoin, SeqRightJoin, EqLeftJoin,
  Join, Union, LeftJoin and Filter, the interval of a join being (min of the starts, max of the ends), δ giving the
  interval functions their values.

``Mode.NEW`` asks only for the events that use at least one basic event newer than the previous evaluation's window
(semi-naive evaluation of the monotone operators, see ``events.is_monotone``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping
from enum import Enum
from typing import Any, NamedTuple

from sparql_ext.events import (
    Bindings,
    Equals,
    EqualsOptional,
    Event,
    EventFilter,
    EventPattern,
    Filtered,
    FilterFunction,
    First,
    Join,
    Last,
    LeftJoin,
    OptionalSeq,
    Selection,
    Seq,
    Term,
    Union,
    basic_events,
    is_monotone,
)

LOW, HIGH = -(2**63), 2**63  # bounds beyond any µs time
_ABSENT = object()


class Mode(Enum):
    ALL = "all"
    NEW = "new"  # using at least one event that entered its window since the previous evaluation
    OLD = "old"  # using none


class Partner(Enum):
    """Where an optional join's partner lies relative to the mandatory event (seed 000's three optional joins)."""

    EQUAL = "equal"  # EqLeftJoin: on the same interval
    BEFORE = "before"  # SeqRightJoin: ends before the mandatory event starts
    UNTIL = "until"  # LeftJoin: ends no later than the mandatory event ends (timewise monotonicity)


class BasicEvent:
    """One solution of an EVENT's P on one element: the event (µ, t, t)."""

    __slots__ = ("event", "stream", "ordinal", "time", "bindings", "alive")

    def __init__(self, event: int, stream: str | None, ordinal: int, time: int, bindings: dict[str, Term]) -> None:
        self.event, self.stream, self.ordinal, self.time, self.bindings = event, stream, ordinal, time, bindings
        self.alive = True


class EventMapping(NamedTuple):
    """An event mapping (µ, start, end) and the basic events it was made of."""

    bindings: dict[str, Term]
    start: int
    end: int
    uses: tuple[BasicEvent, ...]


def ordinal_of(basic: BasicEvent) -> int:
    return basic.ordinal


def time_of(basic: BasicEvent) -> int:
    return basic.time


def start_of(ev: EventMapping) -> int:
    return ev.start


class EventStore:
    """The live basic events of one EVENT, by ordinal, indexed by (variable, term) for the variables every
    solution so far binds (so that substituted bindings, Eq. 7's µ2(E1), are looked up, not scanned)."""

    def __init__(self, key: str) -> None:
        self.key = key  # of the EVENT's window
        self.events: list[BasicEvent] = []
        self.index: dict[tuple[str, Term], list[BasicEvent]] = {}
        self.always: set[str] | None = None
        self.seen = -1  # the last ordinal in the window at the previous evaluation (-1: the window was empty)
        self.dead = 0

    def add(self, basic: BasicEvent) -> None:
        self.events.append(basic)
        for item in basic.bindings.items():
            self.index.setdefault(item, []).append(basic)
        self.always = set(basic.bindings) if self.always is None else self.always & basic.bindings.keys()

    def candidates(self, ctx: Bindings) -> list[BasicEvent]:
        best = self.events
        for name in self.always or ():
            if name in ctx and len(found := self.index.get((name, ctx[name]), [])) < len(best):
                best = found
        return best

    def kill(self, first: int, last: int) -> None:
        """Consume or evict the events of elements first..last."""
        for basic in self.events[bisect_left(self.events, first, key=ordinal_of):
                                 bisect_right(self.events, last, key=ordinal_of)]:
            if basic.alive:
                basic.alive = False
                self.dead += 1
        if self.dead > 32 and self.dead * 2 > len(self.events):
            self.events = [basic for basic in self.events if basic.alive]
            self.index = {k: kept for k, v in self.index.items() if (kept := [b for b in v if b.alive])}
            self.dead = 0


class SeqMemo:
    """What a top-level SEQc / SEQr found at the previous evaluation (a cache: an empty one only costs a full pass).
    With monotone E1 and E2, an E2 event that is not new was one before; without a partner then it can only have
    gained one among E1's *new* events, early enough; with one it keeps it while that partner is live."""

    def __init__(self) -> None:
        self.candidates: dict[tuple[BasicEvent, ...], tuple[EventMapping, tuple[BasicEvent, ...]]] = {}
        self.waiting: list[EventMapping] = []  # E2 events without a partner, by start
        self.checks = 0  # evaluations since ``waiting`` was last rid of dead events

    def place(self, right: EventMapping, partners: list[EventMapping]) -> None:
        if partners:
            self.candidates[right.uses] = (right, partners[0].uses)
        else:
            insort(self.waiting, right, key=start_of)


Memo = dict[int, SeqMemo]  # by id() of the Seq node


class Evaluation:
    """The pattern's events at one evaluation: ``runs`` are the windows at t (first and last ordinal, None if
    empty) by window key, ``stores`` the live basic events by EVENT ident, ``new_from`` the time of each EVENT's
    earliest new element (None: none)."""

    def __init__(self, runs: Mapping[str, tuple[int, int] | None], stores: list[EventStore],
                 new_from: Mapping[int, int | None], filter: FilterFunction | None, memo: Memo | None = None) -> None:
        self._runs, self._stores, self._new_from, self._filter = runs, stores, new_from, filter
        self._memo: Memo = {} if memo is None else memo

    def events(self, node: EventPattern, lo: int, hi: int, ctx: Bindings, mode: Mode) -> list[EventMapping]:
        """The events of ``node`` that end at or before ``hi`` (the active window's restriction, Eq. 7's
        W ⊔ [0, t3 − 1]), compatible with ``ctx`` (the substituted bindings), starting at or after ``lo`` (a
        pruning bound only: non-monotone nodes compute their answer whole, then drop the earlier events)."""
        match node:
            case Event():
                return self._basic(node, lo, hi, ctx, mode)
            case Filtered(operand=operand, filters=filters):
                return [ev for ev in self.events(operand, lo, hi, ctx, mode) if self._holds(filters, ev)]
            case Seq(selection=Selection.UNRESTRICTED):
                return self._seq(node, lo, hi, ctx, mode)
            case Equals():
                return self._equals(node, lo, hi, ctx, mode)
            case Join():
                return self._join(node, lo, hi, ctx, mode)
            case Union(left=left, right=right):
                return self.events(left, lo, hi, ctx, mode) + self.events(right, lo, hi, ctx, mode)
        return [ev for ev in self._selective(node, hi, ctx) if ev.start >= lo]

    def _basic(self, node: Event, lo: int, hi: int, ctx: Bindings, mode: Mode) -> list[EventMapping]:
        run, store = self._runs[node.window.key], self._stores[node.ident]
        if run is None:
            return []
        first, last = run
        if mode is Mode.NEW:
            first = max(first, store.seen + 1)
        elif mode is Mode.OLD:
            last = min(last, store.seen)
        items = store.candidates(ctx)
        a = bisect_left(items, first, key=ordinal_of)
        b = bisect_right(items, last, a, key=ordinal_of)
        a, b = bisect_left(items, lo, a, b, key=time_of), bisect_right(items, hi, a, b, key=time_of)
        return [EventMapping(basic.bindings, basic.time, basic.time, (basic,)) for basic in items[a:b]
                if basic.alive and compatible(basic.bindings, ctx)]

    def _seq(self, node: Seq, lo: int, hi: int, ctx: Bindings, mode: Mode) -> list[EventMapping]:
        """Eq. (7); semi-naive when only new matches are wanted."""
        halves: list[tuple[Mode, Mode, int]] = [(Mode.NEW, Mode.ALL, lo)] if mode is Mode.NEW else [(mode, mode, lo)]
        if mode is Mode.NEW and (earliest := self._earliest_new(node.left)) is not None:
            halves.append((Mode.OLD, Mode.NEW, max(lo, earliest + 1)))  # E2 starts after E1's new event
        out = []
        for right_mode, left_mode, right_lo in halves:
            for right in self.events(node.right, right_lo, hi, ctx, right_mode):
                for left in self.events(node.left, lo, right.start - 1, {**ctx, **right.bindings}, left_mode):
                    out.append(combine(left, right))
        return out

    def _equals(self, node: Equals, lo: int, hi: int, ctx: Bindings, mode: Mode) -> list[EventMapping]:
        halves = [(Mode.NEW, Mode.ALL), (Mode.OLD, Mode.NEW)] if mode is Mode.NEW else [(mode, mode)]
        out = []
        for left_mode, right_mode in halves:
            for left in self.events(node.left, lo, hi, ctx, left_mode):
                out += [combine(left, right) for right in self.events(
                        node.right, left.start, left.end, {**ctx, **left.bindings}, right_mode)
                        if (right.start, right.end) == (left.start, left.end)]
        return out

    def _join(self, node: Join, lo: int, hi: int, ctx: Bindings, mode: Mode) -> list[EventMapping]:
        """EP-SPARQL's Join: no order in time, so the events of one side (the new ones, semi-naively: new E1 ⋈ E2 ∪
        new E2 ⋈ old E1) are the outer loop and their partners are looked up with their bindings substituted, never
        scanned. A side that selects among events (FIRST, SEQc, …) is evaluated once, without them: its answer is not
        the same under substitution."""
        sides = [(node.left, Mode.NEW, node.right, Mode.ALL), (node.right, Mode.NEW, node.left, Mode.OLD)] \
            if mode is Mode.NEW else [(node.left, mode, node.right, mode)]
        out = []
        for outer, outer_mode, inner, inner_mode in sides:
            if is_monotone(inner):
                for one in self.events(outer, lo, hi, ctx, outer_mode):
                    out += [combine(one, two)
                            for two in self.events(inner, lo, hi, {**ctx, **one.bindings}, inner_mode)]
                continue
            others = self.events(inner, lo, hi, ctx, inner_mode)
            out += [combine(one, two) for one in self.events(outer, lo, hi, ctx, outer_mode) for two in others
                    if compatible(two.bindings, one.bindings)]
        return out

    def _selective(self, node: EventPattern, hi: int, ctx: Bindings) -> list[EventMapping]:
        """The operators that select among events, evaluated whole over the live events."""
        match node:
            case First(operand=operand):
                return first_events(self.events(operand, LOW, hi, ctx, Mode.ALL))
            case Last(operand=operand):
                return last_events(self.events(operand, LOW, hi, ctx, Mode.ALL))
            case Seq(left=left, right=right, selection=Selection.NAIVE):  # Eq. (9)
                lasts = last_events(self.events(left, LOW, hi, ctx, Mode.ALL))
                return [combine(one, two) for two in last_events(self.events(right, LOW, hi, ctx, Mode.ALL))
                        for one in lasts if one.end < two.start and compatible(one.bindings, two.bindings)]
            case Seq():
                return self._policy_seq(node, hi, ctx)
            case OptionalSeq(optional=optional, mandatory=mandatory, condition=condition):
                return self._optional(mandatory, optional, condition, hi, ctx, Partner.BEFORE)
            case EqualsOptional(mandatory=mandatory, optional=optional, condition=condition):
                return self._optional(mandatory, optional, condition, hi, ctx, Partner.EQUAL)
            case LeftJoin(mandatory=mandatory, optional=optional, condition=condition):
                return self._optional(mandatory, optional, condition, hi, ctx, Partner.UNTIL)
        raise TypeError(f"not an event pattern: {node!r}")

    def _policy_seq(self, node: Seq, hi: int, ctx: Bindings) -> list[EventMapping]:
        """Eqs. (10) and (11): among the E2 events that have an earlier compatible E1 event, the first (SEQc) or
        last (SEQr) ones for ≺, each joined with its FIRST (SEQc) or LAST (SEQr) such E1 events."""
        candidates = self._candidates(node, hi, ctx)
        if not candidates:
            return []
        # ≺-minimal among candidates: start ≤ the least end of any candidate; ≺-maximal: end ≥ the greatest start
        if node.selection is Selection.CHRONOLOGICAL:
            least_end = min(right.end for right in candidates)
            chosen, pick = [right for right in candidates if right.start <= least_end], first_events
        else:
            greatest_start = max(right.start for right in candidates)
            chosen, pick = [right for right in candidates if right.end >= greatest_start], last_events
        return [combine(left, right) for right in chosen for left in pick(self._partners(node, right, ctx, Mode.ALL))]

    def _partners(self, node: Seq, right: EventMapping, ctx: Bindings, mode: Mode) -> list[EventMapping]:
        """⟪µ2(E1)⟫ within W ⊔ [0, t3 − 1] • W for an E2 event (µ2, t3, t4)."""
        return self.events(node.left, LOW, right.start - 1, {**ctx, **right.bindings}, mode)

    def _candidates(self, node: Seq, hi: int, ctx: Bindings) -> list[EventMapping]:
        """The E2 events that have a partner; at a pattern's top (nothing substituted, no restriction) with monotone
        E1 and E2, semi-naively through the node's ``SeqMemo``, so that a landmark window of partnerless events
        costs nothing per element."""
        if ctx or hi != HIGH or not (is_monotone(node.left) and is_monotone(node.right)):
            return [right for right in self.events(node.right, LOW, hi, ctx, Mode.ALL)
                    if self._partners(node, right, ctx, Mode.ALL)]
        memo = self._memo.get(id(node))
        if memo is None:
            memo = self._memo[id(node)] = SeqMemo()
            fresh = self.events(node.right, LOW, HIGH, {}, Mode.ALL)
        else:
            fresh = self.events(node.right, LOW, HIGH, {}, Mode.NEW)
            self._refresh(node, memo)
        for right in fresh:
            memo.place(right, self._partners(node, right, {}, Mode.ALL))
        return [right for right, _ in memo.candidates.values()]

    def _refresh(self, node: Seq, memo: SeqMemo) -> None:
        for uses, (right, partner) in list(memo.candidates.items()):
            if not self._live(uses):
                del memo.candidates[uses]
            elif not self._live(partner):
                del memo.candidates[uses]
                memo.place(right, self._partners(node, right, {}, Mode.ALL))
        earliest = self._earliest_new(node.left)
        if earliest is not None:  # only the waiting events starting after a new E1 event can have gained one
            cut = bisect_right(memo.waiting, earliest, key=start_of)
            memo.waiting, recheck = memo.waiting[:cut], memo.waiting[cut:]
            for right in recheck:
                if self._live(right.uses):
                    memo.place(right, self._partners(node, right, {}, Mode.NEW))
        memo.checks += 1
        if memo.checks >= len(memo.waiting):  # amortized: dead waiting events are dropped once in a while
            memo.waiting = [right for right in memo.waiting if self._live(right.uses)]
            memo.checks = 0

    def _live(self, uses: tuple[BasicEvent, ...]) -> bool:
        """True while each basic event is unconsumed and in its window."""
        for basic in uses:
            run = self._runs[self._stores[basic.event].key]
            if not basic.alive or run is None or not run[0] <= basic.ordinal <= run[1]:
                return False
        return True

    def _optional(self, mandatory: EventPattern, optional: EventPattern, condition: tuple[EventFilter, ...],
                  hi: int, ctx: Bindings, partner: Partner) -> list[EventMapping]:
        """EqLeftJoin, SeqRightJoin or LeftJoin (``partner``: where the optional event lies): each mandatory event
        joined with its optional partners that satisfy the condition, else alone."""
        out = []
        for kept in self.events(mandatory, LOW, hi, ctx, Mode.ALL):
            low, high = {Partner.EQUAL: (kept.start, kept.end), Partner.BEFORE: (LOW, kept.start - 1),
                         Partner.UNTIL: (LOW, kept.end)}[partner]
            joined = [combine(other, kept) for other in self.events(optional, low, high, {**ctx, **kept.bindings},
                                                                    Mode.ALL)
                      if partner is not Partner.EQUAL or (other.start, other.end) == (kept.start, kept.end)]
            joined = [ev for ev in joined if self._holds(condition, ev)]
            out += joined or [kept]
        return out

    def _holds(self, filters: tuple[EventFilter, ...], ev: EventMapping) -> bool:
        assert self._filter is not None or not filters, "checked when the matcher was made"
        return all(self._filter(f, ev.bindings, ev.start, ev.end) for f in filters)  # type: ignore[misc]

    def _earliest_new(self, node: EventPattern) -> int | None:
        times = [self._new_from[event.ident] for event in basic_events(node)]
        return min((time for time in times if time is not None), default=None)


def compatible(bindings: Bindings, ctx: Bindings) -> bool:
    """µ ~ µ': every shared variable has the same term (RDF term equality, as SPARQL's compatibility)."""
    for name, value in bindings.items():
        other = ctx.get(name, _ABSENT)
        if other is not _ABSENT and other != value:
            return False
    return True


def combine(one: EventMapping, two: EventMapping) -> EventMapping:
    """EP-SPARQL's ⋈ of compatible event mappings: the union of the bindings over the union of the intervals."""
    return EventMapping({**one.bindings, **two.bindings}, min(one.start, two.start), max(one.end, two.end),
                        one.uses + two.uses)


def first_events(events: list[EventMapping]) -> list[EventMapping]:
    """Eq. (5) for ≺ = "ends strictly before the other starts": an event is first unless one ends before it starts."""
    least_end = min((ev.end for ev in events), default=HIGH)
    return [ev for ev in events if ev.start <= least_end]


def last_events(events: list[EventMapping]) -> list[EventMapping]:
    """Eq. (6): an event is last unless one starts after it ends."""
    greatest_start = max((ev.start for ev in events), default=LOW)
    return [ev for ev in events if ev.end >= greatest_start]


def match_key(ev: EventMapping) -> tuple[Any, ...]:
    """A match's identity: interval, constituent elements (time order), bindings (by name)."""
    elements = sorted({(basic.stream, basic.ordinal, basic.time) for basic in ev.uses},
                      key=lambda e: (e[2], e[0] is not None, e[0] or "", e[1]))
    return (ev.start, ev.end, tuple((stream, ordinal) for stream, ordinal, _ in elements),
            tuple(sorted(ev.bindings.items(), key=lambda item: item[0])))

