"""Build, check and time the Hopper bf16 GEMM reference against torch.matmul (cuBLAS) on one GPU.

Run on the GPU machine from the repo root:  export PYTHONPATH=$PWD; python3 docs/measurements/recipes/gpu_gemm_ref.py
Options: --variants JSON (list of PARAMS overrides; default: a small sweep), --reps N.

Every variant is built first (in parallel processes), then checked and timed in its own subprocess
with a timeout, so a hang or a crash in one variant costs only that variant. Correctness: random
inputs, output buffer poisoned with NaN first (the allocator hands the freed block back), error as
||C - ref|| / ||ref|| against an fp32 product of the same bf16 inputs, and a second launch must be
bitwise equal (a moving result means a race). Timing: CUDA events around each launch, a 256 MiB L2
flush before each, warm-up, median of --reps launches, cuBLAS and the kernel interleaved in blocks.
Prints a table last; with $OUT set, also writes $OUT/gemm_ref.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
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
REF = ROOT / "kernelpro/suites/ptxbench/reference/gemm_bf16.py"

CHECK_SIZES = [  # (M, N, K): shown sizes, then held-out non-multiples of the tile
    (8192, 8192, 8192), (1024, 1024, 1024), (2048, 4096, 512), (1000, 1000, 1000), (3000, 2056, 1536),
]
DEFAULT_VARIANTS = [  # overrides of the reference's PARAMS (BM256 BN128 BK64 4 stages, 2 consumers, cluster 2)
    {},
    {"BM": 128, "BN": 256},
    {"BM": 128, "BN": 256, "CLUSTER_M": 1},
    {"CLUSTER_M": 1},
    {"GROUP_M": 16},
]


def load_ref():
    spec = importlib.util.spec_from_file_location("kp_ref_gemm_bf16", REF)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def params_of(override: dict) -> dict:
    ref = load_ref()
    p = dict(ref.PARAMS)
    p.update(override)
    return p


def build_one(override: dict) -> tuple[dict, float, str]:
    t0 = time.time()
    try:
        load_ref()._build(params_of(override))
        return override, time.time() - t0, ""
    except Exception as e:  # report the build error, keep the sweep going
        return override, time.time() - t0, str(e)[-1500:]


# ---------------------------------------------------------------------------------------------
# worker: one variant, in its own process


def bench(fn, reps: int, flush) -> list[float]:
    import torch

    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def worker(override: dict, reps: int, time_all: bool) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref = load_ref()
    mod = ref._build(params_of(override))
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1234)
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device=dev)
    out = {"params": params_of(override), "sizes": []}
    for M, N, K in CHECK_SIZES:
        A = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=gen)
        B = torch.randn(K, N, device=dev, dtype=torch.bfloat16, generator=gen)
        want = torch.matmul(A.float(), B.float())
        poison = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
        poison_ptr = poison.data_ptr()
        del poison
        C = mod.gemm_bf16(A, B)
        torch.cuda.synchronize()
        poisoned = C.data_ptr() == poison_ptr
        finite = bool(torch.isfinite(C).all())
        err = float((C.float() - want).norm() / want.norm())
        C2 = mod.gemm_bf16(A, B)
        same = bool(torch.equal(C, C2))
        cub = torch.matmul(A, B)
        cub_err = float((cub.float() - want).norm() / want.norm())
        row = {"M": M, "N": N, "K": K, "err": err, "cublas_err": cub_err, "finite": finite,
               "poisoned": poisoned, "deterministic": same,
               "ok": finite and same and err < 1e-2}
        if time_all or (M, N, K) == CHECK_SIZES[0]:
            ours, theirs = [], []
            for _ in range(2):  # interleave blocks so clock drift hits both alike
                theirs += bench(lambda A=A, B=B: torch.matmul(A, B), reps, flush)
                ours += bench(lambda A=A, B=B: mod.gemm_bf16(A, B), reps, flush)
            flops = 2.0 * M * N * K
            t_ours, t_cub = statistics.median(ours), statistics.median(theirs)
            row.update({"ms": t_ours, "cublas_ms": t_cub, "tflops": flops / t_ours / 1e9,
                        "cublas_tflops": flops / t_cub / 1e9, "ratio": t_cub / t_ours,
                        "ms_spread": [min(ours), max(ours)], "cublas_ms_spread": [min(theirs), max(theirs)]})
        out["sizes"].append(row)
        del A, B, want, C, C2, cub
        torch.cuda.empty_cache()
    if time_all:
        out["candidate"] = candidate_check(override)
    return out


def candidate_check(override: dict) -> dict:
    """The standalone file make_source() writes must work through ModelNew, as the harness loads it."""
    import tempfile

    import torch

    text = load_ref().make_source(override)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "cand_gemm_bf16.py")
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("cand_gemm_bf16", path)
        cand = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cand)
        A = torch.randn(1000, 1000, device="cuda", dtype=torch.bfloat16)
        B = torch.randn(1000, 1000, device="cuda", dtype=torch.bfloat16)
        C = cand.ModelNew().cuda()(A, B)
        want = torch.matmul(A.float(), B.float())
        err = float((C.float() - want).norm() / want.norm())
    return {"err_1000": err, "ok": err < 1e-2}


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=None, help="JSON list of PARAMS overrides")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--time-all", action="store_true", help="time every size for every variant (default: 8192^3 only, all sizes for the first)")
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()

    if args.worker is not None:
        print("RESULT " + json.dumps(worker(json.loads(args.worker), args.reps, args.time_all)), flush=True)
        return 0

    import torch

    variants = json.loads(args.variants) if args.variants else DEFAULT_VARIANTS
    info = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        info["nvidia_smi"] = f"unavailable: {e}"
    print(json.dumps(info), flush=True)

    t0 = time.time()
    builds = {}
    with cf.ProcessPoolExecutor(max_workers=min(len(variants), 8), mp_context=mp.get_context("spawn")) as ex:
        unique = list({json.dumps(v, sort_keys=True): v for v in variants}.values())
        for override, secs, err in ex.map(build_one, unique):
            builds[json.dumps(override, sort_keys=True)] = err
            print(f"build {json.dumps(override)}: {'ok' if not err else 'FAILED'} in {secs:.0f}s", flush=True)
            if err:
                print(err, flush=True)
    print(f"builds done in {time.time() - t0:.0f}s", flush=True)

    results = []
    for i, override in enumerate(variants):
        if builds[json.dumps(override, sort_keys=True)]:
            results.append({"override": override, "error": "build failed"})
            continue
        cmd = [sys.executable, __file__, "--worker", json.dumps(override), "--reps", str(args.reps)]
        if i == 0 or args.time_all:
            cmd.append("--time-all")
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if p.returncode != 0 or not line:
                results.append({"override": override, "error": f"rc={p.returncode}: {p.stderr[-800:]}"})
            else:
                r = json.loads(line[-1][7:])
                r["override"] = override
                results.append(r)
        except subprocess.TimeoutExpired:
            results.append({"override": override, "error": f"timeout after {args.timeout}s (hang?)"})
        print(f"variant {json.dumps(override)} done", flush=True)

    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gemm_ref.json").write_text(json.dumps({"info": info, "results": results}, indent=1))

    print("\n" + info["date"] + "  " + str(info["gpu"]) + "  torch " + info["torch"] + "  " + info["nvidia_smi"])
    hdr = f"{'variant':44} {'M':>5} {'N':>5} {'K':>5} {'relerr':>8} {'ok':>3} {'ms':>8} {'TFLOP/s':>8} {'cuBLAS':>8} {'ratio':>6}"
    print(hdr)
    for r in results:
        name = json.dumps(r["override"]) if r["override"] else "default"
        if "error" in r:
            print(f"{name:44} ERROR {r['error'][:300]}")
            continue
        for s in r["sizes"]:
            timing = (f"{s['ms']:8.3f} {s['tflops']:8.1f} {s['cublas_tflops']:8.1f} {s['ratio']:6.3f}"
                      if "ms" in s else "")
            flag = "yes" if s["ok"] else "NO"
            extra = "" if s["poisoned"] else " (poison not reused)"
            print(f"{name[:44]:44} {s['M']:5d} {s['N']:5d} {s['K']:5d} {s['err']:8.1e} {flag:>3} {timing}{extra}")
        if "candidate" in r:
            print(f"{name[:44]:44} make_source() candidate via ModelNew, 1000^3: {r['candidate']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
