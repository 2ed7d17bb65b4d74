"""The evaluator's context (engine/context.py): one frozen value per mode, whose copies keep every field they do not
change, and the memo of a ``SERVICE ?var``'s distinct values, kept with the solutions they come from."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from pyoxigraph import Literal, NamedNode, Quad, Store

from engine.cache import StaticResults
from engine.context import EvaluationContext, QueryTarget
from engine.evaluation import ExtendedEvaluator
from engine.results import Solutions
from engine.selection import SelectedWindow
from store import RevisionedDataset
from store.streams import StreamCatalog

WINDOW = "http://elsewhere/streams/hr?WINDOWS=R/HEAD/PT5M"  # another server's window, copied in (an executor's)


@pytest.fixture
def dataset(tmp_path: Path) -> Iterator[RevisionedDataset]:
    opened = RevisionedDataset(tmp_path / "dataset", in_memory=True)
    yield opened
    opened.close()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[StreamCatalog]:
    opened = StreamCatalog(tmp_path / "streams", in_memory=True)
    yield opened
    opened.close()


def window_target() -> QueryTarget:
    """A window holding one reading, ``<http://ex/o> <http://ex/hr> 72`` in graph <http://ex/e>."""
    store = Store()
    store.add(Quad(NamedNode("http://ex/o"), NamedNode("http://ex/hr"), Literal("72"), NamedNode("http://ex/e")))
    return QueryTarget(store, then_time=1_000_000, base_iri=WINDOW)


def every_field_set(dataset: RevisionedDataset, catalog: StreamCatalog) -> EvaluationContext:
    """A context whose every field differs from its default, each a value of its own."""
    return EvaluationContext(
        dataset, catalog, ("http://a",), http=requests.Session(), allow_hosts=frozenset({"example.org"}),
        window_timeout=7.0, http_timeout=9.0, cache=StaticResults(5),
        pins={("hr", "R/HEAD/PT5M"): SelectedWindow([1], commit=1)}, sequences={("hr", "R/HEAD/PT5M"): "s1"},
        preloaded={WINDOW: window_target()}, targets={0: (WINDOW,)})


def unchanged(copy: EvaluationContext, original: EvaluationContext, changed: set[str]) -> list[str]:
    """The fields other than ``changed`` that ``copy`` does not share with ``original``."""
    return [f.name for f in dataclasses.fields(EvaluationContext)
            if f.name not in changed and getattr(copy, f.name) is not getattr(original, f.name)]


def test_a_copy_with_local_bases_keeps_every_other_field(dataset: RevisionedDataset, catalog: StreamCatalog) -> None:
    original = every_field_set(dataset, catalog)
    for copy in (original.with_local_bases(["http://b/"]),
                 ExtendedEvaluator(original).with_local_bases(["http://b/"]).context):
        assert copy.local_bases == ("http://b", "http://a")  # the request's base first, without its "/"
        assert unchanged(copy, original, {"local_bases"}) == []


def test_a_copy_for_a_rule_keeps_every_field_it_does_not_set(dataset: RevisionedDataset,
                                                             catalog: StreamCatalog) -> None:
    original = every_field_set(dataset, catalog)
    pins = {("hr", "R/HEAD/PT1M"): SelectedWindow([2, 3], commit=2)}
    sequences = {("hr", "R/HEAD/PT1M"): "s2"}
    for copy in (original.for_rule(["http://c"], pins, sequences),
                 ExtendedEvaluator(original).for_rule(["http://c"], pins, sequences).context):
        assert copy.local_bases == ("http://c", "http://a")
        assert copy.pins is pins and copy.sequences is sequences and copy.window_timeout == 0.0  # never waits
        assert unchanged(copy, original, {"local_bases", "pins", "sequences", "window_timeout"}) == []


def test_copies_of_an_executors_evaluator_read_its_windows(dataset: RevisionedDataset) -> None:
    # the window copied in answers a SERVICE to its IRI, and the IRIs the driver resolved answer a SERVICE ?var,
    # in the copies as in the original: 72 from the window (no catalog, no HTTP: nothing else could answer)
    executor = ExtendedEvaluator(EvaluationContext.for_executor(dataset, "http://h", {WINDOW: window_target()},
                                                                {0: (WINDOW,)}))
    constant = f"SELECT ?v WHERE {{ SERVICE <{WINDOW}> {{ GRAPH ?g {{ ?o <http://ex/hr> ?v }} }} }}"
    # the dataset binds ?w to two IRIs, of which the driver kept the window's only (the other, not copied in and
    # not reachable without HTTP, would fail the query)
    dataset.update(f"INSERT DATA {{ <http://ex/p> <http://ex/reads> <{WINDOW}>, <http://elsewhere/streams/other> }}")
    variable = "SELECT ?v WHERE { ?x <http://ex/reads> ?w . SERVICE ?w { GRAPH ?g { ?o <http://ex/hr> ?v } } }"
    for evaluator in (executor, executor.with_local_bases(["http://other"]),
                      executor.for_rule(["http://other"], {})):
        for text in (constant, variable):
            solutions = evaluator.query(text, QueryTarget(base_iri="http://h"))
            assert [row["v"] for row in solutions] == [Literal("72")], text  # type: ignore[union-attr]


def test_the_request_modes_bases_lose_their_slash_and_come_once(dataset: RevisionedDataset) -> None:
    context = EvaluationContext.for_requests(dataset, None, ["http://h/", "http://h", "http://i"])
    assert context.local_bases == ("http://h", "http://i")
    assert (context.pins, context.sequences, context.preloaded, context.targets) == ({}, {}, {}, {})
    assert context.window_timeout == 30.0 and context.http is None


def test_distinct_values_come_in_row_order_once_each_and_are_kept() -> None:
    a, b = NamedNode("http://ex/a"), NamedNode("http://ex/b")
    solutions = Solutions(["x", "y"], [{"x": b, "y": a}, {"y": b}, {"x": a}, {"x": b}])
    # x is bound in rows 1, 3 and 4 (b, a, b): b first, then a; y in rows 1 and 2: a, then b
    assert solutions.distinct("x") == (b, a)
    assert solutions.distinct("y") == (a, b)
    assert solutions.distinct("z") == ()
    assert solutions.distinct("x") is solutions.distinct("x")  # worked out once: later firings compare by identity
    assert solutions == Solutions(["x", "y"], list(solutions.rows))  # the memo is no part of the value
