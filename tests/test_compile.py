"""nvcc/ptxas driver: target flags, structured diagnostics, ptxas -v resources, the content-hash cache."""

from pathlib import Path

import pytest

from kernelpro.errors import KernelProError
from kernelpro.static.compile import (
    assemble_ptx,
    compile_cuda,
    filter_arch_flags,
    gencode_flags,
    parse_diagnostics,
    parse_ptxas_resources,
)
from kernelpro.toolchain import find_tool

KERNELS = Path(__file__).parent / "kernels" / "static"
needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None, reason="nvcc not installed")


def test_gencode_flags():
    assert gencode_flags("sm_90a") == ["-gencode", "arch=compute_90a,code=sm_90a"]
    assert gencode_flags("sm_100a") == ["-gencode", "arch=compute_100a,code=sm_100a"]
    assert gencode_flags("sm_90") == ["-gencode", "arch=compute_90,code=sm_90"]
    with pytest.raises(KernelProError, match="not a CUDA target"):
        gencode_flags("hopper")


def test_candidate_arch_flags_are_dropped():
    flags = ["-O3", "-gencode", "arch=compute_80,code=sm_80", "-arch=sm_80", "--gpu-architecture", "sm_86",
             "-gencode=arch=compute_90,code=sm_90", "--use_fast_math"]
    assert filter_arch_flags(flags) == ["-O3", "--use_fast_math"]


def test_parse_diagnostics_from_each_tool():
    log = "\n".join([
        'kernel.cu(12): error: identifier "y" is undefined',
        "kernel.cu(30): warning #177-D: variable \"z\" was declared but never referenced",
        "ptxas /tmp/tmpxft_0000239a_00000000-6_kernel.ptx, line 31; error   : Instruction 'wgmma.fence' "
        "not supported on .target 'sm_90'",
        "ptxas fatal   : Ptx assembly aborted due to errors",
        "ptxas info    : Used 12 registers, used 1 barriers",
        "nvcc fatal   : Unsupported gpu architecture 'compute_91'",
        "/usr/include/foo.h:7:3: error: expected ';' before '}' token",
    ])
    ds = parse_diagnostics(log)
    assert [(d.file, d.line, d.severity, d.tool) for d in ds] == [
        ("kernel.cu", 12, "error", "nvcc"), ("kernel.cu", 30, "warning", "nvcc"),
        ("kernel.ptx", 31, "error", "ptxas"), ("nvcc", None, "fatal", "nvcc"), ("foo.h", 7, "error", "host")]
    assert ds[2].message == "Instruction 'wgmma.fence' not supported on .target 'sm_90'"


def test_parse_ptxas_resources():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_big' for 'sm_90a'
ptxas info    : Function properties for k_big
    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 2056 bytes smem, 400 bytes cmem[0]
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
    r = parse_ptxas_resources(log)
    big = r["k_big"]
    assert (big.registers, big.smem_bytes, big.stack_bytes, big.spill_stores, big.spill_loads, big.barriers,
            big.cmem_bytes, big.is_entry) == (255, 2056, 48, 40, 36, 1, 400, True)
    assert not r["helper"].is_entry and r["helper"].stack_bytes == 16


@needs_nvcc
def test_compile_keeps_ptx_cubin_and_report(tmp_path):
    res = compile_cuda((KERNELS / "wgmma.cu").read_text(), "sm_90a", tmp_path / "w")
    assert res.ok and res.ptx_path.is_file() and res.cubin_path.is_file()
    assert ".target sm_90a" in res.ptx_path.read_text()
    assert set(res.resources) == {"k_wgmma_bf16", "k_wgmma_fp8"}
    assert all(r.registers and r.registers > 0 for r in res.resources.values())
    assert not res.errors


@needs_nvcc
def test_wgmma_for_plain_sm90_fails_with_ptxas_diagnostics(tmp_path):
    res = compile_cuda((KERNELS / "wgmma.cu").read_text(), "sm_90", tmp_path / "w")
    assert not res.ok and res.cubin_path is None
    assert res.ptx_path is not None  # kept, so the verifier can still say what was declared
    errs = res.errors
    assert errs and all(d.tool == "ptxas" and d.file == "kernel.ptx" for d in errs)
    assert any("wgmma.mma_async" in d.message and "sm_90" in d.message for d in errs)
    assert any(d.context.startswith("wgmma.mma_async.sync.aligned.m64n8k16") for d in errs)


@needs_nvcc
def test_front_end_error_points_at_the_source_line(tmp_path):
    src = "__global__ void k(float* o) {\n  o[0] = undefined_name;\n}\n"
    res = compile_cuda(src, "sm_90a", tmp_path / "e")
    assert not res.ok
    (d,) = res.errors
    assert (d.file, d.line, d.tool) == ("kernel.cu", 2, "nvcc") and "undefined_name" in d.message
    assert d.context == "o[0] = undefined_name;"


@needs_nvcc
def test_cache_returns_the_same_result_without_recompiling(tmp_path):
    src = (KERNELS / "common_features.cu").read_text()
    first = compile_cuda(src, "sm_90a", tmp_path / "a", cache_dir=tmp_path / "cache")
    second = compile_cuda(src, "sm_90a", tmp_path / "b", cache_dir=tmp_path / "cache")
    assert first.ok and not first.cached and second.cached
    assert second.cubin_path.read_bytes() == first.cubin_path.read_bytes()
    assert second.cubin_path.parent == tmp_path / "b"
    assert second.resources == first.resources
    other = compile_cuda(src, "sm_100a", tmp_path / "c", cache_dir=tmp_path / "cache")
    assert not other.cached and ".target sm_100a" in other.ptx_path.read_text()


@needs_nvcc
def test_assemble_ptx(tmp_path):
    res = assemble_ptx((KERNELS / "unreachable.ptx").read_text(), "sm_90a", tmp_path)
    assert res.ok and res.cubin_path.is_file() and res.resources["k_entry"].is_entry
    bad = assemble_ptx(".version 8.7\n.target sm_90a\n.address_size 64\n.visible .entry k() { bogus.op; }\n",
                       "sm_90a", tmp_path / "bad")
    assert not bad.ok and bad.errors[0].tool == "ptxas" and bad.errors[0].line == 4
