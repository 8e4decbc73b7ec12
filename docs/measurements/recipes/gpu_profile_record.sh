#!/usr/bin/env bash
# Record the profiler corpus with ncu on the GPU and check each tool against its plant.
# Usage (GPU machine, repo root): bash docs/measurements/recipes/gpu_profile_record.sh   -> $OUT/ncu_recordings.tar.gz
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export OUT=${OUT:-$PWD/ncu_out}
mkdir -p "$OUT"
python3 docs/measurements/recipes/gpu_profile_record.py 2>&1 | tee "$OUT/record.log"
