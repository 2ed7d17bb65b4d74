"""Rules (DESIGN §1, issue 4): CONSTRUCT queries with an output stream, fired per completed window.

Persisted under ``<data>/rules/NAME.rq`` (the text) and ``NAME.json`` (output stream, base IRI, inputs, status).
A rule's *inputs* are the repeating windowed IRIs of this server it reads; each is a sequence registered on
its stream when the rule registers (``HEAD`` is the HEAD of that moment; the rule keeps its sequences when it is
re-registered or reloaded), held while the rule exists, and each completed window of one fires the rule.

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
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyoxigraph import NamedNode

from engine.evaluation import ExtendedEvaluator
from rules.errors import RuleCycle, RuleNotFound, RuleRejected
from rules.event_rules import event_rule_spec
from sparql_ext import ExtendedQuery, parse_extended
from sparql_ext.errors import ConcentratorError, ReportSyntaxError, SparqlExtError
from sparql_ext.histogram import Histogram
from sparql_ext.reporting import ReportSpec, parse_report
from sparql_ext.windowed import windowed_params
from sparql_ext.windowing import format_micros, resolve
from sparql_ext.windowref import parse_window_ref
from store.durable import now_micros, write_json
from store.errors import StoreError
from store.stream_config import StreamConfig
from store.streams import StreamCatalog, check_stream_name

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuleInput:
    stream: str
    ref: str  # canonical repeating WindowRef
    sequence: str  # sequence id on the stream


@dataclass
class RuleStatus:
    firings: int = 0
    outputs: int = 0  # elements appended to the output stream
    failures: int = 0
    waiting: int = 0  # firings skipped because another input had no complete window yet
    executor_firings: int = 0  # firings evaluated in Spark executors (rules/tasks.py)
    placement: str | None = None  # "executors" or "driver: why" (set at the first firing)
    last_latency_ms: float | None = None
    last_error: str | None = None
    last_window: str | None = None
    log: list[str] = field(default_factory=list)  # the latest errors, newest last


@dataclass
class Rule:
    name: str
    text: str
    output: str  # stream name
    base: str  # this server's base URL when registered (resolves local stream IRIs)
    inputs: list[RuleInput]
    status: RuleStatus = field(default_factory=RuleStatus)
    discovers: bool = False  # has SERVICE ?var inputs, re-discovered when the data changes
    report: str | None = None  # report policy (sparql_ext.reporting), None: window-close
    operator: str | None = None  # stream operator, None: rstream
    # "stream/sequence" -> index of the last window the rule fired on (at registration: the latest committed, so
    # a new rule fires on what completes from then on); start-up fires what came after (RuleRunner.catch_up)
    fired: dict[str, int] = field(default_factory=dict)
    publish: str | None = None  # an MQTT topic its output elements are published to (connectors.mqtt_out)
    # every successful firing's latency in seconds, since start-up (not saved: /metrics counts from start-up)
    latency: Histogram = field(default_factory=Histogram, compare=False)
    events: list[str] = field(default_factory=list)  # streams its EVENTs read: an event rule (rules/event_rules.py)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "output": self.output, "base": self.base, "discovers": self.discovers,
                "report": self.report, "operator": self.operator, "fired": self.fired, "publish": self.publish,
                "inputs": [asdict(i) for i in self.inputs], "status": asdict(self.status), "events": self.events}

    @classmethod
    def from_json(cls, text: str, data: dict) -> Rule:  # type: ignore[type-arg]
        return cls(data["name"], text, data["output"], data["base"], [RuleInput(**i) for i in data["inputs"]],
                   RuleStatus(**data.get("status", {})), data.get("discovers", False), data.get("report"),
                   data.get("operator"), dict(data.get("fired", {})), data.get("publish"),
                   events=list(data.get("events", [])))

    @property
    def report_spec(self) -> ReportSpec:
        return parse_report(self.report, self.operator)


LOG_KEEP = 20
STATUS_SAVE_SECONDS = 1.0


def output_stream_name(output: str, base: str) -> str:
    """A stream name, or this server's stream URL (``BASE/streams/NAME``), as a stream name."""
    prefix = base.rstrip("/") + "/streams/"
    name = output[len(prefix):] if output.startswith(prefix) else output
    try:
        return check_stream_name(name)
    except StoreError:
        raise RuleRejected(f"output={output!r} is neither a stream name nor a stream URL of this server "
                           f"({prefix}NAME)") from None


@dataclass(frozen=True)
class RuleAnalysis:
    """What registration learns from a rule's text."""

    constant: list[tuple[str, str]]  # (stream name, canonical repeating WindowRef)
    discovered_by: list[tuple[str, str]]  # (prefix query binding the variable, '?var') of top-level SERVICE ?var
    events: list[str] = field(default_factory=list)  # streams an event rule's EVENTs read (rules/event_rules.py)


def analyse_rule(text: str, base: str, evaluator: ExtendedEvaluator) -> RuleAnalysis:
    """A rule's constant windowed inputs and the prefix queries that discover the others; refuses what cannot be
    a rule."""
    spec = event_rule_spec(text, base, evaluator)
    if spec is not None:  # MATCH: fired on each element of the streams its EVENTs read, not on windows
        return RuleAnalysis([], [], sorted(set(spec.streams.values())))
    try:
        extended = parse_extended(text, base)
        if extended.template is None and "CONSTRUCT" not in extended.sparql.upper():
            raise RuleRejected("a rule must be a CONSTRUCT query")
        constant: dict[tuple[str, str], None] = {}
        discovered_by: list[tuple[str, str]] = []
        _walk(extended, None, evaluator, constant, discovered_by, top=True)
    except SparqlExtError as error:
        raise RuleRejected(f"rule is not valid extended SPARQL: {error}") from None
    if not constant and not discovered_by:
        raise RuleRejected(
            "the rule reads no repeating windowed IRI of this server (SERVICE <BASE/streams/NAME?WINDOWS=R…>, "
            "WINDOWS R… inside SERVICE <BASE/streams/NAME>, or SERVICE ?var with ?var bound from the dataset): "
            "it would never fire")
    return RuleAnalysis(list(constant), discovered_by)


def _walk(query: ExtendedQuery, stream: str | None, evaluator: ExtendedEvaluator,
          constant: dict[tuple[str, str], None], discovered_by: list[tuple[str, str]], *, top: bool) -> None:
    for part in query.parts:
        inner_stream: str | None = None
        if part.kind == "service" and part.target_is_variable:
            if not top:
                raise RuleRejected(f"SERVICE {part.target} inside another SERVICE / REVISION / WINDOWS: a rule's "
                                   "SERVICE ?var inputs are discovered from the dataset, so they must be at the top "
                                   "level of the rule")
            if parse_extended(part.prefix).parts:
                raise RuleRejected(f"SERVICE {part.target}: its IRI depends on the result of another SERVICE / "
                                   "REVISION / WINDOWS, so the rule's inputs cannot be discovered from the dataset")
            discovered_by.append((part.prefix, part.target))
        elif part.kind == "service":
            if not evaluator.is_local(part.target):
                evaluator.check_reachable(part.target)  # a rule must not probe hosts off the allowlist (403)
            name, query_string = evaluator.local_stream(part.target)
            found = evaluator.windowed_input(part.target)
            if found is not None:
                constant[found] = None
            elif name is not None and windowed_params(query_string).windows is None:
                inner_stream = name
        elif part.kind == "windows" and stream is not None:
            ref = parse_window_ref(part.target)
            if ref.repeating:
                constant[(stream, str(ref))] = None
        if isinstance(part.inner, ExtendedQuery):
            _walk(part.inner, inner_stream, evaluator, constant, discovered_by, top=False)


def discover(analysis: RuleAnalysis, base: str, evaluator: ExtendedEvaluator) -> list[tuple[str, str]]:
    """The windowed inputs the dataset binds the rule's ``SERVICE ?var`` targets to, now (streams that exist)."""
    found: dict[tuple[str, str], None] = {}
    for prefix, variable in analysis.discovered_by:
        for row in evaluator.static_solutions(prefix, base).rows:
            value = row.get(variable[1:])
            if isinstance(value, NamedNode):
                windowed = evaluator.windowed_input(value.value)
                catalog = evaluator.catalog
                if windowed is not None and catalog is not None and catalog.find(windowed[0]) is not None:
                    found[windowed] = None
    return sorted(found)


@dataclass(frozen=True)
class RuleFile:
    """A ``.rq`` file: its text and what its leading comment lines declare (``# output: …`` is required;
    ``# report: …``, ``# operator: …`` and ``# publish: <MQTT topic>`` are optional)."""

    text: str
    output: str | None
    report: str | None = None
    operator: str | None = None
    publish: str | None = None


def rule_file(text: str) -> RuleFile:
    """Read the leading ``# key: value`` comment lines of a rule file."""
    declared: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep and key.strip().lower() in ("output", "report", "operator", "publish") and \
                key.strip().lower() not in declared:
            declared[key.strip().lower()] = value.strip()
    output = declared.get("output", "").strip("<>") or None
    return RuleFile(text, output, declared.get("report"), declared.get("operator"), declared.get("publish") or None)


class RuleRegistry:
    """Rules by name, persisted under ``<data>/rules``; re-discovers ``SERVICE ?var`` inputs when data changes."""

    def __init__(self, directory: Path, evaluator: ExtendedEvaluator) -> None:
        self.directory = directory
        self.evaluator = evaluator
        assert evaluator.catalog is not None, "rules read streams: the evaluator needs the stream catalog"
        self.catalog: StreamCatalog = evaluator.catalog
        self._lock = threading.RLock()
        self._rules: dict[str, Rule] = {}
        self._status_saved: dict[str, float] = {}  # monotonic time of each rule's last save
        self.on_change: list[Callable[[], None]] = []  # called after a rule is put or deleted
        directory.mkdir(parents=True, exist_ok=True)
        for meta in sorted(directory.glob("*.json")):
            query = meta.with_suffix(".rq")
            if query.exists():
                rule = Rule.from_json(query.read_text(encoding="utf-8"), json.loads(meta.read_text()))
                self._rules[rule.name] = rule
                self._hold(rule.inputs, [])
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
            raise RuleNotFound(f"no rule named {name!r}: create it with PUT /rules/{name}")
        return rule

    def put(self, name: str, text: str, output: str, base: str, report: str | None = None,
            operator: str | None = None, publish: str | None = None) -> tuple[Rule, bool]:
        """Register (or replace) a rule; creates the output stream if missing. Returns the rule and whether
        it is new. ``publish``: an MQTT topic for its output elements (kept here; the MQTT connector publishes).
        Raises RuleRejected (400) or RuleCycle (409) before anything is changed."""
        try:
            check_stream_name(name)
        except StoreError:
            raise RuleRejected(f"{name!r} is not a rule name: use 1-128 letters, digits, '.', '_' or '-'") from None
        output_name = output_stream_name(output, base)
        try:
            parse_report(report, operator)
        except ReportSyntaxError as error:
            raise RuleRejected(f"rule {name!r}: {error}") from None
        evaluator = self.evaluator.with_local_bases([base])
        analysis = analyse_rule(text, base, evaluator)
        pairs = [*analysis.constant, *discover(analysis, base, evaluator)]
        missing = sorted({stream for stream, _ in analysis.constant if self.catalog.find(stream) is None})
        if missing:
            raise RuleRejected(f"rule {name!r} reads stream(s) {', '.join(missing)}, which do not exist: create them "
                               "(PUT /streams/NAME) or register the rule that outputs them first")
        with self._lock:
            inputs_by_stream = {stream for stream, _ in pairs} | set(analysis.events)
            if self._reaches(output_name, inputs_by_stream, exclude=name):
                raise RuleCycle(f"rule {name!r}: its output stream {output_name!r} feeds its own inputs "
                                f"({', '.join(sorted(inputs_by_stream))}), directly or through other rules")
            if self.catalog.find(output_name) is None:
                self.catalog.put(StreamConfig(output_name))
            old = self._rules.get(name)
            rule = Rule(name, text, output_name, base.rstrip("/"), self._register(pairs, old.inputs if old else []),
                        old.status if old else RuleStatus(), discovers=bool(analysis.discovered_by), report=report,
                        operator=operator, fired=dict(old.fired) if old else {}, publish=publish,
                        latency=old.latency if old else Histogram(), events=analysis.events)
            self._start_after_latest(rule)
            (self.directory / f"{name}.rq").write_text(text, encoding="utf-8")
            self._rules[name] = rule
            self._hold(rule.inputs, old.inputs if old else [])
            self.save(rule)
        self._changed()
        return rule, old is None

    def _register(self, pairs: list[tuple[str, str]], kept: list[RuleInput]) -> list[RuleInput]:
        """The inputs, each sequence registered on its stream as the ref resolves now (``HEAD`` is this moment's
        HEAD; two rules resolving to the same windows share the sequence). An input the rule already had (``kept``:
        re-registered, reloaded at start-up, re-discovered) keeps its sequence."""
        inputs = []
        for stream_name, ref_text in pairs:
            stream = self.catalog.get(stream_name)
            same = next((i for i in kept if (i.stream, i.ref) == (stream_name, ref_text)
                         and stream.windows.sequence(i.sequence) is not None), None)
            if same is not None:
                inputs.append(same)
                continue
            sequence = stream.register(ref_text, resolve(parse_window_ref(ref_text), stream))
            inputs.append(RuleInput(stream_name, ref_text, sequence.id))
        return inputs

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
                    if self._reaches(rule.output, {pair[0]}, exclude=rule.name):
                        self._report(rule, f"input {pair[0]} {pair[1]} left out: the rule's output "
                                           f"{rule.output!r} feeds it (a cycle)")
                    else:
                        kept.append(pair)
                before, rule.inputs = rule.inputs, self._register(kept, rule.inputs)
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
            del self._rules[name]
            self._hold([], rule.inputs)
            (self.directory / f"{name}.json").unlink(missing_ok=True)
            (self.directory / f"{name}.rq").unlink(missing_ok=True)
        self._changed()

    def _changed(self) -> None:
        """Tell the listeners (event rules' workers) that a rule was put or deleted; outside the lock, since a
        listener may wait for a worker that saves its rule."""
        for listener in list(self.on_change):
            listener()

    def save(self, rule: Rule) -> None:
        with self._lock:
            if self._rules.get(rule.name) is rule:
                write_json(self.directory / f"{rule.name}.json", rule.to_json())
                self._status_saved[rule.name] = time.monotonic()

    def save_status(self, rule: Rule) -> None:
        """Persist a successful firing's counters, at most once a second per rule: a durable write per firing
        would cap firings at a few hundred per second, and a restart losing a second of counters loses no data."""
        if time.monotonic() - self._status_saved.get(rule.name, float("-inf")) >= STATUS_SAVE_SECONDS:
            self.save(rule)

    def reading(self, stream: str, sequence: str) -> list[Rule]:
        """The rules fired by a window of ``sequence`` on ``stream``."""
        with self._lock:
            return [rule for rule in self._rules.values()
                    if any(i.stream == stream and i.sequence == sequence for i in rule.inputs)]

    def load_directory(self, directory: Path, base: str) -> list[str]:
        """Register every ``NAME.rq`` of a rules directory (start-up); returns the errors, one per bad file.

        A rule may read another's output stream, which that rule creates: files that fail are retried
        while another pass registers more, so the order of the files does not matter."""
        pending = sorted(directory.glob("*.rq"))
        errors: dict[Path, str] = {}
        while pending:
            failed = []
            for path in pending:
                declared = rule_file(path.read_text(encoding="utf-8"))
                try:
                    if declared.output is None:
                        raise RuleRejected("no '# output: <IRI-or-stream-name>' line among its leading comments")
                    self.put(path.stem, declared.text, declared.output, base, declared.report, declared.operator,
                             declared.publish)
                    errors.pop(path, None)
                except ConcentratorError as error:
                    errors[path] = f"{path}: {error}"
                    failed.append(path)
            if len(failed) == len(pending):
                break
            pending = failed
        return list(errors.values())

    def _reaches(self, start: str, targets: set[str], exclude: str) -> bool:
        """Whether stream ``start`` is, or feeds through the rules (except ``exclude``), one of ``targets``."""
        seen: set[str] = set()
        frontier = [start]
        while frontier:
            stream = frontier.pop()
            if stream in targets:
                return True
            if stream in seen:
                continue
            seen.add(stream)
            for rule in self._rules.values():
                if rule.name != exclude and (stream in rule.events or any(i.stream == stream for i in rule.inputs)):
                    frontier.append(rule.output)
        return False
