#!/usr/bin/env bash
# Issue 3's GPU checks of the head-start timing protocol on a 2-GPU machine, packed into $OUT:
#   GPU 0: the timing-protocol benchmark, the adversarial corpus (must all be rejected), the hand-written good
#          candidates, and one process of baselines;
#   GPU 1: NPROC processes of baselines.
# Baselines: every level1/level2 dev task (or the TASKs given), dealt round-robin over the 1 + NPROC processes;
# each evaluates eager and torch.compile of the reference interleaved in one process (scripts/gpu_runtime_check.py
# --sections base). The processes of one GPU share a lock directory: their torch.compile warm-ups overlap, their
# timed windows do not (kernels_runtime/gpulock.py).
#   [ADV_ONLY=corpus_name] bash scripts/device_issue3_check.sh WALL_S NPROC [TASK ...]
set -u
wall=${1:-540}; nproc=${2:-3}; shift 2 || true
. scripts/device_setup.sh
R=$PWD
export HTAM_GPU_LOCK_DIR=/tmp/htam-gpu-locks
mkdir -p "$HTAM_GPU_LOCK_DIR" "$OUT/adv" "$OUT/base"
if [ $# -gt 0 ]; then tasks=("$@"); else
  mapfile -t tasks < <(cd "$KB" && ls level1/*.py level2/*.py | sort); fi
n=$(( nproc + 1 ))
cd /tmp
base() {  # base GPU PART
  local part=$2 mine=() i
  for i in "${!tasks[@]}"; do [ $(( i % n )) -eq "$part" ] && mine+=("${tasks[$i]}"); done
  CUDA_VISIBLE_DEVICES=$1 python3 "$R/scripts/gpu_runtime_check.py" --out "$OUT/base/p$part" --kernelbench "$KB" \
    --sections base --budget-s $(( wall - 25 )) --tasks "${mine[@]}" > "$OUT/base/p$part.log" 2>&1
  echo "base p$part rc=$?" >> "$OUT/base/p$part.log"
  rm -rf "$OUT/base/p$part/cache"
}
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 120 python3 "$R/benchmarks/timing_protocol.py" > "$OUT/adv/timing_protocol.log" 2>&1
  if [ -n "${ADV_ONLY:-}" ]; then  # ADV_ONLY=name: one corpus file instead of the adversarial and good sections
    python3 - "$R" "$KB" "$ADV_ONLY" "$OUT/adv" > "$OUT/adv/adv.log" 2>&1 <<'PY'
import json, shutil, sys, tempfile
from pathlib import Path
from htam_graph.kernels_runtime.parent import selfcheck
from htam_graph.kernels_runtime.parent.evaluator import SubprocessEvaluator
repo, kb, name, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
folder = Path(tempfile.mkdtemp())
shutil.copy(repo / "tests/data/adversarial" / f"{name}.py", folder)
rows = selfcheck.adversarial(SubprocessEvaluator(cache_dir=Path(tempfile.mkdtemp())), kb, folder)
(out / "adversarial_one.json").write_text(json.dumps(rows, indent=1))
print(json.dumps(rows, indent=1))
PY
  else
    python3 "$R/scripts/gpu_runtime_check.py" --out "$OUT/adv" --kernelbench "$KB" --sections adv,good \
        --budget-s $(( wall - 150 )) > "$OUT/adv/adv.log" 2>&1
  fi
  echo "adv rc=$?" >> "$OUT/adv/adv.log"
  rm -rf "$OUT/adv/cache"
) &
base 0 0 &
for p in $(seq 1 "$nproc"); do base 1 "$p" & done
wait
# At most 8 files come back from the device: the per-process baseline reports become one file.
python3 - "$OUT/base" <<'PY'
import json, sys
from pathlib import Path
base = Path(sys.argv[1])
rows, meta = [], {}
for f in sorted(base.glob("p*/runtime_gpu_check.json")):
    d = json.loads(f.read_text())
    meta = {k: d[k] for k in ("gpu", "torch", "triton")}
    rows += d.get("baselines", [])
(base / "baselines.json").write_text(json.dumps({**meta, "baselines": rows}, indent=1))
print(f"merged {len(rows)} baseline rows")
PY
rm -rf "$OUT"/base/p*/
tail -n 2 "$OUT"/adv/*.log "$OUT"/base/*.log
