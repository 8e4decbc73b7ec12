#!/usr/bin/env bash
# Measurement fidelity on one H200 (about 4.5 minutes): the harness timer under both protocols with
# telemetry, isolated vs do_bench, repeatability (gpu_fidelity.py), then the same GEMM through
# `kernelpro bench` itself (both protocols, telemetry and energy stored per evaluation) and its report.
#   bash docs/measurements/recipes/gpu_fidelity.sh
# Outputs under $OUT: fidelity.json, bench.json, fidelity_report.html, fidelity.db.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/runs/gpu_fidelity}"
mkdir -p "$OUT"
export OUT KERNELPRO_CACHE="${KERNELPRO_CACHE:-/tmp/kernelpro_cache}"
DB="$OUT/fidelity.db"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader || true
timeout 210 python3 docs/measurements/recipes/gpu_fidelity.py 2>&1 | tail -n 45
echo "=== kernelpro bench ptxbench/gemm_bf16 (headline isolated, interleaved beside it) ==="
COLUMNS=160 timeout 150 python3 -m kernelpro bench ptxbench --task gemm_bf16 --arch sm_90a --baselines vendor \
    --executed off --sizes shown --trials 1 --db "$DB" 2>&1 | tail -n 14
python3 - "$DB" "$OUT" <<'PY'
import json, sys
from kernelpro.results.fidelity import fidelity_lines
from kernelpro.report.html import write_report
from kernelpro.results.store import Store
st = Store(sys.argv[1])
runs = st.runs("bench")
if runs:
    rid = runs[-1]["id"]
    recs = [e["payload"] for c in st.candidates(rid) for e in st.results("evaluations", c["id"])]
    json.dump(recs, open(f"{sys.argv[2]}/bench.json", "w"), indent=1, default=str)
    for r in recs:
        for ln in fidelity_lines(r):
            print(ln[:200])
    print("report:", write_report(st, [rid], f"{sys.argv[2]}/fidelity_report.html"))
PY
