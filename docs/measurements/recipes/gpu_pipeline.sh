#!/usr/bin/env bash
# The bench pipeline's figures on one H200 (16 cores), one part per run (each under 9 minutes):
#   bash docs/measurements/recipes/gpu_pipeline.sh main        # cold cache, warm cache, one cached re-run (~4-6 min)
#   bash docs/measurements/recipes/gpu_pipeline.sh kill-build  # kill -9 in the build stage + --resume (~4 min)
#   bash docs/measurements/recipes/gpu_pipeline.sh kill-gpu    # kill -9 in the GPU stage + --resume (~4-5 min)
#   bash docs/measurements/recipes/gpu_pipeline.sh scaling     # 16 builds with 16,8,4,2 parallel (~4-6 min)
#   bash docs/measurements/recipes/gpu_pipeline.sh scaling1    # 16 builds one at a time (~5-8 min)
#   bash docs/measurements/recipes/gpu_pipeline.sh worker-time # where one evaluation's time goes (~2-3 min)
#   KB=/path/to/KernelBench bash docs/measurements/recipes/gpu_pipeline.sh kb1   # level 1, first half
#   KB=/path/to/KernelBench bash docs/measurements/recipes/gpu_pipeline.sh kb2   # level 1, second half
# Writes $OUT/pipeline_<part>.txt (the table and the evidence lines) and the part's command logs.
set -uo pipefail
part=${1:?give a part: main kill-build kill-gpu scaling scaling1 worker-time kb1 kb2}
OUT=${OUT:-/tmp/kp-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
work=$(mktemp -d /tmp/kp-pipeline-XXXX)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/pipeline_${part}.txt"
date -u +%FT%TZ | tee -a "$OUT/pipeline_${part}.txt"
if [ "$part" = worker-time ]; then
  # a tiny problem (nothing of the candidate's own) and the GEMM reference at its task's sizes
  timeout 250 python3 benchmarks/worker_time.py --device cuda --json "$OUT/worker_time_relu.json" 2>&1 \
    | tee -a "$OUT/pipeline_${part}.txt"
  timeout 280 python3 benchmarks/worker_time.py --device cuda --suite ptxbench \
    --task kernelpro/suites/ptxbench/tasks/gemm_bf16.py \
    --candidate kernelpro/suites/ptxbench/reference/gemm_bf16.py --json "$OUT/worker_time_gemm.json" 2>&1 \
    | tee -a "$OUT/pipeline_${part}.txt"
  exit 0
fi
case "$part" in
  main)       args=(--part main) ;;
  kill-build) args=(--part kill --kill-stage build) ;;
  kill-gpu)   args=(--part kill --kill-stage gpu) ;;
  scaling)    args=(--part scaling --jobs 16,8,4,2) ;;
  scaling1)   args=(--part scaling --jobs 1) ;;
  kb1)        args=(--part kernelbench --kb "${KB:?set KB to a KernelBench checkout}" --level 1 --slice 1/2) ;;
  kb2)        args=(--part kernelbench --kb "${KB:?set KB to a KernelBench checkout}" --level 1 --slice 2/2) ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
timeout 540 python3 benchmarks/pipeline_bench.py "${args[@]}" --work "$work" 2>&1 | tee -a "$OUT/pipeline_${part}.txt"
# the command logs of this part (the bench tables, resume lines), at most 6 files
ls "$work"/*.log 2>/dev/null | head -6 | while read -r f; do cp "$f" "$OUT/${part}_$(basename "$f")"; done
