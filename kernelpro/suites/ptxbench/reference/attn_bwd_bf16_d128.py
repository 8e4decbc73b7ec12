"""Expert reference for ptxbench/attn_bwd_bf16_d128 on Hopper (sm_90a): non-causal SDPA backward, bf16, head dim 128.

Thin wrapper: the kernel is ``hopper_attn_bwd.cu`` (K/V tile per CTA and a TMA Q/dO ring with mbarriers,
warp-specialised producer with setmaxnreg, wgmma for S^T, dP^T, dV, dK and dQ, dQ accumulated in fp32),
loaded by ``_attn_bwd_common.py``. Compiled for sm_90a and checked statically; its GPU correctness is
established by ``kernelpro bench``.

A template for the parameter search too (``PARAMS``, ``make_source``, ``validate``, ``LADDERS``,
``ADVICE``, ``GENERIC_START``): ``BWD_STAGES`` (2 or 3), the depth of the Q/dO ring, and
``BWD_DQ_RED_V2`` (dQ added with red.global.add.v2.f32, or one scalar atomicAdd per element), passed to
nvcc as macros.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch
import torch.nn as nn

# The targets this reference builds for (read by the static verifier without importing the module).
ARCHS = {"sm_90a": "wgmma"}

CAUSAL = False

PARAMS = {
    "BWD_STAGES": 2,
    "BWD_DQ_RED_V2": 1,
}

# ---- candidate body (make_source copies everything from here to the end marker) ----


def _common():
    """_attn_bwd_common.py beside this file, or the copy a generated candidate embeds (_COMMON_SRC)."""
    embedded = globals().get("_COMMON_SRC")
    name = "kp_ptxbench_attn_bwd_common" + ("_embedded" if embedded else "")
    if name not in sys.modules:
        if embedded:
            mod = types.ModuleType(name)
            mod.__file__ = str(Path(__file__).with_name("_attn_bwd_common.py"))
            exec(compile(embedded, "_attn_bwd_common.py", "exec"), mod.__dict__)  # noqa: S102 - our own source
        else:
            spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_attn_bwd_common.py"))
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        sys.modules[name] = mod
    return sys.modules[name]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # Build with the model (see gemm_bf16.py): the static verifier constructs ModelNew to see it.
        _common().build(CAUSAL, globals().get("CUDA_SRC"), **PARAMS)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
                lse: torch.Tensor, delta: torch.Tensor):
        # o is not read: delta = rowsum(dO * O) arrives precomputed.
        return _common().attn_backward(q, k, v, do, lse, delta, CAUSAL, globals().get("CUDA_SRC"), **PARAMS)
# ---- end candidate body ----


def make_source(params: dict) -> str:
    """A standalone candidate .py for ``params`` (merged over PARAMS), loader and CUDA source embedded."""
    return _common().make_source(Path(__file__), PARAMS, params)


def validate(p: dict) -> str | None:
    """Why ``p`` cannot build; None if valid."""
    return _common().validate(p)


# ---- search space, read by the LLM-free parameter policy (kernelpro.agent.policy_param) ----

LADDERS, ADVICE, GUIDANCE = _common().LADDERS, _common().ADVICE, _common().GUIDANCE
GENERIC_START = _common().GENERIC_START
