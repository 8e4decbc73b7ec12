"""The Hopper grouped MoE GEMM reference compiles for sm_90a (no GPU needed) and emits the Hopper machinery.

Compiles kernelpro/suites/ptxbench/reference/hopper_grouped_gemm.cu (which #includes hopper_gemm.cu's
primitives) with nvcc at the shipped PARAMS, and also the single source the ModelNew hands load_inline
(hopper_gemm.cu inlined); checks ptxas reports no spills, shared memory (dynamic ring + schedule + static)
within the sm_90a per-block limit, and the SASS: HGMMA (wgmma), UTMALDG (TMA), SYNCS (mbarrier), USETMAXREG
(setmaxnreg), no Ampere-style HMMA. Invalid PARAMS stop the build with the static_assert's message, and
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
CU = REF_DIR / "hopper_grouped_gemm.cu"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
SMEM_LIMIT = 232448
SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def _tools():
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump (CUDA toolkit / nvidia-cuda-cuobjdump)")
    return nvcc, cuobjdump


def _ref():
    spec = importlib.util.spec_from_file_location("kp_ref_grouped_gemm_test", REF_DIR / "grouped_gemm_moe_bf16.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shipped_params() -> dict:
    tree = ast.parse((REF_DIR / "grouped_gemm_moe_bf16.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PARAMS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("grouped_gemm_moe_bf16.py has no literal PARAMS")


def _compile(src: Path, obj: Path, defines: dict) -> subprocess.CompletedProcess:
    nvcc, _ = _tools()
    return subprocess.run([str(nvcc), GENCODE, "-O3", "-std=c++17", "-Xptxas", "-v",
                           *(f"-DKP_{k}={v}" for k, v in defines.items()), "-c", str(src), "-o", str(obj)],
                          capture_output=True, text=True, timeout=300)


def _sass_ops(obj: Path) -> Counter:
    _, cuobjdump = _tools()
    sass = subprocess.run([str(cuobjdump), "-sass", str(obj)], capture_output=True, text=True, timeout=120,
                          check=True).stdout
    return Counter(m.group(1) for m in SASS_OP.finditer(sass))


def _count(ops: Counter, prefix: str) -> int:
    return sum(n for op, n in ops.items() if op == prefix or op.startswith(prefix + "."))


def _kernel_info(stderr: str) -> tuple[int, int]:
    """(registers, static smem bytes) ptxas reports for the grouped kernel."""
    block = stderr.split("grouped_gemm_bf16_kernel", 1)[1]
    m = re.search(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?", block)
    assert m, stderr[-2000:]
    return int(m.group(1)), int(m.group(2) or 0)


def _dynamic_smem(p: dict) -> int:
    # kSmemBytes of hopper_gemm.cu (1024 alignment slack + ring + barriers) + the schedule arrays
    return 1024 + p["STAGES"] * (p["BM"] * p["BK"] + p["BK"] * p["BN"]) * 2 + 16 * p["STAGES"] + \
        (2 * p["MAX_EXPERTS"] + 1) * 4


@pytest.mark.parametrize("inlined", [False, True], ids=["include", "load_inline_source"])
def test_shipped_params_emit_hopper_features(tmp_path, inlined):
    p = _shipped_params()
    src = CU
    if inlined:   # exactly what ModelNew hands load_inline: one file, no #include of a sibling
        src = tmp_path / "grouped.cu"
        text = _ref()._cuda_source()
        assert '#include "hopper_gemm.cu"' not in text
        src.write_text(text)
    obj = tmp_path / "grouped.o"
    res = _compile(src, obj, p)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
    regs, static_smem = _kernel_info(res.stderr)
    assert regs <= 168   # launch bounds: 384 threads, 1 block per SM
    assert _dynamic_smem(p) + static_smem <= SMEM_LIMIT, (_dynamic_smem(p), static_smem)
    ops = _sass_ops(obj)
    m_sub = p["BM"] // p["CONSUMERS"] // 64
    assert ops[f"HGMMA.64x{p['BN']}x16.F32.BF16"] == m_sub * p["BK"] // 16, ops
    assert _count(ops, "UTMALDG") == 2 * p["BK"] // 64, ops   # one X box + one W box per 64-wide K slab
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)   # mbarrier try_wait
    assert any(op.startswith("SYNCS.ARRIVE") for op in ops)
    assert any(op.startswith("USETMAXREG.DEALLOC") for op in ops)
    assert any(op.startswith("USETMAXREG.TRY_ALLOC") for op in ops)
    assert _count(ops, "HMMA") == 0


def test_validate_agrees_with_the_shipped_params_and_the_smem_rule():
    ref = _ref()
    p = _shipped_params()
    assert ref.validate(p) is None
    assert _dynamic_smem(p) == ref._smem(p)
    assert ref.validate({**p, "STAGES": 5}) is not None      # 5 x 48 KiB ring > 227 KiB
    assert ref.max_stages(p) == 4


@pytest.mark.parametrize(
    "defines,message",
    [
        ({"STAGES": 5}, "227 KiB shared-memory limit"),
        ({"BM": 256, "BN": 256}, "accumulators per thread"),
        ({"BN": 96}, "BN must be 64, 128, 192 or 256"),
    ],
)
def test_invalid_params_fail_with_clear_message(tmp_path, defines, message):
    res = _compile(CU, tmp_path / "bad.o", {**_shipped_params(), **defines})
    assert res.returncode != 0
    assert message in res.stderr, res.stderr[-2000:]


def test_make_source_is_self_contained(tmp_path):
    text = _ref().make_source({"STAGES": 3})
    ast.parse(text)
    cuda = text.split("CUDA_SRC = r'''", 1)[1].split("'''", 1)[0]
    assert '#include "hopper_gemm.cu"' not in cuda and "grouped_gemm_bf16_kernel" in cuda
    assert '"STAGES": 3' in text and 'ARCHS = {"sm_90a": "wgmma"}' in text
    with pytest.raises(ValueError):
        _ref().make_source({"NOT_A_KNOB": 1})
