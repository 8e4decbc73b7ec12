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
    # dQ: one two-column vector reduction per register pair of the 64x64 tile, no scalar ones left
    assert len(re.findall(r"\bREDG\.E\.ADD\.F32x2\b", main)) == 16
    assert not re.findall(r"\bREDG\.E\.ADD\.F32\.", main)
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


REF_DIR = CU.parent
TASK_DIR = CU.parents[1] / "tasks"


def _reference(name: str):
    import importlib

    return importlib.import_module(f"kernelpro.suites.ptxbench.reference.{name}")


def test_template_moves_and_rules():
    from kernelpro.agent.policy_param import Template, moves, params_of

    ref = _reference("attn_bwd_causal_headline_bf16")
    t = Template(ref, "attn_bwd_causal_headline_bf16")
    assert [q for _, _, q in moves(t, t.params)] == [{"BWD_STAGES": 3, "BWD_DQ_RED_V2": 1},
                                                     {"BWD_STAGES": 2, "BWD_DQ_RED_V2": 0}]
    assert ref.validate({"BWD_STAGES": 4}) and ref.validate({"BWD_CONSUMERS": 3})
    assert ref.validate({"BWD_DQ_RED_V2": 2}) and ref.validate({"BWD_DQ_RED_V2": 0}) is None
    src = ref.make_source({"BWD_STAGES": 3})
    assert params_of(src) == {"BWD_STAGES": 3, "BWD_DQ_RED_V2": 1}
    compile(src, "cand.py", "exec")
    with pytest.raises(ValueError, match="BWD_STAGES"):
        ref.make_source({"BWD_STAGES": 4})


def test_generated_candidate_passes_static_verification(tmp_path):
    """A 3-stage causal candidate, written away from the reference directory (so it must use the embedded
    loader and CUDA source), is built by the real static verifier and emits the task's features."""
    if find_tool("nvcc") is None:
        pytest.skip("needs nvcc")
    pytest.importorskip("torch.utils.cpp_extension")
    from kernelpro.agent.evaluator import StaticEvaluator
    from kernelpro.suites.task import load_task

    task = load_task(TASK_DIR / "attn_bwd_causal_bf16_d128.py", suite="ptxbench")
    path = tmp_path / "cand.py"
    path.write_text(_reference("attn_bwd_causal_bf16_d128").make_source({"BWD_STAGES": 3}))
    out = StaticEvaluator("sm_90a").evaluate(task, path)
    assert out.ok, out.reason
    assert out.record["features"] == {f: "emitted" for f in ("wgmma", "tma", "mbarrier")}
