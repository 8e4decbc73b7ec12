"""The Hopper fp8 e4m3 GEMM reference compiles for sm_90a (no GPU needed) and emits the Hopper fp8 machinery.

Compiles kernelpro/suites/ptxbench/reference/hopper_gemm_fp8.cu with nvcc at the shipped PARAMS (also with the
flags torch's load_inline adds) and at a few other valid points (no promotion at BN=256, a cluster of two with
BK=256); checks ptxas reports no spills, shared memory within the sm_90a per-block limit, and the SASS:
QGMMA with e4m3 operands and fp32 accumulation (the fp8 wgmma; HGMMA is its f16/bf16 form), one per m64
sub-tile and k32 step, UTMALDG (TMA, multicast for the cluster's B slab), SYNCS (mbarrier), USETMAXREG
(setmaxnreg), the promotion's fp32 adds only when PROMOTE_EVERY > 0, and no HMMA/HGMMA. Invalid PARAMS stop
the build with the static_assert's message and are refused by validate() too; the Python side refuses
unknown or invalid PARAMS in one line before any build; make_source() yields a self-contained candidate;
the C++ binding compiles against torch's headers.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sysconfig
from collections import Counter
from pathlib import Path

import pytest

from kernelpro.toolchain import _cuda_homes, find_tool

REF_DIR = Path(__file__).resolve().parents[1] / "kernelpro/suites/ptxbench/reference"
CU = REF_DIR / "hopper_gemm_fp8.cu"
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
SMEM_LIMIT = 232448
SASS_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def _tools():
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc and cuobjdump (CUDA toolkit / nvidia-cuda-cuobjdump)")
    return nvcc, cuobjdump


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ref():
    return _load(REF_DIR / "gemm_fp8_e4m3.py", "kp_ref_gemm_fp8_test")


def _shipped_params() -> dict:
    tree = ast.parse((REF_DIR / "gemm_fp8_e4m3.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PARAMS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("gemm_fp8_e4m3.py has no literal PARAMS")


def _compile(src: Path, obj: Path, defines: dict, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    nvcc, _ = _tools()
    # -std=c++20: what load_inline passes to nvcc for the CUDA source
    return subprocess.run([str(nvcc), GENCODE, "-O3", "-std=c++20", "-Xptxas", "-v", *extra,
                           *(f"-DKP_{k}={v}" for k, v in defines.items()), "-c", str(src), "-o", str(obj)],
                          capture_output=True, text=True, timeout=300)


def _sass(obj: Path) -> str:
    _, cuobjdump = _tools()
    return subprocess.run([str(cuobjdump), "-sass", str(obj)], capture_output=True, text=True, timeout=120,
                          check=True).stdout


def _count(ops: Counter, prefix: str) -> int:
    return sum(n for op, n in ops.items() if op == prefix or op.startswith(prefix + "."))


def _kernel_info(stderr: str) -> tuple[int, int]:
    """(registers, static smem bytes) ptxas reports for the fp8 kernel."""
    block = stderr.split("gemm_fp8_kernel", 1)[1]
    m = re.search(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?", block)
    assert m, stderr[-2000:]
    return int(m.group(1)), int(m.group(2) or 0)


def _torch_nvcc_flags() -> tuple[str, ...]:
    # The -D__CUDA_NO_*_OPERATORS__ / CONVERSIONS__ macros load_inline compiles CUDA sources with.
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return tuple(f for f in COMMON_NVCC_FLAGS if f.startswith("-D"))


POINTS = {
    "shipped": {},
    "no_promotion_bn256": {"PROMOTE_EVERY": 0, "BN": 256, "STAGES": 4},
    "cluster2_bk256": {"CLUSTER_M": 2, "BK": 256, "BN": 128, "STAGES": 3},
    "one_consumer_bm64": {"BM": 64, "CONSUMERS": 1, "BN": 128, "PROMOTE_EVERY": 2, "STAGES": 8,
                          "CONSUMER_REGS": 256},
}


@pytest.mark.parametrize("point,torch_flags", [("shipped", True), *((p, False) for p in POINTS)],
                         ids=["shipped_load_inline_flags", *POINTS])
def test_build_emits_hopper_fp8_features(tmp_path, point, torch_flags):
    p = {**_shipped_params(), **POINTS[point]}
    assert _ref().validate(p) is None
    obj = tmp_path / "fp8.o"
    res = _compile(CU, obj, p, _torch_nvcc_flags() if torch_flags else ())
    assert res.returncode == 0, res.stderr[-3000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in res.stderr, res.stderr
    # No compiler diagnostics: C7517 is ptxas serializing the wgmma queue behind our back (it once drained
    # it on every k-block, where the promotion and non-promotion paths merged); #179 a `% 0` at
    # PROMOTE_EVERY=0.
    assert "C7517" not in res.stderr and "warning" not in res.stderr, res.stderr[-3000:]
    regs, static_smem = _kernel_info(res.stderr)
    threads = 128 * (p["CONSUMERS"] + 1)
    assert regs <= (65536 // threads) // 8 * 8     # launch bounds: one block per SM
    assert _ref()._smem(p) + static_smem <= SMEM_LIMIT, (_ref()._smem(p), static_smem)
    sass = _sass(obj)
    ops = Counter(m.group(1) for m in SASS_OP.finditer(sass))
    # The k-loop keeps one wgmma group in flight (wait<1>); the queue drains only where a promotion
    # window ends and once after the loop: exactly these three waits, none injected by ptxas.
    waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass)
    assert sorted(waits) == ["0x0", "0x0", "0x1"], waits
    m_sub = p["BM"] // p["CONSUMERS"] // 64
    assert ops[f"QGMMA.64x{p['BN']}x32.F32.E4M3.E4M3"] == m_sub * p["BK"] // 32, ops
    assert _count(ops, "QGMMA") == m_sub * p["BK"] // 32, ops     # no other shape or type slipped in
    slabs = p["BK"] // 128
    if p["CLUSTER_M"] == 1:
        assert ops["UTMALDG.2D"] == 2 * slabs, ops                  # one A box + one B box per 128-wide slab
    else:   # A stays per CTA; each CTA multicasts its share of the B slab to the cluster
        assert ops["UTMALDG.2D"] == slabs and ops["UTMALDG.2D.MULTICAST"] == slabs, ops
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)   # mbarrier try_wait
    assert any(op.startswith("SYNCS.ARRIVE") for op in ops)
    assert any(op.startswith("USETMAXREG.DEALLOC") for op in ops)
    assert any(op.startswith("USETMAXREG.TRY_ALLOC") for op in ops)
    # The promotion adds the wgmma accumulator into the fp32 sum: one FADD per accumulator register, and
    # nothing else in the kernel adds floats (the epilogue only multiplies by the scales).
    assert _count(ops, "FADD") == (m_sub * p["BN"] // 2 if p["PROMOTE_EVERY"] else 0), ops
    assert _count(ops, "HMMA") == 0 and _count(ops, "HGMMA") == 0


@pytest.mark.parametrize(
    "defines,message",
    [
        ({"STAGES": 6}, "227 KiB shared-memory limit"),
        ({"BN": 256}, "fp32 registers per thread"),                   # 2 x 128 with promotion
        ({"BK": 64}, "BK must be 128 or 256"),
        ({"BN": 96}, "BN must be 64, 128, 192 or 256"),
        ({"BM": 192}, "BM must be a multiple of 64*CONSUMERS"),
        ({"PROMOTE_EVERY": 65}, "PROMOTE_EVERY must be in [0, 64]"),
        ({"CLUSTER_M": 3}, "CLUSTER_M must be 1, 2 or 4"),
        ({"CONSUMER_REGS": 240}, "exceeds the 64K-register file"),
    ],
)
def test_invalid_params_fail_with_clear_message_and_validate_agrees(tmp_path, defines, message):
    p = {**_shipped_params(), **defines}
    assert _ref().validate(p) is not None, p
    res = _compile(CU, tmp_path / "bad.o", p)
    assert res.returncode != 0
    assert message in res.stderr, res.stderr[-2000:]


def test_validate_and_max_stages_agree_with_the_shipped_params():
    ref = _ref()
    p = _shipped_params()
    assert ref.validate(p) is None
    assert ref.max_stages(p) == p["STAGES"] == 5                 # 5 x 40 KiB: the deepest ring that fits
    assert ref.validate({**p, "STAGES": ref.max_stages(p) + 1}) is not None
    assert ref.validate({**p, "BN": 256, "PROMOTE_EVERY": 0, "STAGES": 4}) is None   # 1 x 128 registers


def test_python_side_refuses_bad_params_in_one_line_before_building():
    ref = _ref()
    # The checks run before torch.utils.cpp_extension is even imported: no compiler, no GPU needed.
    for bad, needle in (({**ref.PARAMS, "NOT_A_KNOB": 1}, "unknown PARAMS keys ['NOT_A_KNOB']"),
                        ({**ref.PARAMS, "STAGES": 6}, "shared memory over 227 KB"),
                        ({**ref.PARAMS, "BK": 64}, "BK must be 128 or 256")):
        with pytest.raises(ValueError) as e:
            ref._build(bad)
        assert needle in str(e.value) and len(str(e.value).splitlines()) == 1, str(e.value)
    assert not ref._BUILT


def test_make_source_is_self_contained_and_its_candidate_validates(tmp_path):
    text = _ref().make_source({"STAGES": 3, "PROMOTE_EVERY": 2})
    ast.parse(text)
    cuda = text.split("CUDA_SRC = r'''", 1)[1].split("'''", 1)[0]
    assert cuda == CU.read_text()
    assert '"STAGES": 3' in text and '"PROMOTE_EVERY": 2' in text and 'ARCHS = {"sm_90a": "wgmma"}' in text
    with pytest.raises(ValueError):
        _ref().make_source({"NOT_A_KNOB": 1})
    cand = tmp_path / "cand.py"          # away from the reference folder: it must need nothing beside it
    cand.write_text(text)
    mod = _load(cand, "kp_fp8_candidate_test")
    assert mod._cuda_source() == CU.read_text()
    with pytest.raises(ValueError, match="STAGES outside"):
        mod._build({**mod.PARAMS, "STAGES": 7})


def test_binding_compiles_against_torch_headers(tmp_path):
    """The C++ half of the extension (the TORCH_CHECKs, the call into the kernel's C ABI), plus the pybind
    module load_inline appends, compiled with the host compiler against the installed torch's headers."""
    cxx = shutil.which("g++") or shutil.which("c++")
    cuda_inc = next((h / "include" for h in _cuda_homes() if (h / "include/cuda_runtime_api.h").is_file()), None)
    if cxx is None or cuda_inc is None:
        pytest.skip("needs a host C++ compiler and the CUDA runtime headers")
    from torch.utils.cpp_extension import include_paths

    inc = [Path(p) for p in include_paths()]
    extra = tmp_path / "inc"
    # A CPU-only torch wheel ships c10/cuda's headers but not the one header its CUDA build generates from
    # CMake (it holds only the shared-library export switch); provide it so the headers parse.
    if not any((p / "c10/cuda/impl/cuda_cmake_macros.h").is_file() for p in inc):
        (extra / "c10/cuda/impl").mkdir(parents=True)
        (extra / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    src = tmp_path / "binding.cpp"
    src.write_text(_ref()._BINDING + '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n'
                   '  m.def("gemm_fp8", torch::wrap_pybind_function(gemm_fp8), "gemm_fp8");\n}\n')
    cmd = [cxx, "-std=c++20", "-fsyntax-only", "-Werror=return-type", "-DTORCH_EXTENSION_NAME=kp_fp8_binding",
           f"-I{extra}", *(f"-I{p}" for p in inc), f"-I{cuda_inc}", f"-I{sysconfig.get_paths()['include']}",
           str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
