"""Every benchmark draws its PNG plots from its JSON results (issue 17), and ``--plot-only`` draws them again from an
earlier run's JSON without measuring: here from the results committed in bench/results/, copied to a temporary
folder. The plots each benchmark writes are listed by hand from bench/README.md."""

from __future__ import annotations

import importlib
import os
import shutil
import struct
from pathlib import Path
from types import ModuleType

import pytest

import bench.harness as harness

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"

# module, JSON result name → the PNGs it draws (bench/README.md)
EXPECTED = {
    ("gsp_load", "gsp_load"): ["gsp_load_rates"],
    ("continuous", "continuous"): ["continuous_ingest", "continuous_latency", "continuous_scaling"],
    ("continuous", "continuous_2k"): ["continuous_2k_ingest", "continuous_2k_latency", "continuous_scaling"],
    ("window_latency", "window_latency"): ["window_latency_windows", "window_latency_batch", "window_latency_scaling"],
    ("window_latency", "window_latency_1s"): ["window_latency_1s_windows", "window_latency_1s_batch",
                                              "window_latency_scaling"],
    ("spark_latency", "spark_latency"): ["spark_latency", "spark_latency_phases"],
    ("rules", "rules"): ["rules_latency", "rules_firings", "rules_cost", "rules_many", "rules_many_firings",
                         "rules_registration"],
    ("load", "load"): ["load_latency", "load_queries", "load_memory"],
    ("load", "soak"): ["soak_latency", "soak_queries", "soak_memory"],
    ("rule_placement", "rule_placement_pairs"): ["rule_placement_pairs", "rule_placement_pairs_batch",
                                                 "rule_placement"],
    ("fuzz", "fuzz"): ["fuzz"],
    ("events", "events"): ["events"],
    ("patients", "patients"): ["patients"],
    ("queries", "queries"): ["queries_upload", "queries_latency", "queries_parallel"],
}


def _matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("matplotlib is missing in CI: the Makefile installs the bench extra")
        pytest.skip("matplotlib is not installed: pip install -c constraints.txt -e '.[test,bench]'")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (the file must start with the PNG signature)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of bench/results/*.json where the plots go (each module's RESULTS_DIR pointed at it)."""
    for source in RESULTS.glob("*.json"):
        shutil.copy(source, tmp_path / source.name)
    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    return tmp_path


def _module(name: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = importlib.import_module(f"bench.{name}")
    if hasattr(module, "RESULTS_DIR"):
        monkeypatch.setattr(module, "RESULTS_DIR", folder)
    return module


@pytest.mark.slow
@pytest.mark.parametrize(("module_name", "result"), sorted(EXPECTED), ids=[r for _, r in sorted(EXPECTED)])
def test_plots_are_drawn_again_from_the_json(module_name: str, result: str, results: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _matplotlib()
    module = _module(module_name, results, monkeypatch)
    drawn = harness.replot(module.plots, result)
    assert [path.stem for path in drawn] == EXPECTED[(module_name, result)]
    for path in drawn:
        assert path.parent == results
        width, height = png_size(path)
        assert width >= 500 and height >= 200, (path.name, width, height)


def test_plot_only_without_a_result_says_to_run_the_benchmark(results: Path) -> None:
    with pytest.raises(SystemExit, match="does not exist: run the benchmark first"):
        harness.replot(lambda document, name: [], "no_such_benchmark")


def test_summary_and_scaling_plots(results: Path) -> None:
    _matplotlib()
    summary = harness.summary_plot("s", "t", {"a": {"n": 3, "p50_ms": 1.0, "p99_ms": 2.0},
                                              "b": {"median_ms": 5.0, "max_ms": 900.0}})
    scaling = harness.scaling_plot("c", "t", {"p50": [(1, 10.0), (10, 20.0), (100, 35.0)]}, xlabel="rules",
                                   ylabel="ms", log_x=True)
    assert png_size(summary)[0] >= 500 and png_size(scaling)[0] >= 500
    assert sorted(p.name for p in results.glob("*.png")) == ["c.png", "s.png"]


def test_every_benchmark_writes_its_plots_and_has_plot_only() -> None:
    """Each benchmark module (but bench.ingest, which has its own) defines ``plots`` and a ``--plot-only`` option,
    and calls ``write_plots`` after writing its JSON."""
    for name in sorted({module for module, _ in EXPECTED}):
        text = (RESULTS.parent / f"{name}.py").read_text(encoding="utf-8")
        assert "def plots(document" in text and "--plot-only" in text and "write_plots(plots" in text, name
