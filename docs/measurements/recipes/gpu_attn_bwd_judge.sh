#!/usr/bin/env bash
# The four attention-backward references through the judge on one Hopper GPU, then a profile and a
# parameter search of the headline one. STEPS picks the parts (default "check bench profile search"):
#   check   GPU tests of the tasks' tolerance and of the vendor baseline's flash fallback
#   bench   build (parallel) + `kernelpro bench ptxbench --solutions reference` on the four tasks
#   profile `kernelpro profile` (Nsight Compute, roofline-first advice) of the headline reference
#   search  `kernelpro optimize --policy param` (greedy, LLM-free, advice-steered) over the backward template,
#           from its generic start (two stages, scalar dQ atomics)
#   export PYTHONPATH=$PWD; bash docs/measurements/recipes/gpu_attn_bwd_judge.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 KERNELPRO_CACHE=${KERNELPRO_CACHE:-/tmp/kpcache}
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
STEPS=${STEPS:-check bench profile search}
HEADLINE=attn_bwd_headline_bf16
for step in $STEPS; do
  echo "=== $step $(date -u +%FT%TZ)"
  case $step in
    check) timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_attn_bwd_tolerance.py 2>&1 | tail -3 ;;
    bench) OUT=$OUT BUDGET_S=${BENCH_S:-330} \
           TASKS="$HEADLINE attn_bwd_causal_headline_bf16 attn_bwd_bf16_d128 attn_bwd_causal_bf16_d128" \
           bash docs/measurements/recipes/gpu_new_refs.sh ;;
    profile) timeout 200 python3 -m kernelpro profile "kernelpro/suites/ptxbench/reference/$HEADLINE.py" \
             --task "ptxbench/$HEADLINE" --calls 1 --max-kernels 4 --timeout 180 --db "$OUT/profile.db" \
             2>&1 | tail -40 ;;
    search) OUT=$OUT/search TASK="ptxbench/$HEADLINE" SEARCHES=greedy NODES=${NODES:-3} CMP_ROUNDS=0 FEEDBACK=${FEEDBACK:-advice} \
            BUDGET_S=${SEARCH_S:-220} START=BWD_STAGES=2,BWD_DQ_RED_V2=0 bash docs/measurements/recipes/gpu_search.sh ;;
    *) echo "unknown step $step (check, bench, profile, search)"; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
