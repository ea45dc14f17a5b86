"""Summarise an LLM study's runs in flight (the bench folder of `scripts/device_llm_round.sh`) as markdown.

    python scripts/llm_study_summary.py STUDY_BENCH_DIR [--rules RESULTS.jsonl ...] [--price IN,OUT] [--steps N]

Reads every `runs/<task>/<policy>/seed_<n>/trajectory.json` (the steps evaluated so far) and applies the
report's definitions (htam_graph/report/metrics.py) to each run's best step so far: the fastest correct step
over eager, or the reference (1.0x over eager; ref_compile / ref_eager over torch.compile) when no correct
step beat eager. A run still in flight has not been confirmed on fresh seeds yet: its numbers are interim.
`--rules` adds the rules backend's bench rows for the same tasks. Token counts are estimated from the
characters of every request and reply (4 characters per token), priced at `--price` USD per million.
`--steps N` counts only each run's first N steps, to compare two arms at the same number of steps (the cost
line still counts every exchange).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

CORRECT = {"correct", "improved"}


def main() -> None:
    args = _parse()
    runs = [_run(p, args.steps) for p in sorted(args.bench.glob("runs/*/*/seed_*/trajectory.json"))]
    rules = _rules_rows(args.rules, {r["task"] for r in runs})
    print(_table(runs, rules))
    print()
    print(_per_task(runs))
    print()
    print(_cost(args.bench, args.price))


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", type=Path)
    parser.add_argument("--rules", type=Path, nargs="*", default=[])
    parser.add_argument("--price", default="3,15", help="USD per million input,output tokens")
    parser.add_argument("--steps", type=int, default=None, help="count only each run's first N steps")
    return parser.parse_args()


def _run(path: Path, max_steps: int | None) -> dict[str, Any]:
    steps = json.loads(path.read_text(encoding="utf-8"))[:max_steps]
    task = path.parts[-4].replace("__", "/")
    evals = [s.get("eval") or {} for s in steps]
    correct = [(s, e) for s, e in zip(steps, evals, strict=True) if s["status"] in CORRECT]
    # torch.compile is timed once per run (its first evaluation), as RunResult.best_speedup_compile_x uses it:
    # over torch.compile = that ref_compile_us / the best step's runtime_us.
    ref = next(((e["ref_eager_us"], e["ref_compile_us"]) for e in evals if e.get("ref_compile_us")), None)
    best = max(correct, key=lambda se: se[1].get("speedup_eager_x") or 0.0, default=None)
    if best is not None and (best[1].get("speedup_eager_x") or 0.0) > 1.0:
        eager_x, best_step = best[1]["speedup_eager_x"], best[0]["step"]
        compile_x = ref[1] / best[1]["runtime_us"] if ref else None
    else:
        eager_x, best_step = 1.0, None
        compile_x = ref[1] / ref[0] if ref else None
    return {
        "task": task,
        "level": int(task.split("/")[1].removeprefix("level")),
        "steps": len(steps),
        "correct_steps": len(correct),
        "eager_x": eager_x,
        "compile_x": compile_x,
        "best_step": best_step,
        "step_x": [
            round(e.get("speedup_eager_x") or 0.0, 2) if s["status"] in CORRECT else None
            for s, e in zip(steps, evals, strict=True)
        ],
    }


def _rules_rows(files: list[Path], tasks: set[str]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}  # one row per task: the first file that has it wins
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else None
            if row and row.get("task") in tasks and row.get("policy") == "htam":
                rows.setdefault(row["task"], row)
    return list(rows.values())


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _row(label: str, runs: list[dict[str, Any]]) -> str:
    eager = [r["eager_x"] for r in runs]
    comp = [r["compile_x"] for r in runs if r["compile_x"]]
    steps = sum(r["steps"] for r in runs)
    correct = sum(r["correct_steps"] for r in runs)
    fast1 = sum(1 for r in runs if r["eager_x"] > 1.0)
    fast1_c = sum(1 for r in runs if r["compile_x"] and r["compile_x"] > 1.0)
    return (
        f"| {label} ({len(runs)}) | {correct}/{steps} ({100 * correct / steps:.0f} %) | {fast1}/{len(runs)} | "
        f"{fast1_c}/{len(comp)} | {_geomean(eager):.3f}x | {statistics.median(eager):.3f}x | "
        f"{_geomean(comp):.3f}x | {statistics.median(comp):.3f}x |"
    )


def _rules_row(label: str, rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"| rules, {label} | no rows | | | | | | |"
    eager = [r.get("best_speedup_eager_x") or 1.0 for r in rows]
    comp = [r["best_speedup_compile_x"] for r in rows if r.get("best_speedup_compile_x")]
    fast1 = sum(
        1 for r in rows if (r.get("best_speedup_eager_x") or 0) > 1.0 and not r.get("best_is_reference")
    )
    fast1_c = sum(1 for c in comp if c > 1.0)
    med_c = f"{statistics.median(comp):.3f}x" if comp else "-"
    return (
        f"| rules, {label} ({len(rows)}) | | {fast1}/{len(rows)} | {fast1_c}/{len(comp)} | "
        f"{_geomean(eager):.3f}x | {statistics.median(eager):.3f}x | {_geomean(comp):.3f}x | {med_c} |"
    )


def _table(runs: list[dict[str, Any]], rules: list[dict[str, Any]]) -> str:
    lines = [
        "| tasks | correct steps | fast_1 eager | fast_1 compile | geomean eager | median eager | "
        "geomean compile | median compile |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in (1, 2):
        lines.append(_row(f"level{level}", [r for r in runs if r["level"] == level]))
    lines.append(_row("all", runs))
    for level in (1, 2):
        lines.append(_rules_row(f"level{level}", [r for r in rules if r.get("level") == level]))
    lines.append(_rules_row("all", rules))
    return "\n".join(lines)


def _per_task(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| task | x over eager per step (- failed) | best over eager | over torch.compile |",
        "|---|---|---:|---:|",
    ]
    for r in runs:
        steps = " ".join("-" if x is None else f"{x:.2f}" for x in r["step_x"])
        comp = f"{r['compile_x']:.3f}x" if r["compile_x"] else "-"
        where = f" (step {r['best_step']})" if r["best_step"] else " (reference)"
        lines.append(f"| {r['task']} | {steps} | {r['eager_x']:.3f}x{where} | {comp} |")
    return "\n".join(lines)


def _exchanges(bench: Path, suffix: str) -> list[Path]:
    """Every step's `request.md` or `reply.md`: kept in `candidates/` once evaluated, in `pending/` before."""
    runs = "runs/*/*/seed_*"
    return [*bench.glob(f"{runs}/candidates/step_*.{suffix}"), *bench.glob(f"{runs}/pending/step_*.{suffix}")]


def _cost(bench: Path, price: str) -> str:
    usd_in, usd_out = (float(p) for p in price.split(","))
    requests = sum(len(p.read_text(encoding="utf-8")) for p in _exchanges(bench, "request.md"))
    replies = _exchanges(bench, "reply.md")
    reply_chars = sum(len(p.read_text(encoding="utf-8")) for p in replies)
    tok_in, tok_out = requests / 4, reply_chars / 4
    usd = tok_in / 1e6 * usd_in + tok_out / 1e6 * usd_out
    return (
        f"{len(replies)} replies: {requests:,} request characters (~{tok_in / 1e3:.0f} k input tokens), "
        f"{reply_chars:,} reply characters (~{tok_out / 1e3:.0f} k output tokens); at ${usd_in:g} / ${usd_out:g} "
        f"per million input / output tokens: ${usd:.2f}."
    )


if __name__ == "__main__":
    main()
