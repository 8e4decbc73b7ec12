#!/usr/bin/env bash
# One batched H200 call. Phase 1 runs the profiler-corpus recording beside the (CPU-bound)
# prebuild of the reference extensions; phase 2 runs the README's main job alone on the GPU, so
# nothing else touches the card while it times. BUDGET_S bounds the whole script.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KERNELPRO_CACHE=/tmp/kpcache
export OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
end=$(( $(date +%s) + ${BUDGET_S:-540} ))
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/gpu.txt"
( KP_BUDGET_S=${PROFILE_S:-170} timeout $(( ${PROFILE_S:-170} + 40 )) bash docs/measurements/recipes/gpu_profile_record.sh > "$OUT/profile.log" 2>&1 ) &
prof=$!
timeout 150 python3 -m kernelpro.cli build ptxbench --solutions reference --db "$OUT/prebuild.db" 2>&1 | tee "$OUT/prebuild.log"
wait $prof
tail -25 "$OUT/profile.log"
left=$(( end - $(date +%s) - 5 ))
timeout "$left" python3 -m kernelpro bench ptxbench --solutions reference --arch sm_90a \
    --baselines eager --trials 2 --db "$OUT/bench.db" 2>&1 | tee "$OUT/bench.log"
