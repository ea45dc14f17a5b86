"""The report's numbers over the runs of bench folders (`load.load_bench`): their definitions and tables.

Definitions (stated in every report, see `DEFINITIONS`):
- A run is one (task, policy, seed) line of results.jsonl. Its *returned kernel* is the best correct
  candidate, or the reference when none beat it; a run with status error/timeout returned nothing.
- speedup over eager = the recorded `best_speedup_eager_x`; 1.0 when the reference is returned or the run
  failed (the user keeps eager PyTorch). Over torch.compile = `best_speedup_compile_x`; for a returned
  reference or a failed run `ref_compile_us / ref_eager_us` when measured, else missing (left out, counted).
- fast_p (KernelBench): fraction of runs whose returned kernel is correct AND speedup over eager > p. A
  returned reference is correct with speedup 1.0 (so never fast_1); a failed run is not correct.
- geomean / median: over ALL runs, failed runs at 1.0 over eager.

pandas is imported inside functions so importing this module does no work.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from htam_graph.report.load import UNSTATED, Bench

if TYPE_CHECKING:
    import pandas as pd

ALL = "all"  # the level label of the overall rows
STRICT = "fp32-strict"  # the precision policy of the main track; any other is a separate track
FAST_P = (("fast_0", 0.0), ("fast_1", 1.0), ("fast_1_5", 1.5), ("fast_2", 2.0))
SEED_METRICS = ("geomean_eager_x", "fast_1", "geomean_compile_x", "fast_1_compile")
DEFINITIONS = (
    "A run is one (task, policy, seed). Its returned kernel is the best correct candidate, or the PyTorch "
    "reference when no candidate beat it; error/timeout runs returned nothing.",
    "Speedup over eager = ref_eager_us / best_runtime_us as recorded by the bench; a returned reference or a "
    "failed run counts as 1.0 (the user keeps eager). Over torch.compile: the recorded value; for a returned "
    "reference or failed run ref_compile_us / ref_eager_us, or left out when not measured.",
    "fast_p (KernelBench): fraction of runs whose returned kernel is correct AND faster than eager by more "
    "than p. A returned reference is correct at 1.0x, so never fast_1; a failed run is not correct. "
    "fast_1_compile: the same against torch.compile.",
    "geomean and median speedups are over ALL runs (failed runs at 1.0x over eager), "
    "never over successes only.",
    "correct %: runs in which at least one candidate passed every correctness check (correct_steps > 0).",
    "SOL fraction = sol_us / runtime of the returned kernel (1.0 = speed of light); "
    "median over runs with sol_us.",
    "steps to best: mean best_step over runs that returned a kernel other than the reference.",
    "With several seeds, per-level cells are mean ± sample std (n-1) across seeds of the per-seed value.",
)


# ------------------------------------------------------------------------------------------------ metrics
def geomean(values: Any) -> float:
    """Geometric mean of the positive finite values (NaN when there are none)."""
    xs = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summarize(runs: pd.DataFrame) -> dict[str, Any]:
    """The report's metrics over a group of runs (see DEFINITIONS)."""
    n = len(runs)
    correct = runs["returned_correct"]
    compile_known = runs["speedup_compile_x"].dropna()
    out: dict[str, Any] = {
        "tasks": int(runs["task"].nunique()),
        "runs": n,
        "failed_runs": int((~correct).sum()),
        "correct_pct": 100.0 * float((runs["correct_steps"] > 0).mean()),
    }
    for name, p in FAST_P:
        out[name] = float((correct & (runs["speedup_eager_x"] > p)).mean())
    out["fast_1_compile"] = float((correct & (runs["speedup_compile_x"] > 1.0)).mean())
    out["geomean_eager_x"] = geomean(runs["speedup_eager_x"])
    out["median_eager_x"] = float(runs["speedup_eager_x"].median())
    out["geomean_compile_x"] = geomean(compile_known)
    out["median_compile_x"] = float(compile_known.median()) if len(compile_known) else math.nan
    out["compile_x_runs"] = int(len(compile_known))
    sol = runs["sol_fraction"].dropna()
    out["sol_fraction_median"] = float(sol.median()) if len(sol) else math.nan
    out["sol_runs"] = int(len(sol))
    best = runs["best_step"].dropna()
    out["steps_to_best_mean"] = float(best.mean()) if len(best) else math.nan
    out["compile_failures"] = int(runs["compile_failures"].sum())
    out["cost_usd"] = float(runs["cost_usd"].sum())
    out["cost_known"] = bool(runs["cost_known"].all())
    out["input_tokens"] = int(runs["input_tokens"].sum())
    out["output_tokens"] = int(runs["output_tokens"].sum())
    return out


def precision_tracks(runs: pd.DataFrame) -> list[str]:
    """The precision policies of the runs, fp32-strict first (runs without the column count as unstated)."""
    if "precision_policy" not in runs:
        return [UNSTATED]
    return sorted({str(p) for p in runs["precision_policy"]}, key=lambda p: (p != STRICT, p))


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, precision policy, seed, level) plus level 'all', with `summarize`'s metrics.

    Precision tracks are never pooled: tf32 / bf16 runs get their own rows, labelled in `precision_policy`."""
    import pandas as pd

    if "precision_policy" not in runs:
        runs = runs.assign(precision_policy=UNSTATED)
    rows = []
    for (policy, track, seed), group in runs.groupby(["policy", "precision_policy", "seed"], sort=True):
        for level in [*sorted(group["level"].unique(), key=_level_order), ALL]:
            part = group if level == ALL else group[group["level"] == level]
            rows.append(
                {"policy": policy, "precision_policy": track, "seed": seed, "level": level, **summarize(part)}
            )
    return pd.DataFrame(rows)


def seed_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample std (n-1; NaN for one seed) across seeds of the headline metrics, per policy, precision
    policy and level."""
    import pandas as pd

    rows = []
    for (policy, track, level), group in summary.groupby(["policy", "precision_policy", "level"], sort=False):
        row: dict[str, Any] = {
            "policy": policy,
            "precision_policy": track,
            "level": level,
            "seeds": len(group),
        }
        for metric in SEED_METRICS:
            values = group[metric].astype(float)
            row[f"{metric}_mean"] = float(values.mean())
            row[f"{metric}_std"] = float(values.std(ddof=1)) if len(group) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def usage_table(steps: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per policy and `key` ('local' strategy or 'global' direction): attempts, improved count, success rate
    (share of attempts with status 'improved'), correct rate, mean gain (failed attempts count 0.0)."""
    import pandas as pd

    cols = ["policy", key, "attempts", "improved", "success_rate", "correct_rate", "mean_gain"]
    known = steps[steps[key].notna()]
    if known.empty:
        return pd.DataFrame(columns=cols)
    g = known.groupby(["policy", key], sort=True)
    out = pd.DataFrame(
        {
            "attempts": g.size(),
            "improved": g["status"].apply(lambda s: int((s == "improved").sum())),
            "correct_rate": g["status"].apply(lambda s: float((s != "failed").mean())),
            "mean_gain": g["gain"].mean(),
        }
    ).reset_index()
    out["success_rate"] = out["improved"] / out["attempts"]
    return out[cols].sort_values(["policy", "mean_gain", key], ascending=[True, False, True], kind="stable")


def transition_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Consecutive (global at step t-1 -> global at step t) pairs within each run: count and mean gain of the
    step that took the transition, per policy."""
    import pandas as pd

    pairs = []
    for _, run in steps.sort_values("step").groupby(["task", "policy", "seed"], sort=True):
        prev = None
        for s in run.to_dict("records"):  # not itertuples: `global` is a Python keyword
            current = s["global"]
            if prev is not None and current is not None:
                pairs.append({"policy": s["policy"], "src": prev, "dst": current, "gain": s["gain"]})
            prev = current
    cols = ["policy", "src", "dst", "count", "mean_gain"]
    if not pairs:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(pairs)
    g = df.groupby(["policy", "src", "dst"], sort=True)["gain"]
    out = pd.DataFrame({"count": g.size(), "mean_gain": g.mean()}).reset_index()
    return out[cols]


def best_by_step(bench: Bench) -> pd.DataFrame:
    """Geometric mean over runs of the best speedup over eager reached by step t (t = 0: the reference, 1.0),
    per policy. A run's best is carried forward after its last step; a failed run stays at 1.0."""
    import pandas as pd

    rows = [
        {"policy": policy, "step": t, "best_x": best}
        for (_task, policy, _seed), curve in run_curves(bench).items()
        for t, best in enumerate(curve)
    ]
    if not rows:
        return pd.DataFrame(columns=["policy", "step", "geomean_best_x"])
    df = pd.DataFrame(rows)
    out = df.groupby(["policy", "step"], sort=True)["best_x"].apply(geomean).rename("geomean_best_x")
    return out.reset_index()


def run_curves(bench: Bench, horizon: int | None = None) -> dict[tuple[str, str, int], list[float]]:
    """Per run (task, policy, seed): the best speedup over eager reached by step t, for t = 0 (the reference,
    1.0) to `horizon` (default: the bench's last step), carried forward after the run's last step."""
    if horizon is None:
        horizon = int(bench.steps["step"].max()) if len(bench.steps) else 0
    by_run: dict[tuple[str, str, int], dict[int, float]] = {}
    for r in bench.steps.itertuples(index=False):
        by_run.setdefault((str(r.task), str(r.policy), int(r.seed)), {})[int(r.step)] = float(r.best_x)
    curves = {}
    for task, policy, seed in (
        bench.runs[["task", "policy", "seed"]].drop_duplicates().itertuples(index=False)
    ):
        by_step = by_run.get((str(task), str(policy), int(seed)), {})
        best, curve = 1.0, []
        for t in range(horizon + 1):
            if by_step.get(t, 0.0) > 0:  # NaN (no speedup recorded) compares False
                best = max(best, by_step[t])
            curve.append(best)
        curves[(str(task), str(policy), int(seed))] = curve
    return curves


REACH_WITHIN = 0.02  # a run "reached the best" when its best is within 2 % of the best any compared run found


def reach_table(
    arms: dict[str, dict[tuple[str, int], list[float]]], within: float = REACH_WITHIN
) -> pd.DataFrame:
    """Head to head on the (task, seed) runs every arm has: which arm reaches the shared best kernel in fewer
    steps. `arms` maps a label to its curves (run_curves keyed by (task, seed), all of one horizon). The
    shared best of a run is the highest final best over the arms; runs where no arm beat the reference are
    left out. An arm reaches it at the first step whose best is within `within` of it (never: not reached)."""
    import pandas as pd

    labels = list(arms)
    common = sorted(set.intersection(*(set(c) for c in arms.values()))) if arms else []
    reached = dict.fromkeys(labels, 0)
    first_alone = dict.fromkeys(labels, 0)
    tied_first = dict.fromkeys(labels, 0)
    steps: dict[str, list[float]] = {a: [] for a in labels}
    compared = 0
    for run in common:
        best = max(arms[a][run][-1] for a in labels)
        if best <= 1.0:
            continue
        compared += 1
        reach: dict[str, float] = {}
        for a in labels:
            hit = [t for t, b in enumerate(arms[a][run]) if b >= best / (1.0 + within)]
            reach[a] = hit[0] if hit else math.inf
        first = min(reach.values())
        winners = [a for a in labels if reach[a] == first]
        for a in labels:
            reached[a] += reach[a] < math.inf
            if reach[a] == first:
                (first_alone if len(winners) == 1 else tied_first)[a] += 1
        if all(r < math.inf for r in reach.values()):
            for a in labels:
                steps[a].append(reach[a])
    rows = [
        {
            "arm": a,
            "runs_compared": compared,
            "reached_best": reached[a],
            "first_alone": first_alone[a],
            "tied_first": tied_first[a],
            "mean_steps_to_best_when_all_reach": sum(steps[a]) / len(steps[a]) if steps[a] else math.nan,
        }
        for a in labels
    ]
    return pd.DataFrame(rows)


def _level_order(level: str) -> tuple[int, str]:
    return (int(level), "") if level.isdigit() else (10**6, level)


def level_order(levels: Any) -> list[str]:
    """Levels sorted numerically, '-' after them, 'all' last."""
    return sorted({str(x) for x in levels}, key=lambda x: (x == ALL, _level_order(x)))


def policy_order(policies: Any) -> list[str]:
    """HTAM (htam / htg) first, then the others alphabetically."""
    return sorted({str(p) for p in policies}, key=lambda p: (p not in ("htam", "htg"), p))
