"""Expert reference for ptxbench/gemm_bf16_nt on Hopper (sm_90a) and Blackwell (sm_100a): C = A @ B.T, A (M, K) and B (N, K) both
K-major bf16 — the same layout as PTXBench's headline GEMM, so the same reference
(``gemm_bf16_headline.py``: the Hopper GEMM built with ``B_KMAJOR=1``), re-exported, template included.
On sm_100a gemm_bf16.py builds its Blackwell kernel (``blackwell_gemm.cu``, tcgen05.mma with the
accumulator in tensor memory) with ``B_KMAJOR=1``: compiled and statically verified only, no B200 was
available, so it has never run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# The targets this reference builds for (read by the static verifier without importing the module).
ARCHS = {"sm_90a": "wgmma", "sm_100a": "tcgen05.mma"}


def _headline():
    name = "kp_ptxbench_gemm_bf16_headline_ref"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("gemm_bf16_headline.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


PARAMS = _headline().PARAMS
make_source = _headline().make_source
ModelNew = _headline().ModelNew
LADDERS, DERIVED, FIXED, GUIDANCE = _headline().LADDERS, _headline().DERIVED, _headline().FIXED, _headline().GUIDANCE
ADVICE, GENERIC_START = _headline().ADVICE, _headline().GENERIC_START
validate, repair, extra_moves = _headline().validate, _headline().repair, _headline().extra_moves
