"""A 100-task picture from a full bench plus a re-run of some of its tasks with newer code, labelled as such.

For every task of BASE (a bench's results.jsonl) the row of RERUN is used when RERUN has the task, else BASE's.
Prints per-level tables (geomean / median / fast_1 over eager and over torch.compile, computed as the report
does: a returned reference counts 1.0x over eager, and ref_compile_us / ref_eager_us over torch.compile) and
the per-task change for the re-run tasks. This is NOT one bench: the two sets of rows come from different code
versions and memories, and the output says so.

Usage: python scripts/bench_composite.py BASE/results.jsonl RERUN/results.jsonl
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path


def _rows(path: Path) -> dict[str, dict]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {r["task"]: r for r in rows}


def _eager(r: dict) -> float:
    return float(r.get("best_speedup_eager_x") or 1.0) if r.get("status") == "done" else 1.0


def _compile(r: dict) -> float | None:
    if r.get("best_speedup_compile_x"):
        return float(r["best_speedup_compile_x"])
    if r.get("ref_compile_us") and r.get("ref_eager_us"):
        return float(r["ref_compile_us"]) / float(r["ref_eager_us"])
    return None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _table(rows: dict[str, dict], rerun: dict[str, dict]) -> list[str]:
    out = [
        "| | tasks | from the re-run | geomean over eager | median | fast_1 | geomean over torch.compile "
        "| fast_1 over torch.compile |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in (1, 2, None):
        chosen = [r for r in rows.values() if level is None or r.get("level") == level]
        eager = [_eager(r) for r in chosen]
        comp = [c for c in (_compile(r) for r in chosen) if c is not None]
        fast = sum(e > 1.0 and not r["best_is_reference"] for e, r in zip(eager, chosen, strict=True))
        # as the report counts it: over all runs, a returned reference counted at ref_compile_us / ref_eager_us
        fast_c = sum(c > 1.0 for c in comp)
        out.append(
            f"| {'level ' + str(level) if level else '**all**'} | {len(chosen)} "
            f"| {sum(r['task'] in rerun for r in chosen)} | {_geomean(eager):.3f}× | {statistics.median(eager):.3f}× "
            f"| {100 * fast / len(chosen):.0f} % | {_geomean(comp):.3f}× (n={len(comp)}) "
            f"| {100 * fast_c / len(chosen):.0f} % |"
        )
    return out


def main() -> None:
    base, rerun = _rows(Path(sys.argv[1])), _rows(Path(sys.argv[2]))
    missing = sorted(set(rerun) - set(base))
    if missing:
        sys.exit(f"re-run tasks missing from the base bench: {missing}")
    merged = {task: rerun.get(task, row) for task, row in base.items()}
    base_only = _table(base, {})
    lines = [
        f"Composite of {len(base)} tasks: {len(rerun)} rows from `{sys.argv[2]}`, the other "
        f"{len(base) - len(rerun)} from `{sys.argv[1]}` (two code versions, two memories: not one bench).",
        "",
        *_table(merged, rerun),
        "",
        "The base bench alone:",
        "",
        *base_only,
        "",
        "| re-run task | base | re-run | change |",
        "|---|---:|---:|---:|",
    ]
    for task in sorted(rerun, key=lambda t: _eager(rerun[t]) / _eager(base[t])):
        b, n = _eager(base[task]), _eager(rerun[task])
        lines.append(f"| {task.removeprefix('kernelbench/')} | {b:.3f}× | {n:.3f}× | {n / b:.2f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
