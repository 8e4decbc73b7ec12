"""Measurement fidelity on one GPU: 8192^3 bf16, the reference GEMM vs cuBLAS (torch.matmul), through the
harness's own timer (kernelpro.harness.timing) under both protocols, with NVML telemetry over each window.

Run from the repo root on the GPU machine (about 3 minutes on an H200, the GEMM build included):
    PYTHONPATH=$PWD python3 docs/measurements/recipes/gpu_fidelity.py
Writes $OUT/fidelity.json (every figure and telemetry record) when $OUT is set. Prints three tables:

1. the 8 steps (do_bench cold, harness isolated alone, interleaved pair, isolated pair, no L2 flush,
   do_bench hot), each with TFLOP/s, the reference/cuBLAS ratio, median SM clock, power, temperature;
2. `isolated` against triton.testing.do_bench at the same steady state, back to back (A: within 2%);
3. repeatability of `isolated`: the same kernel timed twice (A: within 1%).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from kernelpro.harness import telemetry as tl  # noqa: E402
from kernelpro.harness.timing import time_protocol  # noqa: E402

M = N = K = 8192
FLOP = 2 * M * N * K
OUT = os.environ.get("OUT")
rows: list[dict] = []
log: dict = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "gpu": torch.cuda.get_device_name(),
             "torch": torch.__version__, "steps": rows}


def tflops(ms: float) -> float:
    return FLOP / (ms * 1e-3) / 1e12


def tel_cells(t: tl.Telemetry) -> str:
    if not t.available:
        return f"({t.reason})"[:30]
    thr = ",".join(k.replace("sw_power_cap", "pcap").replace("sw_thermal", "therm")
                   for k, v in t.throttle.items() if v >= 0.5 and k != "gpu_idle") or "-"
    return f"{t.sm_mhz.median:5.0f} {t.power_w.median:4.0f} {t.temp_c.median:3.0f} {thr}"


def main() -> int:
    from triton.testing import do_bench

    from kernelpro.harness.worker import extension_dir
    from kernelpro.results.store import source_hash

    # Build into the compile cache the bench worker uses for this file, so `bench` afterwards loads it.
    ref_file = ROOT / "kernelpro/suites/ptxbench/reference/gemm_bf16.py"
    os.environ["TORCH_EXTENSIONS_DIR"] = str(extension_dir(source_hash(ref_file.read_text())))
    from kernelpro.suites.ptxbench.reference import gemm_bf16 as ref

    nvml, why = tl.open_for_cuda("cuda")
    log["nvml"] = why or nvml.label
    if nvml is not None:
        log["power_limit_w"] = nvml.power_limit_w
        log["counter_refresh_ms"] = (tl.counter_refresh_s(nvml) or 0) * 1e3
        log["idle"] = tl.summarize([[nvml.read()]], 0).to_dict()
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    model = ref.ModelNew()
    got = model(a, b)
    torch.cuda.synchronize()
    log["build_s"] = time.perf_counter() - t0
    err = float((got.float() - (a.float() @ b.float())).norm() / (a.float() @ b.float()).norm())
    log["rel_err"] = err
    print(f"reference GEMM built in {log['build_s']:.0f} s, rel err {err:.2e}; NVML: {log['nvml']}", flush=True)
    fns = {"cublas": lambda: torch.matmul(a, b), "ref": lambda: model(a, b)}

    def db(name: str, step: str, rep: int = 500) -> float:
        s = tl.Sampler(nvml)
        with s:
            ms = do_bench(fns[name], warmup=100, rep=rep, return_mode="median")
        rows.append({"step": step, "protocol": "do_bench", name: ms, "telemetry": s.telemetry().to_dict()})
        return ms

    def harness(names: list[str], protocol: str, step: str, **kw) -> dict:
        run = time_protocol({n: fns[n] for n in names}, "cuda", protocol, rep_ms=kw.pop("rep_ms", 1000), **kw)
        rec = {"step": step, "protocol": protocol, **{n: run.stats[n].median_ms for n in names},
               "telemetry": {k: v.to_dict() for k, v in run.telemetry.items()}, "steady": run.steady.to_dict(),
               "order": run.order}
        rows.append(rec)
        print(f"  {step}: {protocol} {names} steady: {run.steady.outcome}", flush=True)
        return rec

    # ---- 1. the eight steps, in this order (the GPU warms as it goes; telemetry says how much)
    db("cublas", "1 do_bench cuBLAS, GPU cold")
    db("ref", "2 do_bench reference")
    harness(["cublas"], "isolated", "3 isolated, cuBLAS alone")
    harness(["ref"], "isolated", "4 isolated, reference alone")
    harness(["ref", "cublas"], "interleaved", "5 interleaved pair")
    harness(["ref", "cublas"], "isolated", "6 isolated pair, A B A B")
    harness(["ref", "cublas"], "interleaved", "7 interleaved pair, no L2 flush", flush_l2=False)
    db("cublas", "8 do_bench cuBLAS again, GPU hot")

    # ---- 2. isolated vs do_bench at the same steady state, back to back, twice each
    agree: dict[str, list[tuple[float, float]]] = {"cublas": [], "ref": []}
    for _ in range(2):
        for name in ("cublas", "ref"):
            iso = time_protocol({name: fns[name]}, "cuda", "isolated", rep_ms=1000)
            ms = do_bench(fns[name], warmup=100, rep=1000, return_mode="median")
            agree[name].append((iso.stats[name].median_ms, ms))
    log["agree"] = agree
    # ---- 3. repeatability: the same kernel twice under isolated
    rep: dict[str, list[float]] = {}
    for name in ("cublas", "ref"):
        rep[name] = [time_protocol({name: fns[name]}, "cuda", "isolated", rep_ms=1000).stats[name].median_ms
                     for _ in range(2)]
    log["repeat"] = rep
    if OUT:
        Path(OUT).mkdir(parents=True, exist_ok=True)
        (Path(OUT) / "fidelity.json").write_text(json.dumps(log, indent=1, default=str))

    # ---- tables (<= 80 columns)
    print(f"\n{log['gpu']}, {log['date']}, power limit {log.get('power_limit_w')} W, "
          f"energy counter refresh {log.get('counter_refresh_ms', 0):.1f} ms")
    print(f"{'step':<33} {'cuBLAS':>6} {'ref':>6} {'ratio':>5}  SM MHz  W    C  throttle")
    for r in rows:
        cb, rf = r.get("cublas"), r.get("ref")
        t = r["telemetry"]
        pair = r["protocol"] == "isolated" and cb and rf
        tel = t if "available" in t else (t.get("*") or t.get("ref") or t.get("cublas"))
        cells = "each side below" if pair else tel_cells(tl.Telemetry.from_dict(tel))
        ratio = f"{cb / rf:5.3f}" if cb and rf else "     "
        print(f"{r['step'][:33]:<33} {tflops(cb) if cb else 0:6.0f} {tflops(rf) if rf else 0:6.0f} {ratio}  {cells}")
        if pair:   # each side's own clock and power
            for n in ("cublas", "ref"):
                print(f"{'   ' + n + ' windows':<53}{tel_cells(tl.Telemetry.from_dict(t[n]))}")
    print("\nisolated vs do_bench, same steady state (ms; pass: within 2%)")
    for name, pairs in agree.items():
        for iso, dbm in pairs:
            d = iso / dbm - 1
            print(f"  {name:<7} isolated {iso:.4f}  do_bench {dbm:.4f}  diff {d:+.2%}  {'ok' if abs(d) <= 0.02 else 'FAIL'}")
    print("\nrepeatability of isolated (ms; pass: within 1%)")
    for name, (x, y) in rep.items():
        d = y / x - 1
        print(f"  {name:<7} first {x:.4f}  second {y:.4f}  diff {d:+.2%}  {'ok' if abs(d) <= 0.01 else 'FAIL'}")
    med = statistics.median(abs(i / d - 1) for p in agree.values() for i, d in p)
    print(f"\nmedian |isolated/do_bench - 1| = {med:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
