"""Bulk rule registration (issue 15, item 3): ``RuleRegistry.put_many``, the rules journal, ``PUT /rules``."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient

from conformance.server import running_server
from engine.context import EvaluationContext
from engine.evaluation import ExtendedEvaluator
from rules.errors import RuleCycle, RuleRejected
from rules.registry import RuleRegistry, RuleSpec
from sparql_ext.windowing import resolve
from sparql_ext.windowref import parse_window_ref
from store import RevisionedDataset
from store.stream import StreamConfig
from store.streams import StreamCatalog

BASE = "http://localhost"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
REF = "R/2016-06-20T10:00:00Z/PT05M"
CANONICAL_REF = "R/2016-06-20T10:00:00Z/PT5M"  # how the registry writes REF


def rule_text(base: str, stream: str, threshold: int = 100, ref: str = REF) -> str:
    return (
        f"CONSTRUCT {{ GRAPH ?e {{ ?e <http://ex/avg> ?avg }} ?e <{PROV}> ?t }} WHERE {{ "
        f"SERVICE <{base}/streams/{stream}?WINDOWS={ref}> {{ "
        f"SELECT (AVG(?v) AS ?avg) (MAX(?time) AS ?t) WHERE {{ ?g <{PROV}> ?time "
        "GRAPH ?g { ?o <http://ex/hr> ?v } } } "
        f"FILTER(?avg > {threshold}) BIND(IRI(CONCAT('http://ex/alert/', STR(?t))) AS ?e) }}")


def counting_text(base: str, stream: str, j: int) -> str:
    """A rule whose one output per window is known: the window's element count, as rule j's."""
    return (f"CONSTRUCT {{ <urn:rule:{j}> <urn:n> ?n }} WHERE {{ SERVICE <{base}/streams/{stream}?WINDOWS={REF}> "
            "{ SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } } } }")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[StreamCatalog]:
    opened = StreamCatalog(tmp_path / "streams")  # on disk: the durable writes counted below are real
    for name in ("a", "b", "c"):
        opened.put(StreamConfig(name))
    yield opened
    opened.close()


@pytest.fixture
def registry(tmp_path: Path, catalog: StreamCatalog) -> RuleRegistry:
    dataset = RevisionedDataset(tmp_path / "data", in_memory=True)
    return RuleRegistry(tmp_path / "rules", ExtendedEvaluator(EvaluationContext.for_requests(dataset, catalog, [])))


def _state(registry: RuleRegistry) -> tuple[object, ...]:
    """What a refused batch must leave as it was: rules, streams, sequences, the files of the rules directory."""
    files = {p.name: p.read_bytes() for p in sorted(registry.directory.iterdir())}
    sequences = {name: sorted(s.id for s in registry.catalog.get(name).windows.sequences())
                 for name in registry.catalog.names()}
    return registry.names(), sorted(registry.catalog.names()), sequences, files


def test_put_many_registers_every_rule_sharing_sequences(registry: RuleRegistry) -> None:
    specs = [RuleSpec(f"r{j}", rule_text(BASE, "ab"[j % 2], j), "out", BASE) for j in range(50)]
    specs.append(RuleSpec("w", rule_text(BASE, "c", ref="R/2016-06-20T10:00:00Z/PT01M"), f"{BASE}/streams/out2",
                          BASE, report="non-empty", operator="istream"))
    results = registry.put_many(specs)
    assert [(rule.name, created) for rule, created in results] == [(s.name, True) for s in specs]
    assert len(registry.names()) == 51
    # rules resolving to the same windows share one sequence: one per stream and ref
    assert len(registry.catalog.get("a").windows.sequences()) == 1
    assert len(registry.catalog.get("b").windows.sequences()) == 1
    assert {tuple(i.sequence for i in registry.get(f"r{j}").inputs) for j in range(0, 50, 2)} == \
        {(registry.catalog.get("a").windows.sequences()[0].id,)}
    assert [(i.stream, i.ref) for i in registry.get("w").inputs] == [("c", "R/2016-06-20T10:00:00Z/PT1M")]
    assert registry.catalog.find("out") is not None and registry.catalog.find("out2") is not None
    w = registry.get("w")
    assert (w.output, w.report, w.operator) == ("out2", "non-empty", "istream")
    again = registry.put_many([RuleSpec("r0", rule_text(BASE, "a", 7), "out", BASE), RuleSpec("new", rule_text(
        BASE, "a"), "out", BASE)])
    assert [(rule.name, created) for rule, created in again] == [("r0", False), ("new", True)]
    assert registry.get("r0").text == rule_text(BASE, "a", 7)


def test_restart_reloads_every_rule_from_the_journal(registry: RuleRegistry, tmp_path: Path) -> None:
    specs = [RuleSpec(f"r{j}", rule_text(BASE, "abc"[j % 3], j), "out", BASE) for j in range(300)]
    registry.put_many(specs)
    registry.delete("r7")
    registry.put_many([RuleSpec("r8", rule_text(BASE, "c", 1), "other", BASE, publish="alerts/r8")])
    rule = registry.get("r9")
    rule.status.firings, rule.status.outputs = 4, 3
    key = f"{rule.inputs[0].stream}/{rule.inputs[0].sequence}"
    rule.fired[key] = 12
    registry.save_statuses([rule])
    assert sorted(p.name for p in registry.directory.iterdir()) == ["registry.jsonl"]  # no file per rule
    reloaded = RuleRegistry(tmp_path / "rules", registry.evaluator)
    assert reloaded.names() == sorted(f"r{j}" for j in range(300) if j != 7)
    for j in (0, 1, 2, 299):
        before, after = registry.get(f"r{j}"), reloaded.get(f"r{j}")
        assert (after.text, after.output, after.inputs, after.base) == (before.text, "out", before.inputs, BASE)
    r8 = reloaded.get("r8")
    assert (r8.text, r8.output, r8.publish) == (rule_text(BASE, "c", 1), "other", "alerts/r8")
    r9 = reloaded.get("r9")
    assert (r9.status.firings, r9.status.outputs, r9.fired[key]) == (4, 3, 12)


def test_a_cycle_inside_the_batch_refuses_all_of_it(registry: RuleRegistry) -> None:
    registry.put_many([RuleSpec("first", rule_text(BASE, "c"), "d", BASE)])
    before = _state(registry)
    batch = [RuleSpec("fine", rule_text(BASE, "c"), "new-out", BASE),
             RuleSpec("a-to-b", rule_text(BASE, "a"), "b", BASE),
             RuleSpec("b-to-a", rule_text(BASE, "b"), "a", BASE)]
    with pytest.raises(RuleCycle, match="a-to-b|b-to-a") as refused:
        registry.put_many(batch)
    assert refused.value.status_hint == 409
    assert _state(registry) == before  # nothing registered, no stream created, no sequence, no file written
    # through a rule registered before: d -> a (new) closes a -> ... only if something reads a into d; c -> d exists
    with pytest.raises(RuleCycle, match="d-to-c"):
        registry.put_many([RuleSpec("d-to-c", rule_text(BASE, "d"), "c", BASE)])
    assert _state(registry) == before
    with pytest.raises(RuleCycle, match="self"):
        registry.put_many([RuleSpec("self", rule_text(BASE, "a"), f"{BASE}/streams/a", BASE)])


def test_an_invalid_rule_refuses_the_batch_and_names_it(registry: RuleRegistry) -> None:
    before = _state(registry)
    cases = {
        "never-fires": (RuleSpec("never-fires", "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", "out", BASE),
                        "never fire"),
        "broken": (RuleSpec("broken", "CONSTRUCT { ?s ?p ?o } WHERE { ", "out", BASE), "not valid"),
        # extended SPARQL's own parser passes it; SPARQL 1.1 does not (before, it was registered and failed at every
        # firing): refused with where it is wrong
        "bad-filter": (RuleSpec("bad-filter", rule_text(BASE, "a").replace("> 100", "> "), "out", BASE),
                       "not valid extended SPARQL: Syntax error at line 1 column"),
        "reads-nothing": (RuleSpec("reads-nothing", rule_text(BASE, "nowhere"), "out", BASE), "nowhere"),
        "bad-report": (RuleSpec("bad-report", rule_text(BASE, "a"), "out", BASE, report="sometimes"), "sometimes"),
        "bad name!": (RuleSpec("bad name!", rule_text(BASE, "a"), "out", BASE), "not a rule name"),
        "bad-output": (RuleSpec("bad-output", rule_text(BASE, "a"), "http://elsewhere/x", BASE), "output="),
    }
    for name, (spec, problem) in cases.items():
        batch = [RuleSpec("ok-1", rule_text(BASE, "a"), "out", BASE), spec,
                 RuleSpec("ok-2", rule_text(BASE, "b"), "out", BASE)]
        with pytest.raises(RuleRejected) as refused:
            registry.put_many(batch)
        assert refused.value.status_hint == 400
        assert repr(name) in refused.value.message and problem in refused.value.message, refused.value.message
        assert _state(registry) == before
    with pytest.raises(RuleRejected, match="'twice'.*twice"):
        registry.put_many([RuleSpec("twice", rule_text(BASE, "a"), "out", BASE),
                           RuleSpec("twice", rule_text(BASE, "b"), "out", BASE)])
    assert _state(registry) == before


def test_a_rule_may_read_the_output_of_another_rule_of_the_batch(registry: RuleRegistry) -> None:
    # "first" reads "middle", which only "second" (later in the batch) creates
    registry.put_many([RuleSpec("first", rule_text(BASE, "middle"), "final", BASE),
                       RuleSpec("second", rule_text(BASE, "a"), "middle", BASE)])
    assert [(i.stream, i.ref) for i in registry.get("first").inputs] == [("middle", CANONICAL_REF)]


def _count_durable_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fsync / fdatasync this thread makes from now on counts one (whichever helper calls it): the registry
    writes in the caller's thread, and a thread left running by an earlier test in this worker must not count."""
    calls: list[int] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    caller = threading.get_ident()

    def fsync(fd: int) -> None:
        if threading.get_ident() == caller:
            calls.append(fd)
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        if threading.get_ident() == caller:
            calls.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


def test_loading_1000_rules_makes_a_constant_number_of_durable_writes(
        registry: RuleRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "rules-dir"
    directory.mkdir()
    for j in range(1000):  # 3 input streams, 2 refs each: 6 sequences; 2 output streams to create
        ref = REF if j % 2 else "R/2016-06-20T10:00:00Z/PT01M"
        (directory / f"r{j:04d}.rq").write_text(f"# output: out{j % 2}\n" + rule_text(BASE, "abc"[j % 3], j, ref))
    calls = _count_durable_writes(monkeypatch)
    errors = registry.load_directory(directory, BASE)
    for name in registry.catalog.names():
        registry.catalog.get(name).flush()  # the sequences' registration records, committed by each stream
    assert errors == [] and len(registry.names()) == 1000
    # per stream: its sequences file, its log's registration records; per new output stream: its files; the
    # rules: one journal append. Independent of the number of rules (1,000 puts made more than 2,000).
    assert len(calls) <= 30, len(calls)
    calls.clear()
    rules = registry.rules()
    for rule in rules:
        rule.status.firings += 1
    registry.save_statuses(rules)  # the statuses of a batch of firings: one write
    assert len(calls) == 1
    assert RuleRegistry(registry.directory, registry.evaluator).get("r0999").status.firings == 1


def test_save_status_writes_at_most_once_a_second(registry: RuleRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.put_many([RuleSpec(f"r{j}", rule_text(BASE, "a", j), "out", BASE) for j in range(20)])
    calls = _count_durable_writes(monkeypatch)
    started = time.monotonic()
    for _ in range(5):
        for rule in registry.rules():
            rule.status.firings += 1
            registry.save_status(rule)
    elapsed = time.monotonic() - started  # well under a second on a quiet machine; a busy one may cross a second
    assert len(calls) <= 1 + int(elapsed), (len(calls), elapsed)  # not one write per call (100)




def test_statuses_held_back_are_written_at_a_clean_stop(registry: RuleRegistry, monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr("rules.registry.STATUS_SAVE_SECONDS", 3600.0)  # however slow the machine, only one write
    registry.put_many([RuleSpec(f"r{j}", rule_text(BASE, "a", j), "out", BASE) for j in range(3)])
    for _ in range(2):
        for rule in registry.rules():
            rule.status.firings += 1
            registry.save_status(rule)  # the first call writes; the others are held back (within a second)
    assert [r.status.firings for r in RuleRegistry(registry.directory, registry.evaluator).rules()] != [2, 2, 2]
    registry.flush_statuses()  # what a clean stop does (protocol.services.Services.close)
    assert [r.status.firings for r in RuleRegistry(registry.directory, registry.evaluator).rules()] == [2, 2, 2]

def test_the_journal_is_compacted_as_it_grows(registry: RuleRegistry) -> None:
    registry.put_many([RuleSpec(f"r{j}", rule_text(BASE, "a", j), "out", BASE) for j in range(10)])
    rule = registry.get("r3")
    for n in range(3000):
        rule.status.firings = n + 1
        registry.save_statuses([rule])
    lines = (registry.directory / "registry.jsonl").read_bytes().count(b"\n")
    assert lines < 1100, lines  # not 3,010 records
    assert RuleRegistry(registry.directory, registry.evaluator).get("r3").status.firings == 3000


def test_a_torn_journal_end_is_dropped(registry: RuleRegistry) -> None:
    registry.put_many([RuleSpec(f"r{j}", rule_text(BASE, "a", j), "out", BASE) for j in range(3)])
    journal = registry.directory / "registry.jsonl"
    with journal.open("ab") as f:
        f.write(b'{"op": "put", "rule": {"name": "half')  # a crash in the middle of an append
    reloaded = RuleRegistry(registry.directory, registry.evaluator)
    assert reloaded.names() == ["r0", "r1", "r2"]
    reloaded.put_many([RuleSpec("r3", rule_text(BASE, "b"), "out", BASE)])  # appends after a whole line
    assert RuleRegistry(registry.directory, registry.evaluator).names() == ["r0", "r1", "r2", "r3"]


def test_the_old_layout_is_migrated_once(registry: RuleRegistry, tmp_path: Path) -> None:
    directory = tmp_path / "old-rules"
    directory.mkdir()
    stream = registry.catalog.get("a")
    sequence = stream.register(CANONICAL_REF, resolve(parse_window_ref(CANONICAL_REF), stream))
    text = rule_text(BASE, "a")
    # what the previous version wrote: NAME.rq (the text) and NAME.json (the rest, statuses included)
    (directory / "old.rq").write_text(text, encoding="utf-8")
    (directory / "old.json").write_text(json.dumps({
        "name": "old", "output": "out", "base": BASE, "discovers": False, "report": "non-empty",
        "operator": None, "fired": {f"a/{sequence.id}": 5}, "publish": None,
        "inputs": [{"stream": "a", "ref": CANONICAL_REF, "sequence": sequence.id}],
        "status": {"firings": 6, "outputs": 2, "failures": 1, "waiting": 0, "last_error": "boom", "log": ["x"]}}))
    migrated = RuleRegistry(directory, registry.evaluator)
    rule = migrated.get("old")
    assert (rule.text, rule.output, rule.report, rule.fired) == (text, "out", "non-empty", {f"a/{sequence.id}": 5})
    assert (rule.status.firings, rule.status.outputs, rule.status.failures, rule.status.last_error) == (
        6, 2, 1, "boom")
    assert [(i.stream, i.ref, i.sequence) for i in rule.inputs] == [("a", CANONICAL_REF, sequence.id)]
    assert sorted(p.name for p in directory.iterdir()) == ["old.json.migrated", "old.rq.migrated", "registry.jsonl"]
    again = RuleRegistry(directory, registry.evaluator).get("old")  # from the journal now
    assert (again.text, again.status.firings, again.fired) == (text, 6, {f"a/{sequence.id}": 5})


# -- HTTP --------------------------------------------------------------------------------------------------------

def _bulk(client: FlaskClient, rules: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    return client.put("/rules", json={"rules": rules})


def test_http_bulk_put(client: FlaskClient) -> None:
    for name in ("s0", "s1"):
        assert client.put(f"/streams/{name}").status_code == 201
    rules: list[dict[str, object]] = [{"name": f"r{j}", "query": counting_text(BASE, f"s{j % 2}", j),
                                       "output": "counts"} for j in range(2000)]
    rules[5].update(report="non-empty", operator="istream")
    response = _bulk(client, rules)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json() == {"created": [f"r{j}" for j in range(2000)], "replaced": []}
    listed = client.get("/rules").get_json()
    assert len(listed) == 2000
    r5 = client.get("/rules/r5", headers={"Accept": "application/json"}).get_json()
    assert (r5["output"], r5["report"], r5["operator"]) == ("counts", "non-empty", "istream")
    assert r5["inputs"] == [{"stream": "s1", "windows": "R/2016-06-20T10:00:00Z/PT5M"}]
    assert client.get("/rules/r7").get_data(as_text=True) == counting_text(BASE, "s1", 7)
    replaced = _bulk(client, [{"name": "r1", "query": counting_text(BASE, "s0", 1), "output": "counts"}])
    assert replaced.status_code == 200 and replaced.get_json() == {"created": [], "replaced": ["r1"]}
    mixed = _bulk(client, [{"name": "r2", "query": counting_text(BASE, "s0", 2), "output": "counts"},
                           {"name": "n", "query": counting_text(BASE, "s0", 2), "output": "counts"}])
    assert mixed.status_code == 201 and mixed.get_json() == {"created": ["n"], "replaced": ["r2"]}


def test_http_bulk_put_refuses_bad_batches_whole(client: FlaskClient) -> None:
    assert client.put("/streams/s0").status_code == 201
    good = {"name": "good", "query": counting_text(BASE, "s0", 0), "output": "counts"}
    cycle = [good, {"name": "loop-a", "query": counting_text(BASE, "s0", 1), "output": "x"},
             {"name": "loop-b", "query": counting_text(BASE, "x", 2), "output": "s0"}]
    cases: list[tuple[object, int, str]] = [
        ({"rules": cycle}, 409, "loop-"),
        ({"rules": [good, {"name": "bad", "query": "CONSTRUCT {} WHERE {}", "output": "o"}]}, 400, "'bad'"),
        ({"rules": [good, {"name": "no-output", "query": counting_text(BASE, "s0", 1)}]}, 400, "output"),
        ({"rules": [good, {"name": "typo", "query": counting_text(BASE, "s0", 1), "output": "o", "reprot": "x"}]},
         400, "reprot"),
        ({"rules": [good, {"name": "p", "query": counting_text(BASE, "s0", 1), "output": "o", "publish": "t"}]},
         409, "--mqtt"),
        ({"rules": [good, {"name": 3, "query": "x", "output": "o"}]}, 400, "name"),
        ({"rules": "all"}, 400, "rules"),
        ({"rule": [good]}, 400, "rules"),
        ([good], 400, "rules"),
    ]
    for body, status, problem in cases:
        response = client.put("/rules", json=body)
        assert response.status_code == status, (body, response.get_data(as_text=True))
        assert problem in response.get_data(as_text=True), response.get_data(as_text=True)
        assert client.get("/rules").get_json() == []
        assert client.get("/streams/x").status_code == 404
    not_json = client.put("/rules", data="{}", headers={"Content-Type": "text/plain"})
    assert not_json.status_code == 415
    broken = client.put("/rules", data="{", headers={"Content-Type": "application/json"})
    assert broken.status_code == 400


@pytest.mark.jvm
def test_bulk_registered_rules_fire() -> None:
    with running_server() as server:
        base = server.url
        for name in ("s0", "s1"):
            assert requests.put(f"{base}/streams/{name}", timeout=10).ok
        rules = [{"name": f"r{j}", "query": counting_text(base, f"s{j % 2}", j), "output": "counts"}
                 for j in range(2000)]
        response = requests.put(f"{base}/rules", json={"rules": rules}, timeout=120)
        assert response.status_code == 201, response.text
        # window 0 of each stream: s0 holds 2 elements, s1 3; an element at 10:05 completes it
        for name, minutes in (("s0", ("00", "01", "05")), ("s1", ("00", "02", "03", "05"))):
            body = "".join(f'<http://ex/{name}/e{m}> <{PROV}> "2016-06-20T10:{m}:00Z"^^'
                           f"<http://www.w3.org/2001/XMLSchema#dateTime> .\n"
                           f"<http://ex/{name}/e{m}> {{ <http://ex/o> <http://ex/hr> {m} . }}\n" for m in minutes)
            response = requests.post(f"{base}/streams/{name}", data=body.encode(),
                                     headers={"Content-Type": "application/trig"}, timeout=10)
            assert response.ok, response.text
        deadline = time.monotonic() + 240
        while True:
            listed = requests.get(f"{base}/rules", timeout=60).json()
            fired = sum(r["firings"] + r["failures"] + r["waiting"] for r in listed)
            if fired >= 2000 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert len(listed) == 2000
        assert [(r["name"], r["firings"], r["outputs"], r["failures"]) for r in listed if
                (r["firings"], r["outputs"], r["failures"]) != (1, 1, 0)] == [], server.log_tail()
        query = "SELECT ?r ?n WHERE { GRAPH ?g { ?r <urn:n> ?n } }"
        response = requests.post(f"{base}/streams/counts", data=query, timeout=30, headers={
            "Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"})
        assert response.ok, response.text
        counts = {row["r"]["value"]: int(row["n"]["value"]) for row in response.json()["results"]["bindings"]}
        assert counts == {f"urn:rule:{j}": 2 if j % 2 == 0 else 3 for j in range(2000)}
