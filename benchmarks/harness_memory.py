"""The harness's memory at KernelBench sizes: peak memory of one whole evaluation (the real worker, the
problem's own Model as ModelNew) against the problem's input size, printed as an 80-column table.

    python3 benchmarks/harness_memory.py [--device cuda|cpu] [--gib 0.5,1,2] [--problem relu|matmul]
                                         [--baseline-tree DIR] [--json OUT.json]

The problem is KernelBench's level-1 form (`Model`, `get_inputs`, `get_init_inputs`), sized so its inputs
hold the given GiB. Each evaluation runs in a fresh process, through `run_job` as `bench` runs it (all
checks, timing interleaved against eager, no energy windows). Peaks:
- device: NVML's used memory of the GPU, sampled every 20 ms while the evaluation runs, less what was used
  before it (so it counts the CUDA context and the allocator's cache too: what another process on the
  card would lose), and the worker's own `max_memory_allocated` where the tree records it;
- host: the largest resident set among the evaluation's child processes (RUSAGE_CHILDREN).
`--baseline-tree DIR` (a checkout of another commit, e.g. `git worktree add /tmp/old HEAD~1`) runs the
same evaluations with that tree's code, side by side in the same run. Nothing here asserts a target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBLEMS = {
    # one input, one output of the same size (KernelBench level 1 problem 19, ReLU, is 4096 x 393216 fp32)
    "relu": ("""
import torch, torch.nn as nn
ROWS, COLS = {rows}, {cols}
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(ROWS, COLS)]
def get_init_inputs():
    return []
""", lambda n: (max(n // 65536, 1), 65536)),
    # two inputs, an output of their size: level 1's square matmuls
    "matmul": ("""
import torch, torch.nn as nn
ROWS, COLS = {rows}, {cols}
class Model(nn.Module):
    def forward(self, a, b):
        return a @ b
def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(COLS, ROWS)]
def get_init_inputs():
    return []
""", lambda n: (int((n // 2) ** 0.5), int((n // 2) ** 0.5))),
}

# the one job both children build: every check, timing interleaved against eager, no energy windows
JOB = r"""
import sys
from kernelpro.harness.job import Job
task, cand, device, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
job = Job(task_path=task, candidate_path=cand, task_suite="kernelbench", device=device, sizes="shown",
          trials=2, baselines=("eager",), energy=False, timeout_s=timeout, protocols=("interleaved",))
"""

CHILD = JOB + r"""
import json, resource
from kernelpro.harness.worker import run_job
r = run_job(job, timeout_s=timeout, gpu=0 if device.startswith("cuda") else None)
d = r.to_dict()
print("RESULT " + json.dumps({"status": d["status"], "reason": d["reason"], "detail": d["detail"][:200],
                              "memory": d.get("memory"), "wall_s": (d.get("worker") or {}).get("wall_s"),
                              "rss_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""

# --sites: the same evaluation in one child process without the worker or its sandbox (a diagnostic, not a
# verdict), with PyTorch's allocator history on; the trace is replayed to the moment the most bytes were
# live, and those bytes are summed by the harness's code that allocated them (its four innermost kernelpro
# frames).
SITES = JOB + r"""
import json
import torch
from kernelpro.harness.evaluate import Evaluator
torch.cuda.set_per_process_memory_fraction(float(job.mem_fraction))
torch.cuda.memory._record_memory_history(max_entries=500000, stacks="python")
try:
    r = Evaluator(job.eval_config()).run()
    status = f"{r.get('status')} {r.get('reason') or ''}"
except BaseException as e:   # the OOM is what is being looked at: report it, then replay the trace
    status = f"raised {type(e).__name__}: {str(e)[:120]}"
snap = torch.cuda.memory._snapshot()
def site(frames):
    own = [f for f in frames if "/kernelpro/" in f["filename"]][:4]
    return " < ".join(f"{f['name']}:{f['line']}" for f in own) or (frames[0]["name"] if frames else "?")
live, total, peak, at_peak = {}, 0, 0, {}
for ev in (snap["device_traces"] or [[]])[0]:
    if ev["action"] == "alloc":
        live[ev["addr"]] = (ev["size"], site(ev.get("frames") or []))
        total += ev["size"]
        if total > peak:
            peak, at_peak = total, dict(live)
    elif ev["action"] == "free_completed" and ev["addr"] in live:
        total -= live.pop(ev["addr"])[0]
by = {}
for size, where in at_peak.values():
    by[where] = by.get(where, 0) + size
print("SITES " + json.dumps({"status": status, "peak": peak, "sites": sorted(by.items(), key=lambda kv: -kv[1])[:12]}))
"""


def sites(tree: Path, task: Path, cand: Path, device: str, timeout: float, inputs: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, "-c", SITES, str(task), str(cand), device, str(timeout)],
                       cwd=tree, env=env, capture_output=True, text=True, timeout=timeout + 120)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("SITES ")), None)
    if line is None:
        print(f"  sites: no trace (rc {p.returncode}): {(p.stderr or p.stdout)[-300:]}")
        return
    rec = json.loads(line[6:])
    print(f"  sites: {rec['status']}; {_gib(rec['peak'])} GiB live at the peak ({rec['peak'] / inputs:.1f}x in)")
    for where, size in rec["sites"]:
        print(f"  {size / inputs:>5.1f}x {where[:70]}")


class _NvmlPeak:
    """NVML's used memory of GPU 0, sampled in a thread; `peak - before` is what the evaluation took."""

    def __init__(self) -> None:
        sys.path.insert(0, str(ROOT))
        from kernelpro.harness.telemetry import open_nvml

        self.dev, self.why = open_nvml(0)    # None on a machine without NVML: the device column stays empty
        self.before = self.peak = 0
        self._stop = threading.Event()

    def used(self) -> int:
        return int(self.dev.nv.nvmlDeviceGetMemoryInfo(self.dev.handle).used) if self.dev else 0

    def __enter__(self) -> _NvmlPeak:
        self.before = self.peak = self.used()
        self._stop.clear()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.used())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def measure(tree: Path, task: Path, cand: Path, device: str, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    with _NvmlPeak() as nv:
        p = subprocess.run([sys.executable, "-c", CHILD, str(task), str(cand), device, str(timeout)],
                           cwd=tree, env=env, capture_output=True, text=True, timeout=timeout + 120)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"status": "error", "reason": f"rc {p.returncode}", "detail": (p.stderr or p.stdout)[-300:]}
    rec = json.loads(line[7:])
    if nv.dev is not None:
        rec["nvml_peak_bytes"] = nv.peak - nv.before
    return rec


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**30:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gib", default="0.5,1,2", help="input sizes in GiB, comma-separated")
    ap.add_argument("--problem", default="relu", choices=sorted(PROBLEMS))
    ap.add_argument("--baseline-tree", type=Path, help="a checkout of another commit, measured beside this one")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sites", action="store_true",
                    help="then, on the GPU, rerun each size in-process with PyTorch's allocator history and "
                         "print what the harness held at the peak, by allocating site, in input-sizes")
    a = ap.parse_args()
    trees = [("this", ROOT)] + ([("baseline", a.baseline_tree.resolve())] if a.baseline_tree else [])
    src, shape = PROBLEMS[a.problem]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="kp-mem-"))
    print(f"harness memory: {a.problem}, device {a.device}, inputs {a.gib} GiB, trees "
          + ", ".join(f"{n}={t}" for n, t in trees), flush=True)
    for gib in [float(x) for x in a.gib.split(",")]:
        r, c = shape(int(gib * 2**30 / 4))
        folder = work / f"level1_{gib:g}" / "level1"
        folder.mkdir(parents=True, exist_ok=True)
        task = folder / f"1_{a.problem}.py"
        task.write_text(src.format(rows=r, cols=c))
        cand = work / f"level1_{gib:g}" / "cand.py"
        cand.write_text(src.format(rows=r, cols=c).replace("class Model(", "class ModelNew("))
        inputs = (r * c * 4) * (2 if a.problem == "matmul" else 1)
        for name, tree in trees:
            t0 = time.monotonic()
            rec = measure(tree, task, cand, a.device, a.timeout)
            rec.update(tree=name, gib=gib, input_bytes=inputs, wall=time.monotonic() - t0)
            rows.append(rec)
            peak = rec.get("nvml_peak_bytes") if a.device.startswith("cuda") else rec.get("rss_children")
            print(f"  {gib:g} GiB {name}: {rec['status']} {rec.get('reason') or ''} peak {_gib(peak)} GiB "
                  f"({rec['wall']:.0f} s)", flush=True)
            if a.sites and name == "this" and a.device.startswith("cuda"):
                sites(tree, task, cand, a.device, a.timeout, inputs)
    print()
    print(f"{'input':>6} {'tree':<9} {'verdict':<16} {'device':>7} {'x in':>5} {'alloc':>6} {'host':>6} {'x in':>5}")
    for rec in rows:
        dev = rec.get("nvml_peak_bytes")
        alloc = (rec.get("memory") or {}).get("gpu_peak_bytes")
        host = rec.get("rss_children")
        inb = rec["input_bytes"]
        verdict = rec["status"] if rec["status"] == "passed" else str(rec.get("reason"))
        print(f"{rec['gib']:>5g}G {rec['tree']:<9} {verdict[:16]:<16} {_gib(dev):>7} "
              f"{(dev / inb if dev else 0):>5.1f} {_gib(alloc):>6} {_gib(host):>6} {(host / inb if host else 0):>5.1f}")
    print("\ninput: GiB of the problem's inputs; device: NVML peak used less before (GiB), x in: per input byte;")
    print("alloc: the worker's max_memory_allocated (GiB, where recorded); host: peak resident set (GiB).")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
