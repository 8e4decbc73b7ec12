"""GPU acceptance run for the evaluation harness, on one GPU.

    export PYTHONPATH=$PWD; python3 docs/measurements/recipes/gpu_harness.py [--lanes 8] [--skip-corpus] [--skip-timing] [--only triton]

1. measured ceilings: device-to-device copy bandwidth and bf16 matmul rate (8192^3), through kernelpro.harness.timing;
2. the adversarial + honest corpus (tests/candidates) through isolated workers, several at once on the GPU:
   a table of exploit, expected verdict, verdict, ok?;
3. timing: the same kernel timed twice agrees within 2% (median); torch.matmul timed by kernelpro.harness.timing vs
   triton.testing.do_bench (median) within 3%;
4. the GEMM reference (ptxbench/gemm_bf16) timed through the worker, under the evaluator's observation of every
   timed call (torch profiler with CUDA activity, tracer, per-call ranges, output probes), against the plain
   interleaved event timing of the same model and size in this process (before and after): ratio within 1%.
   Adaptive entries (tests/candidates/adversarial/adaptive_*) are judged against their `expect_cuda` where given.
Prints figures to stdout and writes them as JSON to $OUT/harness.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _as_dict(r: Any) -> dict:
    """A worker result as a plain dict (run_job returns a typed Result)."""
    return r if isinstance(r, dict) else r.to_dict()


def ceilings() -> dict:
    import torch

    from kernelpro.harness.timing import time_one

    n = 1 << 30  # 1 GiB copy: read + write
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    t = time_one(lambda: dst.copy_(src), "cuda", rep_ms=300)
    bw = 2 * n / (t.median_ms / 1e3)
    src = dst = None  # free 2 GiB before the matmul
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t2 = time_one(lambda: a @ b, "cuda", rep_ms=300)
    rate = 2 * m**3 / (t2.median_ms / 1e3)
    return {"copy_bytes_per_s": bw, "copy_median_ms": t.median_ms, "bf16_flops_per_s": rate,
            "bf16_median_ms": t2.median_ms}


def corpus(lanes: int, only: list[str] | None = None) -> list[dict]:
    from harness_corpus import entries, job_for, verdict_ok

    from kernelpro.harness.pool import run_jobs

    ents = [e for e in entries() if e.device in ("any", "gpu") and (not only or any(o in e.name for o in only))]
    jobs = []
    for e in ents:
        hang = e.expected("cuda") == "timeout"
        jobs.append(job_for(e, "cuda", trials=2, rep_ms=50, warmup_ms=10, baselines=["eager"],
                            timeout_s=25 if hang else 150))
    rows: list[dict | None] = [None] * len(ents)
    t0 = time.time()

    def done(i: int, res: Any) -> None:
        e = ents[i]
        r = _as_dict(res)
        rows[i] = {"candidate": e.name, "task": e.task, "expected": e.expected("cuda"),
                   "verdict": r.get("reason") or "passed",
                   "failed_checks": r.get("failed_checks", []), "ok": verdict_ok(e, res, "cuda"),
                   "detail": (r.get("detail") or "")[:160], "wall_s": round(r.get("worker", {}).get("wall_s", 0), 1),
                   "timing": (r.get("timing") or {}).get("stats", {}).get("candidate", {}).get("median_ms"),
                   "floor_ms": (r.get("work") or {}).get("floor_ms")}
        print(f"[{time.time() - t0:6.1f}s] {e.name:45s} expect {e.expected('cuda'):22s} got {rows[i]['verdict']:22s} "
              f"{'OK' if rows[i]['ok'] else 'WRONG'} {rows[i]['failed_checks']}", flush=True)
        if not rows[i]["ok"]:
            print("      detail:", r.get("detail"), "| log:", (r.get("worker", {}).get("log_tail") or "")[-600:],
                  r.get("evaluator_traceback", "")[-600:], flush=True)

    run_jobs(jobs, gpus=[0], timeout_s=150, on_result=done, cache_dir="/tmp/kp-cache", per_gpu=lanes)
    return [r for r in rows if r]


def timing_checks() -> dict:
    import torch
    import triton.testing

    from kernelpro.harness.timing import time_interleaved, time_one

    out = {}
    m = 4096
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    mm = lambda: torch.matmul(a, b)  # noqa: E731
    t1 = time_one(mm, "cuda", warmup_ms=200, rep_ms=300)
    t2 = time_one(mm, "cuda", warmup_ms=200, rep_ms=300)
    out["matmul_twice_ms"] = [t1.median_ms, t2.median_ms]
    out["matmul_twice_diff_pct"] = 100 * abs(t1.median_ms - t2.median_ms) / t1.median_ms
    x = torch.randn(1 << 26, device="cuda")
    y = torch.randn(1 << 26, device="cuda")
    add = lambda: x + y  # noqa: E731
    s1 = time_one(add, "cuda", warmup_ms=200, rep_ms=300)
    s2 = time_one(add, "cuda", warmup_ms=200, rep_ms=300)
    out["add64M_twice_ms"] = [s1.median_ms, s2.median_ms]
    out["add64M_twice_diff_pct"] = 100 * abs(s1.median_ms - s2.median_ms) / s1.median_ms
    db = triton.testing.do_bench(mm, warmup=25, rep=300, return_mode="median")
    out["matmul_kernelpro_ms"] = t1.median_ms
    out["matmul_do_bench_ms"] = db
    out["matmul_vs_do_bench_diff_pct"] = 100 * abs(t1.median_ms - db) / db
    inter, _ = time_interleaved({"a": mm, "b": mm}, "cuda", rep_ms=300)
    out["interleaved_same_fn_diff_pct"] = 100 * abs(inter["a"].median_ms - inter["b"].median_ms) / inter["a"].median_ms
    out["matmul_iqr_ms"] = t1.iqr_ms
    out["matmul_tflops"] = 2 * m**3 / (t1.median_ms / 1e3) / 1e12
    return out


def gemm_observed_vs_plain() -> dict:
    """The GEMM reference: worker timing (every timed call observed) vs plain interleaved events, same size."""
    import torch

    from kernelpro.harness.job import Job
    from kernelpro.harness.timing import time_interleaved
    from kernelpro.harness.worker import run_job
    from kernelpro.suites.candidate import load_candidate
    from kernelpro.suites.task import import_module_from, load_task

    task_path = ROOT / "kernelpro/suites/ptxbench/tasks/gemm_bf16.py"
    ref_path = ROOT / "kernelpro/suites/ptxbench/reference/gemm_bf16.py"
    task = load_task(task_path, suite="ptxbench")
    size = task.sizes("default")[0]
    c = load_candidate(ref_path)
    job = Job(task_path=str(task_path), task_suite="ptxbench", task_key="ptxbench/gemm_bf16",
              candidate_path=str(c.path), candidate_hash=c.hash, device="cuda", sizes="default", trials=1,
              baselines=("eager",), rep_ms=300, warmup_ms=50)

    def plain() -> float:
        tmod = import_module_from(task_path, "kp_gemm_task")
        tmod.__dict__.update(size)
        rmod = import_module_from(ref_path, "kp_gemm_ref")
        with torch.device("cuda"):
            init = list(tmod.get_init_inputs())
            model = rmod.ModelNew(*init).cuda()
            xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in tmod.get_inputs()]
        with torch.no_grad():
            model(*xs)
        torch.cuda.synchronize()

        def call() -> None:
            with torch.no_grad():
                model(*xs)
        stats, _ = time_interleaved({"ref": call}, "cuda", warmup_ms=50, rep_ms=300)
        return stats["ref"].median_ms

    # Same extension cache as the worker, so the plain timing loads the worker's build.
    from kernelpro.harness.worker import extension_dir

    os.environ["TORCH_EXTENSIONS_DIR"] = str(extension_dir(c.hash, "/tmp/kp-cache"))
    run_job(job, timeout_s=280, gpu=0, cache_dir="/tmp/kp-cache")   # builds the extension first
    p1 = plain()
    r = _as_dict(run_job(job, timeout_s=280, gpu=0, cache_dir="/tmp/kp-cache"))
    p2 = plain()
    observed = (r.get("timing") or {}).get("stats", {}).get("candidate", {}).get("median_ms")
    base = (p1 + p2) / 2
    out = {"size": size, "ok": r.get("ok"), "reason": r.get("reason"), "detail": (r.get("detail") or "")[:200],
           "observed_ms": observed, "plain_ms": [p1, p2],
           "ratio": observed / base if observed else None, "observation": (r.get("timing") or {}).get("observed"),
           "output_probes": (r.get("timing") or {}).get("output_probes"),
           "isolation": r.get("worker", {}).get("isolation")}
    print("gemm reference:", json.dumps(out, default=str), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--skip-corpus", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--skip-gemm", action="store_true")
    ap.add_argument("--only", action="append", metavar="SUBSTR", help="only corpus entries whose name contains this")
    args = ap.parse_args()
    import torch

    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print("device:", info, flush=True)
    res: dict = {"info": info}
    out = os.environ.get("OUT")
    if not args.skip_timing:
        res["timing"] = timing_checks()
        print("timing:", json.dumps(res["timing"]), flush=True)
        res["ceilings"] = ceilings()
        print("ceilings:", json.dumps(res["ceilings"]), flush=True)
        torch.cuda.empty_cache()
        if out:
            Path(out, "harness.json").write_text(json.dumps(res, indent=1, default=str))
    if not args.skip_gemm:
        res["gemm"] = gemm_observed_vs_plain()
    if not args.skip_corpus:
        res["corpus"] = corpus(args.lanes, args.only)
    if "corpus" in res:
        print(f"\n{'candidate':45s} {'expected':22s} {'verdict':22s} ok?")
        for r in res["corpus"]:
            print(f"{r['candidate']:45s} {r['expected']:22s} {r['verdict']:22s} {'yes' if r['ok'] else 'NO'}")
        n_ok = sum(r["ok"] for r in res["corpus"])
        print(f"corpus: {n_ok}/{len(res['corpus'])} verdicts right")
    if "timing" in res:
        t = res["timing"]
        print(f"same kernel twice: matmul {t['matmul_twice_diff_pct']:.2f}% (<2%: {t['matmul_twice_diff_pct'] < 2}), "
              f"add64M {t['add64M_twice_diff_pct']:.2f}% (<2%: {t['add64M_twice_diff_pct'] < 2}); "
              f"vs do_bench {t['matmul_vs_do_bench_diff_pct']:.2f}% (<3%: {t['matmul_vs_do_bench_diff_pct'] < 3})")
    if "gemm" in res and res["gemm"].get("ratio"):
        g = res["gemm"]
        print(f"GEMM reference observed/plain = {g['ratio']:.4f} (within 1%: {abs(g['ratio'] - 1) <= 0.01}); "
              f"verdict {g['reason'] or 'passed'}")
    if out:
        Path(out, "harness.json").write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
