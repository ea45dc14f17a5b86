#!/usr/bin/env bash
# The rules library's GPU tests (tests/gpu, marker gpu) and the adversarial corpus, split over two GPUs, packed
# into $OUT/gpu_tests.tgz; RULES_GPU lines and pytest summaries are echoed.
#   bash scripts/device_gpu_tests.sh WALL_S "GPU0 FILES" "GPU1 FILES" [ADV(0|1)]
set -u
wall=$1; files0=$2; files1=$3; adv=${4:-1}
. scripts/device_setup.sh
R=$PWD
L=/tmp/gpulogs; mkdir -p "$L"
cd /tmp
lane() {
  local gpu=$1; shift
  export CUDA_VISIBLE_DEVICES=$gpu
  if [ "$gpu" = 0 ] && [ "$adv" = 1 ]; then
    python3 "$R/scripts/gpu_runtime_check.py" --out "$L/adv" --kernelbench "$KB" --sections adv \
        --budget-s 200 > "$L/adv.log" 2>&1; echo "adv rc=$?" >> "$L/adv.log"
  fi
  for f in "$@"; do
    left=$(( wall - SECONDS - 15 ))
    [ $left -lt 20 ] && { echo "$f: not run (time)" > "$L/$f.log"; continue; }
    timeout $left python3 -P -m pytest -q -s -m gpu -o addopts="--import-mode=importlib" -p no:cacheprovider \
        --rootdir "$R" -c "$R/pyproject.toml" "$R/tests/gpu/$f" > "$L/$f.log" 2>&1
    echo "rc=$?" >> "$L/$f.log"
  done
}
lane 0 $files0 &
lane 1 $files1 &
wait
tar czf "$OUT/gpu_tests.tgz" --exclude=cache -C /tmp gpulogs; cd "$L"
grep -H "RULES_GPU\|RULES_TF32\|passed\|failed\|rc=\|not run" *.log | cut -c1-220 | tail -n 120
