"""The Hopper attention-backward reference compiles for sm_90a and emits the instructions its tasks request.

CPU-only: nvcc + cuobjdump, no GPU. Checks the SASS of the kernel (not the source text): the five wgmma
products with the shapes and operand sources the design needs, UTMALDG/UTMASTG for the TMA copies, SYNCS for
the mbarriers, USETMAXREG for the register hand-over, fp32 reductions for dQ and no local-memory spills.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernelpro.toolchain import find_tool

CU = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench" / "reference" / "hopper_attn_bwd.cu"


def _compile(tmp_path: Path, defines: dict[str, int]) -> tuple[str, str]:
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump (CUDA toolkit / nvidia-cuda-cuobjdump wheel)")
    obj = tmp_path / ("attn_bwd_" + "_".join(f"{k}{v}" for k, v in sorted(defines.items())) + ".o")
    cmd = [str(nvcc), "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-Xptxas", "-v",
           *(f"-D{k}={v}" for k, v in defines.items()), "-c", str(CU), "-o", str(obj)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    sass = subprocess.run([str(cuobjdump), "--dump-sass", str(obj)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0, sass.stderr[-2000:]
    return build.stderr, sass.stdout


def _kernel_sass(sass: str, name: str) -> str:
    """The SASS of one function (cuobjdump prints each after a 'Function : <mangled name>' line)."""
    parts = re.split(r"^\s+Function : ", sass, flags=re.M)
    hits = [p for p in parts[1:] if name in p.splitlines()[0]]
    assert len(hits) == 1, [p.splitlines()[0] for p in parts[1:]]
    return hits[0]


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("causal", [0, 1])
def test_attn_bwd_sass_has_requested_features(tmp_path, causal, stages):
    ptxas_log, sass = _compile(tmp_path, {"BWD_CAUSAL": causal, "BWD_STAGES": stages})
    main = _kernel_sass(sass, "attn_bwd_kernel")
    ops = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", main, flags=re.M)
    opcodes = {op.split(".")[0] for op in ops}
    assert {"HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "USETMAXREG", "REDG"} <= opcodes, sorted(opcodes)
    hgmma = [ln for ln in main.splitlines() if "HGMMA." in ln]
    # S^T = K Q^T and dP^T = V dO^T: m64n64k16, both operands shared memory, K-major, 8 k-steps each.
    ss_kmajor = [ln for ln in hgmma if re.search(r"HGMMA\.64x64x16\.F32\.BF16 R\d+, gdesc\[\w+\], (RZ|R\d+)", ln)]
    # dQ = dS K: m64n64k16, A = dS in shared memory, B = K read transposed, 8 k-steps over the keys.
    ss_tnsp = [ln for ln in hgmma if re.search(r"HGMMA\.64x64x16\.F32\.BF16 R\d+, gdesc\[\w+\]\.tnspB", ln)]
    # dV += P^T dO and dK += dS^T Q: m64n128k16, A in registers, B transposed, 4 k-steps each.
    rs_tnsp = [ln for ln in hgmma if re.search(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, R\d+, gdesc\[\w+\]\.tnspB", ln)]
    assert (len(ss_kmajor), len(ss_tnsp), len(rs_tnsp)) == (16, 8, 8), (len(ss_kmajor), len(ss_tnsp), len(rs_tnsp))
    assert len(hgmma) == 32, hgmma
    # K and V halves once, Q and dO halves per ring stage; dK and dV halves stored per consumer.
    assert len(re.findall(r"\bUTMALDG\.3D\b", main)) == 8 and len(re.findall(r"\bUTMASTG\.3D\b", main)) == 4
    assert len(re.findall(r"\bREDG\.E\.ADD\.F32\b", main)) == 32  # one dQ element per register of the 64x64 tile
    # The wgmmas of one GEMM must not be serialised one by one (ptxas does that under register pressure).
    assert "C7512" not in ptxas_log, ptxas_log
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", ptxas_log), ptxas_log
    assert not re.search(r"\b(STL|LDL)\b", sass)


def test_attn_bwd_rejects_bad_config(tmp_path):
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    cmd = [str(nvcc), "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-DBWD_STAGES=4", "-c", str(CU),
           "-o", str(tmp_path / "bad.o")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "BWD_STAGES" in r.stderr
