"""A tiny benchmark harness: timing, table printing and JSON result files.

Machines are noisy, so every benchmark compares against a baseline measured in the
same process run rather than against absolute figures.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TRACKED_PACKAGES = ("pyoxigraph", "flask", "werkzeug", "gunicorn")


@dataclass(frozen=True)
class Measurement:
    """One timed run: ``items`` units of work done in ``seconds``."""

    name: str
    seconds: float
    items: int
    unit: str = "quads"

    @property
    def rate(self) -> float:
        """Items per second (``inf`` for a zero-duration run)."""
        return self.items / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict including the derived rate."""
        data = asdict(self)
        data["rate"] = self.rate
        return data


def measure(name: str, items: int, fn: Callable[[], object], unit: str = "quads") -> Measurement:
    """Time one call of ``fn`` with :func:`time.perf_counter`."""
    start = time.perf_counter()
    fn()
    return Measurement(name, time.perf_counter() - start, items, unit)


def _find(measurements: Iterable[Measurement], name: str) -> Measurement | None:
    return next((m for m in measurements if m.name == name), None)


def print_table(title: str, measurements: list[Measurement], baseline_name: str) -> None:
    """Print name / seconds / rate / ratio-to-baseline columns (ratio = rate / baseline rate)."""
    baseline = _find(measurements, baseline_name)
    width = max([len("name"), *(len(m.name) for m in measurements)])
    print(f"\n{title}")
    header = f"{'name':<{width}}  {'seconds':>10}  {'rate':>14}  {'unit':<8}  {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for m in measurements:
        ratio = f"{m.rate / baseline.rate:7.3f}" if baseline and baseline.rate else "    n/a"
        print(f"{m.name:<{width}}  {m.seconds:10.3f}  {m.rate:14,.0f}  {m.unit + '/s':<8}  {ratio}")


def _package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def environment() -> dict[str, Any]:
    """Timestamp, platform, interpreter, CPU count and package versions."""
    return {
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "packages": _package_versions(),
    }


def write_json(bench_name: str, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/<bench_name>.json`` with the payload plus environment details."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{bench_name}.json"
    document = {"benchmark": bench_name, "environment": environment(), **payload}
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path
