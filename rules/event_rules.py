"""Event rules (docs/events.md): rules whose CONSTRUCT holds ``MATCH { … }``, fired on content change or at chosen
evaluation times (``evaluate=``), from their registration or from a point of their streams' history (``from=``).

A rule with a MATCH clause reads the streams its EVENTs name (``EVENT <streams/NAME?WINDOWS=…> { P }``); it has no
window inputs and the Spark pipeline plays no part. Each rule has a worker thread (``EventRuleWorker``), woken by the
commits of those streams (``Stream.on_commit``): it takes the committed elements it has not matched yet, in time
order, evaluates each EVENT's P over the element's graph (an in-memory pyoxigraph store of the element's content
from the element log), feeds the rule's ``EventMatcher`` (evaluating at each element, or at each evaluation time
once an element or a punctuation is past it) and, for each new match:

1. evaluates the rule with the MATCH replaced by the match's bindings (a one-row ``VALUES``);
2. makes the output elements of what it constructs, linked to the match's constituents (rules/event_outputs.py),
   with their derivation depth: a match whose derived event would be deeper than ``depth=`` is not emitted, which
   bounds a rule that feeds its own input (rules/graph.py allows cycles of event rules only);
3. appends them to the rule's output stream with the origin ``NAME/match/RULE-DIGEST/MATCH-DIGEST/POSITION``.

Exactly once: the matcher's state (``EventMatcher.state``: consumed and emitted events, windows) is saved with the
last element it covers in ``<data>/rules/events/NAME.json``, always *after* the outputs of those elements are
committed. After a crash the worker resumes from the saved state and matches the elements after it again; the
matches it finds again are the same (the matcher is deterministic) and their outputs are already in the output
stream (their origins name the rule and the match), so they are not appended twice. Element commits never wait for
rule evaluation: the committer only sets the worker's wake-up event.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyoxigraph import RdfFormat, parse

from engine.context import QueryTarget
from engine.events import element_depth, element_solutions, filter_function
from rules.errors import RuleRejected
from rules.event_outputs import derived_elements, derived_links, match_digest
from rules.event_spec import event_rule_spec
from rules.model import Rule
from rules.outputs import append_once
from sparql_ext import Event, EventMatcher, Match
from sparql_ext.event_schedule import EvaluationTimes, parse_depth, parse_evaluation_times, parse_replay_start
from sparql_ext.events import EventOrderError, EventStateError
from sparql_ext.windowing import ListIndex, format_micros
from store.durable import now_micros, write_json
from store.elements import ParsedElement
from store.stream import Stream

if TYPE_CHECKING:
    from rules.registry import RuleRegistry

log = logging.getLogger(__name__)

STATE_FORMAT = "event-rule/1"
BATCH = 1_000  # elements matched between two commits of outputs (and state saves)
STATE_SAVE_SECONDS = 1.0  # a saved state at most this old: a crash replays at most this much (exactly once anyway)
LOG_KEEP = 20
DEPTHS_KEPT = 10_000  # derivation depths of derived elements remembered (read again from the element when forgotten)


def _encode(term: Any) -> str:
    return str(term)  # N-Triples


def _decode(text: str) -> Any:
    [triple] = parse(f"<urn:x:s> <urn:x:p> {text} .".encode(), RdfFormat.N_TRIPLES, rename_blank_nodes=False)
    return triple.object


class EventRuleWorker:
    """Matches one event rule's streams as elements arrive and appends its outputs (see the module docstring)."""

    def __init__(self, rule: Rule, registry: RuleRegistry, directory: Path) -> None:
        self.name, self.text, self.base = rule.name, rule.text, rule.base
        self.registry = registry
        self.catalog = registry.catalog
        self.evaluator = registry.evaluator.with_local_bases([rule.base])
        spec = event_rule_spec(rule.text, rule.base, self.evaluator)
        assert spec is not None, "an event rule has a MATCH clause"
        self.spec = spec
        self.path = directory / f"{rule.name}.json"
        self.options = rule.event_options
        identity = f"{rule.base}\n{rule.text}" + (f"\n{json.dumps(self.options)}" if any(self.options) else "")
        self.digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        # RSEP-QL's evaluation times (evaluate=), None: at every element (content change)
        self.schedule: EvaluationTimes | None = parse_evaluation_times(rule.evaluate) if rule.evaluate else None
        self.evaluated: int | None = None  # the latest evaluation time of the schedule
        self.depth_bound = parse_depth(str(rule.depth) if rule.depth else None)
        self.stopped = 0  # matches not emitted: their derived event would be deeper than depth_bound
        self._depths: dict[tuple[str | None, int], int] = {}
        self._derived: set[str] = set()  # the streams event rules output (their elements have a depth)
        self._events_of: dict[str, list[Event]] = {iri: [] for iri in spec.streams}
        for event in spec.clause.events:
            self._events_of[event.window.stream].append(event)  # type: ignore[index]
        self._filter = filter_function(rule.base)
        self._busy = threading.Lock()  # one batch at a time (the worker's, or a final save)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._subscribed: dict[str, Stream] = {}
        self._saved_at = float("-inf")
        self.matches = 0
        self.stats: dict[str, int] = {}
        self.matcher, self.processed = self._load()
        self.covered = dict(self.processed)  # the last element of each stream whose outputs are committed
        self.covered_at: int | None = self.evaluated  # the same for the evaluation times
        self._thread = threading.Thread(target=self._run, name=f"event-rule-{rule.name}", daemon=True)

    # -- state -------------------------------------------------------------------------------------------------

    def _load(self) -> tuple[EventMatcher, dict[str, int]]:
        """The saved matcher and the last element of each stream it covers (saved at registration, then at most
        ``STATE_SAVE_SECONDS`` apart, always after the outputs); a new rule starts after each stream's HEAD (it
        matches what arrives once it is registered)."""
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                if data.get("format") == STATE_FORMAT and data.get("digest") == self.digest:
                    matcher = EventMatcher.from_state(self.spec.clause, data["matcher"], decode=_decode,
                                                      filter=self._filter)
                    self.matches = int(data.get("matches", 0))
                    self.stopped = int(data.get("stopped", 0))
                    self.evaluated = None if data.get("evaluated") is None else int(data["evaluated"])
                    self.stats = matcher.stats()
                    return matcher, {iri: int(data["processed"][iri]) for iri in self.spec.streams}
            except (EventStateError, KeyError, TypeError, ValueError) as error:
                self._report(f"saved state not usable ({error}); matching starts afresh from the streams' HEAD")

        def index_of(iri: str | None) -> Any:
            stream = self.catalog.find(self.spec.streams.get(iri or "", ""))
            return stream if stream is not None else ListIndex(())
        matcher = EventMatcher(self.spec.clause, index_of=index_of, filter=self._filter)
        processed = {iri: self._start(stream) if (stream := self.catalog.find(name)) is not None else 0
                     for iri, name in self.spec.streams.items()}
        self.evaluated = None
        self.matcher, self.processed = matcher, processed
        self._save(force=True)
        return matcher, processed

    def _start(self, stream: Stream) -> int:
        """The last element of ``stream`` a new rule does not match: its HEAD, or the one before ``from=``."""
        if self.options[1] is None:
            return stream.head()
        ordinal, at = parse_replay_start(self.options[1])
        if at is not None:
            first = stream.first_at_or_after(at)
            return first.ordinal - 1 if first is not None else stream.head()
        return min(ordinal - 1, stream.head())

    def _save(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._saved_at < STATE_SAVE_SECONDS:
            return
        write_json(self.path, {"format": STATE_FORMAT, "rule": self.name, "digest": self.digest,
                               "processed": self.processed, "matches": self.matches, "stopped": self.stopped,
                               "evaluated": self.evaluated,
                               "matcher": self.matcher.state(_encode)})
        self._saved_at = time.monotonic()

    def forget(self) -> None:
        """The rule is gone or its text changed: its state goes with it."""
        self.path.unlink(missing_ok=True)

    # -- the thread --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """Stop after the current batch and save the state it reached."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        for stream in self._subscribed.values():
            if self._wake.set in stream.on_commit:
                stream.on_commit.remove(self._wake.set)
        with self._busy:
            self._save(force=True)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            self._subscribe()
            try:
                self.process()
            except Exception as error:  # noqa: BLE001 - recorded in the rule's status; retried from the saved state
                log.exception("event rule %s failed", self.name)
                self._report(f"{type(error).__name__}: {error} (retried from the last saved state)")
                with self._busy:  # the matcher went past outputs that were not committed: back to the saved state,
                    self.matcher, self.processed = self._load()  # whose replay finds committed outputs by origin
                    self.covered, self.covered_at = dict(self.processed), self.evaluated
            self._wake.wait(1.0)  # a stream recreated under the same name has no listener yet: look again soon

    def _subscribe(self) -> None:
        for name in set(self.spec.streams.values()):
            stream = self.catalog.find(name)
            if stream is not None and self._subscribed.get(name) is not stream:
                stream.on_commit.append(self._wake.set)
                self._subscribed[name] = stream

    # -- matching ----------------------------------------------------------------------------------------------

    def process(self) -> int:
        """Match every committed element not matched yet; returns the new matches."""
        found = 0
        with self._busy:
            while not self._stopping.is_set():
                due = self._due()  # read before _pending: every element committed by then is in it
                pending = self._pending()
                if not pending and due is None:
                    break
                found += self._batch(pending, None if pending else due)
        return found

    def _due(self) -> int | None:
        """With evaluation times: the rule's stream time (the latest element or punctuation of its streams) when an
        evaluation time not evaluated yet is before it; else None."""
        if self.schedule is None or self.evaluated is None:  # no evaluation times, or no element yet
            return None
        watermark = max((stream.stream_time for name in set(self.spec.streams.values())
                         if (stream := self.catalog.find(name)) is not None and stream.stream_time is not None),
                        default=self.evaluated)
        return watermark if next(self.schedule.between(self.evaluated, watermark), None) is not None else None

    def _pending(self) -> list[tuple[int, int, int, str]]:
        """(time, stream position, ordinal, stream IRI) of the next committed elements, in time order."""
        found = []
        for position, (iri, name) in enumerate(self.spec.streams.items()):
            stream = self.catalog.find(name)
            if stream is None:
                continue
            first = max(self.processed[iri] + 1, stream.first_ordinal)  # expired before matching: gone
            for ordinal in range(first, min(stream.head(), first + BATCH - 1) + 1):
                at = stream.time_of(ordinal)
                if at is not None:
                    found.append((at, position, ordinal, iri))
        found.sort()
        return found[:BATCH]  # the BATCH earliest of the streams' first BATCH each: none is missing before them

    def _batch(self, pending: list[tuple[int, int, int, str]], watermark: int | None = None) -> int:
        """Match ``pending`` (and evaluate at the evaluation times before ``watermark``); commit, save the state."""
        rule = self.registry.find(self.name)
        if rule is None or rule.text != self.text:
            self._stopping.set()  # replaced or deleted: the registry's listener stops this worker
            return 0
        self._derived = {other.output for other in self.registry.rules() if other.events}
        made: list[tuple[ParsedElement, int]] = []  # output elements, with the commit time of their last element
        matches: list[str] = []
        for at, _, ordinal, iri in pending:
            stream = self.catalog.find(self.spec.streams[iri])
            self.processed[iri] = ordinal
            if stream is None:
                continue
            try:
                solutions = self._solutions(stream, ordinal, at, iri)
            except (OSError, RuntimeError, ValueError) as error:  # P failed on this element: it has no events
                self._report(f"{self.spec.streams[iri]} element {ordinal}: {type(error).__name__}: {error}")
                solutions = {}
            try:
                new = self._feed(ordinal, at, solutions, iri)
            except EventOrderError as error:
                self._report(f"{self.spec.streams[iri]} element {ordinal} skipped: {error}")
                continue
            record = stream.record(ordinal)
            self._emit(rule, new, record.commit if record else now_micros(), made, matches)
        if watermark is not None:
            self._emit(rule, self._evaluations_before(watermark), now_micros(), made, matches)
        appended = self._append(rule, made)
        # a match counts once: not when a replay after a crash finds all its outputs already appended
        replayed = {origin for origin in matches if origin not in appended
                    and any(element.origin.startswith(origin + "/") for element, _ in made)}  # type: ignore[union-attr]
        new_matches = len(matches) - len(replayed)
        self.matches += new_matches
        rule.status.firings += new_matches
        if pending:
            rule.status.last_window = f"{self.spec.streams[pending[-1][3]]} element {pending[-1][2]}"
        elif self.evaluated is not None:
            rule.status.last_window = f"evaluation at {format_micros(self.evaluated)}"
        self.stats = self.matcher.stats()
        self.covered, self.covered_at = dict(self.processed), self.evaluated
        self._save()  # after the outputs: a crash before it replays these elements, their outputs found by origin
        self.registry.save_status(rule)
        return new_matches

    def _feed(self, ordinal: int, at: int, solutions: dict[int, list[dict[str, Any]]], iri: str) -> list[Match]:
        """Add an element to the matcher; the new matches: at its time (content change), or, with evaluation
        times, at those before it (every element at an evaluation time is in before it is evaluated)."""
        if self.schedule is None:
            return self.matcher.arrive(ordinal, at, solutions, stream=iri)
        if self.evaluated is None:  # before the rule's first element there is nothing to evaluate
            self.evaluated = self.schedule.skipped_before(at)
        new = self._evaluations_before(at)
        self.matcher.add(ordinal, at, solutions, stream=iri)
        return new

    def _evaluations_before(self, before: int) -> list[Match]:
        """Evaluate at each evaluation time after the latest one and before ``before`` (RSEP-QL's evaluations at
        chosen times: consumption carries from one to the next in the matcher)."""
        assert self.schedule is not None and self.evaluated is not None
        new: list[Match] = []
        times, skipped = self.schedule.due(self.evaluated, before)
        if skipped:
            self._report(f"{skipped} evaluation times left out between two elements (at most {len(times)} evaluated)")
        for t in times:
            new += self.matcher.evaluate(t)
            self.evaluated = t
        return new

    def _emit(self, rule: Rule, new: list[Match], commit: int, made: list[tuple[ParsedElement, int]],
              matches: list[str]) -> None:
        """The output elements of ``new`` matches into ``made`` (their origins into ``matches``); a match whose
        derived event would be deeper than the bound is not emitted (recursion stops there)."""
        for match in new:
            origin = f"{self.name}/match/{self.digest}/{match_digest(match)}"
            # one more than the deepest element it was matched from (0 for an element no event rule derived)
            depth = 1 + max((self._depth(element.stream, element.ordinal) for element in match.elements), default=0)
            if depth > self.depth_bound:
                self.stopped += 1
                self._report(f"match {origin} not emitted: its derived event would be at depth {depth}, past the "
                             f"bound {self.depth_bound} (depth=)")
                continue
            matches.append(origin)
            try:
                made += [(element, commit) for element in self._outputs(rule, match, origin, depth)]
            except Exception as error:  # noqa: BLE001 - one match's failure is reported; the others go on
                rule.status.failures += 1
                rule.status.last_error = f"{type(error).__name__}: {error}"
                self._report(f"match {origin}: {rule.status.last_error}")

    def _depth(self, iri: str | None, ordinal: int) -> int:
        """The derivation depth of an element (its ``ev:depth``; 0 when no event rule derived it: only the elements of
        a stream an event rule outputs are read for it)."""
        name = self.spec.streams.get(iri or "", "")
        if (iri, ordinal) not in self._depths and name in self._derived:
            stream = self.catalog.find(name)
            if len(self._depths) >= DEPTHS_KEPT:
                self._depths.clear()
            self._depths[(iri, ordinal)] = element_depth(stream, ordinal) if stream is not None else 0
        return self._depths.get((iri, ordinal), 0)

    def _solutions(self, stream: Stream, ordinal: int, at: int, iri: str) -> dict[int, list[dict[str, Any]]]:
        """The solutions of each EVENT over ``iri`` on the element: its P over the element's graph (RSEP-QL Eq. 4)."""
        return element_solutions(stream, ordinal, at, self._events_of[iri], self.base)

    def _outputs(self, rule: Rule, match: Match, origin: str, depth: int) -> list[ParsedElement]:
        """The output elements of one match: what the rule constructs for its bindings, with the derived event's
        links to its constituents."""
        result = self.evaluator.query(self.spec.construct_text(match.bindings), QueryTarget(base_iri=rule.base))

        def stream_of(iri: str | None) -> Stream | None:
            return self.catalog.find(self.spec.streams.get(iri or "", ""))
        return derived_elements(result, origin, match, derived_links(f"{rule.base}/rules/{rule.name}", match, depth,
                                                                     stream_of))

    def _append(self, rule: Rule, made: list[tuple[ParsedElement, int]]) -> set[str]:
        """Append what the batch's matches made (less what a run before a crash appended); the origins (less the
        position) of the matches that appended something."""
        if not made:
            return set()
        output = self.catalog.get(rule.output)
        committed = {id(element): commit for element, commit in made}
        appended = append_once(output, [element for element, _ in made])
        output.flush()
        if appended:  # the latency: from the commit of the element that completed the last match appended
            seconds = max(0, now_micros() - committed[id(appended[-1])]) / 1_000_000
            rule.status.last_latency_ms = round(seconds * 1000, 3)
            rule.latency.observe(seconds)
        rule.status.outputs += len(appended)
        rule.status.last_error = None
        return {(element.origin or "").rpartition("/")[0] for element in appended}

    def _report(self, message: str) -> None:
        log.warning("event rule %s: %s", self.name, message)
        rule = self.registry.find(self.name)
        if rule is not None and rule.text == self.text:
            rule.status.log = [*rule.status.log, f"{format_micros(now_micros())} {message}"][-LOG_KEEP:]

    def status(self) -> dict[str, object]:
        """What ``GET /rules/NAME`` shows of the matching: streams, the last element matched of each, matches."""
        processed: dict[str, int] = {}
        covered = self.covered
        for iri, name in self.spec.streams.items():
            processed[name] = min(processed.get(name, covered[iri]), covered[iri])
        return {"streams": sorted(set(self.spec.streams.values())), "processed": processed, "matches": self.matches,
                "consumption": self.spec.clause.consumption.value.lower(), "state": dict(self.stats),
                "evaluate": self.options[0], "from": self.options[1],
                "evaluated": format_micros(at) if self.schedule is not None and (at := self.covered_at) is not None
                and at >= self.schedule.start else None,
                "depth": {"bound": self.depth_bound, "stopped": self.stopped}}


class EventRules:
    """A worker per event rule of the registry, started, replaced and stopped as rules come and go."""

    def __init__(self, registry: RuleRegistry) -> None:
        self.registry = registry
        self.directory = registry.directory / "events"
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._workers: dict[str, EventRuleWorker] = {}
        self._closed = False
        registry.on_change.append(self.sync)
        self.sync()

    def sync(self) -> None:
        """Follow the registry: a worker for each event rule (a changed text starts afresh), none for the others."""
        with self._lock:
            if self._closed:
                return
            rules = {rule.name: rule for rule in self.registry.rules() if rule.events}
            for name, worker in list(self._workers.items()):
                rule = rules.get(name)
                if rule is None or (rule.text, rule.base, rule.event_options) != (worker.text, worker.base,
                                                                                    worker.options):
                    worker.stop()
                    worker.forget()
                    del self._workers[name]
            for path in set(self.directory.glob("*.json")) - {self.directory / f"{n}.json" for n in rules}:
                path.unlink(missing_ok=True)  # the state of a rule deleted while the server was down
            for name, rule in rules.items():
                if name not in self._workers:
                    try:
                        worker = EventRuleWorker(rule, self.registry, self.directory)
                    except RuleRejected as error:  # e.g. a stream it reads was deleted while the server was down
                        rule.status.last_error = str(error)
                        log.warning("event rule %s not started: %s", name, error)
                        continue
                    self._workers[name] = worker
                    worker.start()

    def status(self, name: str) -> dict[str, object] | None:
        worker = self._workers.get(name)
        return worker.status() if worker is not None else None

    def worker(self, name: str) -> EventRuleWorker | None:
        return self._workers.get(name)

    def close(self) -> None:
        """Stop every worker (each saves its state)."""
        with self._lock:
            self._closed = True
            for worker in self._workers.values():
                worker.stop()
            self._workers.clear()
