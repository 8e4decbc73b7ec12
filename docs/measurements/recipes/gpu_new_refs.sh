#!/usr/bin/env bash
# The fp8, MoE and attention-backward references through the judge on one Hopper GPU, in one call:
# a parallel build of their extensions into the shared cache (the CPU stage), then `kernelpro bench`
# on the same tasks (correctness on every shown and held-out size, the anti-gaming checks, static and
# executed feature evidence, timing against every baseline the task names, NVML telemetry).
#   export PYTHONPATH=$PWD; bash docs/measurements/recipes/gpu_new_refs.sh
# TASKS overrides the task list (space-separated); BUDGET_S bounds the whole script (default 560).
set -uo pipefail
export PYTHONUNBUFFERED=1 KERNELPRO_CACHE=${KERNELPRO_CACHE:-/tmp/kpcache}
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
TASKS=${TASKS:-grouped_gemm_moe_bf16 gemm_fp8_e4m3 attn_bwd_headline_bf16 attn_bwd_causal_headline_bf16}
end=$(( $(date +%s) + ${BUDGET_S:-560} ))
T=(); for t in $TASKS; do T+=(--task "$t"); done
{ date -u +%FT%TZ; git log --oneline -1 2>/dev/null; } | tee "$OUT/start.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
    --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
s=$(date +%s)
# Builds are content-addressed in $KERNELPRO_CACHE: the bench below finds them and never rebuilds.
timeout 240 python3 -m kernelpro build ptxbench --solutions reference --arch sm_90a "${T[@]}" \
    --build-jobs "$(nproc)" --db "$OUT/bench.db" 2>&1 | tail -30 | tee "$OUT/build.log"
echo "build stage: $(( $(date +%s) - s )) s wall"
left=$(( end - $(date +%s) - 10 ))
timeout "$left" python3 -m kernelpro bench ptxbench --solutions reference --arch sm_90a "${T[@]}" \
    --timeout 150 --db "$OUT/bench.db" > "$OUT/bench.log" 2>&1
echo "bench rc $? after $(( $(date +%s) - s )) s"
tail -80 "$OUT/bench.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv | tee -a "$OUT/gpu.txt"
