"""Rules (docs/rules.md): CONSTRUCT queries with an output stream, fired per completed window.

Persisted in ``<data>/rules/registry.jsonl``, an append-only journal (rules/journal.py: one durable write per batch
of rules or statuses). A rule's *inputs* are the repeating windowed IRIs of this server it reads; each is a
sequence registered on its stream when the rule registers (``HEAD`` is the HEAD of that moment; the rule keeps its
sequences when it is re-registered or reloaded; rules resolving to the same windows share one), held while the rule
exists, and each completed window of one fires the rule.

- **Constant inputs** are found in the text: ``SERVICE <BASE/streams/NAME?WINDOWS=R…>`` (or a stream alias
  IRI with ``?WINDOWS=R…``), and ``WINDOWS R… { … }`` inside ``SERVICE <BASE/streams/NAME>``.
- **Discovered inputs**: ``SERVICE ?var`` at the top level of the rule, whose variable the static data binds
  (``?hr prov:streamID ?id . BIND(IRI(CONCAT(STR(?id), '?WINDOWS=R/HEAD/PT05M/PT30S')) AS ?var)``). The
  part's prefix (sparql_ext: the patterns before it, which read only the dataset) is evaluated over the
  dataset at registration, and again after each dataset commit and each stream creation or reconfiguration,
  so a patient added later is watched from then on.

A rule that can never have an input (none of the above) is refused with 400, as is one whose ``SERVICE
?var`` target depends on another extension part's result. A rule whose output stream is one of its inputs,
directly or through other rules' outputs, is refused with 409 (a discovered input that would close a cycle
is left out and reported in the rule's status).

Rules register in batches (``put_many``; ``put`` is a batch of one): every rule is analysed first, then the batch
is checked as a whole (input streams that exist or that another rule of the batch outputs; one cycle search over
the stream graph), and only then is anything changed: output streams created, each distinct (stream, ref) sequence
registered once, the batch written to the journal once. A refused batch changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from engine.evaluation import ExtendedEvaluator
from rules.analysis import analyse_rule, discover, output_stream_name, rule_file
from rules.errors import RuleError, RuleNotFound, RuleRejected
from rules.graph import RuleGraph
from rules.journal import RuleJournal
from rules.model import Rule, RuleInput, RuleStatus
from sparql_ext.errors import ConcentratorError, ReportSyntaxError
from sparql_ext.event_schedule import parse_depth, parse_evaluation_times, parse_replay_start
from sparql_ext.histogram import Histogram
from sparql_ext.reporting import parse_report
from sparql_ext.windowing import format_micros, resolve
from sparql_ext.windowref import parse_window_ref
from store.durable import now_micros
from store.errors import StoreError
from store.stream_config import StreamConfig
from store.streams import StreamCatalog, check_stream_name

__all__ = ["LOG_KEEP", "Rule", "RuleInput", "RuleRegistry", "RuleSpec", "RuleStatus", "analyse_rule", "rule_file"]

log = logging.getLogger(__name__)


LOG_KEEP = 20
REGISTER_THREADS = 8  # streams whose new sequences are written at once (bulk registration)
STATUS_SAVE_SECONDS = 1.0


@dataclass(frozen=True)
class RuleSpec:
    """A rule to register: what ``PUT /rules/{name}``, one entry of ``PUT /rules`` or a rule file gives."""

    name: str
    text: str
    output: str  # a stream name or this server's stream URL
    base: str  # this server's base URL (resolves local stream IRIs)
    report: str | None = None
    operator: str | None = None
    publish: str | None = None
    # an event rule's options (docs/events.md): evaluate=, from=, depth=
    evaluate: str | None = None
    replay_from: str | None = None
    depth: str | None = None


@dataclass(frozen=True)
class _Checked:
    """A rule that passed the checks of its own (the batch's are next)."""

    spec: RuleSpec
    output: str  # stream name
    pairs: list[tuple[str, str]]  # its inputs: (stream, canonical repeating WindowRef)
    discovers: bool
    events: list[str] = field(default_factory=list)  # the streams its EVENTs read (an event rule)

    @property
    def reads(self) -> list[str]:
        """Every stream the rule reads: its windows' and its EVENTs'."""
        return list(dict.fromkeys([*(stream for stream, _ in self.pairs), *self.events]))


class RuleRegistry:
    """Rules by name, persisted in ``<data>/rules/registry.jsonl``; re-discovers ``SERVICE ?var`` inputs when data
    changes."""

    def __init__(self, directory: Path, evaluator: ExtendedEvaluator) -> None:
        self.directory = directory
        self.evaluator = evaluator
        assert evaluator.catalog is not None, "rules read streams: the evaluator needs the stream catalog"
        self.catalog: StreamCatalog = evaluator.catalog
        self._lock = threading.RLock()
        self._rules: dict[str, Rule] = {}
        self._graph = RuleGraph()
        self._status_lock = threading.Lock()
        self._unsaved: dict[str, Rule] = {}  # statuses save_status has not written yet
        self._status_written = float("-inf")  # monotonic time of the last statuses write
        self.on_change: list[Callable[[], None]] = []  # called after rules are put or deleted
        directory.mkdir(parents=True, exist_ok=True)
        # the snapshot takes no lock: a dict copy is atomic, and the journal's lock is taken inside the registry's
        self._journal = RuleJournal(directory, lambda: list(self._rules.copy().values()))
        for rule in self._journal.load().values():
            self._install(rule, None)
        evaluator.dataset.on_commit.append(lambda _head: self.rediscover())
        self.catalog.on_change.append(lambda _stream: self.rediscover())

    def names(self) -> list[str]:
        return sorted(self._rules)

    def rules(self) -> list[Rule]:
        with self._lock:
            return [self._rules[name] for name in sorted(self._rules)]

    def find(self, name: str) -> Rule | None:
        return self._rules.get(name)

    def get(self, name: str) -> Rule:
        rule = self._rules.get(name)
        if rule is None:
            raise RuleNotFound(f"no rule named {name!r}: create it with PUT /rules/{name}", rule=name)
        return rule

    def put(self, name: str, text: str, output: str, base: str, report: str | None = None,
            operator: str | None = None, publish: str | None = None, *, evaluate: str | None = None,
            replay_from: str | None = None, depth: str | None = None) -> tuple[Rule, bool]:
        """Register (or replace) a rule; creates the output stream if missing. Returns the rule and whether
        it is new. ``publish``: an MQTT topic for its output elements (kept here; the MQTT connector publishes);
        ``evaluate``, ``replay_from``, ``depth``: an event rule's options (docs/events.md).
        Raises RuleRejected (400) or RuleCycle (409) before anything is changed."""
        return self.put_many([RuleSpec(name, text, output, base, report, operator, publish, evaluate, replay_from,
                                       depth)])[0]

    def put_many(self, specs: Sequence[RuleSpec]) -> list[tuple[Rule, bool]]:
        """Register (or replace) the rules of ``specs``, all or none: each rule and whether it is new, in order.

        A rule may read a stream another rule of the batch outputs. Raises RuleRejected (400) or RuleCycle (409),
        naming the rule (``error.rule``), before anything is changed."""
        seen: set[str] = set()
        for spec in specs:
            if spec.name in seen:
                raise RuleRejected(f"rule {spec.name!r} is in the batch twice", rule=spec.name)
            seen.add(spec.name)
        return self._put_checked([self._check(spec) for spec in specs])

    def _check(self, spec: RuleSpec) -> _Checked:
        """What a rule reads and writes; refuses what cannot be a rule (its name in the message)."""
        try:
            try:
                check_stream_name(spec.name)
            except StoreError:
                raise RuleRejected(f"{spec.name!r} is not a rule name: use 1-128 letters, digits, '.', '_' or "
                                   "'-'") from None
            output = output_stream_name(spec.output, spec.base)
            try:
                parse_report(spec.report, spec.operator)
            except ReportSyntaxError as error:
                raise RuleRejected(str(error)) from None
            evaluator = self.evaluator.with_local_bases([spec.base])
            analysis = analyse_rule(spec.text, spec.base, evaluator)
            _check_event_options(spec, bool(analysis.events))
            pairs = [*analysis.constant, *discover(analysis, spec.base, evaluator)]
        except ConcentratorError as error:
            # told with the rule's name, with the status the problem has (e.g. 403 for a host off the allowlist)
            raise RuleRejected(f"rule {spec.name!r}: {error.message}", rule=spec.name,
                               status_hint=error.status_hint) from error
        return _Checked(spec, output, pairs, bool(analysis.discovered_by), analysis.events)

    def _put_checked(self, batch: list[_Checked]) -> list[tuple[Rule, bool]]:
        with self._lock:
            self._refuse_missing_inputs(batch)
            self._graph.refuse_cycles([(item.spec.name, item.reads, item.output) for item in batch],
                                      {item.spec.name for item in batch if item.events})
            # nothing is refused any more: change things
            for output in dict.fromkeys(item.output for item in batch):
                if self.catalog.find(output) is None:
                    self.catalog.put(StreamConfig(output))
            olds = [self._rules.get(item.spec.name) for item in batch]
            sequences = self._register(batch, olds)
            made: list[tuple[Rule, bool]] = []
            for item, old in zip(batch, olds, strict=True):
                spec = item.spec
                inputs = []
                for stream, ref in item.pairs:
                    kept = _kept(old.inputs if old else [], stream, ref, self.catalog)
                    inputs.append(kept or RuleInput(stream, ref, sequences[(stream, ref)]))
                rule = Rule(spec.name, spec.text, item.output, spec.base.rstrip("/"), inputs,
                            old.status if old else RuleStatus(), discovers=item.discovers, report=spec.report,
                            operator=spec.operator, fired=dict(old.fired) if old else {}, publish=spec.publish,
                            latency=old.latency if old else Histogram(), events=item.events,
                            evaluate=spec.evaluate or None, replay_from=spec.replay_from or None,
                            depth=parse_depth(spec.depth) if item.events and spec.depth else None)
                self._start_after_latest(rule)
                made.append((rule, old is None))
            self._journal.put(rule for rule, _ in made)  # one durable write for the batch
            for (rule, _), old in zip(made, olds, strict=True):
                self._install(rule, old)
            self._journal.compact_if_grown()
        self._changed()
        return made

    def _refuse_missing_inputs(self, batch: list[_Checked]) -> None:
        outputs = {item.output for item in batch}
        for item in batch:
            missing = sorted({stream for stream in item.reads
                              if stream not in outputs and self.catalog.find(stream) is None})
            if missing:
                raise RuleRejected(
                    f"rule {item.spec.name!r} reads stream(s) {', '.join(missing)}, which do not exist: create "
                    "them (PUT /streams/NAME) or register the rule that outputs them first (or in the same batch)",
                    rule=item.spec.name)

    def _register(self, batch: list[_Checked], olds: list[Rule | None]) -> dict[tuple[str, str], str]:
        """The sequence of each (stream, ref) the batch reads that its rules do not keep from before, registered as
        the ref resolves now (``HEAD`` is this moment's HEAD), once per distinct (stream, ref), each stream's in
        one write. An input a rule already had (re-registered) keeps its sequence."""
        needed: dict[str, dict[str, None]] = {}
        for item, old in zip(batch, olds, strict=True):
            for stream, ref in item.pairs:
                if _kept(old.inputs if old else [], stream, ref, self.catalog) is None:
                    needed.setdefault(stream, {})[ref] = None

        def register(stream_name: str) -> list[str]:
            stream = self.catalog.get(stream_name)
            refs = list(needed[stream_name])
            return [s.id for s in stream.register_many([(ref, resolve(parse_window_ref(ref), stream)) for ref in refs])]

        # the streams' sequence files are written side by side: their fsyncs overlap instead of queueing
        with ThreadPoolExecutor(max_workers=max(1, min(REGISTER_THREADS, len(needed)))) as pool:
            registered = dict(zip(needed, pool.map(register, needed), strict=True))
        return {(stream_name, ref): ident for stream_name, refs in needed.items()
                for ref, ident in zip(refs, registered[stream_name], strict=True)}

    def _install(self, rule: Rule, old: Rule | None) -> None:
        """Make ``rule`` the registered one of its name: it holds its sequences, the rule graph has its edges."""
        if old is not None:
            self._graph.remove(old)
        self._rules[rule.name] = rule
        self._graph.add(rule)
        self._hold(rule.inputs, old.inputs if old else [])

    def _hold(self, inputs: list[RuleInput], released: list[RuleInput]) -> None:
        """A rule holds the sequences it reads (they are never retired while it does); ``released``: its old ones."""
        for item in inputs:
            if (stream := self.catalog.find(item.stream)) is not None:
                stream.windows.hold(item.sequence)
        for item in released:
            if (stream := self.catalog.find(item.stream)) is not None:
                stream.windows.release(item.sequence)

    def _start_after_latest(self, rule: Rule) -> None:
        """An input new to the rule starts after its sequence's latest window: a rule fires on windows that
        complete once it reads them, not on history."""
        for item in rule.inputs:
            key = f"{item.stream}/{item.sequence}"
            if key not in rule.fired:
                latest = self.catalog.get(item.stream).windows.latest(item.sequence)
                rule.fired[key] = latest.index if latest is not None else -1

    def rediscover(self) -> None:
        """Re-evaluate the ``SERVICE ?var`` inputs of every rule that has them (the dataset or the streams
        changed): new inputs are registered, inputs no longer bound are dropped."""
        for rule in [r for r in self.rules() if r.discovers]:
            evaluator = self.evaluator.with_local_bases([rule.base])
            try:
                analysis = analyse_rule(rule.text, rule.base, evaluator)
                pairs = [*analysis.constant, *discover(analysis, rule.base, evaluator)]
            except Exception as error:  # noqa: BLE001 - reported in the rule's status; the old inputs stay
                self._report(rule, f"input discovery failed: {type(error).__name__}: {error}")
                continue
            with self._lock:
                if self._rules.get(rule.name) is not rule or pairs == [(i.stream, i.ref) for i in rule.inputs]:
                    continue
                kept = []
                for pair in pairs:
                    if self._graph.reaches(rule.output, {pair[0]}, exclude=rule.name):
                        self._report(rule, f"input {pair[0]} {pair[1]} left out: the rule's output "
                                           f"{rule.output!r} feeds it (a cycle)")
                    else:
                        kept.append(pair)
                before = rule.inputs
                inputs = []
                for stream_name, ref in kept:
                    same = _kept(before, stream_name, ref, self.catalog)
                    if same is None:
                        stream = self.catalog.get(stream_name)
                        same = RuleInput(stream_name, ref,
                                         stream.register(ref, resolve(parse_window_ref(ref), stream)).id)
                    inputs.append(same)
                self._graph.remove(rule)
                rule.inputs = inputs
                self._graph.add(rule)
                self._hold(rule.inputs, before)
                self._start_after_latest(rule)
                self.save(rule)

    def _report(self, rule: Rule, message: str) -> None:
        log.warning("rule %s: %s", rule.name, message)
        rule.status.log = [*rule.status.log, f"{format_micros(now_micros())} {message}"][-LOG_KEEP:]
        self.save(rule)

    def delete(self, name: str) -> None:
        with self._lock:
            rule = self.get(name)
            self._journal.delete(name)
            del self._rules[name]
            self._graph.remove(rule)
            self._hold([], rule.inputs)
            self._journal.compact_if_grown()
        self._changed()

    def _changed(self) -> None:
        """Tell the listeners (event rules' workers) that a rule was put or deleted; outside the lock, since a
        listener may wait for a worker that saves its rule."""
        for listener in list(self.on_change):
            listener()

    def save(self, rule: Rule) -> None:
        """Persist the whole rule (inputs, status, ``fired`` marks) now, if it is still the registered one."""
        with self._lock:
            if self._rules.get(rule.name) is rule:
                self._journal.put([rule])
                self._journal.compact_if_grown()

    def save_statuses(self, rules: Iterable[Rule]) -> None:
        """Persist the statuses and ``fired`` marks of ``rules`` (those still registered) in one durable write;
        they are durable when this returns (the firing code saves ``fired`` after the outputs it marks)."""
        current = [rule for rule in rules if self._rules.get(rule.name) is rule]
        with self._status_lock:
            for rule in current:
                if self._unsaved.get(rule.name) is rule:
                    del self._unsaved[rule.name]
        self._journal.statuses(current)
        self._journal.compact_if_grown()

    def save_status(self, rule: Rule) -> None:
        """Persist a successful firing's counters, with those of every rule fired since, at most once a second: a
        durable write per firing would cap firings at a few hundred per second, and a restart losing a second of
        counters loses no data."""
        with self._status_lock:
            self._unsaved[rule.name] = rule
            now = time.monotonic()
            if now - self._status_written < STATUS_SAVE_SECONDS:
                return
            self._status_written = now
        self.flush_statuses()

    def flush_statuses(self) -> None:
        """Write the statuses ``save_status`` held back (a clean stop loses no counter)."""
        with self._status_lock:
            unsaved, self._unsaved = list(self._unsaved.values()), {}
        self.save_statuses(unsaved)

    def reading(self, stream: str, sequence: str) -> list[Rule]:
        """The rules fired by a window of ``sequence`` on ``stream``."""
        with self._lock:
            rules = [self._rules[name] for name in self._graph.readers(stream)]
            return [rule for rule in rules if any(i.stream == stream and i.sequence == sequence for i in rule.inputs)]

    def load_directory(self, directory: Path, base: str) -> list[str]:
        """Register every ``NAME.rq`` of a rules directory (start-up) in one batch; returns the errors, one per
        bad file (the others are registered).

        A rule may read another's output stream, which that rule creates, whatever the order of the files; a file
        reading the output of a bad one is reported too."""
        errors: dict[Path, str] = {}
        batch: dict[Path, _Checked] = {}
        for path in sorted(directory.glob("*.rq")):
            declared = rule_file(path.read_text(encoding="utf-8"))
            try:
                if declared.output is None:
                    raise RuleRejected("no '# output: <IRI-or-stream-name>' line among its leading comments")
                batch[path] = self._check(RuleSpec(path.stem, declared.text, declared.output, base, declared.report,
                                                   declared.operator, declared.publish))
            except ConcentratorError as error:
                errors[path] = f"{path}: {error}"
        while batch:
            try:
                self._put_checked(list(batch.values()))
                break
            except RuleError as error:  # a missing input or a cycle: leave that file out, register the rest
                refused = next((p for p, item in batch.items() if item.spec.name == error.rule), None)
                if refused is None:
                    raise
                errors[refused] = f"{refused}: {error}"
                del batch[refused]
        return [errors[path] for path in sorted(errors)]


def _check_event_options(spec: RuleSpec, is_event_rule: bool) -> None:
    """``evaluate=``, ``from=`` and ``depth=`` are well formed, and given to an event rule only."""
    given = [name for name, value in (("evaluate=", spec.evaluate), ("from=", spec.replay_from),
                                      ("depth=", spec.depth)) if value]
    if given and not is_event_rule:
        raise RuleRejected(f"{', '.join(given)}: options of event rules (a CONSTRUCT with MATCH); this rule fires "
                           "on windows")
    if spec.evaluate:
        parse_evaluation_times(spec.evaluate)
    if spec.replay_from:
        parse_replay_start(spec.replay_from)
    parse_depth(spec.depth)


def _kept(inputs: list[RuleInput], stream: str, ref: str, catalog: StreamCatalog) -> RuleInput | None:
    """The input of ``inputs`` reading (stream, ref) whose sequence still exists, if any."""
    for item in inputs:
        if (item.stream, item.ref) == (stream, ref):
            found = catalog.find(stream)
            if found is not None and found.windows.sequence(item.sequence) is not None:
                return item
    return None
