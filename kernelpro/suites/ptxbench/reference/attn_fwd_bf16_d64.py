"""Expert reference for ptxbench/attn_fwd_bf16_d64 on Hopper (sm_90a): non-causal SDPA forward, bf16, head dim 64.

Thin wrapper: the kernel is ``hopper_attn_fwd.cu`` (TMA K/V ring with mbarriers, warp-specialised
producer with setmaxnreg, wgmma for Q K^T and for P V with P in registers), loaded by ``_attn_common.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn as nn

# The targets this reference builds for (read by the static verifier without importing the module): the
# Blackwell attention kernel is written for head dim 128 only, so head dim 64 is Hopper-only.
ARCHS = {"sm_90a": "wgmma"}


def _common():
    name = "kp_ptxbench_attn_common"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_attn_common.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # Build with the model (see gemm_bf16.py): the static verifier constructs ModelNew to see it.
        _common().build(causal=False, with_lse=False, ATTN_HEAD_DIM=64)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        return _common().attn_forward(q, k, v, causal=False, with_lse=False)
