#!/usr/bin/env bash
# LLM-free search on a GEMM task on the GPU: MCTS and/or greedy with the same node budget, each followed by
# a side-by-side comparison (kernelpro compare) of its start, its best node and the template's tuned defaults.
# Trees (every node: params, verdict, timings) and comparisons land in $OUT/search.db; tables are printed.
#
#   bash docs/measurements/recipes/gpu_search.sh                                  # 8 nodes each, template defaults as the start
#   TASK=ptxbench/gemm_bf16_headline START=BM=128,BN=128,STAGES=3,CLUSTER_M=1,GROUP_M=1 \
#     NODES=13 SEARCHES="mcts" CMP_ROUNDS=3 bash docs/measurements/recipes/gpu_search.sh
#
# Builds overlap (--parallel: candidates are compiled concurrently into the worker's extension cache);
# timing stays serial, one isolated worker process per candidate. The start and the template defaults are
# built before the search, in parallel, into the same per-candidate cache the worker uses.
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/runs/gpu_search}"
NODES="${NODES:-8}"
PAR="${PAR:-4}"
BUDGET_S="${BUDGET_S:-300}"
FEEDBACK="${FEEDBACK:-none}"        # 'advice' adds an ncu profile per working node (slower, guides moves)
SIZES="${SIZES:-all}"
TASK="${TASK:-ptxbench/gemm_bf16}"  # or ptxbench/gemm_bf16_headline (A @ B.T, PTXBench sizes)
START="${START:-}"                  # K=V,... changes to the template's PARAMS for the start node
SEARCHES="${SEARCHES:-mcts greedy}"
CMP_ROUNDS="${CMP_ROUNDS:-3}"       # 0: no comparison
SEED="${SEED:-0}"
mkdir -p "$OUT"
DB="$OUT/search.db"
export KERNELPRO_CACHE="${KERNELPRO_CACHE:-/tmp/kernelpro_cache}"   # builds stay off $OUT (large .so files)
export MAX_JOBS="${MAX_JOBS:-4}"
ROOTS=/tmp/kp_roots
mkdir -p "$ROOTS"

python3 -m kernelpro doctor | tail -n 12 || true
# PRE_CMD (e.g. GPU tests) runs beside the CPU-only prebuild and is waited for before anything is timed.
if [ -n "${PRE_CMD:-}" ]; then bash -c "$PRE_CMD" & pre_pid=$!; fi
# The start node and the template defaults, written exactly as `optimize` makes them, built in parallel.
python3 - "$TASK" "$START" "$ROOTS" <<'PY'
import sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from kernelpro.agent.evaluator import precompile
from kernelpro.agent.policy_param import ParamPolicy, load_template
from kernelpro.agent.optimize import parse_start
from kernelpro.results.store import source_hash
from kernelpro.suites.task import find_task
from kernelpro.harness.worker import extension_dir

task, start, roots = find_task(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
tpl = load_template(task)
files = {"defaults": tpl.make_source(tpl.params),
         "start": ParamPolicy(tpl, start=parse_start(start)).root(task).source}
def build(item):
    name, src = item
    p = roots / f"{name}.py"
    p.write_text(src)
    t0 = time.monotonic()
    err = precompile(p, ext_dir=extension_dir(source_hash(src)))
    return name, time.monotonic() - t0, err
with ThreadPoolExecutor(2) as ex:
    for name, s, err in ex.map(build, files.items()):
        print(f"prebuild {name}: {s:.0f}s {'ok' if err is None else 'FAILED ' + err[-300:]}", flush=True)
PY
if [ -n "${pre_pid:-}" ]; then wait "$pre_pid" || echo "PRE_CMD failed (rc $?)"; fi

for s in $SEARCHES; do
  echo "=== $s: $NODES nodes, parallel $PAR, cap ${BUDGET_S}s, start '${START:-template defaults}' ==="
  t0=$(date +%s)
  python3 -m kernelpro optimize "$TASK" --db "$DB" --policy param --search "$s" ${START:+--start "$START"} \
      --budget-nodes "$NODES" --budget-seconds "$BUDGET_S" --parallel "$PAR" --evaluator harness --seed "$SEED" \
      --feedback "$FEEDBACK" --sizes "$SIZES" --quiet --workdir "/tmp/kp_search_$s" 2>&1 | tail -n 25
  echo "$s wall: $(( $(date +%s) - t0 )) s"
  if [ "$CMP_ROUNDS" -gt 0 ]; then
    best=$(python3 -c "
import sys
from kernelpro.results.store import Store
st = Store(sys.argv[1]); r = st.runs('optimize')[-1]
ok = [n for n in st.nodes(r['id']) if (n['payload'].get('outcome') or {}).get('speedup')]
print(max(ok, key=lambda n: n['payload']['outcome']['speedup'])['node_key'])" "$DB")
    echo "=== compare: start n0, best $best, template defaults; $CMP_ROUNDS rounds ==="
    t0=$(date +%s)
    COLUMNS=160 python3 -m kernelpro compare "$TASK" "/tmp/kp_search_$s/n0.py" "/tmp/kp_search_$s/$best.py" \
        "$ROOTS/defaults.py" --labels "start,best_$best,defaults" --rounds "$CMP_ROUNDS" --db "$DB" \
        --json "$OUT/compare_$s.json" 2>&1 | tail -n 20 || true
    echo "compare wall: $(( $(date +%s) - t0 )) s"
  fi
done

python3 - "$DB" <<'PY'
import sys
from kernelpro.results.store import Store

st = Store(sys.argv[1])
runs = [r for r in st.runs("optimize") if r["config"].get("policy") == "param"]
print("\n| search | run | nodes | ok | failed | start speedup | best speedup | best/start | best node | best params |")
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
    bp = best["payload"]["info"].get("params", {}) if best else {}
    print(f"| {r['config'].get('search')} | {r['id']} | {len(nodes)} | {len(ok)} | {len(nodes) - len(ok)} | "
          f"{s0 and f'{s0:.3f}x'} | {sb and f'{sb:.3f}x'} | {f'{sb / s0:.3f}' if s0 and sb else '-'} | "
          f"{best['node_key'] if best else '-'} | "
          f"{' '.join(f'{k}={v}' for k, v in bp.items() if not k.endswith('_REGS'))} |")
for r in runs:
    print(f"\n{r['config'].get('search')} tree (run {r['id']}, status {r['status']}):")
    for n in st.nodes(r["id"]):
        o = n["payload"].get("outcome") or {}
        verdict = f"{o['speedup']:.3f}x" if o.get("ok") and o.get("speedup") else f"{o.get('stage')}: {str(o.get('reason'))[:70]}"
        t = o.get("timings", {})
        ms = t.get("candidate_median_ms")
        print(f"  {n['node_key']:>4} <- {str(n['parent_key']):>4}  d{n['depth']} v{n['visits']} {n['status']:<8} "
              f"{verdict:<12} {f'{ms:.3f} ms' if ms else '':>10}  {n['payload']['what'][:90]}")
PY
echo "trees stored in $DB"
