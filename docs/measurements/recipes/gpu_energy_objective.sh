#!/usr/bin/env bash
# The energy objective on one H200 (about 5 minutes per call; node budget and rounds are sized for it):
# `kernelpro optimize --objective energy` on the headline GEMM template (LLM-free parameter policy,
# greedy, a small node budget), then --confirm:
# start (the tuned defaults) and best side by side over several rounds in one worker, energy per call
# and telemetry in every round, and the HTML report with the power / clock traces.
#   bash docs/measurements/recipes/gpu_energy_objective.sh                      # the headline GEMM
#   TASK=ptxbench/rmsnorm_bf16 NODES=8 OUT=$OUT/rms bash docs/measurements/recipes/gpu_energy_objective.sh
#       # the memory-bound template (ring depth, bytes per stage, resident CTAs per SM); a second call
# Target: best uses >= 10% fewer J/call than the start at <= 2% speed loss, in the compare rounds
# (the 'energy' columns of the comparison), not in the search's own best-of-many figures.
# Outputs under $OUT: energy.db, energy_report.html, confirm.json.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/runs/gpu_energy}"
TASK="${TASK:-ptxbench/gemm_bf16_headline}"
NODES="${NODES:-5}"
ROUNDS="${ROUNDS:-3}"
mkdir -p "$OUT"
export KERNELPRO_CACHE="${KERNELPRO_CACHE:-/tmp/kernelpro_cache}" MAX_JOBS="${MAX_JOBS:-4}"
DB="$OUT/energy.db"
echo "=== optimize $TASK --objective energy: $NODES nodes, then $ROUNDS confirm rounds ==="
COLUMNS=160 timeout 280 python3 -m kernelpro optimize "$TASK" --db "$DB" --policy param --search greedy \
    --objective energy --baseline vendor --budget-nodes "$NODES" --budget-seconds 120 --max-slowdown 0.02 --parallel 4 \
    --evaluator harness --feedback none --sizes shown --confirm "$ROUNDS" --quiet --workdir /tmp/kp_energy \
    2>&1 | tail -n 40
python3 - "$DB" "$OUT" <<'PY'
import json, sys
from kernelpro.report.html import write_report
from kernelpro.results.comparison import load_comparison
from kernelpro.results.store import Store
st = Store(sys.argv[1])
opt = st.runs("optimize")
cmp = [r for r in st.runs("compare") if r["config"].get("optimize_run") == (opt[-1]["id"] if opt else None)]
ids = [r["id"] for r in opt[-1:] + cmp[-1:]]
if cmp:
    c = load_comparison(st, cmp[-1]["id"])
    json.dump(c.to_dict(), open(f"{sys.argv[2]}/confirm.json", "w"), indent=1, default=str)
    for s in c.summary():
        print(s)
if ids:
    print("report:", write_report(st, ids, f"{sys.argv[2]}/energy_report.html"))
PY
