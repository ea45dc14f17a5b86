#!/usr/bin/env bash
# One round of an LLM study on the GPU machine: the bench with `--backend files` evaluates every reply saved
# since the last round, writes the next requests, and stops each run at its pending step; the bench folder, the
# graph home (the memory) and the replay bank live in .devcarry/NAME and come back in $OUT/NAME.tgz (carry
# `.devcarry` in the next call to continue).
#   bash scripts/device_llm_round.sh NAME WALL_S TASKFILE STEPS [POLICY]   (POLICY: htam, flat or random)
set -u
name=$1; wall_s=$2; taskfile=$3; steps=$4; policy=${5:-htam}
R=$PWD
mapfile -t tasks < <(sed "s#^#$R/#" "$taskfile")
bash scripts/device_bench.sh "$name" "$wall_s" -- --tasks "${tasks[@]}" --backend files --policy "$policy" \
    --steps "$steps" --device cuda --workers "${#tasks[@]}" --record "$R/.devcarry/$name/replay_bank.jsonl"
echo "awaiting replies:"; find "$R/.devcarry/$name/bench" -name 'step_*.request.json' | sed "s#$R/##"
