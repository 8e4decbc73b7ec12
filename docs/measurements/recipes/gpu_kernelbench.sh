#!/usr/bin/env bash
# KernelBench level-1 sanity on the GPU: every problem's own Model as its solution (`ModelNew = Model`),
# read through the suite loader, evaluated by the harness, reported as one HTML file.
#
# Usage (repo root on the GPU machine, a KernelBench checkout or a few of its level-1 files carried in
# the ignored folder .kb/ as .kb/KernelBench/level1/*.py or .kb/level1/*.py):
#   bash docs/measurements/recipes/gpu_kernelbench.sh [MAX_PROBLEMS]
# Writes $OUT/kernelbench_report.html (and kernelbench.db, a .png screenshot if chromium exists).
set -u
export PYTHONPATH=$PWD
KB=${KB:-.kb}
OUT=${OUT:-/tmp/kp_kb_out}
MAX=${1:-10}
export KP_DEVICE=${DEVICE:-cuda}   # DEVICE=cpu: a dry run of this script without a GPU
mkdir -p "$OUT"
export KERNELPRO_DB=$OUT/kernelbench.db
SOL=$(mktemp -d /tmp/kb_solutions.XXXX)

# 1. Reference solutions generated from the checkout, in KernelBench's own file layout.
python3 - "$KB" "$SOL" "$MAX" <<'EOF' || exit 1
import sys
from pathlib import Path
from kernelpro.errors import KernelProError
from kernelpro.suites.kernelbench import load_kernelbench
kb, sol, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
try:
    tasks = load_kernelbench(kb, level=1)[:n]
except KernelProError as e:
    sys.exit(f"gpu_kernelbench: {e}")
(sol / "level1").mkdir(parents=True, exist_ok=True)
for t in tasks:
    (sol / "level1" / t.path.name).write_text(t.path.read_text() + "\n\nModelNew = Model\n")
print(f"{len(tasks)} level-1 problems, reference solutions in {sol}: " + ", ".join(t.name for t in tasks))
EOF

# 2. The harness's own command (wired by the harness: `bench kernelbench --path --solutions`).
python3 -m kernelpro bench kernelbench --path "$KB" --level 1 --solutions "$SOL" 2>&1 | tail -25
rc=${PIPESTATUS[0]}

# 3. If that command is not there (or stored nothing), evaluate through the worker directly.
python3 - "$KB" "$SOL" "$MAX" "$rc" <<'EOF'
import sys, time
from pathlib import Path
from kernelpro.results.store import Store
from kernelpro.suites.kernelbench import find_solution, load_kernelbench
kb, sol, n, rc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = Store()
runs = [r for r in store.runs("bench") if r["suite"] == "kernelbench" and store.candidates(r["id"])]
if rc == 0 and runs:
    print(f"bench stored run {runs[-1]['id']}")
    sys.exit(0)
print(f"`kernelpro bench kernelbench` exited {rc} / stored nothing: evaluating with kernelpro.harness.worker")
from kernelpro.harness.worker import run_job
tasks = load_kernelbench(kb, level=1)[:n]
run = store.new_run("bench", "kernelbench", {"path": kb, "level": 1, "solutions": sol, "via": "worker"})
print(f"{'problem':44s} {'compiled':>8s} {'correct':>7s} {'vs eager':>9s} {'wall s':>7s}")
for t in tasks:
    path = find_solution(t, sol)
    cid = store.add_candidate(run, t.key, path.read_text(), "py", "reference", info={"path": str(path)})
    job = {"task_path": str(t.path), "candidate_path": str(path), "task_suite": "kernelbench", "task_key": t.key,
           "device": __import__("os").environ["KP_DEVICE"], "sizes": "default", "trials": 5, "timing": True, "baselines": ["eager"]}
    t0 = time.time()
    rec = run_job(__import__("kernelpro.harness.job", fromlist=["Job"]).Job.from_dict(job), timeout_s=600)
    store.record("evaluations", cid, bool(rec.get("ok")), rec)
    sp = (rec.get("speedup") or {}).get("eager")
    print(f"{t.name[:44]:44s} {str(rec.get('compiled')):>8s} {str(rec.get('correct')):>7s} "
          f"{'-' if sp is None else f'{sp:.3f}x':>9s} {time.time() - t0:7.1f}"
          + ("" if rec.get("ok") else f"  {rec.get('reason')}: {str(rec.get('detail'))[:80]}"))
store.set_run_status(run, "done")
EOF

# 4. The report (self-contained HTML), plus a screenshot where chromium exists.
RUN=$(python3 -c "
from kernelpro.results.store import Store
rs=[r for r in Store().runs('bench') if r['suite']=='kernelbench']
print(rs[-1]['id'] if rs else '')")
[ -n "$RUN" ] || { echo "gpu_kernelbench: no kernelbench run stored"; exit 1; }
python3 -m kernelpro report "$RUN" -o "$OUT/kernelbench_report.html"
python3 - "$RUN" <<'EOF'
import sys
from kernelpro.report import load_run, summary_row, verdict
from kernelpro.results.store import Store
v = load_run(Store(), int(sys.argv[1]))
s = summary_row(v)
print(f"run {s['run']}: {s['correct']}/{s['tasks']} correct, fast_1 {s['fast_1']}, geomean {s['geomean']}, baseline {s['baseline']}")
for task, f in v.best.items():
    print(f"  {task:50s} {verdict(f, baseline=v.baseline):14s} {f.speedups}")
EOF
if command -v chromium >/dev/null 2>&1; then
  chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$(mktemp -d)" \
    --window-size=1280,1600 --screenshot="$OUT/kernelbench_report.png" "file://$OUT/kernelbench_report.html" \
    >/dev/null 2>&1 && echo "screenshot: $OUT/kernelbench_report.png"
fi
rm -rf "$SOL"
