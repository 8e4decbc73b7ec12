"""Parameter-search templates beyond the GEMM: the attention forward (hopper_attn_fwd.cu), the TMA row
pipeline (rmsnorm, softmax) and the TMA transpose. Rules agree with the kernels' static_asserts (real
nvcc on a few points), generated candidates are standalone and pass the static verifier for sm_90a."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
from pathlib import Path

import pytest

from kernelpro.agent.policy_param import load_template, moves, params_of
from kernelpro.suites.task import find_task
from kernelpro.toolchain import find_tool

REF = Path(__file__).parents[1] / "kernelpro" / "suites" / "ptxbench" / "reference"
FAMILIES = ("gemm_bf16", "attn_fwd_bf16_d128", "attn_fwd_causal_bf16_d128", "attn_fwd_lse_bf16",
            "attn_fwd_lse_causal_bf16", "rmsnorm_bf16", "softmax_rows_bf16", "transpose_bf16",
            "grouped_gemm_moe_bf16", "gemm_fp8_e4m3")
needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None, reason="needs nvcc")


@pytest.mark.parametrize("name", FAMILIES)
def test_template_loads_and_moves_stay_valid(name):
    t = load_template(find_task(f"ptxbench/{name}"))
    assert t.validate(t.params) is None and t.advice
    from kernelpro.agent.policy_param import start_params

    g = start_params(t, t.generic_start)      # the ablation's start obeys the same rules
    assert t.generic_start and g != t.params and t.validate(g) is None
    ms = moves(t, t.params)
    assert ms and all(t.validate(q) is None for _, _, q in ms)
    q = ms[0][2]
    src = t.make_source(q)
    ast.parse(src)
    assert params_of(src) == {**t.params, **q}
    with pytest.raises(ValueError):
        t.make_source({"NOT_A_KNOB": 1})


def test_rules_reject_invalid_combinations():
    attn = load_template(find_task("ptxbench/attn_fwd_bf16_d128"))
    assert "over 227 KB" in attn.validate({"ATTN_CONSUMERS": 3, "ATTN_STAGES": 3, "ATTN_OVERLAP": 0})
    assert attn.validate({"ATTN_CONSUMERS": 4, "ATTN_STAGES": 2, "ATTN_OVERLAP": 1}) is not None
    assert attn.validate({"ATTN_CONSUMERS": 2, "ATTN_STAGES": 3, "ATTN_OVERLAP": 2}) is not None
    # moving to 3 consumers from a 3-stage ring repairs the ring instead of proposing a dead build
    got = {(k, d): q for k, d, q in moves(attn, {"ATTN_CONSUMERS": 2, "ATTN_STAGES": 3, "ATTN_OVERLAP": 1})}
    assert got[("ATTN_CONSUMERS", +1)] == {"ATTN_CONSUMERS": 3, "ATTN_STAGES": 2, "ATTN_OVERLAP": 1}
    sm = load_template(find_task("ptxbench/softmax_rows_bf16"))
    assert "shared memory" in sm.validate({"ROW_STAGES": 5, "ROW_STAGE_KB": 64, "ROW_CTAS_PER_SM": 0})
    tp = load_template(find_task("ptxbench/transpose_bf16"))
    assert tp.validate({"TP_STAGES": 1, "TP_GROUP": 8}) is not None
    assert tp.validate({"TP_STAGES": 4, "TP_GROUP": 0}) is not None


def _nvcc(cu: Path, defines: dict, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-c", str(cu),
                           "-o", str(out), *(f"-D{k}={v}" for k, v in defines.items())],
                          capture_output=True, text=True, timeout=300)


@needs_nvcc
def test_attention_static_asserts_agree_with_validate(tmp_path):
    attn = load_template(find_task("ptxbench/attn_fwd_bf16_d128"))
    cu = REF / "hopper_attn_fwd.cu"
    for p in ({"ATTN_CONSUMERS": 3, "ATTN_STAGES": 2, "ATTN_OVERLAP": 1},
              {"ATTN_CONSUMERS": 2, "ATTN_STAGES": 3, "ATTN_OVERLAP": 0}):
        assert attn.validate(p) is None
        r = _nvcc(cu, p, tmp_path / "a.o")
        assert r.returncode == 0, r.stderr[-2000:]
    bad = {"ATTN_CONSUMERS": 3, "ATTN_STAGES": 3, "ATTN_OVERLAP": 1}
    assert attn.validate(bad) is not None
    r = _nvcc(cu, bad, tmp_path / "b.o")
    assert r.returncode != 0 and "shared memory over the sm_90 per-block limit" in r.stderr


@needs_nvcc
def test_transpose_static_asserts_agree_with_validate(tmp_path):
    spec = importlib.util.spec_from_file_location("kp_memops_for_test", REF / "_memops_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    tree = ast.parse((REF / "transpose_bf16.py").read_text())
    cuda = next(n.value.value for n in tree.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CUDA_SRC")
    cu = tmp_path / "tp.cu"
    cu.write_text(common.CUDA_PRELUDE + "\n" + cuda)
    tp = load_template(find_task("ptxbench/transpose_bf16"))
    ok = {"TP_STAGES": 16, "TP_GROUP": 1}
    assert tp.validate(ok) is None
    r = _nvcc(cu, {f"KP_{k}": v for k, v in ok.items()}, tmp_path / "t.o")
    assert r.returncode == 0, r.stderr[-2000:]
    r = _nvcc(cu, {"KP_TP_STAGES": 1}, tmp_path / "u.o")
    assert r.returncode != 0 and "TP_STAGES in [2, 16]" in r.stderr


@pytest.mark.skipif(find_tool("nvcc") is None or find_tool("cuobjdump") is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("name, params", [
    ("attn_fwd_lse_causal_bf16", {"ATTN_CONSUMERS": 3, "ATTN_STAGES": 2, "ATTN_OVERLAP": 0}),
    ("softmax_rows_bf16", {"ROW_STAGES": 5, "ROW_STAGE_KB": 16}),
    ("gemm_fp8_e4m3", {"STAGES": 4, "PROMOTE_EVERY": 2}),   # requests fp8_wgmma besides wgmma
])
def test_generated_candidate_verifies_for_sm_90a(tmp_path, name, params):
    from kernelpro.agent.evaluator import lazy_build_shim
    from kernelpro.static.verify import verify

    task = find_task(f"ptxbench/{name}")
    p = tmp_path / "cand.py"           # nowhere near the reference folder: the sources are embedded
    p.write_text(load_template(task).make_source(params))
    rep = verify(str(lazy_build_shim(p)), "sm_90a", list(task.requested_features("sm_90a")))
    assert rep.compiled, rep.compile_errors
    assert rep.passed, rep.summary
