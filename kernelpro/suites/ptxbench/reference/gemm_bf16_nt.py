"""Expert reference for ptxbench/gemm_bf16_nt on Hopper (sm_90a): C = A @ B.T, A (M, K) and B (N, K) both
K-major bf16 — the same layout as PTXBench's headline GEMM, so the same reference
(``gemm_bf16_headline.py``: the Hopper GEMM built with ``B_KMAJOR=1``), re-exported, template included.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


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
validate, repair, extra_moves = _headline().validate, _headline().repair, _headline().extra_moves
