"""The runtime's own eager and torch.compile baselines against h200_baselines.jsonl (issue 3's "agree within noise").

Usage: python scripts/runtime_baselines_vs_kb.py H200_BASELINES.jsonl BASELINES.json [BASELINES.json ...]
Each BASELINES.json holds `{"gpu", "torch", "baselines": [row, ...]}` as written by
`scripts/device_issue3_check.sh` (rows of `kernels_runtime.parent.selfcheck.baselines`); a task measured in a later file
replaces its row from an earlier one. Prints, per side (eager, torch.compile), the geomean / median / range of
(runtime's time / the file's do_bench time) and how many tasks agree within 5 % and 10 %; the reference-as-candidate
self speedups (the runtime's noise floor); the tasks outside 5 %; and the tasks with no measurement."""

import json
import math
import statistics as st
import sys


def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def near(xs, pct):
    return sum(abs(math.log(v)) < math.log(1 + pct / 100) for v in xs)


file_rows = {json.loads(line)["task"]: json.loads(line) for line in open(sys.argv[1]) if line.strip()}
rows, meta = {}, {}
for path in sys.argv[2:]:
    d = json.load(open(path))
    meta = {k: d.get(k) for k in ("gpu", "torch", "triton")}
    for r in d["baselines"]:
        if r.get("eager_us") or r["task"] not in rows:
            rows[r["task"]] = r
rows = {t: r for t, r in rows.items() if t in file_rows}
print(f"{len(rows)} tasks, {meta['gpu']}, torch {meta['torch']}, fp32 (TF32 off), 20 timed runs per side\n")
print("| side | measured | geomean ratio | median | min | max | within 5 % | within 10 % |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for side, ours, theirs in (("eager", "eager_us", "eager_ms"), ("torch.compile", "compile_us", "compiled_ms")):
    rs = [r[ours] / (file_rows[t][theirs] * 1e3) for t, r in rows.items() if r.get(ours)]
    print(f"| {side} | {len(rs)} | {gm(rs):.3f} | {st.median(rs):.3f} | {min(rs):.3f} | {max(rs):.3f} "
          f"| {near(rs, 5)}/{len(rs)} | {near(rs, 10)}/{len(rs)} |")  # fmt: skip
ss = [r["self_speedup_x"] for r in rows.values() if r.get("self_speedup_x")]
print(f"\nReference as candidate (noise floor), {len(ss)} tasks: geomean {gm(ss):.4f}, median {st.median(ss):.4f}, "
      f"range {min(ss):.3f}–{max(ss):.3f}, within 2 %: {near(ss, 2)}/{len(ss)}, within 1 %: {near(ss, 1)}/{len(ss)}")  # fmt: skip
methods = sorted({r.get("timing_method") or "?" for r in rows.values() if r.get("eager_us")})
print(f"Timing methods: {', '.join(methods)}")
print(
    "\nOutside 5 %:\n\n| task | eager µs (file) | ratio | torch.compile µs (file) | ratio |\n|---|---:|---:|---:|---:|"
)
for t, r in sorted(rows.items()):
    e = r.get("eager_us")
    c = r.get("compile_us")
    re_ = e / (file_rows[t]["eager_ms"] * 1e3) if e else None
    rc = c / (file_rows[t]["compiled_ms"] * 1e3) if c else None
    if any(x is not None and abs(math.log(x)) >= math.log(1.05) for x in (re_, rc)):
        print(f"| {t} | {e:.1f} ({file_rows[t]['eager_ms'] * 1e3:.1f}) | {re_:.3f} "
              f"| {c:.1f} ({file_rows[t]['compiled_ms'] * 1e3:.1f}) | {rc:.3f} |")  # fmt: skip
missing = [
    t for t in file_rows if t.startswith(("level1/", "level2/")) and not (rows.get(t) or {}).get("eager_us")
]
print(
    f"\nNot measured: {len(missing)}"
    + "".join(f"\n- {t}: {(rows.get(t) or {}).get('error_kind')}" for t in missing)
)
