#!/usr/bin/env python3
"""Build, check and time the Hopper attention-backward reference against the tasks' math and cuDNN (H100/H200).

Run on the GPU machine from the repo root:
    export PYTHONPATH=$PWD; python3 docs/measurements/recipes/gpu_attn_bwd_ref.py

Every variant (BWD_CAUSAL x BWD_STAGES, or the scalar dQ reduction) runs in a child process with a time
limit, so a hung kernel (a barrier-phase bug) cannot take the run down:
1. check: fresh random inputs (q scaled by 2, as the tasks' get_inputs), O and LSE from the vendor forward,
   dQ/dK/dV vs the task's fp32 ``math_backward`` one head at a time (rel-norm < 1e-2 per gradient, all
   finite), then a second launch: dK and dV must be bit-for-bit equal (a moving result means a race); dQ is
   reduced with fp32 atomics, so it is compared with a tolerance instead;
2. time: CUDA events, warm-up, median of the reps, against the task's ``vendor_backward`` (cuDNN).
One JSON line per variant on stdout; the table goes to $OUT/attn_bwd_ref.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PTX = ROOT / "kernelpro" / "suites" / "ptxbench"
# variant -> (causal, macro overrides); *_scalar: dQ reduced with one scalar atomicAdd per element
VARIANTS = {"plain": (False, {}), "causal": (True, {}), "plain_s3": (False, {"BWD_STAGES": 3}),
            "causal_s3": (True, {"BWD_STAGES": 3}), "plain_scalar": (False, {"BWD_DQ_RED_V2": 0}),
            "causal_scalar": (True, {"BWD_DQ_RED_V2": 0})}
CHECK_SIZES = [(1, 2, 1), (1, 2, 17), (1, 2, 128), (2, 3, 200), (2, 2, 1000), (1, 4, 3080), (1, 2, 4096)]
TIME_SIZES = [(2, 8, 1024), (4, 16, 2048), (4, 48, 4096)]
TOL = 1e-2


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(task, b: int, h: int, s: int, causal: bool, seed: int):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(scale=1.0):
        return (torch.randn(b, h, s, 128, device="cuda", generator=g) * scale).to(torch.bfloat16)

    q, k, v, do = randn(2.0), randn(), randn(), randn()
    o, lse = task.attention_with_lse(q, k, v, causal)
    delta = (do.float() * o.float()).sum(-1)
    return q, k, v, o, do, lse, delta


def child(variant: str, mode: str) -> dict:
    import torch

    causal, macros = VARIANTS[variant]
    task = _load(PTX / "tasks" / ("attn_bwd_causal_bf16_d128.py" if causal else "attn_bwd_bf16_d128.py"), "task")
    common = _load(PTX / "reference" / "_attn_bwd_common.py", "attn_bwd_common")
    common.build(causal, None, **macros)

    def run(x):
        q, k, v, o, do, lse, delta = x
        return common.attn_backward(q, k, v, do, lse, delta, causal, None, **macros)

    rows = []
    if mode == "build":
        return {"variant": variant, "mode": mode, "rows": rows}
    if mode == "check":
        for i, (b, h, s) in enumerate(CHECK_SIZES):
            x = _inputs(task, b, h, s, causal, seed=i)
            got = run(x)
            again = run(x)
            torch.cuda.synchronize()
            worst = {"dq": 0.0, "dk": 0.0, "dv": 0.0}
            finite = all(bool(torch.isfinite(t).all()) for t in got)
            for hh in range(h):
                sl = slice(hh, hh + 1)
                want = task.math_backward(*(t[:, sl] for t in x[:6]), causal)
                for name, g_, w in zip(("dq", "dk", "dv"), got, want, strict=True):
                    w = w.float()
                    # dQ and dK are zero in exact arithmetic at S = 1 (softmax over one key is constant):
                    # the fp32 truth is rounding noise there, so the error is absolute (rms), not relative.
                    den = max(w.norm().item(), 1e-3 * w.numel() ** 0.5)
                    err = (g_[:, sl].float() - w).norm().item() / den
                    worst[name] = max(worst[name], err)
            repeat = bool(torch.equal(got[1], again[1]) and torch.equal(got[2], again[2]))
            dq_drift = ((got[0].float() - again[0].float()).norm() / got[0].float().norm().clamp_min(1e-30)).item()
            ok = finite and repeat and dq_drift < 1e-3 and max(worst.values()) < TOL
            rows.append({"size": [b, h, s], "ok": ok, "finite": finite, "rel_err": worst,
                         "dk_dv_bitwise_repeat": repeat, "dq_repeat_rel": dq_drift})
    else:
        for i, (b, h, s) in enumerate(TIME_SIZES):
            x = _inputs(task, b, h, s, causal, seed=100 + i)
            fns = {"ref": lambda x=x: run(x), "cudnn": lambda x=x: task.vendor_backward(*x[:6], causal)}
            ms = {}
            for name, fn in fns.items():
                for _ in range(3):
                    fn()
                times = []
                for _ in range(20):
                    a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fn()
                    e.record()
                    e.synchronize()
                    times.append(a.elapsed_time(e))
                ms[name] = statistics.median(times)
            flops = 10 * b * h * s * s * 128 / (2 if causal else 1)
            rows.append({"size": [b, h, s], "ms": ms, "ref_tflops": flops / ms["ref"] / 1e9,
                         "speedup_vs_cudnn": ms["cudnn"] / ms["ref"]})
    return {"variant": variant, "mode": mode, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--check-timeout", type=int, default=240, help="seconds per variant for build + checks")
    ap.add_argument("--time-timeout", type=int, default=180, help="seconds per variant for timing")
    ap.add_argument("--no-time", action="store_true", help="checks only")
    ap.add_argument("--prebuild", action="store_true", help="build every variant in parallel first")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)), flush=True)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU (Hopper, sm_90); run this on the GPU machine", file=sys.stderr)
        return 2
    if args.prebuild:
        # Every variant's extension built at once (one process each): the checks below then load them.
        procs = [subprocess.Popen([sys.executable, __file__, "--child", v, "build"]) for v in args.variants.split(",")
                 if v in VARIANTS]
        for p in procs:
            p.wait()
    results, failed = [], False
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            print(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
        for mode, limit in (("check", args.check_timeout), ("time", args.time_timeout)):
            if mode == "time" and (args.no_time or failed):
                continue  # timing a kernel that failed its checks says nothing
            cmd = [sys.executable, __file__, "--child", variant, mode]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
            except subprocess.TimeoutExpired:
                rec = {"variant": variant, "mode": mode, "error": f"timed out after {limit} s (hang?)"}
            else:
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                rec = (json.loads(lines[-1]) if p.returncode == 0 and lines
                       else {"variant": variant, "mode": mode, "error": p.stderr[-2000:]})
            if mode == "check" and ("error" in rec or not all(r["ok"] for r in rec["rows"])):
                failed = True
            print(json.dumps(rec), flush=True)
            results.append(rec)
    out = os.environ.get("OUT")
    if out:
        Path(out, "attn_bwd_ref.json").write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
