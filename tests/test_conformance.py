"""The W3C SPARQL 1.1 Protocol and Graph Store Protocol manifests, run against a real server.

One test per manifest test (ids are the manifest test names); the server is started once per
module with ``conformance.w3c.running_server``.  Skips come from ``conformance.w3c.SKIP``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `conformance` is not an installed package
    sys.path.insert(0, str(REPO_ROOT))

from conformance import w3c  # noqa: E402

pytestmark = pytest.mark.slow


def _collect() -> list[w3c.ManifestTest]:
    """The manifest tests, or none if the W3C test directory is missing."""
    try:
        return w3c.load_tests()
    except FileNotFoundError:
        return []


TESTS = _collect()


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """The base URL of a freshly started server with an empty data directory."""
    with w3c.running_server() as url:
        yield url


def test_manifest_totals() -> None:
    """All 34 protocol and 14 GSP tests are found in the manifests."""
    assert TESTS, f"no W3C manifests under {w3c.tests_dir()} (set {w3c.TESTS_DIR_ENV})"
    assert Counter(t.suite for t in TESTS) == {"protocol": 34, "gsp": 14}


def test_skips_are_known_and_documented() -> None:
    """Every SKIP entry names a real test, gives a reason and is listed in the README."""
    readme = (REPO_ROOT / "conformance" / "README.md").read_text("utf-8")
    names = {t.name for t in TESTS}
    for name, reason in w3c.SKIP.items():
        assert name in names, f"SKIP entry {name!r} is not a manifest test"
        assert reason.strip(), f"SKIP entry {name!r} has no reason"
        assert f"`{name}`" in readme, f"SKIP entry {name!r} is missing from the README"


@pytest.mark.parametrize("test", TESTS, ids=[t.name for t in TESTS])
def test_w3c(test: w3c.ManifestTest, request: pytest.FixtureRequest) -> None:
    """Replay the manifest test's requests and check every response."""
    if test.name in w3c.SKIP:
        pytest.skip(w3c.SKIP[test.name])
    result = w3c.run_test(request.getfixturevalue("base_url"), test)
    assert result.passed, f"{test.suite}/{test.name} ({test.label}): {result.reason}"
