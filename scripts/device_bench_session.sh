#!/usr/bin/env bash
# One device call of the H200 bench session (2 GPUs): optional adversarial re-check on the side, then the given
# benches (resumable, each its own graph home under .devcarry/NAME), packed into $OUT.
#   bash scripts/device_bench_session.sh WALL_S ADV(0|1) NAME:POLICY:WORKERS[:TASKFILE] ...
# TASKFILE (optional, relative to the repo) lists task paths, one per line; default: level1 + level2.
set -u
wall=$1; adv=$2; shift 2
. scripts/device_setup.sh
R=$PWD
if [ "$adv" = 1 ]; then
  mkdir -p "$OUT/adv"
  (cd /tmp && CUDA_VISIBLE_DEVICES=0 python3 "$R/scripts/gpu_runtime_check.py" --out "$OUT/adv" --kernelbench "$KB" \
      --sections adv --budget-s 240 > "$OUT/adv/adv.log" 2>&1; echo "adv rc=$?" >> "$OUT/adv/adv.log") &
fi
for spec in "$@"; do
  IFS=: read -r name policy workers taskfile <<< "$spec"
  if [ -n "${taskfile:-}" ]; then mapfile -t tasks < "$R/$taskfile"; tasks=("${tasks[@]/#/$KB/}");
  else tasks=("$KB/level1" "$KB/level2"); fi
  bash scripts/device_bench.sh "$name" "$wall" -- --tasks "${tasks[@]}" --backend rules --policy "$policy" \
      --steps 6 --device cuda --workers "$workers" --task-timeout 600 --timeout 240 > "$OUT/$name.log" 2>&1 &
done
wait
tail -n 4 "$OUT"/*.log "$OUT"/adv/adv.log 2>/dev/null
