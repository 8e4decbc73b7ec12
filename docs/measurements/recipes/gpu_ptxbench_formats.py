"""Helpers of gpu_ptxbench_formats.sh (run from the repo root, PYTHONPATH set by the script).

  headline CHECKOUT DEST   PTXBench's five headline definitions as a trace set in DEST, made by PTXBench's own
                           code from a checkout: its attention preparation scripts (run as they are, from
                           the checkout) write mha_with_lse_d128[_causal] (random-input workloads) and
                           mha_bwd_d128[_causal] (inputs from cuDNN's forward, as safetensors blobs; needs the
                           GPU and the cuDNN frontend); the GEMM gemm_n7168_k5120 is read from its Harbor task
                           text (the JSON it embeds) and given the M=8192 workload that task names. Only
                           head dim 128 and the headline sequence length S=4096 are kept. Prints what it found.
  solutions DEST           KernelPro's Hopper references as TVM-FFI solution bundles for the five headline
                           definitions (tests/flashinfer_kernels.py: GEMM, attention forward, backward).
  sdpa-bwd                 cuDNN frontend SDPA backward beside PyTorch's (autograd through SDPA) at
                           B=4, H=48, S=4096, D=128 bf16, non-causal and causal, under the ptxbench
                           protocol (10 warm-ups, 3 x 50 calls, cold L2), plus a check of cuDNN's dQ, dK,
                           dV against PyTorch's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEADLINE = {"mha_with_lse_d128": ("attn_fwd", False), "mha_with_lse_d128_causal": ("attn_fwd", True),
            "mha_bwd_d128": ("attn_bwd", False), "mha_bwd_d128_causal": ("attn_bwd", True),
            "gemm_n7168_k5120": ("gemm", False)}
S_HEADLINE = 4096
MULTITURN = Path("packages/mini-ptx-agent/fib_runtime/multiturn")
# PTXBench's backward script, with its sequence lengths cut to the headline one (its blobs at S=16384 are
# about 5 GB per workload): the script itself runs unchanged, from the checkout.
_BWD = ("import runpy, sys; g = runpy.run_path(sys.argv[1], run_name='ptxbench_prepare'); "
        "g['S_VALUES'][:] = [int(sys.argv[3])]; "
        "sys.argv = [sys.argv[1], '--dataset-root', sys.argv[2], '--d-values', '128']; g['main']()")


def headline(checkout: Path, dest: Path) -> None:
    fwd = checkout / MULTITURN / "mha-with-lse-problems/scripts/prepare_mha_with_lse.py"
    bwd = checkout / MULTITURN / "mha-bwd-problems/scripts/prepare_mha_bwd.py"
    dest.mkdir(parents=True, exist_ok=True)
    for script, cmd in ((fwd, [sys.executable, str(fwd), "--dataset-root", str(dest)]),
                        (bwd, [sys.executable, "-c", _BWD, str(bwd), str(dest), str(S_HEADLINE)])):
        if not script.is_file():
            print(f"{script.relative_to(checkout)}: not in the checkout")
            continue
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        tail = (r.stdout + r.stderr).strip().splitlines()[-2:]
        print(f"{script.name}: exit {r.returncode}; {' | '.join(tail)}")
    gemm = checkout / "integrations/harbor/tasks/gemm_n7168_k5120/instruction.md"
    text = gemm.read_text() if gemm.is_file() else ""
    start = text.find("{", text.find("Task:"))
    if start >= 0:
        d, _ = json.JSONDecoder().raw_decode(text[start:])
        (dest / "definitions" / "gemm").mkdir(parents=True, exist_ok=True)
        (dest / "workloads" / "gemm").mkdir(parents=True, exist_ok=True)
        (dest / "definitions" / "gemm" / f"{d['name']}.json").write_text(json.dumps(d, indent=1))
        line = {"definition": d["name"], "workload": {"uuid": "94920358-01a8-4c5b-9209-3103fd490e94",
                                                      "axes": {"M": 8192}, "inputs": {}}}
        (dest / "workloads" / "gemm" / f"{d['name']}.jsonl").write_text(json.dumps(line) + "\n")
        print(f"{d['name']}: definition read from {gemm.relative_to(checkout)} (workload M=8192)")
    # keep the five headline definitions, each with its S=4096 workload only
    for p in sorted(dest.glob("definitions/**/*.json")):
        if p.stem not in HEADLINE:
            p.unlink()
    for p in sorted(dest.glob("workloads/**/*.jsonl")):
        if p.stem not in HEADLINE:
            p.unlink()
            continue
        keep = [ln for ln in p.read_text().splitlines()
                if ln.strip() and json.loads(ln)["workload"]["axes"].get("S", S_HEADLINE) == S_HEADLINE]
        p.write_text("".join(k + "\n" for k in keep))
    for name in HEADLINE:
        defs = list(dest.glob(f"definitions/**/{name}.json"))
        loads = list(dest.glob(f"workloads/**/{name}.jsonl"))
        n = len(loads[0].read_text().splitlines()) if loads else 0
        print(f"{name}: {'definition ' + str(defs[0].relative_to(dest)) if defs else 'no definition'}, "
              f"{n} workload(s)")


def solutions(dest: Path) -> None:
    sys.path.insert(0, ".")
    from tests.flashinfer_kernels import honest_bundle

    for name, (kind, causal) in HEADLINE.items():
        (dest / name).mkdir(parents=True, exist_ok=True)
        (dest / name / "solution.json").write_text(json.dumps(honest_bundle(name, kind, causal)))
    print(f"wrote {len(HEADLINE)} KernelPro Hopper bundles under {dest}")


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
    elif cmd == "solutions":
        solutions(Path(sys.argv[2]))
    elif cmd == "sdpa-bwd":
        sdpa_bwd()
    else:
        raise SystemExit(f"unknown command {cmd}")
