"""The Hopper attention reference compiles for sm_90a and emits the instructions its tasks request.

CPU-only: nvcc + cuobjdump, no GPU. Checks the SASS of the kernel (not the source text): HGMMA for
both GEMMs (the P V one with a register A operand and the transposed B), UTMALDG/UTMASTG for the
TMA copies, SYNCS for the mbarriers, USETMAXREG for the register hand-over, and no local-memory spills.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernelpro.toolchain import find_tool

CU = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench" / "reference" / "hopper_attn_fwd.cu"


def _compile(tmp_path: Path, defines: dict[str, int]) -> tuple[str, str]:
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump (CUDA toolkit / nvidia-cuda-cuobjdump wheel)")
    obj = tmp_path / ("attn_" + "_".join(f"{k}{v}" for k, v in sorted(defines.items())) + ".o")
    cmd = [str(nvcc), "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v",
           *(f"-D{k}={v}" for k, v in defines.items()), "-c", str(CU), "-o", str(obj)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    sass = subprocess.run([str(cuobjdump), "--dump-sass", str(obj)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr[-2000:]
    return build.stderr, sass.stdout


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("with_lse", [0, 1])
def test_attn_reference_sass_has_requested_features(tmp_path, causal, with_lse):
    ptxas_log, sass = _compile(tmp_path, {"ATTN_CAUSAL": causal, "ATTN_WITH_LSE": with_lse})
    ops = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, flags=re.M)
    opcodes = {op.split(".")[0] for op in ops}
    assert {"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG"} <= opcodes, sorted(opcodes)
    hgmma = [ln for ln in sass.splitlines() if "HGMMA." in ln]
    # 8 k-steps each for S = Q K^T (both operands from shared memory) and O += P V (P in registers,
    # V read transposed); the overlapped main loop plus prologue/epilogue copies give at least 2x16.
    smem_a = [ln for ln in hgmma if re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, gdesc\[", ln)]
    reg_a = [ln for ln in hgmma if re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, R\d+, gdesc\[\w+\]\.tnspB", ln)]
    assert len(smem_a) >= 16 and len(reg_a) >= 16, (len(smem_a), len(reg_a))
    # The wgmmas of one GEMM must not be serialised one by one (ptxas does that under register pressure).
    assert "C7512" not in ptxas_log, ptxas_log
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", ptxas_log), ptxas_log
    assert not re.search(r"\b(STL|LDL)\b", sass)
    # With LSE the kernel stores fp32 rows besides the TMA store of O.
    assert ("STG" in opcodes) == bool(with_lse)


@pytest.mark.parametrize("causal", [0, 1])
def test_head_dim_64_build_uses_n64_for_pv_and_one_box_per_copy(tmp_path, causal):
    """Head dim 64 (the d64 tasks): S = Q K^T keeps n128 over the key tile with 4 k-steps, O += P V is
    m64n64k16 (a 64-wide O), and each Q/K/V load and the O store is one 64-column box, not two."""
    ptxas_log, sass = _compile(tmp_path, {"ATTN_CAUSAL": causal, "ATTN_HEAD_DIM": 64})
    hgmma = [ln for ln in sass.splitlines() if "HGMMA." in ln]
    smem_a = [ln for ln in hgmma if re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, gdesc\[", ln)]
    reg_a = [ln for ln in hgmma if re.search(r"HGMMA\.64x64x16\.F32\.BF16 R\d+, R\d+, gdesc\[\w+\]\.tnspB", ln)]
    assert len(smem_a) == 8 and len(reg_a) == 16, (len(smem_a), len(reg_a))   # 2 copies of 4 and of 8 k-steps
    assert not [ln for ln in hgmma if "64x128x16" in ln and ".tnspB" in ln]
    assert len(re.findall(r"\bUTMALDG\b", sass)) == 3 and len(re.findall(r"\bUTMASTG\b", sass)) == 1
    assert "C7512" not in ptxas_log and re.search(r"0 bytes spill stores, 0 bytes spill loads", ptxas_log)


def test_attn_reference_rejects_bad_config(tmp_path):
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    cmd = [str(nvcc), "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-DATTN_STAGES=4", "-c", str(CU),
           "-o", str(tmp_path / "bad.o")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "STAGES" in r.stderr
