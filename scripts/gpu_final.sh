#!/usr/bin/env bash
# The lead's batched H200 call: the README's main job on the GPU, then the profiler corpus recording.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KERNELPRO_CACHE=/tmp/kpcache
export OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 150 python3 scripts/prebuild_refs.py ptxbench 2>&1 | tee "$OUT/prebuild.log"
timeout ${BENCH_S:-300} python3 -m kernelpro bench ptxbench --solutions reference --arch sm_90a \
    --baselines eager --trials 2 --db "$OUT/bench.db" 2>&1 | tee "$OUT/bench.log"
timeout ${PROFILE_S:-170} bash scripts/gpu_profile_record.sh > "$OUT/profile.log" 2>&1
tail -40 "$OUT/profile.log"
