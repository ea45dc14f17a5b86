"""`write_compare(dirs, out)`: several bench folders side by side (overall, per level, best speedup by step,
and which arm reaches the shared best first), as tables, one figure and one HTML page."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from htam_graph.report import load, metrics, plots, render, shared_runs
from htam_graph.report.writer import header_items, precision_warnings, rounded, warnings_for, write_table

if TYPE_CHECKING:
    import pandas as pd

COMPARE_COLUMNS = (
    "correct_pct",
    "fast_1",
    "fast_1_compile",
    "geomean_eager_x",
    "median_eager_x",
    "geomean_compile_x",
)


def compare_table(benches: Sequence[load.Bench], level: str = metrics.ALL) -> pd.DataFrame:
    """One row per (bench folder, precision policy, policy), over all levels or one `level`; metrics are means
    over seeds (std in *_std). Precision tracks are separate rows (fp32-strict first), never averaged
    together."""
    import pandas as pd

    rows = []
    for bench in benches:
        summary = metrics.summary_table(bench.runs)
        overall = summary[summary["level"] == level]
        for track, policy in [
            (t, p) for t in metrics.precision_tracks(overall) for p in metrics.policy_order(overall["policy"])
        ]:
            part = overall[(overall["policy"] == policy) & (overall["precision_policy"] == track)]
            if not len(part):
                continue
            row: dict[str, Any] = {
                "bench": bench.name,
                "policy": policy,
                "level": level,
                "precision_policy": track,
                "gpu": dict(header_items(bench))["GPU"],
                "model": bench.config.get("model", "-"),
                "seeds": len(part),
                "tasks": int(part["tasks"].max()),
            }
            for col in COMPARE_COLUMNS:
                values = part[col].astype(float)
                row[col] = float(values.mean())
                row[f"{col}_std"] = float(values.std(ddof=1)) if len(part) > 1 else math.nan
            rows.append(row)
    return pd.DataFrame(rows)


def write_compare(bench_dirs: Sequence[Path], out: Path) -> Path:
    """Compare several bench folders side by side into `out`: compare.md/.html, the overall table
    (compare.csv/.json), per level (compare_levels.*), best speedup by step and the head-to-head on the shared
    (task, seed) runs (compare_steps.*, compare_reach.*, compare_best_vs_step.png). Returns the html."""
    benches = [load.load_bench(Path(d)) for d in bench_dirs]
    names = [b.name for b in benches]
    if len(set(names)) < len(names):  # two folders with one name: tell them apart by path
        benches = [load.Bench(b.path, str(b.path), b.config, b.runs, b.steps) for b in benches]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = compare_table(benches)
    write_table(table, out, "compare")
    levels = metrics.level_order({str(v) for b in benches for v in b.runs["level"]} - {metrics.ALL})
    by_level = _concat([compare_table(benches, level) for level in levels])
    write_table(by_level, out, "compare_levels")
    warnings = [w for b in benches for w in (f"{b.name}: {x}" for x in warnings_for(b))]
    if len({h for b in benches for h in [dict(header_items(b))["GPU"]]}) > 1:
        warnings.insert(0, "the folders were measured on different GPUs: compare speedups with care.")
    tracks = (
        sorted(set(table["precision_policy"]), key=lambda t: (t != metrics.STRICT, t)) if len(table) else []
    )
    warnings[:0] = precision_warnings(tracks)
    sections = []
    for track in tracks:
        sections.append(
            (
                f"all levels, mean over seeds, precision policy {track}",
                rounded(table[table["precision_policy"] == track].drop(columns="level")).set_index(
                    ["bench", "policy"]
                ),
            )
        )
        for level in levels:
            part = by_level[(by_level["precision_policy"] == track) & (by_level["level"] == level)]
            if len(part):
                sections.append(
                    (
                        f"level {level}, precision policy {track}",
                        rounded(part.drop(columns="level")).set_index(["bench", "policy"]),
                    )
                )
    arms = shared_runs.arms_of(benches)
    keys = shared_runs.shared_keys(arms)
    sections += _shared_sections(benches, arms, keys, tracks, out, warnings)
    steps, reach, common = _step_comparison(arms)
    write_table(steps, out, "compare_steps")
    write_table(reach, out, "compare_reach")
    figures = []
    if len(steps):
        lines = {arm: steps[steps["arm"] == arm] for arm in dict.fromkeys(steps["arm"])}
        figure = plots.step_curves(
            lines, out / "compare_best_vs_step.png", "best speedup vs step (shared runs)"
        )
        figures.append(
            (figure, f"Best speedup vs step, geometric mean over the {common} runs all arms share")
        )
        pivot = steps.pivot(index="step", columns="arm", values="geomean_best_x")[list(lines)]
        sections.append(
            (f"best speedup over eager by step, geomean over the {common} shared runs", rounded(pivot))
        )
    if len(reach):
        sections.append(
            (
                f"which arm reaches the shared best first (within {metrics.REACH_WITHIN:.0%}, "
                "runs where a kernel beat eager)",
                rounded(reach).set_index("arm"),
            )
        )
    page = render.Page(
        title="htam-graph bench comparison",
        header=[(b.name, ", ".join(f"{k}: {v}" for k, v in header_items(b)[:8])) for b in benches],
        warnings=warnings,
        definitions=[*metrics.DEFINITIONS, *COMPARE_DEFINITIONS],
        sections=sections,
        extra=[],
        figures=figures,
    )
    (out / "compare.md").write_text(render.markdown(page), encoding="utf-8")
    html = out / "compare.html"
    html.write_text(render.html(page), encoding="utf-8")
    return html


COMPARE_DEFINITIONS = (
    "An arm is one (bench folder, policy, precision policy). The step tables use only the (task, seed) runs "
    "every arm has, so the arms are compared on the same tasks.",
    "Reaching the shared best: a run's shared best is the highest final best speedup any arm found for that "
    "(task, seed); an arm reaches it at the first step whose best is within "
    f"{metrics.REACH_WITHIN:.0%} of it. "
    "Runs where no arm beat eager are left out; mean steps are over the runs every arm reached.",
)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    import pandas as pd

    frames = [f for f in frames if len(f)]
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["level", "precision_policy"])
    )


def _shared_sections(
    benches: Sequence[load.Bench],
    arms: Sequence[shared_runs.Arm],
    keys: set[tuple[str, int]],
    tracks: list[str],
    out: Path,
    warnings: list[str],
) -> list[tuple[str, pd.DataFrame]]:
    """When the arms ran different runs: the overall table again on the runs they share (compare_shared.*),
    and a warning. Always: the shared runs whose arms differ beyond noise (compare_tasks.*)."""
    sections = []
    if len(arms) > 1 and any(len(a.bench.runs) > len(keys) for a in arms):
        warnings.append(
            f"the arms ran different runs ({', '.join(f'{a.label}: {len(a.bench.runs)}' for a in arms)}); "
            f"the overall and per-level tables are each over their own runs, the tables below over the "
            f"{len(keys)} runs every arm has"
        )
        table = compare_table([shared_runs.restricted(b, keys) for b in benches])
        write_table(table, out, "compare_shared")
        for track in tracks:
            part = table[table["precision_policy"] == track].drop(columns="level")
            title = f"all levels, on the {len(keys)} runs every arm has, precision policy {track}"
            sections.append((title, rounded(part).set_index(["bench", "policy"])))
    differences = shared_runs.task_differences(arms, keys)
    write_table(differences, out, "compare_tasks")
    if len(arms) > 1:
        title = (
            f"shared runs whose returned kernels differ by more than {shared_runs.NOISE:.0%} over eager "
            f"({len(differences)} of {len(keys)}; smaller per-task differences are within bench noise)"
        )
        sections.append((title, rounded(differences).set_index(["task", "seed"])))
    return sections


def _step_comparison(arms: Sequence[shared_runs.Arm]) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Best-by-step curves (columns arm, step, geomean_best_x) and the reach table over the (task, seed) runs
    every arm has, and how many runs that is."""
    import pandas as pd

    horizon = max((int(a.bench.steps["step"].max()) for a in arms if len(a.bench.steps)), default=0)
    curves_of: dict[str, dict[tuple[str, int], list[float]]] = {}
    for arm in arms:
        for (task, _policy, seed), curve in metrics.run_curves(arm.bench, horizon=horizon).items():
            curves_of.setdefault(arm.label, {})[(task, seed)] = curve
    if not curves_of:
        return pd.DataFrame(columns=["arm", "step", "geomean_best_x"]), metrics.reach_table({}), 0
    common = set.intersection(*(set(c) for c in curves_of.values()))
    rows = [
        {"arm": arm, "step": t, "geomean_best_x": metrics.geomean([curves[run][t] for run in common])}
        for arm, curves in curves_of.items()
        for t in range(horizon + 1)
        if common
    ]
    steps = pd.DataFrame(rows, columns=["arm", "step", "geomean_best_x"])
    return steps, metrics.reach_table(curves_of), len(common)
