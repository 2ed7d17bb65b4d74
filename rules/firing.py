"""Firing rules (rules/registry.py) when the pipeline commits window revisions.

``RuleRunner.on_windows`` is registered in ``WindowPipeline.on_windows``. For each new window revision of a
sequence a rule reads, the rule fires once: its windowed IRIs resolve to the latest complete window of their
sequence, the firing sequence's IRI to exactly the window that completed (so two windows completing in one
batch fire twice, each over its own window). What it constructs becomes elements of the output stream:

- quad template: one element per constructed graph name; a triple ``?g prov:generatedAtTime ?t`` in the
  template's default graph gives the element's time, else the window's end time;
- triple template: one element per firing, graph ``urn:uuid:…``, time = the window's end.

A count window's "end" is its last element's timestamp.

Output times strictly increase: a time not after the output stream's time becomes stream time + 1 µs.
A failing firing is recorded in the rule's status (error, window) and the other rules keep running; a firing
while another input has no complete window yet is skipped and counted as ``waiting``.

The firings of one pipeline batch are settled in chunks of at most ``SETTLE_SECONDS`` of firing: a chunk's outputs
are committed with one durable write per output stream, then its firings are marked; the batch's statuses and
``fired`` marks are saved with one write at its end. A firing is marked only after its outputs are durable, so a
crash before the marks are saved repeats it, and the repeat skips the outputs already committed. The chunks bound
how long a batch of thousands of firings holds back the outputs of its first ones.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pyoxigraph import DefaultGraph, Literal, NamedNode, Quad

from engine.context import QueryTarget
from engine.errors import WindowNotComplete
from engine.evaluation import ExtendedEvaluator
from engine.results import ConstructedQuads, ConstructedTriples
from engine.selection import revision_window
from rules.outputs import append_once
from rules.registry import LOG_KEEP, Rule, RuleRegistry
from rules.tasks import (
    UNREADABLE,
    ExecutorPool,
    Placement,
    TaskResult,
    firing_task,
    ineligible_reason,
    placement_of,
)
from sparql_ext.reporting import Reporter
from sparql_ext.revision import is_finer_than_micros, parse_datetime_stamp
from sparql_ext.windowing import format_micros, to_micros
from store.durable import now_micros
from store.elements import PROV_GENERATED_AT_TIME, ParsedElement, parse_timestamp
from store.stream import Stream
from store.windows import WindowRevision

log = logging.getLogger(__name__)

# A batch's firings are settled at least this often (seconds of firing): each settle costs one durable write per
# output stream and one for the statuses (≈ 2-4 ms here), so 0.1 s keeps that a few per cent of firing time while a
# batch of 5,000 firings (≈ 1.5 s) lets the outputs of its first rules out after 0.1 s, not after its last firing.
SETTLE_SECONDS = 0.1


class RuleRunner:
    def __init__(self, registry: RuleRegistry, evaluator: ExtendedEvaluator, *, placement: Placement = "driver",
                 spark_master: str = "local", pool: ExecutorPool | None = None) -> None:
        self.registry = registry
        self.evaluator = evaluator
        self.placement = placement
        self.spark_master = spark_master
        self.pool = pool  # evaluates eligible firings in Spark executors (rules/tasks.py)
        self._lock = threading.Lock()  # one firing at a time: output times stay ordered
        # per (rule, its report settings, input stream and sequence): the reporter, which keeps the last firing
        self._reporters: dict[tuple[str, ...], Reporter] = {}
        self._placements: dict[tuple[str, str], str] = {}  # (rule name, text) -> "executors" | "driver: why"

    def on_windows(self, committed: list[tuple[Stream, list[WindowRevision]]]) -> None:
        """Fire every rule reading these window revisions (a pipeline batch's, per stream), as one batch: the outputs
        of its firings are committed together, a chunk at a time (one durable write per output stream and chunk, not
        one per firing or per input stream), then the chunk's firings are marked."""
        firings = [(rule, stream, revision) for stream, revisions in committed for revision in revisions
                   for rule in self.registry.reading(stream.config.name, revision.sequence)
                   if revision.index > rule.fired.get(f"{stream.config.name}/{revision.sequence}", -1)]
        remote = self._evaluate_in_executors(firings)
        with self._lock:
            self._fire_and_settle(firings, remote)

    def warm_up(self) -> None:
        """When rules may go to executors (``--rules-on executors``, or a cluster): start Spark's Python workers and
        load what an evaluation needs there now, so that the first batch of firings does not wait for it (≈ 1.4 s
        on this 2-core machine)."""
        if self.pool is None or placement_of(self.placement, self.spark_master, None) != "executors":
            return
        self.pool.warm_up()
        log.info("Spark executors warmed for rule firings in %.1f s", self.pool.warmed_seconds or 0.0)

    def placement_for(self, rule: Rule) -> str:
        """Where ``rule`` is evaluated: "executors", or "driver: why" (decided once per rule text)."""
        key = (rule.name, rule.text)
        if key not in self._placements:
            reason = "no Spark pipeline" if self.pool is None else ineligible_reason(
                rule.text, rule.base, self.evaluator.with_local_bases([rule.base]))
            self._placements[key] = placement_of(self.placement, self.spark_master, reason)
        return self._placements[key]

    def _evaluate_in_executors(self, firings: list[tuple[Rule, Stream, WindowRevision]]) -> dict[int, TaskResult]:
        """The batch's firings of rules placed in executors, evaluated there in one Spark job (by position). A firing
        whose windows cannot be copied (e.g. another input without a complete window) is left to ``fire``."""
        if self.pool is None or not self.pool.ready:
            return {}
        wanted = [(position, rule, stream, revision) for position, (rule, stream, revision) in enumerate(firings)
                  if self.placement_for(rule) == "executors"]
        if not wanted:
            return {}
        static = self.pool.static(self.evaluator)
        if static is None:
            return {}  # the dataset is too large to broadcast
        tasks = []
        for position, rule, stream, revision in wanted:
            try:
                task = firing_task(position, rule.text, rule.base, self._evaluator_for(rule, stream, revision),
                                   self.pool.reads_log)
            except Exception:  # noqa: BLE001 - StaysInDriver, or the driver's evaluation reports it the usual way
                continue
            tasks.append(task)
        if not tasks:
            return {}
        try:
            results = self.pool.run(tasks, static)
        except Exception as error:  # noqa: BLE001 - a failed job: the driver evaluates these firings instead
            message = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
            log.warning("rule firings in Spark executors failed, evaluated in the driver instead: %s", message)
            for _, rule, _, _ in wanted:
                note = f"{format_micros(now_micros())} executors failed ({message}); evaluated in the driver"
                rule.status.log = [*rule.status.log, note][-LOG_KEEP:]
            return {}
        unreadable = [result for result in results if result.kind == UNREADABLE]
        if unreadable:
            log.warning("%d rule firing(s) could not read their windows in Spark executors (%s); evaluated in the "
                        "driver instead", len(unreadable), unreadable[0].payload.decode("utf-8", "replace"))
        return {result.position: result for result in results if result.kind != UNREADABLE}

    def _evaluator_for(self, rule: Rule, stream: Stream, revision: WindowRevision) -> ExtendedEvaluator:
        """The evaluator of one firing: the firing sequence's windowed IRIs pinned to the window that completed."""
        sequence = stream.windows.sequence(revision.sequence)
        kind = sequence.spec.kind if sequence is not None else "time"
        pins = {(i.stream, i.ref): revision_window(kind, revision)
                for i in rule.inputs if i.stream == stream.config.name and i.sequence == revision.sequence}
        return self.evaluator.for_rule([rule.base], pins, {(i.stream, i.ref): i.sequence for i in rule.inputs})

    def catch_up(self) -> int:
        """Fire every rule on the committed windows of its inputs it has not fired on (a crash between a window's
        commit and its firing, or before the firing was recorded): exactly once, since a repeated firing skips
        the outputs its first run committed (their origins are in the output stream). Returns the firings."""
        with self._lock:
            firings = []
            for rule in self.registry.rules():
                for item in rule.inputs:
                    stream = self.registry.catalog.find(item.stream)
                    if stream is None:
                        continue
                    after = rule.fired.get(f"{item.stream}/{item.sequence}", -1)
                    firings += [(rule, stream, revision)
                                for revision in stream.windows.windows_from(item.sequence, after + 1, 0)]
            self._fire_and_settle(firings, {})
        return len(firings)

    def _fire_and_settle(self, firings: list[tuple[Rule, Stream, WindowRevision]],
                         evaluated: dict[int, TaskResult]) -> None:
        """Fire each of ``firings`` in order (``evaluated``: the results executors computed, by position) and settle
        them in chunks of at most ``SETTLE_SECONDS`` of firing. Called with the runner's lock held."""
        chunk: list[_Firing] = []
        began = time.monotonic()
        for position, (rule, stream, revision) in enumerate(firings):
            chunk.append(self._fire(rule, stream, revision, evaluated.get(position)))
            if time.monotonic() - began >= SETTLE_SECONDS:
                self._settle(chunk)
                chunk, began = [], time.monotonic()
        if chunk:
            self._settle(chunk)
        # the statuses and marks in one durable write for the batch (a write per chunk made the journal grow, and
        # compact, with every chunk); the chunks' outputs are durable already, so a crash before this write repeats
        # those firings at the next start, and the repeats skip their outputs
        if firings:
            self.registry.save_statuses(list({id(rule): rule for rule, _, _ in firings}.values()))

    @staticmethod
    def _mark_fired(rule: Rule, stream: Stream, revision: WindowRevision) -> None:
        key = f"{stream.config.name}/{revision.sequence}"
        rule.fired[key] = max(rule.fired.get(key, -1), revision.index)

    def _reported(self, rule: Rule, stream: Stream, revision: WindowRevision, result: Any) -> Any:
        """What the rule's report policy and stream operator let out of this firing's construction (RStream at
        window close, the default, lets out all of it). Firings of one input sequence are compared with each
        other; constructed blank nodes and UUID() / STRUUID() values differ in every firing, so IStream and
        content-change suit rules whose output is a function of the window."""
        key = (rule.name, str(rule.report), str(rule.operator), stream.config.name, revision.sequence)
        reporter = self._reporters.get(key)
        if reporter is None:  # (not setdefault: that would parse the report spec on every firing)
            reporter = self._reporters[key] = Reporter(rule.report_spec)
        return type(result)(reporter.report(revision.end, list(result), revision.count) or [])

    def _fire(self, rule: Rule, stream: Stream, revision: WindowRevision, evaluated: TaskResult | None) -> _Firing:
        """Evaluate one firing and queue its outputs on the output stream (its committer commits them as it runs;
        ``_settle`` waits until they are durable). A firing that waits for another input's window, or fails, is
        recorded in the rule's status here."""
        sequence = stream.windows.sequence(revision.sequence)
        kind = sequence.spec.kind if sequence is not None else "time"
        firing = _Firing(rule, stream, revision, kind, time.monotonic(), evaluated is not None)
        try:
            result: Any
            if evaluated is not None:
                result = evaluated.construction()
            else:
                evaluator = self._evaluator_for(rule, stream, revision)
                result = evaluator.query(rule.text, QueryTarget(base_iri=rule.base))
            end = _window_time(stream, kind, revision)
            elements = _elements(self._reported(rule, stream, revision, result), end)
            output = self.registry.catalog.get(rule.output)
            key = f"{rule.name}/{stream.config.name}/{revision.sequence}/{revision.index}"
            for position, element in enumerate(elements):
                element.origin = f"{key}/{position}"
            elements = append_once(output, elements)
        except WindowNotComplete as waiting:  # another input has no complete window yet: nothing to join
            rule.status.waiting += 1
            self._mark_fired(rule, stream, revision)
            rule.status.last_window = firing.where
            rule.status.log = [*rule.status.log, f"{format_micros(now_micros())} {firing.where}: not fired, {waiting}"
                               ][-LOG_KEEP:]
            return firing
        except Exception as error:  # noqa: BLE001 - recorded; other rules keep running
            self._failed(firing, error)
            return firing
        firing.output, firing.outputs = output, len(elements)
        return firing

    def _settle(self, firings: list[_Firing]) -> None:
        """Wait until the outputs the firings queued are committed (one wait per output stream), then record each
        firing in its rule's status: a firing is marked only once its outputs are durable, so a crash before its mark
        is saved repeats it (and the repeat skips the outputs that were committed: their origins are in the output
        stream)."""
        failed: dict[str, Exception] = {}
        settled: dict[int, _Firing] = {}  # each rule's last firing that settled
        for stream in {id(f.output): f.output for f in firings if f.output is not None}.values():
            try:
                stream.flush()
            except Exception as error:  # noqa: BLE001 - the firings writing there failed; the others stand
                failed[stream.config.name] = error
        for firing in firings:
            rule, output = firing.rule, firing.output
            if output is not None and output.config.name in failed:
                # not marked fired: its outputs are not durable, so the firing is repeated at the next start
                # (catch_up), once the output stream is opened anew
                self._failed(firing, failed[output.config.name], mark=False)
            elif output is not None:
                status = rule.status
                status.firings += 1
                if firing.in_executor:
                    status.executor_firings += 1
                status.placement = self.placement_for(rule)
                self._mark_fired(rule, firing.stream, firing.revision)
                status.outputs += firing.outputs
                seconds = time.monotonic() - firing.started
                status.last_latency_ms = round(seconds * 1000, 3)
                rule.latency.observe(seconds)
                status.last_error = None
                settled[id(rule)] = firing
        for firing in settled.values():  # a rule's last window: its last firing's (written once, not per firing)
            firing.rule.status.last_window = firing.where

    def _failed(self, firing: _Firing, error: Exception, *, mark: bool = True) -> None:
        """Record a failed firing; ``mark`` it fired (a rule that fails on a window is not run on it again) unless
        what failed was the commit of its outputs."""
        status = firing.rule.status
        status.failures += 1
        if mark:
            self._mark_fired(firing.rule, firing.stream, firing.revision)
        status.last_error = f"{type(error).__name__}: {error}"
        status.last_window = firing.where
        status.log = [*status.log, f"{format_micros(now_micros())} {firing.where}: {status.last_error}"][-LOG_KEEP:]
        log.warning("rule %s failed on %s: %s", firing.rule.name, firing.where, error)
        firing.output = None


@dataclass
class _Firing:
    """One firing between its evaluation and its settling: the output stream it queued elements on (None when it
    waited or failed) and how many."""

    rule: Rule
    stream: Stream
    revision: WindowRevision
    kind: str  # of the window: "time" or "count"
    started: float
    in_executor: bool
    output: Stream | None = None
    outputs: int = 0

    @property
    def where(self) -> str:
        """The window, as the rule's status names it (formatted when it is shown: a batch has thousands of firings)."""
        revision = self.revision
        return (f"{self.stream.config.name} window {revision.index} ({_bound(self.kind, revision.start)}, "
                f"{_bound(self.kind, revision.end)})")


def _window_time(stream: Stream, kind: str, revision: WindowRevision) -> int:
    """The default output time: a time window's end; a count window's last element's timestamp (stream time
    too, so a replay gives the same output times); an empty count window's commit time."""
    if kind != "count":
        return revision.end
    last = max(revision.ordinals(), default=None)
    time_of_last = stream.time_of(last) if last is not None else None
    return time_of_last if time_of_last is not None else revision.commit


def _bound(kind: str, value: int) -> str:
    return f"element {value}" if kind == "count" else format_micros(value)


def _output_time(value: Literal, where: str) -> tuple[int, Literal | None]:
    """An output element's time from its template's timestamp, and the literal to keep: the literal as the rule made
    it, unless it is finer than a microsecond (``NOW()`` has nanoseconds): then the time is the next microsecond and
    the literal is written anew from it (docs/rules.md)."""
    if is_finer_than_micros(value.value):
        return to_micros(parse_datetime_stamp(value.value, f"{where}: timestamp {value.value!r}", finer="ceil")), None
    return parse_timestamp(value.value, where), value


def _elements(result: object, window_end: int) -> list[ParsedElement]:
    if isinstance(result, ConstructedQuads):
        stamp = NamedNode(PROV_GENERATED_AT_TIME)
        times: dict[object, tuple[int, Literal | None]] = {}
        graphs: dict[object, list[Quad]] = {}
        for quad in result:
            if isinstance(quad.graph_name, DefaultGraph):
                if quad.predicate == stamp and isinstance(quad.object, Literal):
                    times[quad.subject] = _output_time(quad.object, f"output element {quad.subject}")
                continue
            graphs.setdefault(quad.graph_name, []).append(quad)
        return [ParsedElement(graph, quads, *times.get(graph, (window_end, None)))  # type: ignore[arg-type]
                for graph, quads in graphs.items()]  # (graphs of a quad template are IRIs or blank nodes)
    if isinstance(result, ConstructedTriples):
        if not result:
            return []
        graph = NamedNode(f"urn:uuid:{uuid.uuid4()}")
        return [ParsedElement(graph, [Quad(t.subject, t.predicate, t.object, graph) for t in result], window_end)]
    raise TypeError("a rule must be a CONSTRUCT query")
