"""A tiny benchmark harness: timing, table printing, JSON result files and plots.

Machines are noisy, so every benchmark compares against a baseline measured in the
same process run rather than against absolute figures.

Plots (``bar_plot``, ``share_plot``, ``distribution_plot``, ``summary_plot``, ``time_series_plot``, ``scaling_plot``)
are PNGs written next to the JSON results, ``bench/results/<name>.png``, with matplotlib's headless ``Agg`` backend.
Each benchmark draws its plots from its JSON document (``write_plots``), so ``--plot-only`` draws them again from the
JSON of an earlier run without measuring anything (``replot``). matplotlib is in the ``bench`` extra
(``pip install -e '.[test,bench]'``); without it the plot functions raise ``PlottingUnavailable``, which a
benchmark reports and then goes on (its JSON is written all the same).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

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


# --- plots ------------------------------------------------------------------------------------------------------


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed (it comes with the ``bench`` extra)."""


def _figure(rows: int = 1, width: float = 9.0, height: float = 4.5) -> tuple[Figure, list[Axes]]:
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable("matplotlib is not installed: pip install -e '.[test,bench]' (no plots)") from None
    matplotlib.use("Agg")  # headless: no display on benchmark machines
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(rows, 1, figsize=(width, height * rows), squeeze=False, layout="constrained")
    return figure, [row[0] for row in axes]


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:,.0f}")


def _save(figure: Figure, name: str) -> Path:
    from matplotlib import pyplot

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.png"
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return path


def bar_plot(name: str, title: str, groups: Mapping[str, Mapping[str, float]], *,
             reference: str | Mapping[str, str] | None, unit: str = "statements/s") -> Path:
    """Side-by-side rates: one group of bars per key of ``groups`` (e.g. a body format), one bar per system (the
    same colour in every group), each labelled with its value and its ratio to the group's reference bar (the
    baseline): ``reference`` names it for every group, or per group (None: counts, no ratios). A group shows only
    its own bars, side by side. Writes ``bench/results/<name>.png``."""
    bars_total = sum(len(bars) for bars in groups.values())
    figure, (axes,) = _figure(width=min(16.0, max(9.0, 0.75 * bars_total + 4.0)), height=5.0)
    systems = list(dict.fromkeys(label for bars in groups.values() for label in bars))
    colours = {system: f"C{i % 10}" for i, system in enumerate(systems)}
    references = {g: reference if isinstance(reference, str) else (reference or {}).get(g, "") for g in groups}
    x = 0.0
    ticks: list[float] = []
    for group, bars in groups.items():
        positions = [x + i for i in range(len(bars))]
        ticks.append(sum(positions) / len(positions) if positions else x)
        base = bars.get(references[group])
        for position, (system, value) in zip(positions, bars.items(), strict=True):
            drawn = axes.bar([position], [value], 0.85, color=colours[system],
                             label=system if system not in axes.get_legend_handles_labels()[1] else None)
            axes.bar_label(drawn, [f"{value:,.0f}\n{value / base:.2f}×" if base else f"{value:,.0f}"], fontsize=7,
                           padding=2)
        x += len(bars) + 1.0  # a gap between groups
    axes.set_xticks(ticks, list(groups))
    axes.set_ylabel(unit)
    axes.yaxis.set_major_formatter(_thousands())
    shown = reference if isinstance(reference, str) else " / ".join(dict.fromkeys((reference or {}).values()))
    axes.set_title(f"{title}\n(ratios to {shown})" if shown else title, fontsize=10)
    axes.margins(y=0.15)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(figure, name)


def share_plot(name: str, title: str, parts: Mapping[str, float], *, unit: str = "CPU seconds") -> Path:
    """Where a total goes: one horizontal bar per part, labelled with its value and its share of the sum (e.g. CPU
    seconds per component). Writes ``bench/results/<name>.png``."""
    figure, (axes,) = _figure(height=0.45 * len(parts) + 1.5)
    total = sum(parts.values())
    labels = list(parts)[::-1]  # the first part on top
    drawn = axes.barh(labels, [parts[label] for label in labels])
    axes.bar_label(drawn, [f"{parts[label]:,.1f} ({parts[label] / total:.0%})" if total else "0" for label in labels],
                   fontsize=7, padding=2)
    axes.tick_params(axis="y", labelsize=7)
    axes.set_xlabel(unit)
    axes.margins(x=0.25)
    axes.set_title(f"{title}\n(total {total:,.1f} {unit})", fontsize=10)
    return _save(figure, name)


def distribution_plot(name: str, title: str, samples: Mapping[str, Sequence[float]], *, unit: str = "ms",
                      marks: Mapping[str, float] | None = None) -> Path:
    """Latency distributions as empirical CDFs (x: value, log scale; y: fraction of samples at or below it), one
    line per key with its count, p50 and p99 in the legend; ``marks`` are vertical target lines (label → value).
    Empty sample lists are left out. Writes ``bench/results/<name>.png``."""
    figure, (axes,) = _figure()
    for label, values in samples.items():
        ordered = sorted(values)
        if not ordered:
            continue
        fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
        axes.step(ordered, fractions, where="post",
                  label=f"{label} (n={len(ordered)}, p50 {percentile(ordered, 0.5):,.0f}, "
                        f"p99 {percentile(ordered, 0.99):,.0f} {unit})")
    for label, value in (marks or {}).items():
        axes.axvline(value, color="grey", linestyle="--", linewidth=1)
        axes.annotate(label, (value, 0.05), rotation=90, fontsize=7, color="grey", ha="right", va="bottom")
    axes.set_xscale("log")
    axes.set_xlabel(unit)
    axes.set_ylabel("fraction ≤ x")
    axes.set_ylim(0, 1.02)
    axes.grid(True, which="both", alpha=0.3)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=7, loc="lower right")
    return _save(figure, name)


@dataclass
class Series:
    """One line (or scatter, ``points=True``) of a time-series panel."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    points: bool = False
    width: float = 1.2


@dataclass
class Panel:
    """One panel of ``time_series_plot``: its y label, its series, horizontal target lines (label → value)."""

    ylabel: str
    series: list[Series]
    marks: dict[str, float] = field(default_factory=dict)
    log: bool = False


def time_series_plot(name: str, title: str, panels: Sequence[Panel], *, xlabel: str = "seconds") -> Path:
    """Values over time, one panel per quantity sharing the x axis (e.g. rate above, latency below). Writes
    ``bench/results/<name>.png``."""
    figure, axes_list = _figure(len(panels), height=3.2)
    for axes, panel in zip(axes_list, panels, strict=True):
        for series in panel.series:
            if series.points:
                axes.plot(series.x, series.y, ".", markersize=3, label=series.label)
            else:
                axes.plot(series.x, series.y, linewidth=series.width, label=series.label)
        for label, value in panel.marks.items():
            axes.axhline(value, color="grey", linestyle="--", linewidth=1)
            axes.annotate(label, (0, value), fontsize=7, color="grey", va="bottom",
                          xycoords=("axes fraction", "data"))
        if panel.log:
            axes.set_yscale("log")
        else:
            axes.yaxis.set_major_formatter(_thousands())
        axes.set_ylabel(panel.ylabel)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7, loc="upper right")
    axes_list[-1].set_xlabel(xlabel)
    axes_list[0].set_title(title, fontsize=10)
    return _save(figure, name)


PERCENTILES = (("p50_ms", "p50"), ("median_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("max_ms", "max"))


def summary_plot(name: str, title: str, summaries: Mapping[str, Mapping[str, Any]], *, unit: str = "ms") -> Path:
    """Latency distributions as benchmarks summarize them (p50, p90, p99, max — whichever a summary has, e.g.
    ``{"n": 50, "p50_ms": 408.3, "p99_ms": 609.7}``): one group of bars per summary, each bar labelled with its value,
    the count under the group's name; a log scale when the values span more than 50×. Writes
    ``bench/results/<name>.png``."""

    def value(summary: Mapping[str, Any], quantile: str) -> float | None:
        found = next((summary[key] for key, label in PERCENTILES if label == quantile and key in summary), None)
        return float(found) if isinstance(found, int | float) and found > 0 else None

    quantiles = [q for q in dict.fromkeys(label for _, label in PERCENTILES)
                 if any(value(summary, q) is not None for summary in summaries.values())]
    figure, (axes,) = _figure(width=min(14.0, max(6.0, 1.5 * len(summaries) + 3.0)), height=4.8)
    width = 0.8 / max(1, len(quantiles))
    values: list[float] = []
    for j, quantile in enumerate(quantiles):
        xs, ys = [], []
        for i, summary in enumerate(summaries.values()):
            found = value(summary, quantile)
            if found is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(found)
        values += ys
        drawn = axes.bar(xs, ys, width, color=f"C{j}", label=quantile)
        axes.bar_label(drawn, [f"{y:,.0f}" if y >= 10 else f"{y:.2g}" for y in ys], fontsize=6, padding=1)
    labels = [f"{label}\n(n={summary['n']:,})" if "n" in summary else label for label, summary in summaries.items()]
    axes.set_xticks(range(len(summaries)), labels, fontsize=7)
    if values and max(values) / min(values) > 50:
        axes.set_yscale("log")
        axes.set_ylim(bottom=min(values) / 3)
    else:
        axes.yaxis.set_major_formatter(_thousands())
        axes.margins(y=0.12)
    axes.set_ylabel(unit)
    axes.grid(True, axis="y", which="both", alpha=0.3)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(figure, name)


def scaling_plot(name: str, title: str, curves: Mapping[str, Sequence[tuple[float, float]]], *, xlabel: str,
                 ylabel: str, log_x: bool = False, log_y: bool = False) -> Path:
    """How a measure changes with a size (rules, streams, workers, offered rate): one line with markers per curve,
    each point labelled with its value. Writes ``bench/results/<name>.png``."""
    figure, (axes,) = _figure(height=4.5)
    for label, points in curves.items():
        ordered = sorted(points)
        if not ordered:
            continue
        xs, ys = [x for x, _ in ordered], [y for _, y in ordered]
        axes.plot(xs, ys, marker="o", label=label)
        for x, y in ordered:
            axes.annotate(f"{y:,.0f}" if abs(y) >= 10 else f"{y:.3g}", (x, y), fontsize=7, textcoords="offset points",
                          xytext=(0, 5), ha="center")
    if log_x:
        axes.set_xscale("log")
    if log_y:
        axes.set_yscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, which="both", alpha=0.3)
    axes.margins(x=0.1, y=0.15)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=7)
    return _save(figure, name)


Plots = Callable[[dict[str, Any], str], list[Path]]


def write_plots(plots: Plots, document: dict[str, Any], name: str) -> list[Path]:
    """Draw a benchmark's plots from its JSON ``document`` (file names start with ``name``) and say where they went;
    without matplotlib, say so and go on."""
    try:
        paths = plots(document, name)
    except PlottingUnavailable as missing:
        print(f"no plots: {missing}")
        return []
    for path in paths:
        print(f"wrote {path}")
    return paths


def replot(plots: Plots, name: str) -> list[Path]:
    """``--plot-only``: the plots of ``bench/results/<name>.json``, an earlier run's results, drawn again."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"--plot-only: {path} does not exist: run the benchmark first")
    return write_plots(plots, json.loads(path.read_text(encoding="utf-8")), name)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by the nearest rank; ``nan`` when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
