#!/usr/bin/env python3
"""Check and time the Hopper references for the memory-bound ptxbench tasks (softmax_rows_bf16,
rmsnorm_bf16, transpose_bf16) against each task's own Model on an H100/H200.

Run on the GPU machine from the repo root:  export PYTHONPATH=$PWD; python3 docs/measurements/recipes/gpu_memops_ref.py

1. builds the three extensions in parallel processes (importing a reference module builds it);
2. per task, in a child process with a time limit (a hung kernel cannot take the run down): for the
   default, shown and held-out sizes and a few extra ragged ones, two trials each with fresh random
   inputs (task.instantiate with a new seed): the allocator is poisoned with all-ones bytes first
   (unwritten outputs show up as NaN / poison), the output is compared with the task Model's using the
   task tolerance (kernelpro.harness.tensors.error_stats: every element within atol + rtol*|ref| and the
   relative norm within rel_norm), and a second launch must give bit-identical output (a race shows up
   as a difference);
3. times ModelNew and Model at every size (CUDA events, warm-up, median of many reps) and prints a
   table with GB/s from the task's `bytes` expression; JSON goes to $OUT/memops_ref.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REF = ROOT / "kernelpro" / "suites" / "ptxbench" / "reference"
TASKS = ["softmax_rows_bf16", "rmsnorm_bf16", "transpose_bf16"]
# Extra sizes beyond the task's: single row/tile, ragged edges smaller than one box, odd row counts.
EXTRA = {
    "softmax_rows_bf16": [{"ROWS": 1, "COLS": 8}, {"ROWS": 3, "COLS": 264}, {"ROWS": 777, "COLS": 16384},
                          {"ROWS": 5000, "COLS": 520}],
    "rmsnorm_bf16": [{"ROWS": 1, "HIDDEN": 8}, {"ROWS": 3, "HIDDEN": 264}, {"ROWS": 777, "HIDDEN": 16384},
                     {"ROWS": 5000, "HIDDEN": 520}],
    "transpose_bf16": [{"ROWS": 8, "COLS": 8}, {"ROWS": 72, "COLS": 136}, {"ROWS": 4104, "COLS": 8},
                       {"ROWS": 8, "COLS": 4104}],
}
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _import_ref(name: str):
    spec = importlib.util.spec_from_file_location(f"kp_ref_{name}", REF / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)  # builds the extension
    return mod


def _build_one(name: str) -> tuple[str, float, str]:
    t0 = time.time()
    try:
        _import_ref(name)
        return name, time.time() - t0, ""
    except Exception as e:  # noqa: BLE001 - a build failure is a row, not a crash
        return name, time.time() - t0, f"{type(e).__name__}: {str(e)[-2000:]}"


def build_all(names: list[str]) -> bool:
    os.environ.setdefault("MAX_JOBS", "4")
    with mp.get_context("spawn").Pool(len(names)) as pool:
        rows = pool.map(_build_one, names)
    ok = True
    for name, secs, err in rows:
        print(f"build {name:18s} {secs:6.1f}s {'ok' if not err else 'FAILED: ' + err}", flush=True)
        ok &= not err
    return ok


def _bench(fn, warmup: int = 10, min_reps: int = 20, budget_s: float = 0.4) -> float:
    """Median milliseconds of one call, each call timed with its own pair of CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts: list[float] = []
    t_end = time.time() + budget_s
    while len(ts) < min_reps or (time.time() < t_end and len(ts) < 500):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def _fmt_size(size: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in size.items() if k != "EPS")


def run_task(name: str) -> int:
    """Check and time one task's reference (runs in its own process)."""
    import torch

    from kernelpro.harness.tensors import bitwise_equal, error_stats, poison_allocator
    from kernelpro.suites.task import find_task, instantiate

    task = find_task(f"ptxbench/{name}")
    ref = _import_ref(name)
    sizes = [("default", s) for s in task.sizes("default")] + [("shown", s) for s in task.sizes("shown")] \
        + [("heldout", s) for s in task.sizes("heldout")] + [("extra", {**task.default_size, **s}) for s in EXTRA[name]]
    rows, failures = [], 0
    for which, size in sizes:
        row = {"task": name, "which": which, "size": _fmt_size(size), "ok": True, "rel_norm": 0.0, "max_abs": 0.0}
        try:
            for trial in range(2):
                _, model, inputs = instantiate(task, size, "cuda", seed=1000 * trial + 7)
                new = ref.ModelNew().cuda()
                with torch.no_grad():
                    expect = model(*inputs)
                    torch.cuda.synchronize()
                    poison_allocator([expect.numel() * expect.element_size()], "cuda")
                    out = new(*inputs)
                    torch.cuda.synchronize()
                    poison_allocator([expect.numel() * expect.element_size()], "cuda")
                    out2 = new(*inputs)
                    torch.cuda.synchronize()
                if out.shape != expect.shape or out.dtype != expect.dtype:
                    raise AssertionError(f"output {tuple(out.shape)} {out.dtype} != {tuple(expect.shape)} {expect.dtype}")
                st = error_stats(out, expect, task.tolerance)
                row["rel_norm"] = max(row["rel_norm"], st["rel_norm"])
                row["max_abs"] = max(row["max_abs"], st["max_abs"])
                same = bitwise_equal(out, out2)
                if not st["ok"] or not same:
                    row["ok"] = False
                    row["why"] = (f"trial {trial}: mismatch {st['mismatch']:.2e} poisoned {st['poisoned']} "
                                  f"nonfinite {st['nonfinite']} repeat_equal {same}")
                    break
            if row["ok"]:
                _, model, inputs = instantiate(task, size, "cuda", seed=99)
                new = ref.ModelNew().cuda()
                with torch.no_grad():
                    row["ours_ms"] = _bench(lambda f=new, x=inputs: f(*x))
                    row["torch_ms"] = _bench(lambda f=model, x=inputs: f(*x))
                _, nbytes = task.work(size)
                row["bytes"] = nbytes
        except Exception as e:  # noqa: BLE001 - one failing size is a row
            row["ok"] = False
            row["why"] = f"{type(e).__name__}: {str(e)[:300]}"
        failures += not row["ok"]
        rows.append(row)
        torch.cuda.empty_cache()
    print("ROWS " + json.dumps(rows), flush=True)
    return 1 if failures else 0


def _print_table(rows: list[dict]) -> None:
    print(f"\n{'task':18s} {'which':8s} {'size':24s} {'check':5s} {'rel_norm':>9s} {'max_abs':>9s} "
          f"{'ours ms':>9s} {'torch ms':>9s} {'ours GB/s':>9s} {'torch GB/s':>10s} {'speedup':>7s}")
    for r in rows:
        line = (f"{r['task']:18s} {r['which']:8s} {r['size']:24s} {'PASS' if r['ok'] else 'FAIL':5s} "
                f"{r['rel_norm']:9.2e} {r['max_abs']:9.2e}")
        if "ours_ms" in r:
            gb = r["bytes"] / 1e6
            line += (f" {r['ours_ms']:9.4f} {r['torch_ms']:9.4f} {gb / r['ours_ms']:9.0f} {gb / r['torch_ms']:10.0f} "
                     f"{r['torch_ms'] / r['ours_ms']:6.2f}x")
        if not r["ok"]:
            line += f"  {r.get('why', '')}"
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=TASKS, action="append", help="only this task (repeatable)")
    ap.add_argument("--child", choices=TASKS, help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per task child (checks + timing)")
    a = ap.parse_args()
    if a.child:
        return run_task(a.child)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check (run this on the GPU machine)")
        return 1
    names = a.task or TASKS
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    t0 = time.time()
    if not build_all(names):
        return 1
    print(f"builds done in {time.time() - t0:.0f}s", flush=True)
    rows, status = [], 0
    for name in names:
        try:
            r = subprocess.run([sys.executable, __file__, "--child", name], timeout=a.timeout,
                               capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            print(f"{name}: TIMED OUT after {a.timeout}s (hung kernel?)", flush=True)
            status = 1
            continue
        got = [ln for ln in r.stdout.splitlines() if ln.startswith("ROWS ")]
        if got:
            rows += json.loads(got[-1][5:])
        if r.returncode != 0:
            status = 1
            if not got:
                print(f"{name}: child exit {r.returncode}\n{r.stderr[-3000:]}", flush=True)
    _print_table(rows)
    print(f"\nfailures: {sum(not r['ok'] for r in rows)} of {len(rows)} sizes")
    out = os.environ.get("OUT")
    if out:
        Path(out, "memops_ref.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
