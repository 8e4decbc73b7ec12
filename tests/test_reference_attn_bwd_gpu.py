"""GPU check of the Hopper attention-backward reference against each task's fp32 ``math_backward``.

Runs the shown and held-out sizes of the four attn_bwd tasks (skipped without a GPU; needs sm_90). The error
measure is the task's own ``rel_norm`` tolerance per gradient; the harness (``kernelpro bench``) remains the
judge of correctness, this is the quick check to run first on a Hopper machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench"
NAMES = ["attn_bwd_headline_bf16", "attn_bwd_causal_headline_bf16", "attn_bwd_bf16_d128",
         "attn_bwd_causal_bf16_d128"]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cases():
    for name in NAMES:
        task = _load(ROOT / "tasks" / f"{name}.py", f"task_{name}")
        for kind in ("shown", "heldout"):
            for size in task.META["sizes"][kind]:
                yield pytest.param(name, size, id=f"{name}-{kind}-" + "-".join(f"{k}{v}" for k, v in size.items()))


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "size"), list(_cases()))
def test_reference_matches_task_math(name, size):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the reference is built for sm_90a (Hopper)")
    task = _load(ROOT / "tasks" / f"{name}.py", f"task_{name}")
    ref_mod = _load(ROOT / "reference" / f"{name}.py", f"ref_{name}")
    causal = "causal" in name
    b, h, s = size.get("BATCH", task.BATCH), size.get("HEADS", task.HEADS), size.get("SEQ", task.SEQ)
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(scale=1.0):
        return (torch.randn(b, h, s, task.HEAD_DIM, device="cuda", generator=g) * scale).to(torch.bfloat16)

    q, k, v, do = randn(2.0), randn(), randn(), randn()
    o, lse = task.attention_with_lse(q, k, v, causal)
    delta = (do.float() * o.float()).sum(-1)
    got = ref_mod.ModelNew()(q, k, v, o, do, lse, delta)
    torch.cuda.synchronize()
    tol = task.META["tolerance"]["rel_norm"]
    for hh in range(h):  # the fp32 math holds S x S matrices: one head at a time
        sl = slice(hh, hh + 1)
        want = task.math_backward(q[:, sl], k[:, sl], v[:, sl], o[:, sl], do[:, sl], lse[:, sl], causal)
        for grad, x, w in zip(("dq", "dk", "dv"), got, want, strict=True):
            x, w = x[:, sl].float(), w.float()
            assert torch.isfinite(x).all(), (grad, hh)
            rel = ((x - w).norm() / w.norm()).item()
            assert rel < tol, (grad, hh, rel)
