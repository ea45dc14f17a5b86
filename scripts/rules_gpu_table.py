#!/usr/bin/env python
"""Per-task table of the rules library's GPU test results (the `RULES_GPU` lines of tests/gpu/*.py run with -s).

    python scripts/rules_gpu_table.py LOG_DIR [--kernelbench DIR] [--json OUT.json]

For every level1/level2 task of the KernelBench checkout: the recipes whose generated kernel passed on the GPU and
its best `triton.testing.do_bench` speed-up over eager (measured in the same test process; a failing case prints
no line, the FAILED lines of the logs are listed at the end), and torch.compile's speed-up over eager from the checkout's `h200_baselines.jsonl` (the same do_bench
method, another process). Tasks with no passing kernel count as 1.0× (the loop returns the reference). The
geomean over all tasks is therefore what the rules library could reach if the loop always picked the fastest
passing kernel: an estimate under do_bench timing, not a bench result (the benches of results/h200 were timed with
L2 flushes and a synchronise inside every window, the runtime's protocol until 2026-11-30; see NOTES.md §13-14).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

_LINE = re.compile(r"^\s*RULES_GPU (level[12]/\S+\.py) (.*)$", re.MULTILINE)
_RECIPE = re.compile(r"\b([a-z_]+\.[a-z_0-9]+)\b")
_EAGER = re.compile(r"eager_ms=([\d.]+)")
_KERNEL = re.compile(r"(?:kernel|rules)_ms=([\d.]+)")


def parse(log_dir: Path) -> tuple[dict[str, dict[str, float]], list[str]]:
    """(task -> recipe -> best speed-up, FAILED lines) from every *.log under log_dir."""
    wins: dict[str, dict[str, float]] = {}
    failed: list[str] = []
    for log in sorted(log_dir.glob("*.log")):
        text = log.read_text(encoding="utf-8", errors="replace")
        for rel, rest in _LINE.findall(text):
            recipe, eager, kernel = _RECIPE.search(rest), _EAGER.search(rest), _KERNEL.search(rest)
            if not (recipe and eager and kernel):
                continue
            speedup = float(eager.group(1)) / float(kernel.group(1))
            recipe = recipe.group(1)
            per = wins.setdefault(rel, {})
            per[recipe] = max(per.get(recipe, 0.0), speedup)
        failed += [line.strip() for line in text.splitlines() if line.startswith("FAILED ")]
    return wins, failed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log_dir", type=Path)
    p.add_argument(
        "--kernelbench",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "tests" / "data" / "kernelbench",
    )
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    wins, failed = parse(args.log_dir)
    base = {}
    for line in (args.kernelbench / "h200_baselines.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        base[row["task"]] = row["eager_ms"] / row["compiled_ms"]
    tasks = sorted(base, key=lambda t: (t.split("/")[0], int(t.split("/")[1].split("_")[0])))
    rows = []
    for t in tasks:
        per = wins.get(t, {})
        best_recipe, best = max(per.items(), key=lambda kv: kv[1]) if per else ("-", 1.0)
        rows.append({"task": t, "best_recipe": best_recipe, "rules_x": max(best, 1.0), "kernel_x": best if per else None,
                     "compile_x": base[t], "recipes": per})  # fmt: skip
    print("| task | best passing recipe | its speed-up | rules (≥1) | torch.compile |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        k = f"{r['kernel_x']:.2f}×" if r["kernel_x"] else "-"
        print(
            f"| {r['task'][:-3]} | {r['best_recipe']} | {k} | {r['rules_x']:.2f}× | {r['compile_x']:.2f}× |"
        )
    for level in ("level1", "level2", ""):
        sel = [r for r in rows if r["task"].startswith(level)]
        g = math.exp(sum(math.log(r["rules_x"]) for r in sel) / len(sel))
        c = math.exp(sum(math.log(r["compile_x"]) for r in sel) / len(sel))
        beat = sum(r["rules_x"] >= r["compile_x"] * 0.97 for r in sel)
        print(f"\n{level or 'overall'}: {len(sel)} tasks, rules geomean {g:.3f}× over eager (best passing kernel or "
              f"1.0), torch.compile {c:.3f}×; rules within 3 % of torch.compile or better on {beat}")  # fmt: skip
    print("\nFailed GPU test cases (no kernel counted for them):")
    for line in failed:
        print(f"- {line}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
