"""Helpers of gpu_ptxbench_formats.sh (run from the repo root, PYTHONPATH set by the script).

  headline CHECKOUT DEST   find PTXBench's five headline definitions in a checkout (trace sets under any
                           definitions/ folder); the public repository carries no trace set (its data/ is
                           empty by design), but it does carry gemm_n7168_k5120's definition as JSON in its
                           Harbor task text: that one is read from there and given the M=8192 workload the
                           Harbor task names. Writes a trace set to DEST and prints what it found.
  gemm-solution DEST       the honest TVM-FFI GEMM bundle (tests/flashinfer_kernels.py) for gemm_n7168_k5120.
  sdpa-bwd                 cuDNN frontend SDPA backward beside PyTorch's (autograd through SDPA) at
                           B=4, H=48, S=4096, D=128 bf16, non-causal and causal, under the ptxbench
                           protocol (10 warm-ups, 3 x 50 calls, cold L2), plus a check of cuDNN's dQ, dK,
                           dV against PyTorch's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HEADLINE = ("mha_with_lse_d128", "mha_with_lse_d128_causal", "mha_bwd_d128", "mha_bwd_d128_causal",
            "gemm_n7168_k5120")


def headline(checkout: Path, dest: Path) -> None:
    found = {}
    for p in checkout.rglob("definitions/**/*.json"):
        if p.stem in HEADLINE:
            found[p.stem] = p
    for name in HEADLINE:
        print(f"{name}: {found[name] if name in found else 'no definition file in the checkout'}")
    gemm = checkout / "integrations/harbor/tasks/gemm_n7168_k5120/instruction.md"
    text = gemm.read_text() if gemm.is_file() else ""
    start = text.find("{", text.find("Task:"))
    if start < 0:
        print("gemm_n7168_k5120: no definition JSON in the Harbor task text either")
        return
    d, _ = json.JSONDecoder().raw_decode(text[start:])
    (dest / "definitions" / "gemm").mkdir(parents=True, exist_ok=True)
    (dest / "workloads" / "gemm").mkdir(parents=True, exist_ok=True)
    (dest / "definitions" / "gemm" / f"{d['name']}.json").write_text(json.dumps(d, indent=1))
    line = {"definition": d["name"], "workload": {"uuid": "94920358-01a8-4c5b-9209-3103fd490e94",
                                                  "axes": {"M": 8192}, "inputs": {}}}
    (dest / "workloads" / "gemm" / f"{d['name']}.jsonl").write_text(json.dumps(line) + "\n")
    print(f"{d['name']}: definition read from {gemm.relative_to(checkout)} (workload M=8192) -> {dest}")


def gemm_solution(dest: Path) -> None:
    sys.path.insert(0, ".")
    from tests.flashinfer_kernels import write_solutions

    tmp = write_solutions(dest / "_all", "honest")
    b = json.loads((tmp / "gemm_n256_k512" / "solution.json").read_text())
    b.update(name="gemm_n7168_k5120_kernelpro_hopper", definition="gemm_n7168_k5120")
    (dest / "gemm_n7168_k5120").mkdir(parents=True, exist_ok=True)
    (dest / "gemm_n7168_k5120" / "solution.json").write_text(json.dumps(b))


def sdpa_bwd() -> None:
    import torch

    from kernelpro.harness import timing
    from kernelpro.harness.sdpa import cudnn_sdpa, torch_sdpa

    B, H, S, D = 4, 48, 4096, 128
    flops = 2.5 * 4 * B * H * S * S * D     # FA's backward count: 2.5 x the forward's 4*B*H*S^2*D
    for causal in (False, True):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), do)
        fwd = cudnn_sdpa("forward", causal, [q, k, v])
        fwd()
        o_c, lse = fwd.outputs
        bwd = cudnn_sdpa("backward", causal, [q, k, v, o_c, do, lse])
        bwd()
        torch.cuda.synchronize()
        errs = [float((a.float() - b.float()).abs().max()) for a, b in zip(bwd.outputs, (dq, dk, dv), strict=True)]
        run = timing.time_protocol({"cudnn_frontend": bwd, "torch_sdpa": torch_sdpa("backward", causal,
                                                                                    [q, k, v, o_c, do, lse])},
                                   "cuda", "ptxbench")
        c, t = run.stats["cudnn_frontend"], run.stats["torch_sdpa"]
        f = flops / (2 if causal else 1)
        print(f"sdpa backward B={B} H={H} S={S} D={D} causal={causal}: cudnn_frontend {c.median_ms:.3f} ms "
              f"({f / c.median_ms / 1e9:.0f} TFLOP/s, trials {[round(x, 3) for x in c.trials_ms]}), torch_sdpa "
              f"{t.median_ms:.3f} ms ({f / t.median_ms / 1e9:.0f} TFLOP/s, trials {[round(x, 3) for x in t.trials_ms]}); "
              f"torch/cudnn {t.median_ms / c.median_ms:.2f}x; max |cudnn - torch| dQ,dK,dV {[round(e, 4) for e in errs]}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "headline":
        headline(Path(sys.argv[2]), Path(sys.argv[3]))
    elif cmd == "gemm-solution":
        gemm_solution(Path(sys.argv[2]))
    elif cmd == "sdpa-bwd":
        sdpa_bwd()
    else:
        raise SystemExit(f"unknown command {cmd}")
