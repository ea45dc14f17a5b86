"""The arms of a comparison and the runs they all have.

An arm is one (bench folder, policy, precision track). Arms that ran different tasks (a bench cut part-way
beside a finished one) are compared fairly only on the (task, seed) runs every arm has: `shared_keys` names
them, `restricted` cuts a bench down to them, and `task_differences` lists the shared runs whose returned
kernels differ by more than one bench's per-task noise, with the step and strategy that produced each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from htam_graph.report import load, metrics

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["NOISE", "Arm", "arms_of", "restricted", "shared_keys", "task_differences"]

# Per-task speedups of one kernel moved by up to ~20 % between two benches on the H200 (results/h200/NOTES.md
# §12): a smaller difference between arms is not evidence.
NOISE = 0.20


@dataclass(frozen=True)
class Arm:
    """One arm: its label ("bench / policy", plus " / track" off the fp32-strict track) and its bench, whose
    runs are the arm's alone."""

    label: str
    bench: load.Bench


def arms_of(benches: Sequence[load.Bench]) -> list[Arm]:
    """Every (bench, precision track, policy) with runs, HTAM policies first within a bench."""
    arms = []
    for bench in benches:
        runs = bench.runs
        tracks = metrics.precision_tracks(runs) if "precision_policy" in runs else [None]
        for track in tracks:
            on_track = runs if track is None else runs[runs["precision_policy"] == track]
            for policy in metrics.policy_order(on_track["policy"]):
                part = on_track[on_track["policy"] == policy]
                suffix = "" if track in (None, metrics.STRICT) else f" / {track}"
                label = f"{bench.name} / {policy}{suffix}"
                arms.append(Arm(label, load.Bench(bench.path, bench.name, bench.config, part, bench.steps)))
    return arms


def _keys(runs: pd.DataFrame) -> set[tuple[str, int]]:
    return {(str(t), int(s)) for t, s in runs[["task", "seed"]].itertuples(index=False)}


def shared_keys(arms: Sequence[Arm]) -> set[tuple[str, int]]:
    """The (task, seed) runs every arm has."""
    return set.intersection(*(_keys(a.bench.runs) for a in arms)) if arms else set()


def restricted(bench: load.Bench, keys: set[tuple[str, int]]) -> load.Bench:
    """`bench` with only the runs whose (task, seed) is in `keys`."""
    runs = bench.runs
    mask = [(str(t), int(s)) in keys for t, s in runs[["task", "seed"]].itertuples(index=False)]
    return load.Bench(bench.path, bench.name, bench.config, runs[mask], bench.steps)


def task_differences(arms: Sequence[Arm], keys: set[tuple[str, int]], noise: float = NOISE) -> pd.DataFrame:
    """The shared runs where the best arm's speedup over eager exceeds the worst arm's by more than `noise`:
    task, seed, the ratio, then per arm its speedup and where its returned kernel came from ("step k:
    strategy", or "the reference"). Largest ratio first."""
    import pandas as pd

    rows = []
    for task, seed in sorted(keys):
        speedups = {a.label: _speedup(a, task, seed) for a in arms}
        known = [x for x in speedups.values() if x > 0]
        if len(known) < 2 or max(known) <= (1 + noise) * min(known):
            continue
        row: dict[str, object] = {"task": task, "seed": seed, "ratio": max(known) / min(known)}
        for a in arms:
            row[a.label] = speedups[a.label]
            row[f"{a.label}: from"] = _origin(a, task, seed)
        rows.append(row)
    columns = ["task", "seed", "ratio", *(c for a in arms for c in (a.label, f"{a.label}: from"))]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values("ratio", ascending=False, kind="stable").reset_index(drop=True)


def _run(arm: Arm, task: str, seed: int) -> pd.Series:
    runs = arm.bench.runs
    return runs[(runs["task"] == task) & (runs["seed"] == seed)].iloc[0]


def _speedup(arm: Arm, task: str, seed: int) -> float:
    """The returned kernel's speedup over eager (1.0 for a returned reference or a failed run)."""
    return float(_run(arm, task, seed)["speedup_eager_x"])


def _origin(arm: Arm, task: str, seed: int) -> str:
    run = _run(arm, task, seed)
    if not run["returned_correct"]:
        return f"failed ({run['status']})"
    if run["best_is_reference"]:
        return "the reference"
    if math.isnan(float(run["best_step"])):
        return "a kernel (its step not recorded)"
    step = int(run["best_step"])
    steps = arm.bench.steps
    at = steps[
        (steps["task"] == task)
        & (steps["policy"] == run["policy"])
        & (steps["seed"] == seed)
        & (steps["step"] == step)
    ]
    local = at.iloc[0]["local"] if len(at) else None
    return f"step {step}: {local}" if local else f"step {step}"
