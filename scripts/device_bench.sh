#!/usr/bin/env bash
# Run (or resume) a bench on the GPU machine and pack what it wrote into $OUT (which returns at most 8 files).
#   bash scripts/device_bench.sh NAME WALL_S -- <htam-graph bench arguments without --out>
# The bench folder and the embedded graph's home live in .devcarry/NAME. To resume, put the returned NAME.tgz at
# .devcarry/NAME.tgz and carry that file (packed, it stays under the 64 MiB carry limit where the folder and the
# wheels may not): it is unpacked first. results.jsonl makes the bench resumable, the graph home keeps the memory
# it learned.
set -u
name=$1; wall_s=$2; shift 3
[ -d /tmp/site/htam_graph ] || . scripts/device_setup.sh
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH KB=$PWD/tests/data/kernelbench PYTHONUNBUFFERED=1
R=$PWD
export HTAM_HOME=$R/.devcarry/$name/home
mkdir -p $R/.devcarry/$name
if [ -f $R/.devcarry/$name.tgz ]; then tar xzf $R/.devcarry/$name.tgz -C $R/.devcarry; fi
cd /tmp  # the checkout's own htam_graph/ folder must not shadow the installed package in worker processes
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
start=$(date +%s)
timeout --signal=INT --kill-after=30 "$wall_s" htam-graph bench "$@" --out $R/.devcarry/$name/bench 2> $R/.devcarry/$name/bench.err
echo "bench rc=$? after $(( $(date +%s) - start )) s"
htam-graph db stop >/dev/null 2>&1
tail -n 5 $R/.devcarry/$name/bench.err
python3 - "$name" "$R" <<'EOF'
import json, pathlib, sys
results = pathlib.Path(f"{sys.argv[2]}/.devcarry/{sys.argv[1]}/bench/results.jsonl")
rows = [json.loads(l) for l in results.read_text().splitlines() if l.strip()] if results.exists() else []
ran = [r for r in rows if r.get("trajectory")]
print(f"{len(rows)} results, {len(ran)} with steps")
for r in ran:
    print(f"{r['task']:70s} {r['policy']:8s} {r['status']:7s} eager {r.get('best_speedup_eager_x') or 0:7.3f}x "
          f"compile {r.get('best_speedup_compile_x') or 0:7.3f}x ref={r['best_is_reference']}")
EOF
# Triton's kernel cache stays behind: it is rebuilt on demand and would push the next call's carry past 64 MiB.
tar czf "$OUT/$name.tgz" -C $R/.devcarry --exclude=home/falkordb.sock --exclude=home/cache/triton "$name"
