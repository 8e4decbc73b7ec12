"""Where one evaluation's time goes: the worker's phases, and the harness functions that take the most of
them, for a small problem (so nothing here is the candidate's own work), as 80-column tables.

    python3 benchmarks/worker_time.py [--device cuda|cpu] [--problem relu|matmul] [--elements N]
                                      [--task T --candidate C --suite S] [--top 25] [--json OUT.json]

Two measurements of the same job (every check, shown and held-out sizes, two trials, timing interleaved
against eager, no energy windows):
1. the real worker (`run_job`, as `bench` runs it, sandbox included): its wall time and the phases it
   records, plus what the parent waited in all (process start, imports, CUDA context);
2. the evaluator in this process under cProfile: the harness functions with the most cumulative time,
   and the number of candidate calls, profiler sessions and trace reads.
Nothing here asserts a target; it says where to look.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# the same KernelBench-form problems as the memory benchmark (sized by element count)
from harness_memory import PROBLEMS  # noqa: E402

# harness hooks counted by name (wrapped, so the count and time are exact, not sampled)
HOOKS = {
    "candidate calls": ("kernelpro.harness.checks", "CorrectnessChecks", "_run_candidate"),
    "profiler sessions": ("kernelpro.harness.checks", "CorrectnessChecks", "_profiler"),
    "trace reads": ("kernelpro.harness.checks", "CorrectnessChecks", "_read_profile"),
}


def make_job(task: Path, cand: Path, device: str, timeout: float, suite: str):
    from kernelpro.harness.job import Job

    return Job(task_path=str(task), candidate_path=str(cand), task_suite=suite, device=device,
               sizes="all", trials=2, baselines=("eager",), energy=False, timeout_s=timeout,
               protocols=("interleaved",))


def worker_run(job, device: str, timeout: float) -> dict:
    from kernelpro.harness.worker import run_job

    t0 = time.perf_counter()
    r = run_job(job, timeout_s=timeout, gpu=0 if device.startswith("cuda") else None).to_dict()
    waited = time.perf_counter() - t0
    w = r.get("worker") or {}
    return {"status": r.get("status"), "reason": r.get("reason"), "waited_s": waited,
            "wall_s": w.get("wall_s"), "phases": w.get("phases") or r.get("phases") or {}}


def _wrap(counts: dict, label: str, owner: type, name: str) -> None:
    import contextlib

    orig = getattr(owner, name)
    cm = getattr(orig, "__wrapped__", None) is not None  # a @contextmanager: time the whole block

    if cm:
        @contextlib.contextmanager
        def hooked(self, *a, **k):
            t = time.perf_counter()
            with orig(self, *a, **k) as v:
                counts[label][1] += time.perf_counter() - t
                yield v
                t = time.perf_counter()
            counts[label][0] += 1
            counts[label][1] += time.perf_counter() - t
    else:
        def hooked(self, *a, **k):
            t = time.perf_counter()
            try:
                return orig(self, *a, **k)
            finally:
                counts[label][0] += 1
                counts[label][1] += time.perf_counter() - t
    setattr(owner, name, hooked)


def profiled_run(job, top: int) -> dict:
    import importlib

    from kernelpro.harness.evaluate import Evaluator

    counts: dict[str, list] = {label: [0, 0.0] for label in HOOKS}
    for label, (mod, cls, name) in HOOKS.items():
        _wrap(counts, label, getattr(importlib.import_module(mod), cls), name)
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    r = Evaluator(job.eval_config()).run()
    pr.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(pr)
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if "/kernelpro/" in file or "torch/profiler" in file or "torch/cuda" in file:
            short = file.split("/kernelpro/")[-1] if "/kernelpro/" in file else "torch/" + file.split("torch/")[-1]
            rows.append({"where": f"{short}:{line} {fn}", "calls": nc, "cum_s": ct, "own_s": tt})
    rows.sort(key=lambda x: -x["cum_s"])
    return {"status": r.get("status"), "reason": r.get("reason"), "wall_s": wall, "phases": r.get("phases") or {},
            "hooks": {k: {"calls": v[0], "s": v[1]} for k, v in counts.items()}, "functions": rows[:top]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--problem", default="relu", choices=sorted(PROBLEMS))
    ap.add_argument("--elements", type=int, default=1 << 18, help="input elements of the problem (default 2^18)")
    ap.add_argument("--task", type=Path, help="a KernelBench-form task file instead of --problem")
    ap.add_argument("--candidate", type=Path, help="its candidate (default: the task's Model as ModelNew)")
    ap.add_argument("--suite", default="kernelbench", help="the task's suite (kernelbench, ptxbench, ...)")
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip-worker", action="store_true", help="only the in-process profile")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kp-wt-"))
    if a.task:
        task = a.task.resolve()
        src = task.read_text()
    else:
        template, shape = PROBLEMS[a.problem]
        rows, cols = shape(a.elements)
        src = template.format(rows=rows, cols=cols)
        task = work / "task.py"
        task.write_text(src)
    cand = a.candidate.resolve() if a.candidate else work / "cand.py"
    if not a.candidate:
        cand.write_text(src.replace("class Model(", "class ModelNew("))
    job = make_job(task, cand, a.device, a.timeout, a.suite)
    out: dict = {"device": a.device, "problem": str(a.task or f"{a.problem} {a.elements} elements")}
    try:
        import torch
        out["gpu"] = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
    except Exception as e:  # noqa: BLE001 - a label only
        out["gpu"] = f"unknown ({type(e).__name__})"
    print(f"worker_time: {out['problem']} on {out['gpu']}")
    if not a.skip_worker:
        w = worker_run(job, a.device, a.timeout)
        out["worker"] = w
        print(f"\n1. the worker: {w['status']} {w['reason'] or ''}; parent waited {w['waited_s']:.1f} s, "
              f"evaluator {w['wall_s'] or 0:.1f} s")
        print(f"   {'phase':<44} {'s':>8}")
        for name, s in w["phases"].items():
            print(f"   {name[:44]:<44} {s:>8.2f}")
    p = profiled_run(job, a.top)
    out["profiled"] = p
    print(f"\n2. in-process under cProfile: {p['status']} {p['reason'] or ''}; {p['wall_s']:.1f} s")
    print(f"   {'phase':<44} {'s':>8}")
    for name, s in p["phases"].items():
        print(f"   {name[:44]:<44} {s:>8.2f}")
    print(f"\n   {'hook':<44} {'calls':>6} {'s':>8}")
    for name, h in p["hooks"].items():
        print(f"   {name:<44} {h['calls']:>6} {h['s']:>8.2f}")
    print(f"\n   {'harness function (cumulative)':<52} {'calls':>6} {'cum s':>7} {'own s':>7}")
    for f in p["functions"]:
        print(f"   {f['where'][-52:]:<52} {f['calls']:>6} {f['cum_s']:>7.2f} {f['own_s']:>7.2f}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
