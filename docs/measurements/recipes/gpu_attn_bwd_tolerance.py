#!/usr/bin/env python3
"""How far apart honest bf16 attention backwards are, under the attn_bwd tasks' own tolerance rule.

Run on a Hopper GPU machine from the repo root:
    export PYTHONPATH=$PWD; python3 docs/measurements/recipes/gpu_attn_bwd_tolerance.py

For every size the headline tasks check (default, shown, held-out; causal and not), with inputs drawn as the
tasks' get_inputs draw them, three bf16 backwards are run on the same inputs: the Hopper reference
(``hopper_attn_bwd.cu``), cuDNN's SDPA backward (what the task's Model returns on CUDA, so what a candidate
is judged against) and PyTorch's flash-attention backward. Each is compared with an fp32 truth (the tasks'
``math_backward`` equations, in fp32, one head at a time, not rounded to bf16) and with cuDNN, by the
judge's elementwise rule (|out - ref| <= atol + rtol |ref|) and relative norm.
One JSON line per (size, pair, gradient) on stdout; $OUT/attn_bwd_tolerance.json when $OUT is set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

from kernelpro.harness.tensors import error_stats

ROOT = Path(__file__).resolve().parents[3]
PTX = ROOT / "kernelpro" / "suites" / "ptxbench"
SIZES = {"default": (4, 4096), "shown0": (1, 512), "shown1": (2, 1024), "shown2": (4, 2048),
         "heldout0": (1, 1000), "heldout1": (4, 3080)}
HEADS, D = 48, 128


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def truth(x, causal: bool):
    """fp32 gradients, one (b, h) at a time, never rounded to bf16."""
    q, k, v, o, do, lse = x[:6]
    out = [torch.empty(q.shape, dtype=torch.float32, device=q.device) for _ in range(3)]
    scale = D ** -0.5
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            qf, kf, vf, of, dof = (t[b, h].float() for t in (q, k, v, o, do))
            s = (qf @ kf.T) * scale
            if causal:
                s = s.masked_fill(~torch.ones_like(s, dtype=torch.bool).tril(), float("-inf"))
            p = torch.exp(s - lse[b, h].float().unsqueeze(-1))
            out[2][b, h] = p.T @ dof
            ds = p * (dof @ vf.T - (dof * of).sum(-1, keepdim=True))
            out[0][b, h] = (ds @ kf) * scale
            out[1][b, h] = (ds.T @ qf) * scale
    return out


def flash_backward(q, k, v, do, causal: bool):
    """PyTorch's flash-attention backward through autograd (it re-runs its own forward for O and LSE)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    out.backward(do)
    return tuple(t.grad for t in leaves)


def stats(got: torch.Tensor, ref: torch.Tensor, tol: dict) -> dict:
    """The judge's own verdict on the pair (`error_stats`), and the atol its rule would need."""
    st = error_stats(got, ref, tol)
    r = ref.double()
    # The smallest atol that passes every element at the task's rtol: what a tolerance must be at least.
    need_atol = float(((got.double() - r).abs() - tol["rtol"] * r.abs()).clamp_min(0).max())
    return {"rel_norm": st["rel_norm"], "max_abs": st["max_abs"], "need_atol": need_atol,
            "bad": round(st["mismatch"] * r.numel()), "numel": r.numel(), "ref_absmax": float(r.abs().max()),
            "passes_rule": st["ok"]}


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (Hopper, sm_90); run this on the GPU machine", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    common = _load(PTX / "reference" / "_attn_bwd_common.py", "attn_bwd_common")
    rows = []
    for causal in (False, True):
        task = _load(PTX / "tasks" / ("attn_bwd_causal_headline_bf16.py" if causal
                                      else "attn_bwd_headline_bf16.py"), "task")
        tol = task.META["tolerance"]
        common.build(causal, None, BWD_STAGES=2)
        for label, (b, s) in SIZES.items():
            g = torch.Generator(device="cuda").manual_seed(1000 + s)

            def randn(scale=1.0, b=b, s=s, g=g):
                return (torch.randn(b, HEADS, s, D, device="cuda", generator=g) * scale).to(torch.bfloat16)

            q, k, v, do = randn(2.0), randn(), randn(), randn()
            o, lse = task.attention_with_lse(q, k, v, causal)
            delta = (do.float() * o.float()).sum(-1)
            x = (q, k, v, o, do, lse, delta)
            impls = {
                "kernelpro": common.attn_backward(q, k, v, do, lse, delta, causal, None, BWD_STAGES=2),
                "cudnn": task.vendor_backward(q, k, v, o, do, lse, causal),
            }
            try:
                impls["flash"] = flash_backward(q, k, v, do, causal)
            except RuntimeError as exc:  # reason: a build without flash kernels; the row says so
                print(json.dumps({"size": label, "flash_error": str(exc)[:200]}), flush=True)
            tru = truth(x, causal)
            torch.cuda.synchronize()
            pairs = [(n, "fp32") for n in impls] + [(n, "cudnn") for n in impls if n != "cudnn"]
            for a, ref in pairs:
                for gi, gname in enumerate(("dq", "dk", "dv")):
                    r = tru[gi] if ref == "fp32" else impls["cudnn"][gi]
                    row = {"causal": causal, "size": label, "B": b, "S": s, "impl": a, "vs": ref, "grad": gname,
                           **stats(impls[a][gi], r, tol)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            del impls, tru, x
            torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "attn_bwd_tolerance.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
