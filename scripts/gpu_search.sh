#!/usr/bin/env bash
# MCTS vs greedy with the LLM-free parameter policy on a GEMM task (default ptxbench/gemm_bf16), same node budget, on the GPU.
# Both trees (every node: params, verdict, timings) land in $OUT/search.db; a comparison table is printed.
#
#   bash scripts/gpu_search.sh                     # defaults: 8 nodes each, 4 builds in parallel, 200 s cap each
#   NODES=10 PAR=4 BUDGET_S=240 bash scripts/gpu_search.sh
#
# Builds overlap (--parallel: candidates are compiled concurrently into the worker's extension cache);
# timing stays serial, one isolated worker process per candidate. The two searches share the template
# root and any identical candidate, whose builds are cache hits the second time.
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/runs/gpu_search}"
NODES="${NODES:-8}"
PAR="${PAR:-4}"
BUDGET_S="${BUDGET_S:-200}"
FEEDBACK="${FEEDBACK:-none}"        # 'advice' adds an ncu profile per working node (slower, guides moves)
SIZES="${SIZES:-all}"
TASK="${TASK:-ptxbench/gemm_bf16}"      # or ptxbench/gemm_bf16_headline (A @ B.T, PTXBench sizes)
mkdir -p "$OUT"
DB="$OUT/search.db"
export KERNELPRO_CACHE="${KERNELPRO_CACHE:-/tmp/kernelpro_cache}"   # builds stay off $OUT (large .so files)
export MAX_JOBS="${MAX_JOBS:-4}"

python3 -m kernelpro doctor | tail -n 12 || true
for s in mcts greedy; do
  echo "=== $s: $NODES nodes, parallel $PAR, cap ${BUDGET_S}s ==="
  t0=$(date +%s)
  python3 -m kernelpro optimize "$TASK" --db "$DB" --policy param --search "$s" \
      --budget-nodes "$NODES" --budget-seconds "$BUDGET_S" --parallel "$PAR" --evaluator harness \
      --feedback "$FEEDBACK" --sizes "$SIZES" --quiet --workdir "/tmp/kp_search_$s" 2>&1 | tail -n 25
  echo "$s wall: $(( $(date +%s) - t0 )) s"
done

python3 - "$DB" <<'PY'
import sys
from kernelpro.store import Store

st = Store(sys.argv[1])
runs = [r for r in st.runs("optimize") if r["config"].get("policy") == "param"][-2:]
print("\n| search | run | nodes | ok | failed | start speedup | best speedup | best/start | best node | best change |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    nodes = st.nodes(r["id"])
    outs = {n["node_key"]: n["payload"].get("outcome") or {} for n in nodes}
    ok = [n for n in nodes if outs[n["node_key"]].get("ok")]
    timed = [n for n in ok if outs[n["node_key"]].get("speedup")]
    root = outs.get("n0", {})
    best = max(timed, key=lambda n: outs[n["node_key"]]["speedup"]) if timed else None
    s0 = root.get("speedup")
    sb = outs[best["node_key"]]["speedup"] if best else None
    print(f"| {r['config'].get('search')} | {r['id']} | {len(nodes)} | {len(ok)} | {len(nodes) - len(ok)} | "
          f"{s0 and f'{s0:.3f}x'} | {sb and f'{sb:.3f}x'} | {f'{sb / s0:.3f}' if s0 and sb else '-'} | "
          f"{best['node_key'] if best else '-'} | {best['payload']['what'] if best else '-'} |")
for r in runs:
    print(f"\n{r['config'].get('search')} tree (run {r['id']}, status {r['status']}):")
    for n in st.nodes(r["id"]):
        o = n["payload"].get("outcome") or {}
        verdict = f"{o['speedup']:.3f}x" if o.get("ok") and o.get("speedup") else f"{o.get('stage')}: {str(o.get('reason'))[:70]}"
        t = o.get("timings", {})
        ms = t.get("candidate_median_ms")
        print(f"  {n['node_key']:>4} <- {str(n['parent_key']):>4}  d{n['depth']} v{n['visits']} {n['status']:<8} "
              f"{verdict:<12} {f'{ms:.3f} ms' if ms else '':>10}  {n['payload']['what'][:80]}")
PY
echo "trees stored in $DB"
