"""The dev-split sweep of `benchmarks/compile_gap.py --first-table-only --json-out` against h200_baselines.jsonl.

Usage: python scripts/compile_gap_vs_kb.py H200_BASELINES.jsonl SWEEP.jsonl [SWEEP.jsonl ...]
Per protocol (do_bench = the file's own method, head-start, the runtime's harness) and side (eager,
torch.compile): the geomean / median / range of (this run's time / the file's time) and how many tasks agree
within 5 %; then torch.compile's speedup over eager as each protocol sees it, and the outliers."""

import json
import math
import statistics as st
import sys

baselines = {json.loads(line)["task"]: json.loads(line) for line in open(sys.argv[1]) if line.strip()}
rows = [json.loads(line) for path in sys.argv[2:] for line in open(path) if line.strip()]
rows = [r for r in rows if r["task"] in baselines]
FILE_KEY = {"eager": "eager_ms", "compile": "compiled_ms"}
PROTOCOLS = (("do_bench", "db"), ("head-start", "q"), ("harness", "h"))


def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def ratio(r, prefix, side):
    return r[f"{prefix}_{side}"] / (baselines[r["task"]][FILE_KEY[side]] * 1e3)


print(f"{len(rows)} tasks, {rows[0]['gpu']}, torch {rows[0]['torch']}, fp32 (TF32 off)\n")
print("| side | protocol | geomean ratio | median | min | max | within 5 % |")
print("|---|---|---:|---:|---:|---:|---:|")
for side in FILE_KEY:
    for name, prefix in PROTOCOLS:
        rs = [ratio(r, prefix, side) for r in rows]
        near = sum(abs(math.log(v)) < math.log(1.05) for v in rs)
        print(f"| {side} | {name} | {gm(rs):.3f} | {st.median(rs):.3f} | {min(rs):.3f} | {max(rs):.3f} "
              f"| {near}/{len(rs)} |")  # fmt: skip
print("\n| torch.compile over eager, geomean | value |\n|---|---:|")
print(f"| h200_baselines.jsonl | {gm([baselines[r['task']]['eager_ms'] / baselines[r['task']]['compiled_ms'] for r in rows]):.3f} |")  # fmt: skip
for name, prefix in PROTOCOLS:
    print(f"| {name} | {gm([r[f'{prefix}_eager'] / r[f'{prefix}_compile'] for r in rows]):.3f} |")
print("\nTasks outside 5 % under do_bench or head-start (this run / file):")
for r in rows:
    cells = {f"{n} {s}": ratio(r, p, s) for s in FILE_KEY for n, p in PROTOCOLS[:2]}
    if any(abs(math.log(v)) >= math.log(1.05) for v in cells.values()):
        print(f"- {r['task']}: " + ", ".join(f"{k} {v:.3f}" for k, v in cells.items()))
