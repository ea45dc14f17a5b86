#!/usr/bin/env bash
# Issue 3's GPU checks on a 2-GPU machine, in parallel, packed into $OUT (at most 8 files come back):
#   GPU 0: adversarial corpus (must all be rejected), then the runtime cost benchmark (Triton and CUDA, cold and
#          warm), then the norm/reduction rules GPU tests;
#   GPU 1: eager + torch.compile baselines vs h200_baselines.jsonl for as many tasks as WALL_S allows.
#   bash scripts/device_runtime_check.sh WALL_S [TASK ...]
set -u
wall=${1:-300}; shift || true
. scripts/device_setup.sh
R=$PWD
mkdir -p "$OUT/rt_adv" "$OUT/rt_base"
cd /tmp
(
  export CUDA_VISIBLE_DEVICES=0
  python3 "$R/scripts/gpu_runtime_check.py" --out "$OUT/rt_adv" --kernelbench "$KB" --sections adv --budget-s 150 \
      > "$OUT/rt_adv/adv.log" 2>&1
  echo "adv rc=$?" >> "$OUT/rt_adv/adv.log"
  timeout 200 python3 "$R/benchmarks/runtime_cost.py" --device cuda --kernelbench "$KB" > "$OUT/rt_adv/runtime_cost.log" 2>&1
  echo "runtime_cost rc=$?" >> "$OUT/rt_adv/runtime_cost.log"
  left=$(( wall - SECONDS - 10 ))
  [ $left -gt 30 ] && timeout $left python3 -P -m pytest -q -m gpu -o addopts="--import-mode=importlib" --rootdir "$R" \
      -c "$R/pyproject.toml" "$R/tests/gpu/test_rules_library_norm_gpu.py" -x -p no:cacheprovider \
      > "$OUT/rt_adv/norm_gpu.log" 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  python3 "$R/scripts/gpu_runtime_check.py" --out "$OUT/rt_base" --kernelbench "$KB" --sections base \
      --budget-s $(( wall - 20 )) ${1:+--tasks "$@"} > "$OUT/rt_base/base.log" 2>&1
  echo "base rc=$?" >> "$OUT/rt_base/base.log"
) &
wait
tail -n 3 "$OUT"/rt_adv/*.log "$OUT"/rt_base/base.log
