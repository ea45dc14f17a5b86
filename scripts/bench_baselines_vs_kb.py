"""Harness-measured eager / torch.compile reference times of a loop bench against h200_baselines.jsonl (do_bench).

Usage: python scripts/bench_baselines_vs_kb.py RESULTS.jsonl H200_BASELINES.jsonl [OUT.json]
Per task: the median over the loop's steps of the reference times each evaluation measured, divided by the
do_bench time of the same task. Prints geomean/median ratios overall and by eager-time bucket."""

import json
import math
import statistics as st
import sys

B = {json.loads(line)["task"][:-3]: json.loads(line) for line in open(sys.argv[2])}
rows = [json.loads(line) for line in open(sys.argv[1])]


def gm(x):
    return math.exp(sum(map(math.log, x)) / len(x))


out = []
for r in rows:
    t = r["task"].split("kernelbench/")[-1]
    b = B.get(t)
    if not b or not r["ref_eager_us"]:
        continue
    es = [
        s["eval"]["ref_eager_us"] for s in r["trajectory"] if (s.get("eval") or {}).get("ref_eager_us")
    ] or [r["ref_eager_us"]]
    cs = [
        s["eval"]["ref_compile_us"] for s in r["trajectory"] if (s.get("eval") or {}).get("ref_compile_us")
    ] or ([r["ref_compile_us"]] if r["ref_compile_us"] else [])
    e = st.median(es)
    c = st.median(cs) if cs else None
    out.append(
        dict(
            task=t,
            kb_eager=b["eager_ms"] * 1000,
            kb_comp=b["compiled_ms"] * 1000,
            eager=e,
            comp=c,
            eager_ratio=e / (b["eager_ms"] * 1000),
            comp_ratio=c / (b["compiled_ms"] * 1000) if c else None,
            n_e=len(es),
            n_c=len(cs),
        )
    )
re_ = [o["eager_ratio"] for o in out]
rc_ = [o["comp_ratio"] for o in out if o["comp_ratio"]]
print(
    f"tasks {len(out)} (compile {len(rc_)}): eager ratio harness/do_bench geomean {gm(re_):.3f} median {st.median(re_):.3f}; compile ratio geomean {gm(rc_):.3f} median {st.median(rc_):.3f}"
)
for lo, hi in ((0, 100), (100, 1000), (1000, 1e9)):
    sel = [o for o in out if lo <= o["kb_eager"] < hi]
    if sel:
        print(
            f"eager {lo}-{hi} us: {len(sel)} tasks, eager ratio {gm([o['eager_ratio'] for o in sel]):.3f}, compile ratio {gm([o['comp_ratio'] for o in sel if o['comp_ratio']]):.3f}"
        )
so = [o["eager"] / o["comp"] for o in out if o["comp"]]
stt = [o["kb_eager"] / o["kb_comp"] for o in out if o["comp"]]
print(f"torch.compile speedup over eager: harness geomean {gm(so):.3f}, h200_baselines.jsonl {gm(stt):.3f}")
for o in sorted(out, key=lambda o: -(o["comp_ratio"] or 0))[:10]:
    print(
        f"  {o['task'][:55]:55s} kb_e {o['kb_eager']:9.1f} e_ratio {o['eager_ratio']:.2f} c_ratio {o['comp_ratio'] or 0:.2f}"
    )
if len(sys.argv) > 3:
    json.dump(out, open(sys.argv[3], "w"), indent=1)
