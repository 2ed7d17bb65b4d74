"""Report policies and stream operators (sparql_ext.reporting), worked out by hand."""

from __future__ import annotations

import pytest

from sparql_ext import Reporter, ReportPolicy, ReportSpec, ReportSyntaxError, StreamOperator, parse_report
from sparql_ext.errors import SparqlExtError

S = 1_000_000  # µs per second

# The small stream of the module docstring: 5 windows ending at 10, 20, 30, 40, 50 s.
STREAM = [(10 * S, set()), (20 * S, {"a"}), (30 * S, {"a"}), (40 * S, {"a", "b"}), (50 * S, set())]


def run(report: str | None, operator: str | None, stream=STREAM) -> list[frozenset | None]:  # type: ignore[no-untyped-def]
    reporter = Reporter(parse_report(report, operator))
    return [reporter.on_window(end, content) for end, content in stream]


E = frozenset()
A = frozenset({"a"})
B = frozenset({"b"})
AB = frozenset({"a", "b"})


def test_operators_compare_with_the_previous_window() -> None:
    # {a,b} then {b,c}: Rstream is the content {b,c}; Istream what entered, {b,c} − {a,b} = {c};
    # Dstream what left, {a,b} − {b,c} = {a}. The first window's previous is empty:
    # Istream({a,b}) = {a,b}, Dstream({a,b}) = {}.
    stream = [(1 * S, {"a", "b"}), (2 * S, {"b", "c"})]
    assert run(None, "rstream", stream) == [AB, frozenset({"b", "c"})]
    assert run(None, "istream", stream) == [AB, frozenset({"c"})]
    assert run(None, "dstream", stream) == [E, A]


def test_window_close_reports_every_window() -> None:
    # contents {}, {a}, {a}, {a,b}, {}; every window is reported, empty ones included.
    assert run("window-close", "rstream") == [E, A, A, AB, E]
    # Istream: {}−{} = {}; {a}−{} = {a}; {a}−{a} = {}; {a,b}−{a} = {b}; {}−{a,b} = {}.
    assert run("window-close", "istream") == [E, A, E, B, E]
    # Dstream: {}−{} = {}; {}−{a} = {}; {a}−{a} = {}; {a}−{a,b} = {}; {a,b}−{} = {a,b}.
    assert run("window-close", "dstream") == [E, E, E, E, AB]


def test_content_change_reports_only_when_the_content_differs() -> None:
    # w1 {} = previous {} (the empty previous of the first window): not reported.
    # w2 {a} ≠ {}: reported. w3 {a} = {a}: not. w4 {a,b} ≠ {a}: reported.
    # w5 {} ≠ {a,b}: reported, and Rstream emits the (empty) content.
    assert run("content-change", "rstream") == [None, A, None, AB, E]
    # Istream of the same windows: w5 emits {} − {a,b} = {}.
    assert run("content-change", "istream") == [None, A, None, B, E]


def test_non_empty_reports_only_non_empty_emissions() -> None:
    # Rstream: the emission is the content; {} windows (w1, w5) are not reported.
    assert run("non-empty", "rstream") == [None, A, A, AB, None]
    # Istream: emissions {}, {a}, {}, {b}, {} → only w2 and w4.
    assert run("non-empty", "istream") == [None, A, None, B, None]
    # Dstream: only w5 has something that left ({a,b}).
    assert run("non-empty", "dstream") == [None, None, None, None, AB]
    # The operator still compares with the previous *window*, reported or not: with Istream,
    # w3 is not reported, yet w4 emits {a,b} − {a} = {b} (not {a,b} − {a} of the last report w2,
    # which would also be {b}; see the next case for one where it matters).
    assert run("content-change,non-empty", "rstream") == [None, A, None, AB, None]


def test_previous_window_not_previous_report() -> None:
    # {a}, {} (not reported: empty), {a}. Istream compares w3 with w2 = {}: emits {a}.
    # Had it compared with the last report (w1 = {a}), it would emit {} and w3 would be dropped.
    stream = [(1 * S, {"a"}), (2 * S, set()), (3 * S, {"a"})]
    assert run("non-empty", "istream", stream) == [A, None, A]


def test_periodic_reports_the_first_window_at_or_after_each_due_time() -> None:
    # Period 20 s, e0 = 10 s: due times 10, 30, 50 → w1 (10), w3 (30), w5 (50).
    assert run("periodic:PT20S", "rstream") == [E, None, A, None, E]
    # Period 25 s: due 10 → w1; next due 35 → w4 (40 ≥ 35); next due is the first multiple after
    # 40: 10 + 2·25 = 60 → w5 (50) is not reported.
    assert run("periodic:PT25S", "rstream") == [E, None, None, AB, None]
    # With non-empty: w1 is due but empty, so the due time 10 stays pending; w2 (20 ≥ 10) is
    # reported, next due 10 + (⌊10/20⌋+1)·20 = 30 → w3 reported, next due 50; w5 is empty.
    assert run("periodic:PT20S,non-empty", "rstream") == [None, A, A, None, None]


def test_windows_must_come_in_order() -> None:
    reporter = Reporter(parse_report(None, None))
    reporter.on_window(2 * S, {"a"})
    with pytest.raises(ValueError):
        reporter.on_window(1 * S, {"a"})


def test_default_report_gives_each_window_as_it_is() -> None:
    """RStream at window close: every window's items, in their order, duplicates kept, an empty window empty; the
    order of windows is still checked."""
    reporter = Reporter(parse_report(None, None))
    assert reporter.report(1 * S, ["b", "a", "b"], 3) == ["b", "a", "b"]
    assert reporter.report(2 * S, [], 0) == []
    assert reporter.report(2 * S, ["a"], 1) == ["a"]  # a window ending at the same time (another sequence's)
    with pytest.raises(ValueError, match="in order"):
        reporter.report(1 * S, ["a"], 1)
    # the same spec written out is the default too; written otherwise (istream) it compares windows
    assert Reporter(parse_report("window-close", "rstream")).report(S, ["x", "x"]) == ["x", "x"]
    istream = Reporter(parse_report(None, "istream"))
    assert istream.report(S, ["x", "y"]) == ["x", "y"]
    assert istream.report(2 * S, ["x", "z"]) == ["z"]


def test_parse_defaults_and_forms() -> None:
    assert parse_report(None, None) == ReportSpec(
        frozenset({ReportPolicy.WINDOW_CLOSE}), StreamOperator.RSTREAM, None)
    spec = parse_report(" Window-Close , non-empty,periodic:PT1M30S", "IStream")
    assert spec.policies == {ReportPolicy.WINDOW_CLOSE, ReportPolicy.NON_EMPTY, ReportPolicy.PERIODIC}
    assert spec.operator is StreamOperator.ISTREAM
    assert spec.period == 90 * S
    assert parse_report("content-change", None).operator is StreamOperator.RSTREAM


@pytest.mark.parametrize(("report", "operator", "names"), [
    ("window-closed", None, "'window-closed' is not a report policy"),
    ("window-close,,non-empty", None, "empty policy name"),
    ("", None, "names no policy"),
    ("periodic", None, "'periodic' needs a period"),
    ("periodic:", None, "needs a period"),
    ("periodic:10s", None, "period '10s' is not an ISO 8601 duration"),
    ("periodic:P1M", None, "period 'P1M' has years or months"),
    ("periodic:PT0S", None, "period 'PT0S' must be positive"),
    ("periodic:-PT5S", None, "period '-PT5S' must be positive"),
    ("non-empty:PT5S", None, "'non-empty:PT5S': only periodic takes an argument"),
    ("non-empty,non-empty", None, "'non-empty' is given twice"),
    (None, "xstream", "operator='xstream' is not a stream operator"),
])
def test_parse_errors_name_the_bad_part(report: str | None, operator: str | None, names: str) -> None:
    with pytest.raises(ReportSyntaxError) as caught:
        parse_report(report, operator)
    assert names in str(caught.value)
    assert isinstance(caught.value, SparqlExtError)
    assert caught.value.status_hint == 400


def test_docstring_examples() -> None:
    import doctest

    import sparql_ext.reporting

    result = doctest.testmod(sparql_ext.reporting)
    assert result.failed == 0 and result.attempted > 0


def test_bags_through_numbered_rows() -> None:
    # Continuous responses number equal rows (protocol.continuous.numbered) so that the Reporter's set
    # difference is bag difference. Per-arrival scopes of the content-change example in docs/continuous.md
    # with a query giving v = 1 per element: 1 | 1 1 | 1 1 1 | (new window) 1 | 1 1.
    from delivery.results import numbered

    reporter = Reporter(parse_report("content-change,non-empty", "istream"))
    scopes = [["1"], ["1", "1"], ["1", "1", "1"], ["1"], ["1", "1"]]
    emitted = [reporter.on_window(n * S, numbered(rows)) for n, rows in enumerate(scopes)]
    assert emitted == [frozenset({("1", 1)}), frozenset({("1", 2)}), frozenset({("1", 3)}), None,
                       frozenset({("1", 2)})]
    # as plain sets, nothing after the first arrival would be new
    plain = Reporter(parse_report("content-change,non-empty", "istream"))
    assert [plain.on_window(n * S, rows) for n, rows in enumerate(scopes)] == [frozenset({"1"})] + [None] * 4


def test_non_empty_content_skips_windows_without_elements() -> None:
    # Tumbling windows {a}, {} (no element), {c}. DStream compares with the previous *evaluated* window: with
    # non-empty-content the empty window is not evaluated, so {c}'s previous window is {a}.
    stream = [(1 * S, {"a"}, 1), (2 * S, set(), 0), (3 * S, {"c"}, 1)]
    plain = Reporter(parse_report("window-close", "dstream"))
    assert [plain.on_window(end, content, n) for end, content, n in stream] == [E, A, E]
    skipping = Reporter(parse_report("window-close,non-empty-content", "dstream"))
    assert [skipping.on_window(end, content, n) for end, content, n in stream] == [E, None, A]
    # the element count unknown (None): the condition holds
    unknown = Reporter(parse_report("non-empty-content", "rstream"))
    assert unknown.on_window(1 * S, set()) == E
