"""PNG charts for the benchmark programs (matplotlib, Agg backend: no display needed).

Each chart is a row of grouped-bar panels: one group per category (a scenario, a strategy) and
one bar per series (a system, a percentile). Missing values (None) leave a gap, never a zero bar.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass(frozen=True)
class Panel:
    """One subplot: categories on x; series name -> one value per category (None = not measured)."""

    title: str
    ylabel: str
    categories: tuple[str, ...]
    series: tuple[tuple[str, tuple[float | None, ...]], ...]
    log_y: bool = False


def panel(title: str, ylabel: str, categories: Sequence[str], series: dict[str, Sequence[float | None]],
          log_y: bool = False) -> Panel:
    """Build a Panel; every series must have one value per category."""
    for name, values in series.items():
        if len(values) != len(categories):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(categories)} categories")
    return Panel(title, ylabel, tuple(categories), tuple((k, tuple(v)) for k, v in series.items()), log_y)


def save_chart(path: str | Path, panels: Sequence[Panel], suptitle: str = "") -> Path:
    """Draw the panels side by side into a PNG at `path`; returns the path."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure  # the OO API keeps no global pyplot state

    fig = Figure(figsize=(max(6.0, 5.5 * len(panels)), 4.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, p in zip(axes, panels):
        _draw(ax, p)
    if suptitle:
        fig.suptitle(suptitle)
    path = Path(path)
    fig.savefig(path, format="png", dpi=110)
    return path


def _draw(ax: Any, p: Panel) -> None:
    n = max(1, len(p.series))
    width = 0.8 / n
    xs = range(len(p.categories))
    for i, (name, values) in enumerate(p.series):
        pos = [x - 0.4 + width * (i + 0.5) for x in xs]
        heights = [float("nan") if v is None else v for v in values]
        bars = ax.bar(pos, heights, width, label=name)
        ax.bar_label(bars, labels=["" if v is None else f"{v:.3g}" for v in values], fontsize=7)
    ax.set_xticks(list(xs), list(p.categories), rotation=20, ha="right", fontsize=8)
    ax.set_title(p.title, fontsize=10)
    ax.set_ylabel(p.ylabel)
    if p.log_y:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def records_panel(records: Sequence[dict[str, Any]], key: str, title: str, ylabel: str,
                  scenarios: Sequence[str] | None = None) -> Panel:
    """A panel from benchmark records (common.record): one group per scenario, one bar per system."""
    scenarios = list(scenarios or dict.fromkeys(r["scenario"] for r in records))
    systems = list(dict.fromkeys(r["system"] for r in records))
    table = {(r["system"], r["scenario"]): r[key] for r in records}
    return panel(title, ylabel, scenarios, {s: [table.get((s, c)) for c in scenarios] for s in systems})
