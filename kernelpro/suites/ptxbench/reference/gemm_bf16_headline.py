"""Expert reference for ptxbench/gemm_bf16_headline on Hopper (sm_90a) and Blackwell (sm_100a): PTXBench's headline GEMM (M=8192, N=7168, K=5120), C = A @ B.T with
A (M, K) and B (N, K) both K-major bf16.

Thin wrapper over gemm_bf16.py: the same warp-specialized TMA + mbarrier + wgmma + setmaxnreg kernel
(``hopper_gemm.cu``) built with ``B_KMAJOR=1``, which tiles B like A and runs wgmma with trans-b 0.
``PARAMS`` and ``make_source`` make it a template for the parameter search, like gemm_bf16.
On sm_100a gemm_bf16.py builds its Blackwell kernel (``blackwell_gemm.cu``, tcgen05.mma with the
accumulator in tensor memory) with ``B_KMAJOR=1``: compiled and statically verified only, no B200 was
available, so it has never run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn as nn

# The targets this reference builds for (read by the static verifier without importing the module).
ARCHS = {"sm_90a": "wgmma", "sm_100a": "tcgen05.mma"}


def _gemm():
    name = "kp_ptxbench_gemm_bf16_ref"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("gemm_bf16.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


PARAMS = {**_gemm().PARAMS, "B_KMAJOR": 1}
# The same kernel, so the same search space (rules, ladders, guidance) as gemm_bf16.
LADDERS, DERIVED, FIXED, GUIDANCE = _gemm().LADDERS, _gemm().DERIVED, _gemm().FIXED, _gemm().GUIDANCE
ADVICE, GENERIC_START = _gemm().ADVICE, _gemm().GENERIC_START
validate, repair, extra_moves = _gemm().validate, _gemm().repair, _gemm().extra_moves


def make_source(params: dict) -> str:
    """A standalone candidate for ``params`` merged over PARAMS (B stays K-major)."""
    return _gemm().make_source({**PARAMS, **params, "B_KMAJOR": 1})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _gemm()._build(PARAMS)   # build with the model (see gemm_bf16.py)

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _gemm()._build(PARAMS).gemm_bf16(A, B)
