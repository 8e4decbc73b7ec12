#!/usr/bin/env bash
# The lead's batched H200 call: the README's main job on the GPU, then the profiler corpus recording.
# BUDGET_S bounds the whole script; the profiler recording gets what the bench leaves.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KERNELPRO_CACHE=/tmp/kpcache
export OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
end=$(( $(date +%s) + ${BUDGET_S:-540} ))
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout 120 python3 scripts/prebuild_refs.py ptxbench 2>&1 | tee "$OUT/prebuild.log"
timeout ${BENCH_S:-270} python3 -m kernelpro bench ptxbench --solutions reference --arch sm_90a \
    --baselines eager --trials 2 --db "$OUT/bench.db" 2>&1 | tee "$OUT/bench.log"
left=$(( end - $(date +%s) ))
if [ "$left" -gt 60 ]; then
    timeout "$left" bash scripts/gpu_profile_record.sh > "$OUT/profile.log" 2>&1
    tail -30 "$OUT/profile.log"
else
    echo "profile recording skipped: ${left}s left"
fi
