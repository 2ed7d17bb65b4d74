"""A clone stands on its own: the conformance material and tools the suite reads are in the repository,
and ``make`` installs every package (transitive ones included) at the versions of ``constraints.txt``.

Expected values come from the runners' code and the upstream folders (conformance/suites/README.md), not
from the modules under test: the W3C manifests the runners name, CSRBench's 34 elements ``data_00`` …
``data_33`` and the answers of C-SPARQL and CQELS to its 7 queries."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conformance import clients, csrbench, csrbench_expected, w3c
from conformance.server import REPO_ROOT

SUITES = REPO_ROOT / "conformance" / "suites"
W3C_MANIFESTS = ("protocol/manifest.ttl", "graph-store-protocol/manifest-direct.ttl",
                 "graph-store-protocol/manifest-indirect.ttl", "service/manifest.ttl", "construct/manifest.ttl")


def _inside_repository(path: Path) -> bool:
    return path.resolve().is_relative_to(REPO_ROOT.resolve())


# --- item 13: conformance material in the repository ---------------------------------------------------------


def test_w3c_manifests_default_to_the_copy_in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(w3c.TESTS_DIR_ENV, raising=False)
    root = w3c.tests_dir()
    assert root == SUITES / "w3c-rdf-tests" / "sparql" / "sparql11"
    for manifest in W3C_MANIFESTS:
        assert (root / manifest).is_file(), manifest


def test_w3c_tests_dir_override_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(w3c.TESTS_DIR_ENV, str(tmp_path))
    assert w3c.tests_dir() == tmp_path


def test_csrbench_defaults_to_the_copy_in_the_repository() -> None:
    root = SUITES / "csrbench"
    assert csrbench.DEFAULT_CSRBENCH == root
    assert csrbench_expected.DEFAULT_CSRBENCH == root  # the independent derivation reads the same files
    assert sorted(p.name for p in (root / "data").glob("data_*.ttl")) == [f"data_{n:02d}.ttl" for n in range(34)]
    resources = root / "resources"
    assert (resources / "srbench-queries.properties").is_file()
    for configuration in csrbench.CONFIGURATIONS:
        assert (resources / configuration.properties).is_file()
        for number in range(1, 8):
            assert (resources / "answers" / f"{configuration.name}-answer-{number}.json").is_file()


def test_jena_classpath_script_is_in_the_repository() -> None:
    if os.environ.get("CONCENTRATOR_SHARED_TOOLS"):
        pytest.skip("CONCENTRATOR_SHARED_TOOLS overrides the script's folder")
    script = clients.JENA_CLASSPATH_SCRIPT
    assert script == REPO_ROOT / "conformance" / "tools" / "jena-classpath.sh"
    assert script.is_file() and os.access(script, os.X_OK)


def test_suites_carry_their_licences_and_a_readme_naming_their_origin() -> None:
    assert (SUITES / "w3c-rdf-tests" / "LICENSE.md").is_file()
    assert (SUITES / "csrbench" / "LICENSE-2.0.html").is_file()
    readme = (SUITES / "README.md").read_text("utf-8")
    for words in ("https://github.com/w3c/rdf-tests", "https://github.com/dellaglio/csrbench-oracle",
                  "LICENSE.md", "LICENSE-2.0.html", "Apache License", "protocol", "graph-store-protocol",
                  "service", "construct"):
        assert words in readme, words


def test_no_tracked_file_reads_beside_the_repository() -> None:
    """Nothing points at a ``shared`` folder next to the clone (a user's clone has none)."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    patterns = ("../" + "shared", 'parent / "' + 'shared"')  # split: this file would match itself
    offenders = []
    for name in listed.decode().split("\0"):
        path = REPO_ROOT / name
        if not name or not path.is_file() or name.startswith("conformance/suites/"):
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        offenders += [f"{name}: {p}" for p in patterns if p in text]
    assert offenders == []
