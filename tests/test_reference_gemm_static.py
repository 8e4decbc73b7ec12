"""The Hopper bf16 GEMM reference compiles for sm_90a (no GPU needed) and emits the Hopper machinery.

Compiles kernelpro/suites/ptxbench/reference/hopper_gemm.cu with nvcc, disassembles it with
cuobjdump, and checks the SASS opcodes: HGMMA (wgmma, with B transposed), UTMALDG (TMA loads,
multicast when clustered), SYNCS (mbarrier), USETMAXREG (setmaxnreg). Also checks ptxas reports no
spills, that invalid PARAMS stop the build with the static_assert's message, and that
make_source() yields a self-contained candidate.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kernelpro.toolchain import find_tool

REF_DIR = Path(__file__).resolve().parents[1] / "kernelpro/suites/ptxbench/reference"
CU = REF_DIR / "hopper_gemm.cu"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
# "/*0b30*/   @!P0 HGMMA.64x256x16.F32.BF16 R24, ..." -> "HGMMA.64x256x16.F32.BF16"
SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def _tools():
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump (CUDA toolkit / nvidia-cuda-cuobjdump)")
    return nvcc, cuobjdump


def _compile(tmp_path: Path, defines: dict[str, int]) -> subprocess.CompletedProcess:
    nvcc, _ = _tools()
    obj = tmp_path / "gemm.o"
    flags = [f"-DKP_{k}={v}" for k, v in defines.items()]
    return subprocess.run(
        [str(nvcc), GENCODE, "-O3", "-Xptxas", "-v", *flags, "-c", str(CU), "-o", str(obj)],
        capture_output=True, text=True, timeout=300,
    )


def _sass_ops(tmp_path: Path) -> Counter:
    _, cuobjdump = _tools()
    sass = subprocess.run([str(cuobjdump), "-sass", str(tmp_path / "gemm.o")],
                          capture_output=True, text=True, timeout=120, check=True).stdout
    return Counter(m.group(1) for m in SASS_OP.finditer(sass))


def _count(ops: Counter, prefix: str) -> int:
    return sum(n for op, n in ops.items() if op == prefix or op.startswith(prefix + "."))


def test_default_params_emit_hopper_features(tmp_path):
    res = _compile(tmp_path, {})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
    ops = _sass_ops(tmp_path)
    hgmma = {op: n for op, n in ops.items() if op.startswith("HGMMA.")}
    # BM=128, BN=256, BK=64, 2 consumers: one m64n256k16 per k16 step, 4 per stage, unrolled.
    assert hgmma == {"HGMMA.64x256x16.F32.BF16": 4}, hgmma
    assert _count(ops, "UTMALDG") == 5  # one A box + four 64-wide B slabs per stage
    assert _count(ops, "SYNCS") >= 3  # mbarrier init / arrive.expect_tx / try_wait
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)
    assert any(op.startswith("USETMAXREG.DEALLOC") for op in ops)
    assert any(op.startswith("USETMAXREG.TRY_ALLOC") for op in ops)
    assert _count(ops, "HMMA") == 0  # no fallback to Ampere-style mma.sync


def _shipped_params() -> dict:
    tree = ast.parse((REF_DIR / "gemm_bf16.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PARAMS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("gemm_bf16.py has no literal PARAMS")


def test_shipped_params_emit_hopper_features_and_multicast(tmp_path):
    params = _shipped_params()
    res = _compile(tmp_path, params)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
    ops = _sass_ops(tmp_path)
    m_sub = params["BM"] // params["CONSUMERS"] // 64
    assert ops[f"HGMMA.64x{params['BN']}x16.F32.BF16"] == m_sub * params["BK"] // 16, ops
    assert any(op.startswith("USETMAXREG.TRY_ALLOC") for op in ops)
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)
    if params["CLUSTER_M"] > 1:
        assert ops["UTMALDG.2D.MULTICAST"] >= 1, ops  # B shared across the cluster
        assert ops["UCGABAR_ARV"] >= 1 and ops["UCGABAR_WAIT"] >= 1  # cluster barrier
    else:
        assert _count(ops, "UTMALDG") >= 2, ops


@pytest.mark.parametrize(
    "defines,message",
    [
        ({"BM": 256, "BN": 256}, "accumulators per thread"),
        ({"STAGES": 6}, "227 KiB shared-memory limit"),
        ({"BN": 96}, "BN must be 64, 128, 192 or 256"),
        ({"CLUSTER_M": 4, "BN": 128}, "divisible by CLUSTER_M"),
    ],
)
def test_invalid_params_fail_with_clear_message(tmp_path, defines, message):
    res = _compile(tmp_path, defines)
    assert res.returncode != 0
    assert message in res.stderr, res.stderr[-2000:]


def test_make_source_is_self_contained(tmp_path):
    spec = importlib.util.spec_from_file_location("kp_ref_gemm_bf16_test", REF_DIR / "gemm_bf16.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    text = ref.make_source({"STAGES": 3, "CLUSTER_M": 2})  # merged over PARAMS
    cand = tmp_path / "cand.py"
    cand.write_text(text)  # the candidate must not need the .cu next to it
    ns: dict = {"__file__": str(cand)}
    exec(compile(text, str(cand), "exec"), ns)
    assert ns["PARAMS"]["STAGES"] == 3 and ns["PARAMS"]["CLUSTER_M"] == 2 and ns["PARAMS"]["BN"] == ref.PARAMS["BN"]
    assert ns["_cuda_source"]() == CU.read_text()
    assert "class ModelNew" in text
    with pytest.raises(ValueError, match="unknown PARAMS keys"):
        ref.make_source({"TILE": 1})


def _sass_text(tmp_path: Path) -> str:
    _, cuobjdump = _tools()
    return subprocess.run([str(cuobjdump), "-sass", str(tmp_path / "gemm.o")],
                          capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.mark.parametrize("cluster", [1, 2])
def test_b_kmajor_reads_b_untransposed_and_multicasts(tmp_path, cluster):
    """B_KMAJOR=1 (C = A @ B.T, the headline GEMM): wgmma without .tnspB, B tiled like A (one box per
    64-wide K slab), multicast split along N when clustered; the default build keeps .tnspB."""
    params = {**_shipped_params(), "CLUSTER_M": cluster, "B_KMAJOR": 1}
    res = _compile(tmp_path, params)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
    sass = _sass_text(tmp_path)
    hgmma = [ln for ln in sass.splitlines() if "HGMMA." in ln]
    assert hgmma and not any("tnspB" in ln for ln in hgmma), hgmma[:2]
    ops = _sass_ops(tmp_path)
    if cluster > 1:
        assert ops["UTMALDG.2D.MULTICAST"] == params["BK"] // 64 and ops["UTMALDG.2D"] == params["BK"] // 64, ops
    else:
        assert _count(ops, "UTMALDG") == 2 * params["BK"] // 64, ops
    assert _compile(tmp_path, {**params, "B_KMAJOR": 0}).returncode == 0
    assert all("tnspB" in ln for ln in _sass_text(tmp_path).splitlines() if "HGMMA." in ln)


def test_headline_reference_is_a_k_major_template():
    from kernelpro.agent.policy_param import load_template
    from kernelpro.suites.ptxbench.reference.gemm_bf16 import validate as gemm_rules
    from kernelpro.suites.task import find_task

    tpl = load_template(find_task("ptxbench/gemm_bf16_headline"))
    assert tpl.params["B_KMAJOR"] == 1 and gemm_rules(tpl.params) is None
    assert 'B_KMAJOR": 1' in tpl.make_source({"STAGES": 3, "B_KMAJOR": 0})   # the layout is not a knob
    # K-major B splits along N under multicast: CLUSTER_M=4 with BN=64 is valid there, not N-major.
    assert gemm_rules({**tpl.params, "BN": 64, "CLUSTER_M": 4}) is None
    assert gemm_rules({**tpl.params, "BN": 64, "CLUSTER_M": 4, "B_KMAJOR": 0}) is not None
