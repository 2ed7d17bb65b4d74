"""The W3C SPARQL 1.1 ``service/`` and ``construct/`` query manifests, evaluated by ``ExtendedEvaluator``.

One pytest test per manifest test (ids are the test names).  The endpoint servers (two: no test
names more endpoints) and their proxy are started once for the module and stopped at its end.
Skips come from ``conformance.w3c_query.SKIP`` (none); evaluator defects a test shows are listed in
``KNOWN_DEFECTS`` and expected to fail (strictly, so that a fix is noticed and the entry removed).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyoxigraph import BlankNode, NamedNode

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `conformance` is not an installed package
    sys.path.insert(0, str(REPO_ROOT))

from conformance import w3c_query  # noqa: E402

pytestmark = pytest.mark.slow


def _collect() -> list[w3c_query.QueryTest]:
    """The manifest tests, or none if the W3C test directory is missing."""
    try:
        return w3c_query.load_tests()
    except FileNotFoundError:
        return []


TESTS = _collect()


@pytest.fixture(scope="module")
def endpoints() -> Iterator[w3c_query.Endpoints]:
    """As many servers as the test with the most ``qt:serviceData`` endpoints needs (2)."""
    with w3c_query.Endpoints(max([len(t.service_data) for t in TESTS] + [1])) as running:
        yield running


def test_manifest_totals() -> None:
    """All 7 service tests and all 7 construct tests (5 evaluation, 2 negative syntax) are found."""
    assert TESTS, f"no W3C manifests under {w3c_query.tests_dir()}"
    assert Counter(t.suite for t in TESTS) == {"service": 7, "construct": 7}
    assert Counter(t.kind for t in TESTS) == {"eval": 12, "negative-syntax": 2}


def test_skips_and_defects_are_known_and_documented() -> None:
    """Every SKIP / KNOWN_DEFECTS entry names a real test, gives a reason and is listed in the README."""
    readme = (REPO_ROOT / "conformance" / "README.md").read_text("utf-8")
    names = {t.name for t in TESTS}
    for name, reason in {**w3c_query.SKIP, **w3c_query.KNOWN_DEFECTS}.items():
        assert name in names and reason.strip(), name
        assert f"`{name}`" in readme, f"{name!r} is missing from conformance/README.md"


@pytest.mark.parametrize("test", [
    pytest.param(t, marks=pytest.mark.xfail(reason=w3c_query.KNOWN_DEFECTS[t.name], strict=True))
    if t.name in w3c_query.KNOWN_DEFECTS else t for t in TESTS], ids=[t.name for t in TESTS])
def test_w3c_query(test: w3c_query.QueryTest, request: pytest.FixtureRequest) -> None:
    """Load the test's data and endpoints, evaluate its query, compare with the expected result."""
    if test.name in w3c_query.SKIP:
        pytest.skip(w3c_query.SKIP[test.name])
    result = w3c_query.run_test(request.getfixturevalue("endpoints"), test)
    assert result.passed, f"{test.suite}/{test.name} ({test.label}): {result.reason}"


def test_solutions_match_up_to_one_renaming_of_blank_nodes() -> None:
    """No expected result of these suites has a blank node, so the comparison's renaming is checked here."""
    a, b, x = BlankNode("a"), BlankNode("b"), NamedNode("urn:x")
    want = [{"s": a, "o": x}, {"s": b, "o": x}, {"s": a}]
    assert w3c_query._match(want, [{"s": b}, {"s": a, "o": x}, {"s": b, "o": x}], {}, frozenset())  # a↔b
    assert not w3c_query._match(want, [{"s": a, "o": x}, {"s": a, "o": x}, {"s": a}], {}, frozenset())  # not 1:1
    assert w3c_query._match(want, [{"s": a, "o": x}, {"s": b, "o": x}, {"s": b}], {}, frozenset())  # a↔b again
    # no node of these is in a row with ?o and in one without, as _:a is in want
    assert not w3c_query._match(want, [{"s": a, "o": x}, {"s": a, "o": x}, {"s": b}], {}, frozenset())
