"""Where a bench's time went: per evaluation, the worker's phases and its waits to be admitted to the GPU.

    python benchmarks/bench_time.py BENCH_DIR [BENCH_DIR ...]

Reads every step's evaluation record in `BENCH_DIR/runs/*/*/seed_*/trajectory.json` (no GPU needed, so it runs on
a bench copied back from the device machine) and prints one Markdown table per folder:
- `wall`: the evaluation as the parent saw it (worker start to result);
- `queued`: waiting for the GPU (memory budget, turnstile, shared or exclusive lock), the worker's `queued_s`;
  `queued: memory` / `shared` / `timing`: the same split by what was waited for (records that have the split;
  `n` counts the evaluations that waited for that kind);
- `wall - queued`: the evaluation's own work, spawn and imports included;
- one row per top-level phase of `phase_s` (a phase's time includes the waits inside it);
- `run wall - evaluations`: per run, what the loop spent outside its evaluations (generation, the memory, the
  baseline and the confirmation of the returned kernel); runs resumed after a cut are left out of this row.
Sub-phases (`correctness.*`) are parts of their phase and are not listed.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from htam_graph.bench.job import run_dir_name
from htam_graph.kernels_runtime.recorder import phase_seconds, queued_seconds

__all__ = ["bench_rows", "main", "table"]


def _runs(bench: Path) -> list[tuple[list[dict[str, Any]], dict[str, Any] | None]]:
    """(trajectory rows, the run's results.jsonl row or None) per run folder."""
    finished: dict[Path, dict[str, Any]] = {}
    results = bench / "results.jsonl"
    if results.is_file():
        for line in results.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                finished[run_dir_name(row["task"], row["policy"], int(row["seed"]))] = row
    runs = bench / "runs"
    return [
        (json.loads(path.read_text(encoding="utf-8")), finished.get(path.parent.relative_to(runs)))
        for path in sorted(runs.glob("*/*/seed_*/trajectory.json"))
    ]


def bench_rows(bench: Path) -> dict[str, list[float]]:
    """Per measure, its values: one per evaluation with a record (one per finished, uncut run for the last)."""
    rows: dict[str, list[float]] = defaultdict(list)
    for steps, result in _runs(bench):
        evals = [s["eval"] for s in steps if isinstance(s.get("eval"), dict) and s["eval"].get("wall_s")]
        for e in evals:
            checks = e.get("checks") or {}
            queued, by_kind = queued_seconds(checks)
            rows["wall"].append(e["wall_s"])
            rows["queued"].append(queued)
            for kind, seconds in by_kind.items():
                rows[f"queued: {kind}"].append(seconds)
            rows["wall - queued"].append(e["wall_s"] - queued)
            for name, seconds in phase_seconds(checks).items():
                if "." not in name:  # "a.b" is a part of phase "a"
                    rows[f"phase: {name}"].append(seconds)
        if result is not None and not result.get("resumed_after_steps") and result.get("wall_s"):
            rows["run wall - evaluations"].append(result["wall_s"] - sum(e["wall_s"] for e in evals))
    return dict(rows)


def table(rows: dict[str, list[float]]) -> str:
    """The Markdown table of `bench_rows`: count, median, mean and sum per measure."""
    lines = ["| measure | n | median s | mean s | sum s |", "|---|---:|---:|---:|---:|"]
    for name, values in rows.items():
        lines.append(
            f"| {name} | {len(values)} | {statistics.median(values):.1f} | {statistics.mean(values):.1f} "
            f"| {sum(values):,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benches", nargs="+", type=Path, help="bench folders (`htam-graph bench --out`)")
    args = p.parse_args(argv)
    status = 0
    for bench in args.benches:
        rows = bench_rows(bench)
        if not rows.get("wall"):
            print(f"{bench}: no evaluation records under runs/")
            status = 1
            continue
        print(f"## {bench}\n\n{table(rows)}\n")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
