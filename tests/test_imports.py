"""Dependencies point one way: sparql_ext is pure; store knows nothing of HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "sparql_ext": {"flask", "werkzeug", "pyspark", "requests", "pyoxigraph", "store", "protocol",
                   "concentrator", "socket", "os", "gunicorn"},
    "store": {"flask", "werkzeug", "pyspark", "requests", "protocol", "concentrator"},
    "protocol": {"pyspark", "concentrator"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_point_one_way(package: str) -> None:
    for path in (ROOT / package).glob("*.py"):
        bad = _imports(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
