"""Expert reference for ptxbench/attn_fwd_lse_bf16 on Hopper (sm_90a) and Blackwell (sm_100a): non-causal SDPA forward, bf16, head dim 128; returns (out, lse), lse fp32 natural-log logsumexp of the scaled scores.

Thin wrapper; ``_attn_common.py`` loads the kernel for the target architecture. Hopper:
``hopper_attn_fwd.cu`` (TMA K/V ring with mbarriers, warp-specialised producer with setmaxnreg, wgmma
for Q K^T and for P V with P in registers). Blackwell: ``blackwell_attn_fwd.cu`` (tcgen05.mma for both
products with S and O in tensor memory, TMA K/V ring, mbarriers, online softmax), compiled and
statically verified only: no B200 was available, so it has never run.
A parameter-search template too (Hopper): ``PARAMS`` (consumer warpgroups, K/V ring depth, S/PV
overlap), ``make_source`` and the rules, all from ``_attn_common.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn as nn

# The targets this reference builds for and the instruction family of each one's kernel (read by the
# static verifier without importing the module).
ARCHS = {"sm_90a": "wgmma", "sm_100a": "tcgen05.mma"}


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
        self._params = _common().for_target(PARAMS)   # resolved once: no target lookup per call
        _common().build(causal=False, with_lse=True, **self._params)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        return _common().attn_forward(q, k, v, causal=False, with_lse=True, **self._params)


# ---- parameter-search template (kernelpro.agent.policy_param); the rules live in _attn_common.py ----
PARAMS = dict(_common().PARAMS)
LADDERS, ADVICE, GENERIC_START = _common().LADDERS, _common().ADVICE, _common().GENERIC_START
validate, repair = _common().validate, _common().repair


def make_source(params: dict) -> str:
    return _common().make_candidate("ptxbench/attn_fwd_lse_bf16", causal=False, with_lse=True, params=params)
