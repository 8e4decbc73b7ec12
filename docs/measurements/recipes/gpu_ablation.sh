#!/usr/bin/env bash
# A slice of the search ablation on the GPU (kernelpro ablate): three task families (GEMM, attention
# forward, TMA softmax row pipeline) x 5 seeds x the arms below, a small node budget from each template's
# GENERIC_START, start vs best confirmed side by side. Resumable: every finished (arm, task, seed) cell is a
# row of the study's store, so the same command in the next GPU run runs only the cells still missing
# and prints the table over everything recorded so far.
#
#   bash docs/measurements/recipes/gpu_ablation.sh                    # one slice, at most ~9 minutes
#   ARMS=advice-mcts,none-mcts,advice-greedy,none-greedy,raw-mcts NODES=6 bash .../gpu_ablation.sh
#
# State: $STATE/ablation.db (and the extension cache beside it) under runs/, which git ignores. On a
# warm device machine it is still there at the next call; the script also copies the store to $OUT, so a
# fresh machine can be handed it back (carry runs/ablation, after copying $OUT/ablation.db there).
#
# How long (an estimate; this recipe has not been run yet): the recorded LLM-free GEMM searches took
# 136-141 s for 8 nodes at --parallel 4 on an H200 (docs/measurements/search_h200.md), ~17 s a node with
# no profiling. An advice or raw node adds an Nsight Compute pass, assumed here at ~30 s (unmeasured for
# search candidates), and each cell adds two confirm rounds (~30 s). With the defaults (3 families x 5
# seeds x 4 arms = 60 cells of 4 nodes) that is ~100 s for a none cell and ~220 s for an advice cell:
# ~9600 s, about 2.7 hours, i.e. ~20 calls of this script. The table's GPU-min column after the first
# call gives the measured per-cell figure to replace this estimate with.
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
STATE="${STATE:-$PWD/runs/ablation}"
OUT="${OUT:-$STATE/out}"
TASKS="${TASKS:-ptxbench/gemm_bf16 ptxbench/attn_fwd_bf16_d128 ptxbench/softmax_rows_bf16}"
ARMS="${ARMS:-advice-mcts,advice-greedy,none-mcts,none-greedy}"
SEEDS="${SEEDS:-0-4}"
NODES="${NODES:-4}"
CONFIRM="${CONFIRM:-2}"
MINUTES="${MINUTES:-5}"            # no new cell after this; the running cell finishes (an advice cell ~4 min)
PAR="${PAR:-4}"                    # builds of a batch overlap; timing stays serial
SIZES="${SIZES:-default}"          # correctness at the default size per node; --confirm rounds judge again
mkdir -p "$STATE" "$OUT"
export KERNELPRO_CACHE="${KERNELPRO_CACHE:-$STATE/cache}"
export MAX_JOBS="${MAX_JOBS:-8}"
# a consistent copy of a WAL-mode store (sqlite's backup, not cp)
backup() { python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" "$1" "$2"; }
if [ -f "$OUT/ablation.db" ] && [ ! -f "$STATE/ablation.db" ]; then backup "$OUT/ablation.db" "$STATE/ablation.db"; fi

python3 -m kernelpro doctor | tail -n 6 || true
t0=$(date +%s)
# shellcheck disable=SC2086 # TASKS is a list
python3 -m kernelpro ablate $TASKS --arms "$ARMS" --seeds "$SEEDS" --budget-nodes "$NODES" --confirm "$CONFIRM" \
    --max-minutes "$MINUTES" --parallel "$PAR" --sizes "$SIZES" --db "$STATE/ablation.db" --study gpu_slice \
    2>&1 | tee "$OUT/ablate_$(date +%H%M%S).log"
echo "wall: $(( $(date +%s) - t0 )) s"
backup "$STATE/ablation.db" "$OUT/ablation.db"
