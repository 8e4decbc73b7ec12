#!/usr/bin/env python3
"""Build, check and time the Hopper attention-forward references against PyTorch SDPA (H100/H200).

Run on the GPU machine from the repo root:  export PYTHONPATH=$PWD; python3 docs/measurements/recipes/gpu_attn_ref.py

1. builds every variant in parallel processes (the same load_inline path the ModelNew files use);
2. checks each reference, in a child process with a time limit (a hung kernel cannot take the run down),
   on shown, held-out, small and default sizes: outputs poisoned with NaN first, fresh random inputs,
   rel-norm error vs F.scaled_dot_product_attention in fp32 on the same bf16 inputs (< 1e-2), lse vs an
   fp32 logsumexp (abs error), and a second run compared bit-for-bit (a moving result means a race);
3. times them (CUDA events, warm-up, median of many reps) against SDPA's cuDNN and flash backends and
   prints a table; full numbers go to $OUT/attn_ref.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REF = ROOT / "kernelpro" / "suites" / "ptxbench" / "reference"

# name -> (causal, with_lse, macro overrides)
VARIANTS = {
    "plain": (False, False, {}),
    "causal": (True, False, {}),
    "lse": (False, True, {}),
    "lse_causal": (True, True, {}),
    "plain_noovl": (False, False, {"ATTN_OVERLAP": 0}),
    "causal_noovl": (True, False, {"ATTN_OVERLAP": 0}),
}
DEFAULT = (4, 16, 4096)
HEADLINE = (1, 48, 4096)
CHECK_SIZES = [(1, 2, 128), (2, 3, 256), (1, 1, 1), (1, 2, 17), (2, 2, 1000), (1, 4, 3000), (1, 2, 4096),
               DEFAULT, HEADLINE]
TOL = 1e-2


def _common():
    sys.path.insert(0, str(REF))
    import _attn_common  # noqa: PLC0415

    return _attn_common


def _build_one(name: str) -> tuple[str, float, str]:
    t0 = time.time()
    try:
        causal, lse, ov = VARIANTS[name]
        _common().build(causal, lse, **ov)
        return name, time.time() - t0, ""
    except Exception as e:  # noqa: BLE001 - report any build failure as a row
        return name, time.time() - t0, f"{type(e).__name__}: {str(e)[-1500:]}"


def build_all() -> bool:
    os.environ.setdefault("MAX_JOBS", "4")
    with mp.get_context("spawn").Pool(len(VARIANTS)) as pool:
        rows = pool.map(_build_one, list(VARIANTS))
    ok = True
    for name, secs, err in rows:
        print(f"build {name:14s} {secs:6.1f}s {'ok' if not err else 'FAILED: ' + err}", flush=True)
        ok &= not err
    return ok


def _ref_out_lse(q, k, v, causal, with_lse=True):
    import torch
    import torch.nn.functional as F

    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    if not with_lse:
        return out, None
    b, h, s, d = q.shape
    lse = torch.empty((b, h, s), device=q.device, dtype=torch.float32)
    qf, kf = q.float().flatten(0, 1), k.float().flatten(0, 1)
    lf = lse.view(b * h, s)
    step = max(1, (1 << 28) // max(1, s * s))  # bound the fp32 score buffer to ~1 GiB
    for i in range(0, b * h, step):
        sc = torch.matmul(qf[i:i + step], kf[i:i + step].transpose(1, 2)) / math.sqrt(d)
        if causal:
            sc.masked_fill_(torch.ones(s, s, device=q.device, dtype=torch.bool).triu(1), float("-inf"))
        lf[i:i + step] = torch.logsumexp(sc, dim=-1)
    return out, lse


def phase_check() -> int:
    import torch

    c = _common()
    torch.manual_seed(0)
    failures = 0
    for name, (causal, with_lse, ov) in VARIANTS.items():
        sizes = CHECK_SIZES if not ov else [(1, 2, 17), (2, 2, 1000), DEFAULT]
        ext = c.build(causal, with_lse, **ov)
        for (b, h, s) in sizes:
            q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            out = torch.full_like(q, float("nan"))
            lse = torch.full((b, h, s) if with_lse else (0,), float("nan"), device="cuda", dtype=torch.float32)
            ext.attn_fwd_into(q, k, v, out, lse, 1.0 / math.sqrt(128))
            torch.cuda.synchronize()
            ref, ref_lse = _ref_out_lse(q, k, v, causal, with_lse)
            finite = bool(torch.isfinite(out).all())
            err = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)) if finite else float("nan")
            lse_err = 0.0
            if with_lse:
                lse_err = float((lse - ref_lse).abs().max()) if bool(torch.isfinite(lse).all()) else float("nan")
            out2 = torch.full_like(q, float("nan"))
            lse2 = torch.full_like(lse, float("nan"))
            ext.attn_fwd_into(q, k, v, out2, lse2, 1.0 / math.sqrt(128))
            torch.cuda.synchronize()
            same = bool(torch.equal(out, out2)) and (not with_lse or bool(torch.equal(lse, lse2)))
            ok = finite and err < TOL and (not with_lse or lse_err < 1e-2) and same
            failures += not ok
            print(f"check {name:13s} B={b} H={h:2d} S={s:5d} rel_err={err:.2e}"
                  + (f" lse_abs_err={lse_err:.2e}" if with_lse else "")
                  + f" repeat_equal={same} {'PASS' if ok else 'FAIL'}", flush=True)
            del q, k, v, out, out2, ref
    # The ModelNew files themselves, once each at a small held-out size.
    import importlib.util

    for fname, (causal, with_lse) in {"attn_fwd_bf16_d128": (False, False), "attn_fwd_causal_bf16_d128": (True, False),
                                      "attn_fwd_lse_bf16": (False, True),
                                      "attn_fwd_lse_causal_bf16": (True, True)}.items():
        spec = importlib.util.spec_from_file_location(fname, REF / f"{fname}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        q, k, v = (torch.randn(2, 3, 1000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        res = mod.ModelNew().cuda()(q, k, v)
        ref, ref_lse = _ref_out_lse(q, k, v, causal, with_lse)
        out, lse = (res if with_lse else (res, None))
        err = float((out.float() - ref).norm() / ref.norm())
        lerr = float((lse - ref_lse).abs().max()) if with_lse else 0.0
        ok = out.shape == q.shape and out.dtype == torch.bfloat16 and err < TOL and lerr < 1e-2
        if with_lse:
            ok = ok and lse.shape == (2, 3, 1000) and lse.dtype == torch.float32
        failures += not ok
        print(f"modelnew {fname:26s} rel_err={err:.2e} lse_abs_err={lerr:.2e} {'PASS' if ok else 'FAIL'}", flush=True)
    print(f"check failures: {failures}", flush=True)
    return 1 if failures else 0


def _bench(fn, warmup: int = 5, reps: int = 40) -> dict:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return {"median_ms": statistics.median(ts), "p10_ms": ts[len(ts) // 10], "p90_ms": ts[(9 * len(ts)) // 10]}


def phase_time() -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    c = _common()
    torch.manual_seed(1)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    plan = [(DEFAULT, False, ["plain", "plain_noovl"]), (DEFAULT, True, ["causal", "causal_noovl"]),
            (HEADLINE, False, ["lse"]), (HEADLINE, True, ["lse_causal"])]
    for (b, h, s), causal, mine in plan:
        q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4.0 * b * h * s * s * 128 * (0.5 if causal else 1.0)
        row = {"B": b, "H": h, "S": s, "causal": causal, "flops": flops, "times": {}}
        for be_name, be in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    row["times"][be_name] = _bench(
                        lambda q=q, k=k, v=v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            except Exception as e:  # noqa: BLE001 - a backend missing on this build is a row, not a crash
                row["times"][be_name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        for name in mine:
            vc, vl, ov = VARIANTS[name]
            row["times"][name] = _bench(
                lambda q=q, k=k, v=v, vc=vc, vl=vl, ov=ov: c.attn_forward(q, k, v, vc, vl, **ov))
        results["rows"].append(row)
        del q, k, v
    # Same build timed twice: the spread between the two medians is the noise floor.
    q, k, v = (torch.randn(*DEFAULT, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    results["repeat_plain_ms"] = [_bench(lambda: c.attn_forward(q, k, v, False, False))["median_ms"] for _ in range(2)]

    print(f"\n{results['device']}  torch {results['torch']}", flush=True)
    print(f"{'shape':22s} {'causal':6s} {'impl':13s} {'median ms':>9s} {'TFLOP/s':>8s} {'vs best SDPA':>12s}")
    for row in results["rows"]:
        base = [t["median_ms"] for n, t in row["times"].items() if n.startswith("sdpa") and "median_ms" in t]
        best = min(base) if base else float("nan")
        row["best_sdpa_ms"] = best
        for n, t in row["times"].items():
            shape = f"{row['B']}x{row['H']}x{row['S']}x128"
            if "median_ms" not in t:
                print(f"{shape:22s} {str(row['causal']):6s} {n:13s} {t['error']}")
                continue
            tf = row["flops"] / t["median_ms"] / 1e9
            print(f"{shape:22s} {str(row['causal']):6s} {n:13s} {t['median_ms']:9.3f} {tf:8.1f} "
                  f"{best / t['median_ms']:11.2f}x")
    print(f"repeat plain medians (ms): {results['repeat_plain_ms']}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "attn_ref.json").write_text(json.dumps(results, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", choices=["all", "build", "check", "time"], default="all")
    ap.add_argument("--check-timeout", type=int, default=150)
    ap.add_argument("--time-timeout", type=int, default=120)
    a = ap.parse_args()
    if a.phase == "build":
        return 0 if build_all() else 1
    if a.phase == "check":
        return phase_check()
    if a.phase == "time":
        return phase_time()
    t0 = time.time()
    status = 0
    if not build_all():
        return 1
    print(f"builds done in {time.time() - t0:.0f}s", flush=True)
    for phase, limit in (("check", a.check_timeout), ("time", a.time_timeout)):
        try:
            r = subprocess.run([sys.executable, __file__, "--phase", phase], timeout=limit)
        except subprocess.TimeoutExpired:
            print(f"{phase}: TIMED OUT after {limit}s (hung kernel?)", flush=True)
            return 1
        if r.returncode != 0:
            # Timing still runs after a failed check: the figures are not quotable, but they show
            # whether a fix is worth a second GPU run.
            print(f"{phase}: exit {r.returncode}", flush=True)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
