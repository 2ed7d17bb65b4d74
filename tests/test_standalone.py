"""A clone stands on its own: the conformance material and tools the suite reads are in the repository,
and ``make`` installs every package (transitive ones included) at the versions of ``constraints.txt``.

Expected values come from the runners' code and the upstream folders (conformance/suites/README.md), not
from the modules under test: the W3C manifests the runners name, CSRBench's 34 elements ``data_00`` …
``data_33`` and the answers of C-SPARQL and CQELS to its 7 queries."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conformance import clients, csrbench, csrbench_expected, w3c
from conformance.server import REPO_ROOT

SUITES = REPO_ROOT / "conformance" / "suites"
W3C_MANIFESTS = ("protocol/manifest.ttl", "graph-store-protocol/manifest-direct.ttl",
                 "graph-store-protocol/manifest-indirect.ttl", "service/manifest.ttl", "construct/manifest.ttl")
CONSTRAINTS = REPO_ROOT / "constraints.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


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


# --- item 14: a lock of every package, used by make ----------------------------------------------------------


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text("utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"constraints.txt: not a name==version pin: {line!r}"
        pins[canonicalize_name(match[1])] = match[2]
    return pins


def _direct_requirements() -> list[Requirement]:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines() + config["options.extras_require"]["test"].splitlines()
    return [Requirement(line) for line in lines if line.strip()]


def test_constraints_keep_the_direct_pins_of_setup_cfg() -> None:
    pins = _pins()
    for requirement in _direct_requirements():
        (specifier,) = requirement.specifier
        assert pins.get(canonicalize_name(requirement.name)) == specifier.version, requirement


def test_constraints_pin_every_transitive_dependency() -> None:
    """Walk the installed packages' requirements from setup.cfg's: each one reached is pinned, at the version
    installed here (the test environment was installed from the lock)."""
    pins = _pins()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in _direct_requirements()]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        assert name in pins, f"{name} is installed as a dependency but not pinned in constraints.txt"
        assert metadata.version(name) == pins[name], name
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            wanted = requirement.marker is None or any(
                requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""}))
            if wanted:
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    assert len(seen) >= 30  # flask, pyspark, pandas, pytest … and theirs


def _make_dry_run(target: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("no make")
    done = subprocess.run(["make", "-n", "-B", target], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_installs_from_the_lock_and_shows_progress() -> None:
    commands = _make_dry_run(".venv/installed")
    # the test extra (and the bench extra: the plot tests draw with matplotlib), pinned by the lock
    installs = [line for line in commands.splitlines() if "pip install" in line and re.search(r"\.\[test\b", line)]
    assert len(installs) == 1 and "-c constraints.txt" in installs[0], commands
    assert "--quiet" not in commands and " -q " not in commands
    assert re.search(r"echo .*installing the server's dependencies, ~890 MB", commands), commands
    assert re.search(r"echo .*installing the test and benchmark tools, ~420 MB more", commands), commands


def test_make_serve_installs_only_what_serving_needs() -> None:
    """make serve installs the package alone (≈ 890 MB), not the test and benchmark tools, at the pinned versions (uv
    itself at the version constraints.txt pins)."""
    commands = _make_dry_run(".venv/installed-serve")
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert installs == [".venv/bin/pip install --upgrade pip uv==0.13.9",
                        ".venv/bin/uv pip install --python .venv/bin/python -c constraints.txt -e ."], commands


def test_make_lock_freezes_a_fresh_environment_into_constraints() -> None:
    commands = _make_dry_run("lock")
    assert "-m venv" in commands and "pip freeze --exclude-editable" in commands and "constraints.txt" in commands
    assert "-c constraints.txt" not in commands  # resolved afresh from setup.cfg, not from the old lock
