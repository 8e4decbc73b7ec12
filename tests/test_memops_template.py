"""The RMSNorm reference as a parameter-search template (the energy objective's memory-bound task):
generated candidates are standalone, carry their parameters to nvcc, and the policy moves along them."""

from __future__ import annotations

import ast
import importlib.util
import sys

import pytest

from kernelpro.agent.policy_param import load_template, moves, params_of
from kernelpro.suites.task import find_task
from kernelpro.toolchain import find_tool


def _template():
    return load_template(find_task("ptxbench/rmsnorm_bf16"))


def test_template_rules_and_moves():
    t = _template()
    assert t.params == {"ROW_STAGES": 3, "ROW_STAGE_KB": 32, "ROW_CTAS_PER_SM": 0}
    assert t.validate(t.params) is None
    assert "shared memory" in t.validate({**t.params, "ROW_STAGES": 5, "ROW_STAGE_KB": 64})
    assert t.validate({**t.params, "ROW_STAGE_KB": 24}) is not None
    got = {(k, d): q for k, d, q in moves(t, t.params)}
    assert got[("ROW_STAGES", +1)]["ROW_STAGES"] == 4 and got[("ROW_CTAS_PER_SM", +1)]["ROW_CTAS_PER_SM"] == 1
    assert all(t.validate(q) is None for q in got.values())


def test_generated_candidate_is_standalone(tmp_path, monkeypatch):
    t = _template()
    src = t.make_source({"ROW_STAGES": 4, "ROW_CTAS_PER_SM": 2})
    assert params_of(src) == {"ROW_STAGES": 4, "ROW_STAGE_KB": 32, "ROW_CTAS_PER_SM": 2}
    ast.parse(src)
    p = tmp_path / "cand.py"     # nowhere near _memops_common.py
    p.write_text(src)
    calls = []
    import torch.utils.cpp_extension as ce

    monkeypatch.setattr(ce, "load_inline", lambda **kw: calls.append(kw) or object())
    spec = importlib.util.spec_from_file_location("kp_cand_rms", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod._build(mod.PARAMS)
    finally:
        sys.modules.pop("kp_ptxbench_memops_common_embedded", None)
    flags = calls[0]["extra_cuda_cflags"]
    assert "-DKP_ROW_STAGES=4" in flags and "-DKP_ROW_CTAS_PER_SM=2" in flags and "-DKP_ROW_STAGE_KB=32" in flags
    assert "row_kernel" in calls[0]["cuda_sources"]
    with pytest.raises(ValueError):
        t.make_source({"BM": 128})


def test_generated_candidate_verifies_for_sm_90a(tmp_path):
    if find_tool("nvcc") is None or find_tool("cuobjdump") is None:
        pytest.skip("needs nvcc and cuobjdump")
    from kernelpro.agent.evaluator import lazy_build_shim
    from kernelpro.static.verify import verify

    task = find_task("ptxbench/rmsnorm_bf16")
    p = tmp_path / "cand.py"
    p.write_text(_template().make_source({"ROW_STAGES": 4, "ROW_STAGE_KB": 16}))
    rep = verify(str(lazy_build_shim(p)), "sm_90a", list(task.requested_features("sm_90a")))
    assert rep.compiled, rep.compile_errors
    assert rep.passed, rep.summary
