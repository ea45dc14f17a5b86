"""The report's figures (matplotlib, Agg, PNG). Each function writes one file and returns its path.

`matplotlib.figure.Figure` is used directly (no pyplot): no global state, no GUI backend, safe in threads.
matplotlib is imported inside functions so importing this module does no work.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from htam_graph.report.load import Bench
from htam_graph.report.metrics import ALL, best_by_step, level_order, policy_order

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

DPI = 110


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, format="png")
    return path


def _ecdf(ax: Any, values: list[float], label: str, **style: Any) -> None:
    xs = sorted(v for v in values if v > 0 and math.isfinite(v))
    if not xs:
        return
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    ax.step([xs[0], *xs], [0.0, *ys], where="post", label=f"{label} (n={len(xs)})", **style)


def _plain_ticks(axis: Any) -> None:
    """'0.5x', '2x' instead of matplotlib's 2×10^0 labels on a log axis."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
    axis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))


def speedup_distribution(bench: Bench, path: Path) -> Path:
    """Per level: the ECDF of each policy's speedup over eager against torch.compile's own speedup over eager
    (ref_eager_us / ref_compile_us, one value per task) on a log axis."""
    runs = bench.runs
    levels = [lv for lv in level_order(runs["level"]) if lv != ALL]
    fig = _figure(4.2 * len(levels), 3.6)
    axes = fig.subplots(1, len(levels), squeeze=False)[0]
    for ax, level in zip(axes, levels, strict=True):
        part = runs[runs["level"] == level]
        for policy in policy_order(part["policy"]):
            _ecdf(ax, part[part["policy"] == policy]["speedup_eager_x"].tolist(), policy)
        per_task = part.drop_duplicates("task")["torch_compile_x"].tolist()
        _ecdf(ax, per_task, "torch.compile", color="black", linestyle="--")
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        _plain_ticks(ax.xaxis)
        ax.set_title(f"level {level}")
        ax.set_xlabel("speedup over eager (log)")
        ax.set_ylabel("fraction of runs with speedup ≤ x")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def best_vs_step(bench: Bench, path: Path) -> Path:
    """Geometric mean over runs of the best speedup over eager reached by each step, one line per policy."""
    curve = best_by_step(bench)
    lines = {p: curve[curve["policy"] == p] for p in policy_order(curve["policy"])}
    return step_curves(lines, path, "best speedup vs step")


def step_curves(lines: dict[str, pd.DataFrame], path: Path, title: str) -> Path:
    """One line per label: `geomean_best_x` against `step`."""
    fig = _figure(5.5, 3.6)
    ax = fig.subplots()
    for label, part in lines.items():
        ax.plot(part["step"], part["geomean_best_x"], marker="o", label=label)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("best speedup over eager (geomean over runs)")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return _save(fig, path)


def transition_heatmap(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Mean gain of each observed (previous direction -> next direction) pair; blank where never taken.
    `table` has columns src, dst, count, mean_gain (one row per pair)."""
    keys = sorted(set(table["src"]) | set(table["dst"]))
    index = {k: i for i, k in enumerate(keys)}
    grid = [[math.nan] * len(keys) for _ in keys]
    counts = [[0] * len(keys) for _ in keys]
    for r in table.itertuples(index=False):
        grid[index[r.src]][index[r.dst]] = float(r.mean_gain)
        counts[index[r.src]][index[r.dst]] = int(r.count)
    size = max(4.0, 0.55 * len(keys) + 2.5)
    fig = _figure(size + 1.0, size)
    ax = fig.subplots()
    finite = [abs(v) for row in grid for v in row if math.isfinite(v)]
    bound = max(finite) if finite and max(finite) > 0 else 1.0
    image = ax.imshow(grid, cmap="RdYlGn", vmin=-bound, vmax=bound)
    for i, row in enumerate(counts):
        for j, n in enumerate(row):
            if n:
                ax.text(j, i, f"n={n}", ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(keys)), keys, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(keys)), keys, fontsize=7)
    ax.set_xlabel("next direction")
    ax.set_ylabel("previous direction")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label="mean gain (ln speedup ratio)")
    return _save(fig, path)


def sol_fraction(bench: Bench, path: Path) -> Path:
    """Speed-of-light fraction of the returned kernel per task (mean over seeds), one bar group per policy."""
    runs = bench.runs.dropna(subset=["sol_fraction"])
    tasks = sorted(runs["task"].unique())
    policies = policy_order(runs["policy"]) or ["-"]
    fig = _figure(max(5.0, 0.35 * len(tasks) * len(policies) + 2.0), 4.2)
    ax = fig.subplots()
    width = 0.8 / len(policies)
    for k, policy in enumerate(policies):
        part = runs[runs["policy"] == policy].groupby("task")["sol_fraction"].mean()
        xs = [i + k * width for i, t in enumerate(tasks) if t in part.index]
        ax.bar(xs, [float(part[t]) for t in tasks if t in part.index], width=width, label=policy)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], [t.split("/")[-1] for t in tasks])
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    ax.set_ylabel("sol_us / runtime of returned kernel")
    ax.set_title("fraction of speed of light per task" + ("" if tasks else " (no sol_us recorded)"))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return _save(fig, path)
