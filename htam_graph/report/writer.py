"""`write_report(bench_dir)`: tables (Markdown, CSV, JSON), PNG figures and one self-contained HTML page for a
bench folder (`compare.py` puts several folders side by side with the helpers here).

Numbers come from `data` (definitions there, repeated in every report); figures from `plots`;
Markdown and HTML assembly from `render`. pandas and matplotlib are imported lazily.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from htam_graph.devicefacts import SOL_MARGIN
from htam_graph.report import load, metrics, plots, render

if TYPE_CHECKING:
    import pandas as pd

# (column, label, format, how several seeds combine: "mean" -> mean ± std, "sum" -> total over seeds)
METRIC_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("tasks", "tasks", "int", "mean"),
    ("runs", "runs", "int", "sum"),
    ("failed_runs", "failed runs (error/timeout)", "int", "sum"),
    ("correct_pct", "correct % (≥1 correct candidate)", "pct", "mean"),
    ("fast_0", "fast_0 over eager", "frac", "mean"),
    ("fast_1", "fast_1 over eager", "frac", "mean"),
    ("fast_1_5", "fast_1.5 over eager", "frac", "mean"),
    ("fast_2", "fast_2 over eager", "frac", "mean"),
    ("fast_1_compile", "fast_1 over torch.compile", "frac", "mean"),
    ("geomean_eager_x", "geomean speedup over eager (all runs)", "x", "mean"),
    ("median_eager_x", "median speedup over eager", "x", "mean"),
    ("geomean_compile_x", "geomean speedup over torch.compile", "x", "mean"),
    ("median_compile_x", "median speedup over torch.compile", "x", "mean"),
    ("sol_fraction_median", "median fraction of speed of light", "frac", "mean"),
    ("steps_to_best_mean", "mean steps to best", "f1", "mean"),
    ("compile_failures", "compile failures", "int", "sum"),
    ("cost_usd", "cost (USD)", "usd", "sum"),
    ("input_tokens", "input tokens", "int", "sum"),
    ("output_tokens", "output tokens", "int", "sum"),
)
FIGURES = (
    ("speedup_distribution.png", "Speedup over eager per level, against torch.compile's own speedup"),
    ("best_vs_step.png", "Best speedup vs step (geometric mean over runs), per policy"),
    ("transition_heatmap.png", "Mean gain of (previous -> next direction) pairs in the trajectories"),
    ("memory_transition_heatmap.png", "Mean gain of observed TRANSITION edges in the exported memory bank"),
    ("sol_fraction.png", "Fraction of speed of light per task (mean over seeds)"),
)


def fmt(value: Any, kind: str) -> str:
    """One table cell: '-' for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "int":
        return f"{value:.0f}" if isinstance(value, float) else str(value)
    return {"pct": "{:.1f}", "frac": "{:.3f}", "x": "{:.3f}x", "f1": "{:.1f}", "usd": "${:.2f}"}[kind].format(
        value
    )


def _cell(values: list[float], kind: str, combine: str) -> str:
    if combine == "sum":
        return fmt(sum(values), kind)
    finite = [v for v in values if not math.isnan(v)]
    if len(set(values)) <= 1 or len(finite) < 2:
        return fmt(
            values[0] if len(set(values)) <= 1 else (sum(finite) / len(finite) if finite else None), kind
        )
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / (len(finite) - 1))
    return f"{fmt(mean, kind)} ± {fmt(std, kind).rstrip('x')}"


def side_by_side(summary: pd.DataFrame, level: str) -> pd.DataFrame:
    """Rows = metrics, columns = policies (HTAM first) for one level; several seeds -> mean ± sample std."""
    import pandas as pd

    part = summary[summary["level"] == level]
    tracks = metrics.precision_tracks(part)
    columns: dict[str, list[str]] = {}
    for track in tracks:  # precision tracks side by side, never pooled into one column
        for policy in metrics.policy_order(part["policy"]):
            rows = part[(part["policy"] == policy) & (part["precision_policy"] == track)]
            if not len(rows):
                continue
            name = policy if len(tracks) == 1 else f"{policy} [{track}]"
            name = name if len(rows) == 1 else f"{name} ({len(rows)} seeds)"
            columns[name] = [_cell(rows[c].astype(float).tolist(), k, how) for c, _, k, how in METRIC_ROWS]
    return pd.DataFrame(columns, index=pd.Index([label for _, label, _, _ in METRIC_ROWS], name="metric"))


def header_items(bench: load.Bench) -> list[tuple[str, str]]:
    """What the numbers were measured on: every report's header block."""
    c, runs = bench.config, bench.runs

    def seen(key: str) -> str:
        values = {str(c[key])} if c.get(key) not in (None, "") else set()
        if key in runs:
            values |= {str(v) for v in runs[key].dropna().unique() if str(v)}  # "" = a run that timed nothing
        return ", ".join(sorted(values)) or "-"

    return [
        ("GPU", seen("gpu_name")),
        ("torch version", seen("torch_version")),
        ("triton version", str(c.get("triton_version") or "-")),
        ("dtype / precision policy", f"{c.get('dtype', '-')} / {', '.join(metrics.precision_tracks(runs))}"),
        ("tolerance", f"rtol {c.get('rtol', '-')}, atol {c.get('atol', '-')}"),
        ("timing method", str(c.get("timing_method") or "-")),
        ("device / shape", f"{c.get('device', '-')} / {c.get('shape', '-')}"),
        ("backend / model", f"{c.get('backend', '-')} / {c.get('model', '-')}"),
        ("policies", ", ".join(metrics.policy_order(runs["policy"]))),
        ("seeds", ", ".join(str(s) for s in sorted(runs["seed"].unique()))),
        ("steps per run", str(c.get("steps", "-"))),
        ("tasks / runs", f"{runs['task'].nunique()} / {len(runs)}"),
        ("htam-graph version", str(c.get("htam_graph_version") or "-")),
    ]


REWRITE_GLOBAL = "algebraic_rewrite"  # the direction whose kernels may do less work than the reference


def warnings_for(bench: load.Bench) -> list[str]:
    """Things a reader must know before trusting any number below."""
    out = []
    if bench.config.get("synthetic"):
        out.append("SYNTHETIC DATA: these numbers were made up for tests and examples, not measured.")
    out += precision_warnings(metrics.precision_tracks(bench.runs))
    cpu = int(bench.runs["timing_on_cpu"].sum())
    if cpu or str(bench.config.get("gpu_name", "")).lower() == "cpu":
        out.append(f"{cpu} run(s) were timed on the CPU: their speedups say nothing about GPU performance.")
    gpus = [g for g in bench.runs["gpu_name"].dropna().unique() if str(g)]  # "" = a run that timed nothing
    if len(gpus) > 1:
        out.append(f"runs were measured on different GPUs ({', '.join(map(str, gpus))}).")
    out += _sol_warnings(bench.runs)
    failed = bench.runs[~bench.runs["returned_correct"]]
    if len(failed):
        out.append(
            f"{len(failed)} run(s) failed (error/timeout); they count as 1.0x over eager and not fast_p."
        )
    return out


def _sol_warnings(runs: pd.DataFrame) -> list[str]:
    """Runs faster than their speed-of-light floor: within the runtime's margin (a read-mostly kernel can
    stream faster than the copy rate the byte floor uses), through a work-reducing rewrite, or impossible."""
    out = []
    over = runs["sol_fraction"] > 1.0
    rewrite = over & (runs["best_global"] == REWRITE_GLOBAL)
    beyond = over & ~rewrite & (runs["sol_fraction"] > 1.0 / SOL_MARGIN)
    near = over & ~rewrite & ~beyond
    limit = f"{1.0 / SOL_MARGIN:.2f}"
    if int(beyond.sum()):
        out.append(
            f"{int(beyond.sum())} run(s) ran faster than their speed-of-light bound by more than the "
            f"runtime's margin (SOL fraction > {limit}): the SOL estimate or the timing of those runs "
            "is wrong."
        )
    if int(near.sum()):
        tasks = ", ".join(sorted(runs.loc[near, "task"].astype(str)))
        out.append(
            f"{int(near.sum())} run(s) ran faster than their speed-of-light bound within the runtime's "
            f"margin (SOL fraction 1.00-{limit}: {tasks}): the byte floor moves every input byte at the "
            "GPU's measured device-to-device copy rate (reads and writes), which a kernel that mostly reads "
            "can exceed."
        )
    if int(rewrite.sum()):
        tasks = ", ".join(sorted(runs.loc[rewrite, "task"].astype(str)))
        out.append(
            f"{int(rewrite.sum())} run(s) beat the speed-of-light bound of the reference's own work with an "
            f"algebraic rewrite that does less work ({tasks}): the bound is computed from the reference's "
            "FLOPs and bytes, so a fraction above 1 is expected there; check the returned kernel's algebra, "
            "not the timing."
        )
    return out


def precision_warnings(tracks: list[str]) -> list[str]:
    out = []
    relaxed = [t for t in tracks if t != metrics.STRICT]
    if relaxed:
        out.append(
            f"PRECISION TRACK {', '.join(relaxed)}: reduced-precision math was allowed and checked at that "
            "policy's tolerance; these numbers are a separate track, "
            "never comparable with fp32-strict results."
        )
    if len(tracks) > 1:
        out.append(
            f"runs of several precision policies ({', '.join(tracks)}): the summary, seed and comparison "
            "tables are split by them; the direction, strategy and transition tables and the figures are not."
        )
    return out


def write_table(df: pd.DataFrame, folder: Path, stem: str) -> None:
    df.to_csv(folder / f"{stem}.csv", index=False)
    records = json.loads(df.to_json(orient="records"))  # NaN -> null
    (folder / f"{stem}.json").write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")


def write_report(bench_dir: Path, out: Path | None = None) -> Path:
    """Write the report of the bench folder `bench_dir` into `out` (default `bench_dir/report/`): report.md,
    report.html (self-contained), CSV + JSON tables and PNG figures. Returns the path of report.html.
    Raises ReportError (one line) when the folder lacks bench.json or results.jsonl."""
    bench = load.load_bench(Path(bench_dir))
    folder = Path(out) if out is not None else bench.path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    summary = metrics.summary_table(bench.runs)
    tables = {
        "summary": summary,
        "seeds": metrics.seed_table(summary),
        "directions": metrics.usage_table(bench.steps, "global"),
        "strategies": metrics.usage_table(bench.steps, "local"),
        "transitions": metrics.transition_table(bench.steps),
        "runs": bench.runs,
    }
    for stem, df in tables.items():
        write_table(df, folder, stem)
    figures = _figures(bench, tables["transitions"], folder)
    levels = metrics.level_order(summary["level"])
    sections = [
        (f"level {lv}" if lv != metrics.ALL else "all levels", side_by_side(summary, lv)) for lv in levels
    ]
    page = render.Page(
        title=f"htam-graph bench report: {bench.name}",
        header=header_items(bench),
        warnings=warnings_for(bench),
        definitions=list(metrics.DEFINITIONS),
        sections=sections,
        extra=_extra_tables(tables),
        figures=[(folder / name, caption) for name, caption in FIGURES if (folder / name) in figures],
    )
    (folder / "report.md").write_text(render.markdown(page), encoding="utf-8")
    html = folder / "report.html"
    html.write_text(render.html(page), encoding="utf-8")
    return html


def _extra_tables(tables: dict[str, pd.DataFrame]) -> list[tuple[str, pd.DataFrame]]:
    seeds = tables["seeds"]
    out = []
    if len(seeds) and int(seeds["seeds"].max()) > 1:
        out.append(("Across seeds: mean and sample std of the per-seed values", rounded(seeds)))
    out += [
        ("Directions (global keys) from the trajectories", rounded(tables["directions"])),
        ("Strategies (local keys) from the trajectories", rounded(tables["strategies"])),
        ("Transitions between directions from the trajectories", rounded(tables["transitions"])),
    ]
    return out


def rounded(df: pd.DataFrame) -> pd.DataFrame:
    return df.round(4)


def _figures(bench: load.Bench, transitions: pd.DataFrame, folder: Path) -> set[Path]:
    made = {
        plots.speedup_distribution(bench, folder / "speedup_distribution.png"),
        plots.best_vs_step(bench, folder / "best_vs_step.png"),
        plots.sol_fraction(bench, folder / "sol_fraction.png"),
    }
    if len(transitions):
        pooled = _pool_transitions(transitions)
        made.add(
            plots.transition_heatmap(
                pooled,
                folder / "transition_heatmap.png",
                "trajectories: mean gain of the step after a transition",
            )
        )
    # `memory/` is where bench exports the bank; `memory_bank/` where results/ keeps it gzip-compressed
    bank_edges = next(
        (e for e in (bank_transitions(bench.path / d) for d in ("memory", "memory_bank")) if e is not None),
        None,
    )
    if bank_edges is not None and len(bank_edges):
        made.add(
            plots.transition_heatmap(
                bank_edges,
                folder / "memory_transition_heatmap.png",
                "exported memory bank: TRANSITION gain_sum / count (all GPU archs)",
            )
        )
    return made


def _pool_transitions(transitions: pd.DataFrame) -> pd.DataFrame:
    """All policies together, weighted by count."""
    t = transitions.assign(gain_sum=transitions["mean_gain"] * transitions["count"])
    g = t.groupby(["src", "dst"], sort=True)[["count", "gain_sum"]].sum().reset_index()
    return g.assign(mean_gain=g["gain_sum"] / g["count"])


def bank_transitions(folder: Path) -> pd.DataFrame | None:
    """Observed TRANSITION edges (not seed priors) of the memory bank exported into `folder` (the first
    `*.jsonl` or `*.jsonl.gz` with a manifest), summed over GPU archs: src, dst, count, mean_gain. None when
    there is no bank."""
    import pandas as pd

    from htam_graph import bank

    found = [*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]
    banks = sorted(p for p in found if bank.manifest_path(p).exists())
    if not banks:
        return None
    rows = []
    for line in bank.read_bank_bytes(banks[0]).decode("utf-8").splitlines():
        obj = json.loads(line) if line.strip() else {}
        props = obj.get("properties") or {}
        if obj.get("label") == "TRANSITION" and props.get("gpu_arch") != "prior" and props.get("count"):
            rows.append(
                {
                    "src": obj["start"]["properties"]["key"],
                    "dst": obj["end"]["properties"]["key"],
                    "count": int(props["count"]),
                    "gain_sum": float(props.get("gain_sum") or 0.0),
                }
            )
    if not rows:
        return pd.DataFrame(columns=["src", "dst", "count", "mean_gain"])
    g = pd.DataFrame(rows).groupby(["src", "dst"], sort=True)[["count", "gain_sum"]].sum().reset_index()
    return g.assign(mean_gain=g["gain_sum"] / g["count"])
