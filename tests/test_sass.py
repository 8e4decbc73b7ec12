"""SASS parsing and per-kernel reports, on text and on real cubins."""

from pathlib import Path

import pytest

from kernelpro.static.compile import compile_cuda
from kernelpro.static.sass import disassemble, family, kernel_report, parse_sass, resource_usage
from kernelpro.toolchain import find_tool

KERNELS = Path(__file__).parent / "kernels" / "static"
needs_tools = pytest.mark.skipif(find_tool("nvcc") is None or find_tool("cuobjdump") is None,
                                 reason="nvcc/cuobjdump not installed")

TEXT = """
	code for sm_90a
		Function : k_spill
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;          /* 0x00000a00ff017b82 */
        /*0010*/                   STL [R1+0x4], R2 ;               /* 0x0000000000007918 */
        /*0020*/              @!P0 LDL R3, [R1+0x4] ;              /* 0x0000000000007918 */
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;  /* 0x0 */
        /*0040*/               @P1 CALL.REL.NOINC `(helper) ;      /* 0x0 */
        /*0050*/                   EXIT ;                          /* 0x000000000000794d */
        /*0060*/                   BRA 0x60;                       /* 0xfffffffc00fc7947 */
        /*0070*/                   NOP;                            /* 0x0000000000007918 */
		Function : helper
        /*0000*/                   LDL.64 R4, [R1] ;               /* 0x0 */
        /*0010*/                   RET.REL.NODEC R2 0x0 ;          /* 0x0 */
		Function : unused
        /*0000*/                   STL [R1], R4 ;                  /* 0x0 */
"""


def test_parse_sass_opcodes_modifiers_predicates():
    funcs = parse_sass(TEXT)
    assert list(funcs) == ["k_spill", "helper", "unused"]
    k = funcs["k_spill"]
    assert [i.opcode for i in k][:4] == ["LDC", "STL", "LDL", "HGMMA.64x128x16.F32.BF16"]
    hg = k[3]
    assert hg.base == "HGMMA" and hg.modifiers == ["64x128x16", "F32", "BF16"] and hg.offset == 0x30
    assert k[2].predicate == "!P0" and k[4].predicate == "P1"


def test_kernel_report_follows_calls_and_counts_local_memory():
    rep = kernel_report("k_spill", parse_sass(TEXT))
    assert rep.callees == ["helper"]
    assert (rep.ldl, rep.stl) == (2, 1)  # unused's STL is not reachable
    assert rep.instructions == 9  # NOP padding excluded
    assert rep.mix["local_mem"] == 3 and rep.mix["tensor_core"] == 1


def test_families():
    assert family("UTMALDG") == "tma_bulk" and family("SYNCS") == "sync" and family("QGMMA") == "tensor_core"
    assert family("UTCHMMA") == "tensor_core" and family("LDSM") == "shared_mem" and family("WHATEVER") == "other"


@needs_tools
def test_real_cubin(tmp_path):
    res = compile_cuda((KERNELS / "wgmma.cu").read_text(), "sm_90a", tmp_path)
    funcs = disassemble(res.cubin_path)
    assert set(funcs) == {"k_wgmma_bf16", "k_wgmma_fp8"}
    assert any(i.opcode.startswith("HGMMA.64x8x16.F32.BF16") for i in funcs["k_wgmma_bf16"])
    assert any(i.base == "QGMMA" for i in funcs["k_wgmma_fp8"])
    ru = resource_usage(res.cubin_path)
    assert ru["k_wgmma_bf16"]["REG"] == res.resources["k_wgmma_bf16"].registers
    rep = kernel_report("k_wgmma_bf16", funcs, ru, res.resources)
    assert rep.registers == res.resources["k_wgmma_bf16"].registers and rep.ldl == rep.stl == 0


@needs_tools
def test_spilling_kernel_reports_local_memory(tmp_path):
    # A large per-thread array indexed at run time cannot live in registers: it goes to local memory.
    src = """extern "C" __global__ void k_local(const int* idx, float* out) {
  float a[256];
  for (int i = 0; i < 256; ++i) a[i] = out[i * blockDim.x + threadIdx.x];
  a[idx[threadIdx.x] & 255] = 0.5f;
  out[threadIdx.x] = a[idx[threadIdx.x + 1] & 255];
}"""
    res = compile_cuda(src, "sm_90a", tmp_path)
    rep = kernel_report("k_local", disassemble(res.cubin_path), resource_usage(res.cubin_path), res.resources)
    assert rep.stack_bytes and rep.stack_bytes >= 1024
    assert rep.stl > 0 and rep.ldl > 0
