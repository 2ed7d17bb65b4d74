"""The incremental matcher of a MATCH clause: RSEP-QL's event pattern semantics (seed 001 Eqs. 4–11, Defs. 8–10) and
EP-SPARQL's joins (seed 000 §3), evaluated as stream elements arrive (``sparql_ext.events`` has the contract).

State: per stream a log of the (ordinal, time) of the elements its windows can still reach; per EVENT the live
*basic events* — one per solution of P on an element — until the element leaves that EVENT's window for good or is
consumed. Evaluation at time t (``arrive``, or ``add`` then ``evaluate``):

1. each window's run of the stream at t (``event_windows``);
2. the pattern, operator by operator as the seeds define them, over the live events (``event_algebra``);
3. the new matches. A *monotone* pattern (EVENT, SEQ, EQUALS, FILTER: ``events.is_monotone``) gains a match only
   through an event that entered its window since the previous evaluation, so only those are joined, semi-naively
   (new(E1 SEQ E2) = new E2 ⋈ all E1 ∪ old E2 ⋈ new E1): the work per element is that element's partners, not the
   windows. Other patterns are re-evaluated over the live events and what was already emitted is left out;
4. consumption (Def. 10): under CHRONOLOGICAL or RECENT the elements used by this evaluation's matches are gone from
   the input of the windows they were used in (a window's input is shared by the EVENTs over it, as RSEP-QL's
   I_i(w_j)). The pure core sees solutions, not triples, so the unit consumed is the element: as the seed's
   Example 11 has it, "the evaluation will consume G1, G2, and G3";
5. eviction of what no window can reach again (windows only move forward).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparql_ext.event_algebra import (
    HIGH,
    LOW,
    BasicEvent,
    Evaluation,
    EventMapping,
    EventStore,
    Memo,
    Mode,
    match_key,
)
from sparql_ext.event_windows import ResolvedWindow
from sparql_ext.events import (
    Bindings,
    Consumption,
    ElementRef,
    EventOrderError,
    EventPatternError,
    EventStateError,
    FilterFunction,
    Match,
    MatchClause,
    Term,
    filters_of,
    is_monotone,
)
from sparql_ext.windowing import ElementIndex, ListIndex

_FORMAT = "event-matcher/1"


class EventMatcher:
    """Matches one MATCH clause incrementally; see ``sparql_ext.events`` for how an engine drives it."""

    def __init__(self, clause: MatchClause, *, index_of: Callable[[str | None], ElementIndex] | None = None,
                 filter: FilterFunction | None = None) -> None:
        """Resolve the clause's windows against the streams as they are now (registration); ``index_of(stream)``
        defaults to empty streams (``HEAD`` then waits for the first element)."""
        lookup = index_of or (lambda stream: ListIndex(()))
        windows: dict[str, ResolvedWindow] = {}
        for event in clause.events:
            if event.window.key not in windows:
                windows[event.window.key] = ResolvedWindow.of(event.window, lookup(event.window.stream))
        self._setup(clause, filter, windows)

    def _setup(self, clause: MatchClause, filter: FilterFunction | None, windows: dict[str, ResolvedWindow]) -> None:
        if filters_of(clause.pattern) and filter is None:
            raise EventPatternError("this MATCH has FILTERs: the matcher needs a filter function to evaluate them")
        self.clause, self._filter, self._windows = clause, filter, windows
        self._stores = [EventStore(event.window.key) for event in clause.events]
        self._logs: dict[str | None, tuple[list[int], list[int]]] = {s: ([], []) for s in clause.streams}
        self._heads: dict[str | None, int] = dict.fromkeys(clause.streams, 0)
        self._sharing: dict[str, list[int]] = {}
        for event in clause.events:
            self._sharing.setdefault(event.window.key, []).append(event.ident)
        self._latest, self._time = LOW, LOW  # latest element time, latest evaluation time
        self._runs: dict[str, tuple[int, int] | None] = {}
        self._floors: dict[str, int] = {}
        self._new_from: dict[int, int | None] = {}
        self._emitted: set[tuple[Any, ...]] = set()
        self._memo: Memo = {}  # what SEQc / SEQr found at the previous evaluation (a cache: not saved)
        self._monotone = is_monotone(clause.pattern)

    # --- feeding -------------------------------------------------------------------------------------------------

    def arrive(self, ordinal: int, time: int, solutions: Mapping[int, Iterable[Bindings]], *,
               stream: str | None = None) -> list[Match]:
        """Add an element and evaluate at its time (EP-SPARQL's content-change evaluation); the new matches.
        ``solutions`` maps an EVENT's ident to the solutions of its P on this element (names without '?')."""
        return self.evaluate(time) if self.add(ordinal, time, solutions, stream=stream) else []

    def add(self, ordinal: int, time: int, solutions: Mapping[int, Iterable[Bindings]], *,
            stream: str | None = None) -> bool:
        """Add an element without evaluating (for evaluation times other than every element); False when the
        element was added before (a replay after a restart), which changes nothing."""
        stream = self._stream(stream)
        if ordinal <= self._heads[stream]:
            return False
        if time < (now := max(self._latest, self._time)):
            raise EventOrderError(f"element {ordinal} at {time} µs arrives after stream time {now} µs: event "
                                  "patterns need the elements of their streams in time order")
        for ident in solutions:
            if not 0 <= ident < len(self.clause.events) or self.clause.events[ident].window.stream != stream:
                raise EventPatternError(f"no EVENT {ident} of this MATCH reads stream {stream}")
        times, ordinals = self._logs[stream]
        times.append(time)
        ordinals.append(ordinal)
        self._heads[stream], self._latest = ordinal, time
        for key, window in self._windows.items():
            if window.stream == stream and window.pending:
                self._windows[key] = window.bind(ordinal, time)
        for ident, rows in solutions.items():
            for row in rows:
                bindings = {name.lstrip("?$"): value for name, value in row.items() if value is not None}
                self._stores[ident].add(BasicEvent(ident, stream, ordinal, time, bindings))
        return True

    def _stream(self, stream: str | None) -> str | None:
        if stream in self._logs:
            return stream
        if stream is None and len(self._logs) == 1:
            return next(iter(self._logs))
        raise EventPatternError(f"this MATCH reads {sorted(map(str, self._logs))}, not stream {stream}")

    # --- evaluating ----------------------------------------------------------------------------------------------

    def evaluate(self, at: int | None = None) -> list[Match]:
        """Evaluate at time ``at`` (default: the latest element's); the matches not emitted before."""
        t = self._latest if at is None else at
        if t < max(self._latest, self._time):
            raise EventOrderError(f"evaluation at {t} µs is before stream time {max(self._latest, self._time)} µs")
        if t == LOW:
            return []
        self._time = t
        for key, window in self._windows.items():
            times, ordinals = self._logs[window.stream]
            i, j = window.run(times, ordinals, t)
            self._runs[key] = (ordinals[i], ordinals[j - 1]) if i < j else None
            self._floors[key] = ordinals[i] if i < len(ordinals) else self._heads[window.stream] + 1
        for event in self.clause.events:
            run, seen = self._runs[event.window.key], self._stores[event.ident].seen
            times, ordinals = self._logs[event.window.stream]
            k = bisect_left(ordinals, max(seen + 1, run[0])) if run else len(ordinals)
            self._new_from[event.ident] = times[k] if run and k < len(ordinals) and ordinals[k] <= run[1] else None
        evaluation = Evaluation(self._runs, self._stores, self._new_from, self._filter, self._memo)
        mode = Mode.NEW if self._monotone else Mode.ALL
        results = {match_key(ev): ev for ev in evaluation.events(self.clause.pattern, LOW, HIGH, {}, mode)}
        new = [key for key in results if key not in self._emitted]
        for event in self.clause.events:
            run = self._runs[event.window.key]
            self._stores[event.ident].seen = run[1] if run else -1
        if self.clause.consumption is not Consumption.UNRESTRICTED:
            self._consume(results.values())
        elif not self._monotone:
            self._emitted |= results.keys()
        self._evict()
        return [Match(dict(key[3]), key[0], key[1], tuple(ElementRef(s, o) for s, o in key[2])) for key in new]

    def runs(self) -> dict[str, tuple[int, int] | None]:
        """Each window's run at the last evaluation: (first, last) element ordinal, None when empty."""
        return dict(self._runs)

    # --- consumption and eviction --------------------------------------------------------------------------------

    def _consume(self, results: Iterable[EventMapping]) -> None:
        used = {(self.clause.events[basic.event].window.key, basic.ordinal) for ev in results for basic in ev.uses}
        for key, ordinal in used:
            for ident in self._sharing[key]:
                self._stores[ident].kill(ordinal, ordinal)

    def _evict(self) -> None:
        floors: dict[str | None, int | None] = {}
        for key, window in self._windows.items():
            floor = None if window.pending else self._floors[key]
            if floor is not None:
                for ident in self._sharing[key]:
                    self._stores[ident].kill(LOW, floor - 1)
            known = floors.get(window.stream, HIGH)
            floors[window.stream] = None if floor is None or known is None else min(known, floor)
        for stream, floor in floors.items():
            if floor is not None:
                times, ordinals = self._logs[stream]
                cut = bisect_left(ordinals, floor)
                del times[:cut], ordinals[:cut]
        self._emitted = {key for key in self._emitted
                         if all(ordinal >= (floors.get(stream) or 0) for stream, ordinal in key[2])}

    # --- saving and restoring ------------------------------------------------------------------------------------

    def state(self, encode: Callable[[Term], Any] | None = None) -> dict[str, Any]:
        """Everything needed to resume exactly where this matcher is, as JSON-able data (``encode`` turns a term
        into JSON, e.g. pyoxigraph's N-Triples text; identity by default)."""
        enc = encode or (lambda term: term)
        return {
            "format": _FORMAT, "clause": self.clause.prologue + self.clause.text,
            "latest": self._latest, "time": self._time,
            "windows": {key: window.to_json() for key, window in self._windows.items()},
            "streams": [[stream, self._heads[stream], [[ordinal, time] for time, ordinal in zip(*self._logs[stream],
                                                                                                 strict=True)]]
                        for stream in self._logs],
            "events": [[basic.event, basic.ordinal, basic.time, [[n, enc(v)] for n, v in basic.bindings.items()]]
                       for store in self._stores for basic in store.events if basic.alive],
            "seen": [store.seen for store in self._stores],
            "emitted": [[start, end, [list(element) for element in elements], [[n, enc(v)] for n, v in bindings]]
                        for start, end, elements, bindings in sorted(self._emitted, key=lambda k: (k[0], k[1]))],
        }

    @classmethod
    def from_state(cls, clause: MatchClause, data: Mapping[str, Any], *, decode: Callable[[Any], Term] | None = None,
                   filter: FilterFunction | None = None) -> EventMatcher:
        """A matcher that continues from ``state()``; ``EventStateError`` when it is not a state of this clause."""
        if not isinstance(data, Mapping) or data.get("format") != _FORMAT:
            raise EventStateError(f"not a saved event matcher state ({_FORMAT})")
        if data.get("clause") != clause.prologue + clause.text:
            raise EventStateError("the saved event matcher state is of another MATCH clause")
        dec = decode or (lambda value: value)
        matcher = cls.__new__(cls)
        by_key = {event.window.key: event.window for event in clause.events}
        if not isinstance(data.get("windows"), Mapping) or set(data["windows"]) != set(by_key):
            raise EventStateError("the saved event matcher state has other windows than this MATCH clause")
        try:
            matcher._setup(clause, filter, {key: ResolvedWindow.from_json(by_key[key], value)
                                            for key, value in data["windows"].items()})
            matcher._latest, matcher._time = int(data["latest"]), int(data["time"])
            for stream, head, pairs in data["streams"]:
                matcher._heads[stream] = int(head)
                matcher._logs[stream][0].extend(int(time) for _, time in pairs)
                matcher._logs[stream][1].extend(int(ordinal) for ordinal, _ in pairs)
            for ident, ordinal, time, bindings in data["events"]:
                matcher._stores[ident].add(BasicEvent(ident, clause.events[ident].window.stream, ordinal, time,
                                                  {name: dec(value) for name, value in bindings}))
            for store, seen in zip(matcher._stores, data["seen"], strict=True):
                store.seen = int(seen)
            matcher._emitted = {(start, end, tuple((s, o) for s, o in elements),
                                 tuple((n, dec(v)) for n, v in bindings))
                                for start, end, elements, bindings in data["emitted"]}
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise EventStateError(f"the saved event matcher state is malformed: {error!r}") from None
        return matcher

    def stats(self) -> dict[str, int]:
        """What the matcher holds: live basic events, logged elements, remembered matches (all bounded by the
        windows and consumption)."""
        return {"events": sum(len(store.events) - store.dead for store in self._stores),
                "elements": sum(len(times) for times, _ in self._logs.values()), "emitted": len(self._emitted)}
