"""The Blackwell (sm_100a) references compile with the real nvcc/ptxas and emit what their tasks request.

There is no B200 here, so nothing is run on a GPU. What is checked, on the CPU:
- through the project's static verifier (PTX reachable from the entry + SASS evidence), every feature
  the GEMM and attention-forward tasks request for sm_100a is emitted; the tcgen05 life cycle
  (alloc, relinquish_alloc_permit, mma, commit, ld/st and their waits, dealloc) is in the kernel's
  reachable PTX; registers, spills and shared memory are within the limits;
- the instruction and shared-memory descriptors the kernels build (printed by a host program compiled
  from the kernels' own __host__ __device__ functions) match a model of the PTX ISA bit layouts, and
  decode, through the PTX ISA's canonical 128B-swizzled layouts, to exactly the bytes where TMA (or the
  softmax warps, for P) put each operand element;
- every GEMM output element is stored exactly once and every tile's TMA boxes cover its K range; every
  attention query row is written once and sees exactly the keys it should (causal and not);
- a Hopper-only candidate (make_source's, which declares ARCHS) reports one line on sm_100a.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpro.errors import KernelProError
from kernelpro.static.ptx import parse_ptx
from kernelpro.static.verify import (
    TARGET_ARCH_ENV,
    declared_archs,
    extract_sources,
    verify,
    verify_task_candidate,
)
from kernelpro.suites.task import find_task
from kernelpro.toolchain import find_tool

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "kernelpro" / "suites" / "ptxbench" / "reference"
MODEL = ROOT / "tests" / "kernels" / "blackwell_model.cu"
SMEM_LIMIT = 232448          # dynamic shared memory per block on sm_100a (227 KiB)


def _nvcc() -> Path:
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        pytest.skip("needs nvcc (CUDA 12.8+) and cuobjdump")
    return nvcc


# -- the static verifier on the reference files --------------------------------------------------------
LIFECYCLE = ("tcgen05.alloc", "tcgen05.relinquish_alloc_permit", "tcgen05.mma", "tcgen05.commit", "tcgen05.ld",
             "tcgen05.wait::ld", "tcgen05.dealloc", "tcgen05.fence::before_thread_sync",
             "tcgen05.fence::after_thread_sync", "cp.async.bulk.tensor", "mbarrier.try_wait")


@pytest.mark.parametrize("task,kernel,extra", [
    ("gemm_bf16", "kp_bw_gemm::gemm_bf16_tcgen05_kernel", ()),
    ("gemm_bf16_headline", "kp_bw_gemm::gemm_bf16_tcgen05_kernel", ()),
    ("attn_fwd_bf16_d128", "kp_bw_attn::attn_fwd_tcgen05_kernel", ("tcgen05.st", "tcgen05.wait::st")),
    ("attn_fwd_lse_causal_bf16", "kp_bw_attn::attn_fwd_tcgen05_kernel", ("tcgen05.st", "tcgen05.wait::st")),
])
def test_reference_emits_every_requested_sm100a_feature(tmp_path, task, kernel, extra):
    _nvcc()
    t = find_task(task)
    want = set(t.requested_features("sm_100a"))
    assert {"tcgen05_mma", "tmem", "tma", "mbarrier"} <= want
    rep = verify_task_candidate(t, REF / f"{task}.py", "sm_100a", workdir=tmp_path)
    assert rep.compiled, rep.compile_errors
    assert rep.passed, rep.summary
    (k,) = rep.kernels
    assert k.demangled == kernel
    assert set(k.status) == want and all(s == "emitted" for s in k.status.values())
    assert "UTCHMMA" in k.sass_features["tcgen05_mma"]
    assert {"UTCATOMSWS", "LDTM"} <= {op.split(".")[0] for op in k.sass_features["tmem"]}
    # Resources: 128 (GEMM) or 192 (attention) threads, one CTA per SM; nothing spilled to local memory.
    assert k.registers is not None and k.registers <= 255
    assert k.spill_stores == 0 and k.spill_loads == 0 and k.ldl == 0 and k.stl == 0
    assert (k.smem_bytes or 0) <= 48 * 1024
    # The whole tcgen05 life cycle is in code the entry reaches (not only somewhere in the file).
    module = parse_ptx(Path(rep.sources[0]["ptx"]).read_text())
    (entry,) = module.entries
    opcodes = {i.opcode for _, i in module.reachable_instructions(entry)}
    for prefix in (*LIFECYCLE, *extra):
        assert any(op == prefix or op.startswith(prefix + ".") for op in opcodes), prefix
    assert not any(op.startswith("wgmma") or op.startswith("setmaxnreg") for op in opcodes)
    assert any(op.startswith("tcgen05.ld.sync.aligned.32x32b.x32") for op in opcodes)
    assert any(op.startswith("tcgen05.mma.cta_group::1.kind::f16") for op in opcodes)


def test_references_pick_their_source_by_target():
    # The reader process is told the target; the same file hands over a different kernel for each.
    _nvcc()
    (h,) = extract_sources(REF / "gemm_bf16.py", arch="sm_90a")
    (b,) = extract_sources(REF / "gemm_bf16.py", arch="sm_100a")
    assert "wgmma.mma_async" in h.text and "tcgen05.mma" not in h.text
    assert "tcgen05.mma" in b.text and "wgmma.mma_async" not in b.text
    assert not any("compute_" in f for f in b.extra_flags)   # the verifier picks the target itself
    # The env name the references read is the one the verifier sets.
    for f in ("gemm_bf16.py", "_attn_common.py"):
        assert f'TARGET_ARCH_ENV = "{TARGET_ARCH_ENV}"' in (REF / f).read_text()


# -- a Hopper-only candidate on sm_100a ----------------------------------------------------------------
@pytest.fixture(scope="module")
def hopper_variant(tmp_path_factory) -> Path:
    sys.path.insert(0, str(REF))
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("kp_test_gemm_ref", REF / "gemm_bf16.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(REF))
    path = tmp_path_factory.mktemp("variant") / "gemm_variant.py"
    path.write_text(mod.make_source({"BN": 128}))
    return path


def test_hopper_only_candidate_is_one_line_on_sm100a(hopper_variant, tmp_path):
    assert declared_archs(hopper_variant) == {"sm_90a": "wgmma"}
    rep = verify(hopper_variant, "sm_100a", ["tcgen05_mma"])
    assert not rep.compiled and not rep.passed and rep.sources == [] and rep.kernels == []
    assert rep.cause_short == "Hopper-only (wgmma)"
    assert rep.cause == "Hopper-only: uses wgmma (ARCHS: sm_90a); not compiled for sm_100a"
    out = subprocess.run([sys.executable, "-m", "kernelpro.cli", "verify", str(hopper_variant), "--task", "gemm_bf16",
                          "--arch", "sm_100a", "--db", str(tmp_path / "runs.db")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    assert lines[0].endswith("for sm_100a: not built: Hopper-only: uses wgmma (ARCHS: sm_90a); not compiled for "
                             "sm_100a")


def test_declared_archs_reads_literals_only(tmp_path):
    p = tmp_path / "c.py"
    p.write_text("ARCHS = ('sm_90a', 'sm_100a')\n")
    assert declared_archs(p) == {"sm_90a": "", "sm_100a": ""}
    p.write_text("import os\nARCHS = os.environ['X']\n")
    with pytest.raises(KernelProError, match="ARCHS must be a literal"):
        declared_archs(p)
    p.write_text("ARCHS = {'sm_9x': 'wgmma'}\n")
    with pytest.raises(KernelProError, match="not a CUDA target"):
        declared_archs(p)
    p.write_text("ARCHS: dict[str, str] = {'sm_100a': 'tcgen05.mma'}\n")
    assert declared_archs(p) == {"sm_100a": "tcgen05.mma"}
    p.write_text("X = 1\n")
    assert declared_archs(p) is None
    assert declared_archs(REF / "gemm_bf16.py") == {"sm_90a": "wgmma", "sm_100a": "tcgen05.mma"}


# -- descriptors and index math, from the kernels' own functions -------------------------------------
@pytest.fixture(scope="module", params=[(0, 0), (1, 1)], ids=["b_nmajor-noncausal", "b_kmajor-causal"])
def model(request, tmp_path_factory) -> dict:
    nvcc = _nvcc()
    b_kmajor, causal = request.param
    exe = tmp_path_factory.mktemp("model") / "model"
    build = subprocess.run([str(nvcc), "-gencode=arch=compute_100a,code=sm_100a", "-std=c++17", f"-I{REF}",
                            f"-DKP_B_KMAJOR={b_kmajor}", f"-DATTN_CAUSAL={causal}", str(MODEL), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]

    def run(m: int, n: int, k: int, seq: int) -> dict:
        out = subprocess.run([str(exe), str(m), str(n), str(k), str(seq)], capture_output=True, text=True,
                             timeout=120, check=True)
        return json.loads(out.stdout)

    return {"run": run, "b_kmajor": b_kmajor, "causal": causal}


def bits(x: int, lo: int, hi: int) -> int:
    """Bits lo..hi (inclusive) of x."""
    return (x >> lo) & ((1 << (hi - lo + 1)) - 1)


def ptx_idesc_f16(m: int, n: int, a_mn: bool, b_mn: bool) -> int:
    """PTX ISA, tcgen05 'Instruction descriptor' for .kind::f16 (dense): D fmt 4-5 (1 = F32), A fmt 7-9 and
    B fmt 10-12 (1 = BF16), negate A/B 13/14, transpose (MN-major) A/B 15/16, N>>3 17-22, M>>4 24-28."""
    assert m == 128 and n % 16 == 0 and 16 <= n <= 256     # valid M=128 dense shapes
    return (1 << 4) | (1 << 7) | (1 << 10) | (int(a_mn) << 15) | (int(b_mn) << 16) | ((n >> 3) << 17) | ((m >> 4) << 24)


def decode_smem_desc(d: int) -> dict:
    """PTX ISA, tcgen05 'Shared memory descriptor': start 0-13, LBO 16-29, SBO 32-45 (all >> 4), fixed
    0b001 at 46-48, base offset 49-51, LBO mode 52, fixed 0 at 53-60, swizzle 61-63 (2 = 128B)."""
    assert bits(d, 14, 15) == 0 and bits(d, 30, 31) == 0 and bits(d, 53, 60) == 0
    return {"start": bits(d, 0, 13) << 4, "lbo": bits(d, 16, 29) << 4, "sbo": bits(d, 32, 45) << 4,
            "version": bits(d, 46, 48), "base_offset": bits(d, 49, 51), "lbo_mode": bits(d, 52, 52),
            "swizzle": bits(d, 61, 63)}


def swz128(addr: int) -> int:
    """The 128-byte swizzle (Swizzle<3,4,3>): address bits 4-6 XOR bits 7-9."""
    return addr ^ (((addr >> 7) & 7) << 4)


def operand_addr(desc: dict, major: str, row: int, k: int) -> int:
    """Byte address of element (row = M or N index, k) of a bf16 operand under the PTX ISA's canonical
    128B-swizzled layouts (T = 8 elements = 16 bytes):
      K-major  ((8,m),(T,2k)) : ((8T,SBO),(1,T))        -- rows of 128 B, 8-row groups SBO apart;
      MN-major ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))   -- 64-wide MN slabs LBO apart, 8-k groups SBO apart."""
    assert desc["swizzle"] == 2 and desc["version"] == 1 and desc["base_offset"] == 0 and desc["lbo_mode"] == 0
    if major == "K":
        assert 0 <= k < 64
        lin = desc["start"] + (row % 8) * 128 + (row // 8) * desc["sbo"] + k * 2
    else:
        lin = desc["start"] + (row % 64) * 2 + (row // 64) * desc["lbo"] + (k % 8) * 128 + (k // 8) * desc["sbo"]
    return swz128(lin)


def tma_addr(box_base: int, r: int, c: int) -> int:
    """Where a 128B-swizzled TMA box (rows of 64 bf16) at a 1024-aligned base puts element (r, c)."""
    assert box_base % 1024 == 0 and 0 <= c < 64
    return swz128(box_base + r * 128 + c * 2)


def test_instruction_descriptors_match_the_ptx_layout(model):
    d = model["run"](256, 256, 64, 256)
    assert d["idesc_gemm"] == ptx_idesc_f16(128, d["bn"], False, not d["b_kmajor"])
    assert d["idesc_qk"] == ptx_idesc_f16(128, 128, False, False)     # Q and K both K-major
    assert d["idesc_pv"] == ptx_idesc_f16(128, 128, False, True)      # V MN-major (head dim contiguous)
    for x in (d["idesc_gemm"], d["idesc_qk"], d["idesc_pv"]):
        assert bits(x, 0, 3) == 0 and bits(x, 6, 6) == 0 and bits(x, 23, 23) == 0 and bits(x, 29, 31) == 0
        assert bits(x, 24, 28) << 4 == 128


def test_smem_descriptors_are_tcgen05_not_wgmma(model):
    d = model["run"](256, 256, 64, 256)
    for key in ("a_desc", "b_desc", "q_desc", "k_desc", "p_desc", "v_desc"):
        for raw in d[key]:
            f = decode_smem_desc(raw)
            # tcgen05's version bits: a Hopper wgmma descriptor has 0 there
            assert f["version"] == 1 and f["swizzle"] == 2 and f["base_offset"] == 0, (key, hex(raw))


def test_operands_decode_to_where_tma_and_softmax_put_them(model):
    d = model["run"](256, 256, 64, 256)
    st, bn, slab, aslab = d["stage"], d["bn"], d["b_slab"], d["attn_slab"]
    for kk, raw in enumerate(d["a_desc"]):          # A: 128 x 64 K-major box
        desc = decode_smem_desc(raw)
        for m in range(128):
            for k in range(16):
                assert operand_addr(desc, "K", m, k) == tma_addr(st, m, kk * 16 + k), ("A", kk, m, k)
    for kk, raw in enumerate(d["b_desc"]):
        desc = decode_smem_desc(raw)
        for n in range(bn):
            for k in range(16):
                if d["b_kmajor"]:                   # one BN x 64 box, rows are N
                    want = tma_addr(st, n, kk * 16 + k)
                    got = operand_addr(desc, "K", n, k)
                else:                               # BN/64 boxes of 64 x 64, rows are K
                    want = tma_addr(st + (n // 64) * slab, kk * 16 + k, n % 64)
                    got = operand_addr(desc, "MN", n, k)
                assert got == want, ("B", kk, n, k)
    pu = d["p_unit_offset"]
    for kk in range(8):
        for key in ("q_desc", "k_desc"):            # 128 rows x 128 head dim, two 64-column boxes
            desc = decode_smem_desc(d[key][kk])
            for r in range(128):
                for k in range(16):
                    dim = kk * 16 + k
                    assert operand_addr(desc, "K", r, k) == tma_addr(st + (dim // 64) * aslab, r, dim % 64)
        desc = decode_smem_desc(d["p_desc"][kk])    # P: written by thread r in 16-byte units
        for r in range(128):
            for k in range(16):
                key_ = kk * 16 + k
                assert operand_addr(desc, "K", r, k) == st + pu[r * 16 + key_ // 8] + (key_ % 8) * 2
        desc = decode_smem_desc(d["v_desc"][kk])    # V: B operand (N = head dim, K = keys), MN-major
        for n in range(128):
            for k in range(16):
                key_ = kk * 16 + k
                assert operand_addr(desc, "MN", n, k) == tma_addr(st + (n // 64) * aslab, key_, n % 64)
    # P's units are a permutation of its two 16 KiB slabs: no two (row, unit) pairs share 16 bytes.
    assert sorted(pu) == list(range(0, 2 * aslab, 16))


def test_resources_and_tmem_columns(model):
    d = model["run"](256, 256, 64, 256)
    assert d["gemm_smem"] <= SMEM_LIMIT and d["attn_smem"] <= SMEM_LIMIT
    for cols in (d["gemm_tmem_cols"], d["attn_tmem_cols"]):
        assert 32 <= cols <= 512 and cols & (cols - 1) == 0          # tcgen05.alloc: a power of 2 in [32, 512]
    assert d["gemm_tmem_cols"] >= d["bn"]                             # fp32 accumulator: one column per N
    assert d["o_col"] - d["s_col"] >= 128 and d["o_col"] + 128 <= d["attn_tmem_cols"]   # S and O disjoint
    assert d["tmem_addr"] == [0x00100000 + (96 << 16) + 160, (31 << 16) + 255]


@pytest.mark.parametrize("m,n,k,seq", [(1000, 1544, 776, 1000), (2056, 1032, 3080, 2056), (70, 7168, 64, 128),
                                       (128, 256, 8, 1)])
def test_tiles_cover_every_output_once(model, m, n, k, seq):
    d = model["run"](m, n, k, seq)
    bm, bn, bk = d["bm"], d["bn"], d["bk"]
    assert d["gemm_cover"] == {"tiles": -(-m // bm) * -(-n // bn), "zero": 0, "multi": 0, "outside": 0}
    origins = {(t["m0"], t["n0"]) for t in d["tiles"]}
    assert origins == {(i * bm, j * bn) for i in range(-(-m // bm)) for j in range(-(-n // bn))}
    k_tiles = -(-k // bk)
    for t in d["tiles"]:
        # A boxes {64 k, 128 m}: consecutive K slabs of this tile's rows, covering [0, K) exactly once.
        assert t["a"] == [[kt * bk, t["m0"]] for kt in range(k_tiles)]
        if d["b_kmajor"]:
            assert t["b"] == [[0, kt * bk, t["n0"]] for kt in range(k_tiles)]
        else:   # N-major: BN/64 boxes {64 n, 64 k} per k-tile, box j at columns n0 + 64 j
            assert t["b"] == [[j, t["n0"] + 64 * j, kt * bk] for kt in range(k_tiles) for j in range(bn // 64)]
    assert d["attn_cover"] == {"ctas": -(-seq // 128), "rows_zero": 0, "rows_multi": 0, "missing_keys": 0,
                               "extra_keys": 0, "bad_tile": 0, "tiles_not_once": 0}


def test_bench_says_sm100a_references_are_static_only(tmp_path):
    from kernelpro.bench.table import unrun_reference_note

    refs = sorted(REF.glob("[a-z]*.py"))
    note = unrun_reference_note("reference", ["sm_90a", "sm_100a"], refs)
    n = sum("sm_100a" in (declared_archs(p) or {}) for p in refs)
    assert n == 7    # gemm_bf16, _headline, _nt and the four attention-forward references
    assert note == (f"sm_100a references ({n} declare a kernel for it) are compiled and statically verified only: "
                    "no B200 has run them")
    assert unrun_reference_note("reference", ["sm_90a"], refs) is None
    assert unrun_reference_note(str(tmp_path), ["sm_100a"], refs) is None   # a user's solutions: not ours to say
