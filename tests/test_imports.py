"""The layout shows the flow (docs/architecture.md): upload → element → window → rule → output, each step owned by
one package, and imports point one way — sparql_ext (pure) ← store ← engine ← {pipeline, rules} ← delivery ← protocol ←
connectors ← concentrator (the composition root) — with no import cycle between files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["sparql_ext", "store", "engine", "pipeline", "rules", "delivery", "protocol", "connectors", "concentrator"]
HTTP = {"flask", "werkzeug", "gunicorn", "requests"}
# metrics are read from the layers' own counters at scrape time (protocol/metrics.py): only protocol knows Prometheus
METRICS = {"prometheus_client"}
FORBIDDEN = {
    # pure semantics: no I/O library, not even pyoxigraph
    "sparql_ext": HTTP | METRICS | {"pyspark", "pyoxigraph", "socket", "os", *PACKAGES[1:]},
    # durable state only: no evaluation, no rules, no Spark, no HTTP
    "store": HTTP | METRICS | {"pyspark", "engine", "pipeline", "rules", "protocol", "connectors", "concentrator"},
    # extended-SPARQL evaluation: reads the store; HTTP for SERVICE comes in as a session object
    "engine": HTTP | METRICS | {"pyspark", "pipeline", "rules", "protocol", "connectors", "concentrator"},
    # Spark only: it reads the element log and commits windows; rules reach it through callbacks
    "pipeline": HTTP | METRICS | {"rules", "protocol", "connectors", "concentrator"},
    # rules: registry, firing, executor tasks; no Spark (the pipeline runs their jobs), no HTTP
    "rules": HTTP | METRICS | {"pyspark", "pipeline", "protocol", "connectors", "concentrator"},
    # delivering window results: following sequences, subscriptions, the fan-out's event loop; no web framework
    "delivery": HTTP | METRICS | {"pyspark", "pipeline", "rules", "protocol", "connectors", "concentrator"},
    # HTTP: reaches the MQTT connector only through protocol.services.MqttService
    "protocol": {"pyspark", "pipeline", "connectors", "concentrator"},
    # the I/O of other transports (MQTT, LDES): they write to streams and publish window results (delivery's shared
    # producers); nothing of HTTP's (protocol), no Spark; started by the composition root only (requests: the LDES
    # client)
    "connectors": {"flask", "werkzeug", "gunicorn", "pyspark", "pipeline", "protocol", "concentrator"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module or top-level library the file imports (a package's submodules by their own name)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
            names.update(submodules)
            if len(submodules) < len(node.names):
                names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_point_one_way(package: str) -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.split(".")[0] == package:
            bad = {imported.split(".")[0] for imported in _imports(path, modules)} & FORBIDDEN[package]
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_only_the_composition_root_imports_connectors() -> None:
    modules = _modules()
    importers = {name for name, path in modules.items() if not name.startswith("connectors")
                 and any(m.split(".")[0] == "connectors" for m in _imports(path, modules))}
    assert importers == {"concentrator.compose"}


#: The element log's layout and record lines: the store's own. Other packages read the log through the store's API:
#: ``store.log_reading`` (which logs, their records as Arrow batches) and ``store.log_contents`` (contents by runs).
LOG_LAYOUT = {"store.element_log", "store.log_records"}


def test_only_the_store_reads_the_log() -> None:
    """No production module outside ``store`` and no benchmark imports the log's layout; a test may, only if it tests
    the store alone (it imports nothing of ours but ``store`` and ``sparql_ext``)."""
    modules = _modules()
    files = {name: path for name, path in modules.items() if name.split(".")[0] != "store"}
    files.update({f"bench.{path.stem}": path for path in sorted((ROOT / "bench").glob("*.py"))})
    readers = sorted(name for name, path in files.items() if _imports(path, modules) & LOG_LAYOUT)
    assert not readers, f"these read the element log's layout, not store.log_reading / store.log_contents: {readers}"
    ours = set(PACKAGES) - {"store", "sparql_ext"}
    for path in sorted((ROOT / "tests").glob("*.py")):
        imported = _imports(path, modules)
        if imported & LOG_LAYOUT:
            others = sorted({name.split(".")[0] for name in imported} & ours)
            assert not others, f"{path.name} imports the element log's layout and {others}: not a test of the store"


def test_only_the_composition_root_builds_services() -> None:
    """``protocol.services.Services`` is built in one place, ``concentrator.compose`` (``open_services``): no other
    production module calls ``Services(…)``, and the class builds no instance of itself (``cls(…)``)."""
    def called(node: ast.AST) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)

    builders = set()
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        if any(called(node) == "Services" for node in ast.walk(tree)):
            builders.add(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "Services" and any(
                    called(inner) == "cls" for inner in ast.walk(node)):
                builders.add(f"{name}.Services")
    assert builders == {"concentrator.compose"}


def test_no_import_cycle_between_files() -> None:
    modules = _modules()
    graph = {name: {m for m in _imports(path, modules) if m in modules and m != name} for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for follower in sorted(graph[name]):
            if state.get(follower) == 1:
                cycle = path[path.index(follower):] + [follower]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if follower not in state:
                visit(follower, [*path, follower])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
