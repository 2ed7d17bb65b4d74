"""Event rules (docs/events.md): rules whose CONSTRUCT holds ``MATCH { … }``, fired on content change.

A rule with a MATCH clause reads the streams its EVENTs name (``EVENT <streams/NAME?WINDOWS=…> { P }``); it has no
window inputs and the Spark pipeline plays no part. Each rule has a worker thread (``EventRuleWorker``), woken by the
commits of those streams (``Stream.on_commit``): it takes the committed elements it has not matched yet, in time
order, evaluates each EVENT's P over the element's graph (an in-memory pyoxigraph store of the element's content
from the element log), feeds the rule's ``EventMatcher`` and, for each new match:

1. evaluates the rule with the MATCH replaced by the match's bindings (a one-row ``VALUES``), so the rest of the
   WHERE (the dataset, other SERVICEs) joins as with any graph pattern;
2. makes one output element of what it constructs (a triple template: one element, graph
   ``urn:uuid:`` named after the match; a quad template: one per constructed graph), adds to each the links of the
   derived event to its constituents (seed 002 DM10) — ``<g> prov:wasDerivedFrom <element graph>`` per constituent,
   ``<g> ev:start`` / ``ev:end`` the match interval (``xsd:dateTime``), ``<g> ev:rule <BASE/rules/NAME>`` — and
   stamps it with the match's end time (moved 1 µs past the output stream's time when it is not after it);
3. appends it to the rule's output stream with the origin ``NAME/match/RULE-DIGEST/MATCH-DIGEST/POSITION``.

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
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad, RdfFormat, parse

from engine.context import QueryTarget
from engine.events import element_solutions, filter_function
from engine.results import ConstructedQuads, ConstructedTriples
from rules.errors import RuleRejected
from rules.event_spec import event_rule_spec
from rules.model import Rule
from rules.outputs import append_once
from sparql_ext import Event, EventMatcher, Match
from sparql_ext.events import EventOrderError, EventStateError
from sparql_ext.windowing import ListIndex, format_micros
from store.durable import now_micros, write_json
from store.elements import ParsedElement
from store.stream import Stream

if TYPE_CHECKING:
    from rules.registry import RuleRegistry

log = logging.getLogger(__name__)

PROV_WAS_DERIVED_FROM = "http://www.w3.org/ns/prov#wasDerivedFrom"
EVENT_NAMESPACE = "urn:x-concentrator:event#"  # ev:start, ev:end, ev:rule of a derived event
_XSD_DATETIME = NamedNode("http://www.w3.org/2001/XMLSchema#dateTime")
STATE_FORMAT = "event-rule/1"
BATCH = 1_000  # elements matched between two commits of outputs (and state saves)
STATE_SAVE_SECONDS = 1.0  # a saved state at most this old: a crash replays at most this much (exactly once anyway)
LOG_KEEP = 20


def _encode(term: Any) -> str:
    return str(term)  # N-Triples


def _decode(text: str) -> Any:
    [triple] = parse(f"<urn:x:s> <urn:x:p> {text} .".encode(), RdfFormat.N_TRIPLES, rename_blank_nodes=False)
    return triple.object


def match_digest(match: Match) -> str:
    """A match's identity as text (two matches are the same when bindings, interval and elements are)."""
    identity = [match.start, match.end, [list(element) for element in match.elements],
                sorted([name, str(value)] for name, value in match.bindings.items())]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]


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
        self.digest = hashlib.sha256(f"{rule.base}\n{rule.text}".encode()).hexdigest()[:16]
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
                    self.stats = matcher.stats()
                    return matcher, {iri: int(data["processed"][iri]) for iri in self.spec.streams}
            except (EventStateError, KeyError, TypeError, ValueError) as error:
                self._report(f"saved state not usable ({error}); matching starts afresh from the streams' HEAD")

        def index_of(iri: str | None) -> Any:
            stream = self.catalog.find(self.spec.streams.get(iri or "", ""))
            return stream if stream is not None else ListIndex(())
        matcher = EventMatcher(self.spec.clause, index_of=index_of, filter=self._filter)
        processed = {iri: stream.head() if (stream := self.catalog.find(name)) is not None else 0
                     for iri, name in self.spec.streams.items()}
        self.matcher, self.processed = matcher, processed
        self._save(force=True)
        return matcher, processed

    def _save(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._saved_at < STATE_SAVE_SECONDS:
            return
        write_json(self.path, {"format": STATE_FORMAT, "rule": self.name, "digest": self.digest,
                               "processed": self.processed, "matches": self.matches,
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
                    self.covered = dict(self.processed)
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
            while not self._stopping.is_set() and (pending := self._pending()):
                found += self._batch(pending)
        return found

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

    def _batch(self, pending: list[tuple[int, int, int, str]]) -> int:
        rule = self.registry.find(self.name)
        if rule is None or rule.text != self.text:
            self._stopping.set()  # replaced or deleted: the registry's listener stops this worker
            return 0
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
                new = self.matcher.arrive(ordinal, at, solutions, stream=iri)
            except EventOrderError as error:
                self._report(f"{self.spec.streams[iri]} element {ordinal} skipped: {error}")
                continue
            record = stream.record(ordinal)
            for match in new:
                origin = f"{self.name}/match/{self.digest}/{match_digest(match)}"
                matches.append(origin)
                try:
                    made += [(element, record.commit if record else now_micros())
                             for element in self._outputs(rule, match, origin)]
                except Exception as error:  # noqa: BLE001 - one match's failure is reported; the others go on
                    rule.status.failures += 1
                    rule.status.last_error = f"{type(error).__name__}: {error}"
                    self._report(f"match {origin}: {rule.status.last_error}")
        appended = self._append(rule, made)
        # a match counts once: not when a replay after a crash finds all its outputs already appended
        replayed = {origin for origin in matches if origin not in appended
                    and any(element.origin.startswith(origin + "/") for element, _ in made)}  # type: ignore[union-attr]
        new_matches = len(matches) - len(replayed)
        self.matches += new_matches
        rule.status.firings += new_matches
        rule.status.last_window = f"{self.spec.streams[pending[-1][3]]} element {pending[-1][2]}"
        self.stats = self.matcher.stats()
        self.covered = dict(self.processed)
        self._save()  # after the outputs: a crash before it replays these elements, their outputs found by origin
        self.registry.save_status(rule)
        return new_matches

    def _solutions(self, stream: Stream, ordinal: int, at: int, iri: str) -> dict[int, list[dict[str, Any]]]:
        """The solutions of each EVENT over ``iri`` on the element: its P over the element's graph (RSEP-QL Eq. 4)."""
        return element_solutions(stream, ordinal, at, self._events_of[iri], self.base)

    def _outputs(self, rule: Rule, match: Match, origin: str) -> list[ParsedElement]:
        """The output elements of one match: what the rule constructs for its bindings, with the derived event's
        links to its constituents."""
        result = self.evaluator.query(self.spec.construct_text(match.bindings), QueryTarget(base_iri=rule.base))
        graphs: dict[Any, list[Quad]] = {}
        if isinstance(result, ConstructedTriples):
            if result:
                graph = NamedNode(f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, origin)}")
                graphs[graph] = [Quad(t.subject, t.predicate, t.object, graph) for t in result]
        elif isinstance(result, ConstructedQuads):
            for quad in result:
                if not isinstance(quad.graph_name, DefaultGraph):  # the default graph is the stream's timestamps
                    graphs.setdefault(quad.graph_name, []).append(quad)
        else:
            raise RuleRejected("a rule must be a CONSTRUCT query")
        return [ParsedElement(graph, quads + self._links(rule, graph, match), match.end,
                              origin=f"{origin}/{position}")
                for position, (graph, quads) in enumerate(graphs.items())]

    def _links(self, rule: Rule, graph: Any, match: Match) -> list[Quad]:
        """DM10: the derived event (graph ``graph``) points back to the elements it was matched from."""
        links = [Quad(graph, NamedNode(f"{EVENT_NAMESPACE}start"), Literal(format_micros(match.start),
                                                                           datatype=_XSD_DATETIME), graph),
                 Quad(graph, NamedNode(f"{EVENT_NAMESPACE}end"), Literal(format_micros(match.end),
                                                                         datatype=_XSD_DATETIME), graph),
                 Quad(graph, NamedNode(f"{EVENT_NAMESPACE}rule"), NamedNode(f"{rule.base}/rules/{rule.name}"), graph)]
        for element in match.elements:
            stream = self.catalog.find(self.spec.streams.get(element.stream or "", ""))
            name = stream.graph_of(element.ordinal) if stream is not None else None
            if name is not None and name.startswith("<"):
                constituent = NamedNode(name[1:-1])
            elif stream is not None:  # a blank node graph name means nothing outside its element: its revision id
                constituent = NamedNode(f"urn:uuid:{stream.uuid_of(element.ordinal)}")
            else:
                continue
            links.append(Quad(graph, NamedNode(PROV_WAS_DERIVED_FROM), constituent, graph))
        return links

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
                "consumption": self.spec.clause.consumption.value.lower(), "state": dict(self.stats)}


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
                if rule is None or (rule.text, rule.base) != (worker.text, worker.base):
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
