"""Rules fire exactly once per window across a crash (issue 6): windows committed but not fired, or fired but
not recorded, are fired at start-up (RuleRunner.catch_up); a repeated firing skips the outputs its first run
committed (their origins are in the output stream's log). In-process, windows materialized by hand as the
pipeline writes them."""

from __future__ import annotations

import io
from pathlib import Path

from pyoxigraph import RdfFormat
from pytest import MonkeyPatch

from engine.context import EvaluationContext
from engine.evaluation import ExtendedEvaluator
from rules import firing
from rules.firing import RuleRunner
from rules.registry import RuleRegistry
from sparql_ext.windowing import resolve
from sparql_ext.windowref import parse_window_ref
from store import RevisionedDataset
from store.durable import now_micros
from store.framing import ElementFramer
from store.stream import Stream, StreamConfig
from store.streams import StreamCatalog
from store.windows import PipelineState, new_revision

BASE = "http://localhost"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
T0 = 1_466_416_800_000_000  # 2016-06-20T10:00:00Z
MINUTE = 60_000_000
RULE = (f"CONSTRUCT {{ GRAPH ?e {{ ?e <http://ex/n> ?n }} }} WHERE {{ SERVICE <{BASE}/streams/hr?WINDOWS="
        "R/2016-06-20T10:00:00Z/PT05M> { SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } } "
        "BIND(IRI(CONCAT('urn:uuid:', STRUUID())) AS ?e) }")


def feed(stream: Stream, minutes: list[int]) -> list[int]:
    stamp = "^^<http://www.w3.org/2001/XMLSchema#dateTime>"
    body = "".join(f'<http://ex/e{m}> <{PROV}> "2016-06-20T10:{m:02d}:00Z"{stamp} .\n'
                   f"<http://ex/e{m}> {{ <http://ex/s{m}> <http://ex/v> {m} . }}\n" for m in minutes)
    framer = ElementFramer(io.BytesIO(body.encode()), RdfFormat.TRIG, PROV)
    ordinals = [stream.accept(e, now_micros()) for e in framer]
    stream.flush()
    return ordinals  # type: ignore[return-value]


def materialize(stream: Stream, sequence: str, k: int, ordinals: list[int]) -> None:
    """Commit window k as the pipeline's batch would (without the on_windows callbacks: the crash came first)."""
    start = T0 + k * 5 * MINUTE
    revision = new_revision(sequence, k, start, start + 5 * MINUTE, ((ordinals[0], ordinals[-1]),))
    state = PipelineState(batch=stream.windows.state.batch + 1, next_index={sequence: k + 1})
    assert stream.windows.commit(state.batch, [revision], state)


def parts(tmp_path: Path) -> tuple[StreamCatalog, RuleRegistry, RuleRunner]:
    catalog = StreamCatalog(tmp_path / "streams")
    dataset = RevisionedDataset(tmp_path / "data", in_memory=True)  # the rules here read streams only
    evaluator = ExtendedEvaluator(EvaluationContext.for_requests(dataset, catalog, []))
    registry = RuleRegistry(tmp_path / "rules", evaluator)
    return catalog, registry, RuleRunner(registry, evaluator)


def stop(catalog: StreamCatalog, registry: RuleRegistry) -> None:
    catalog.close()
    registry.evaluator.dataset.close()


def test_windows_fire_exactly_once_across_restarts(tmp_path: Path) -> None:
    catalog, registry, runner = parts(tmp_path)
    catalog.put(StreamConfig("hr"))
    rule, _ = registry.put("count", RULE, "counts", BASE)
    sequence = rule.inputs[0].sequence
    hr = catalog.get("hr")
    materialize(hr, sequence, 0, feed(hr, [0, 1, 2]))
    runner.on_windows([(hr, [hr.windows.latest(sequence)])])  # type: ignore[list-item]  # fired: 1 output
    assert len(catalog.get("counts")) == 1
    # the crash: window 0's firing was not recorded (statuses are saved at most once a second), and window 1 was
    # committed by the pipeline but never fired
    registry.get("count").fired.clear()
    registry.save(registry.get("count"))
    registry.get("count").fired[f"hr/{sequence}"] = -1
    registry.save(registry.get("count"))
    materialize(hr, sequence, 1, feed(hr, [5, 6]))
    stop(catalog, registry)

    catalog, registry, runner = parts(tmp_path)  # restart on the same data directory
    assert registry.get("count").fired == {f"hr/{sequence}": -1}
    assert runner.catch_up() == 2  # window 0 again (its output is already there) and window 1
    counts = catalog.get("counts")
    assert len(counts) == 2  # one element per window, none twice
    assert registry.get("count").fired == {f"hr/{sequence}": 1}
    assert runner.catch_up() == 0  # nothing left
    values = sorted(int(q.object.value) for q in counts.dataset_quads(range(1, counts.head() + 1))
                    if q.predicate.value == "http://ex/n")
    assert values == [2, 3]  # window 1 holds 2 elements, window 0 holds 3
    stop(catalog, registry)


def test_a_new_rule_does_not_fire_on_history(tmp_path: Path) -> None:
    catalog, registry, runner = parts(tmp_path)
    catalog.put(StreamConfig("hr"))
    hr = catalog.get("hr")
    ref = "R/2016-06-20T10:00:00Z/PT5M"
    seq = hr.register(ref, resolve(parse_window_ref(ref), hr)).id
    materialize(hr, seq, 0, feed(hr, [0, 1]))
    registry.put("count", RULE, "counts", BASE)  # registered after window 0 completed
    assert runner.catch_up() == 0 and len(catalog.get("counts")) == 0
    stop(catalog, registry)


def test_a_firing_whose_output_commit_fails_is_not_marked_and_fires_again_after_a_restart(tmp_path: Path) -> None:
    catalog, registry, runner = parts(tmp_path)
    catalog.put(StreamConfig("hr"))
    rule, _ = registry.put("count", RULE, "counts", BASE)
    registry.put("count-too", RULE, "others", BASE)  # its output stream commits: its firing stands
    sequence = rule.inputs[0].sequence
    hr = catalog.get("hr")
    materialize(hr, sequence, 0, feed(hr, [0, 1, 2]))

    def disk_full(batch: object) -> None:
        raise OSError(28, "No space left on device")

    catalog.get("counts")._commit = disk_full  # type: ignore[method-assign]  # the output stream's next commit fails
    runner.on_windows([(hr, [hr.windows.latest(sequence)])])  # type: ignore[list-item]
    status = registry.get("count").status
    assert (status.firings, status.failures, status.outputs) == (0, 1, 0)
    assert "No space left on device" in (status.last_error or "")
    assert registry.get("count").fired.get(f"hr/{sequence}", -1) == -1  # not marked: its output is not durable
    assert registry.get("count-too").status.firings == 1 and len(catalog.get("others")) == 1
    stop(catalog, registry)

    catalog, registry, runner = parts(tmp_path)  # a restart (the failed stream is opened anew)
    assert runner.catch_up() == 1  # window 0 for "count" only
    assert len(catalog.get("counts")) == 1 and len(catalog.get("others")) == 1
    assert registry.get("count").fired == {f"hr/{sequence}": 0}
    stop(catalog, registry)


def test_a_large_batch_lets_out_the_outputs_of_its_first_firings_before_its_last(tmp_path: Path,
                                                                                 monkeypatch: MonkeyPatch) -> None:
    """A batch's firings are settled in chunks of at most SETTLE_SECONDS of firing. With chunks of one firing, the
    first rule's (``a-…``) output is committed and durable, and the rule marked fired, before the second rule
    (``b-…``) fires: ``b`` reads it. In one chunk both firings are settled together, at the end. (Whether ``b`` then
    reads ``a``'s output depends on the output stream's committer, which may commit it before the settling waits
    for it: not asserted.)"""
    seen_rule = (f"CONSTRUCT {{ GRAPH ?e {{ ?e <http://ex/seen> ?n }} }} WHERE {{ SERVICE <{BASE}/streams/hr?WINDOWS="
                 f"R/2016-06-20T10:00:00Z/PT05M> {{ SELECT * WHERE {{}} }} SERVICE <{BASE}/streams/counts> "
                 "{ SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s <http://ex/n> ?o } } } "
                 "BIND(IRI(CONCAT('urn:uuid:', STRUUID())) AS ?e) }")
    settled: list[list[str]] = []
    settle = RuleRunner._settle  # noqa: SLF001 - spied on: which firings each settling covers

    def spy(runner: RuleRunner, firings: list[firing._Firing]) -> None:  # noqa: SLF001
        settled.append([f.rule.name for f in firings])
        settle(runner, firings)

    monkeypatch.setattr(RuleRunner, "_settle", spy)
    seen = {}
    chunks = {}
    for settle_seconds in (60.0, 0.0):
        directory = tmp_path / str(settle_seconds)
        monkeypatch.setattr(firing, "SETTLE_SECONDS", settle_seconds)
        catalog, registry, runner = parts(directory)
        catalog.put(StreamConfig("hr"))
        first, _ = registry.put("a-count", RULE, "counts", BASE)
        registry.put("b-seen", seen_rule.replace("http://localhost", BASE), "seen", BASE)
        hr = catalog.get("hr")
        sequence = first.inputs[0].sequence
        materialize(hr, sequence, 0, feed(hr, [0, 1, 2]))
        settled.clear()
        runner.on_windows([(hr, [hr.windows.latest(sequence)])])  # type: ignore[list-item]
        chunks[settle_seconds] = list(settled)
        out = catalog.get("seen")
        seen[settle_seconds] = [int(q.object.value) for q in out.dataset_quads(range(1, out.head() + 1))
                                if q.predicate.value == "http://ex/seen"]
        assert registry.get("a-count").status.firings == registry.get("b-seen").status.firings == 1
        stop(catalog, registry)
    assert chunks == {60.0: [["a-count", "b-seen"]], 0.0: [["a-count"], ["b-seen"]]}
    assert seen[0.0] == [1]
