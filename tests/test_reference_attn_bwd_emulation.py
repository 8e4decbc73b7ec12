"""CPU emulation of the index math of ``hopper_attn_bwd.cu`` (no GPU).

The kernel's index helpers (``acc_row``/``acc_col``, ``swz128``, ``ds_offset``, ``kv_tile_offset``,
``first_query_tile``, ``tile_needs_mask``, ``element_dead``) are ``__host__ __device__``: a host program that
includes the .cu tabulates them (real nvcc build, both BWD_CAUSAL values), and the emulation below runs the
backward pass through those tables, composing them as the consumer code does. Each wgmma is modelled as the
matrix product it computes, shared memory as a flat bf16 array, and the TMA/wgmma 128B-swizzle layout by the
XOR rule TMA applies (written independently here), so an error in an index (a swapped row/column, a wrong
half, a missed mask, a skipped tile) shows as a mismatch against the task's own ``math_backward``. What it
cannot catch: the composition lines of the consumer itself (restated here), or a difference between the
wgmma descriptor model and the hardware; those need the GPU.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kernelpro.toolchain import find_tool

PTXBENCH = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench"
TASKS = PTXBENCH / "tasks"
CU = PTXBENCH / "reference" / "hopper_attn_bwd.cu"
SEQS = (64, 200, 257)
LOG2E = 1.4426950408889634
BLOCK_N, BLOCK_M, D = 128, 64, 128
KV_HALF_ELEMS = BLOCK_N * 64       # KV_HALF_BYTES / 2
DS_HALF_ELEMS = BLOCK_M * 64       # DS_HALF_BYTES / 2


def _task(name: str):
    spec = importlib.util.spec_from_file_location(f"task_{name}", TASKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tma_swizzle(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """The 128B swizzle TMA writes and wgmma reads, for bf16 element (row, col) of a (rows x 64) block based
    at a 1024-byte boundary: address bits [4:6] (the 16-byte chunk) XOR bits [7:9] (the row mod 8)."""
    linear = row * 128 + col * 2
    return linear ^ (((linear >> 7) & 7) << 4)


HOST_PROGRAM = r"""
#include "hopper_attn_bwd.cu"
#include <cstdio>
using namespace kp_attn_bwd;
int main() {
  for (int t = 0; t < 128; ++t)
    for (int j = 0; j < 64; ++j) printf("acc %d %d %d %d\n", t, j, acc_row(t, j), acc_col(t, j));
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 64; ++c) printf("swz %d %d %u\n", r, c, swz128(r, c));
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 64; ++r)
      for (int q = 0; q < 64; ++q) printf("ds %d %d %d %u\n", c, r, q, ds_offset(c, r, q));
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 128; ++c) printf("kv %d %d %u\n", r, c, kv_tile_offset(r, c));
  for (int kt0 = 0; kt0 < 1024; kt0 += 128) printf("first %d %d\n", kt0, first_query_tile(kt0));
  const int seqs[] = {SEQ_LIST};
  for (int seq : seqs) {
    const int pad = (seq + 127) / 128 * 128;
    for (int q0 = 0; q0 < pad; q0 += 64)
      for (int k0 = 0; k0 < pad; k0 += 64) printf("mask %d %d %d %d\n", seq, q0, k0, tile_needs_mask(q0, k0, seq));
    for (int key = 0; key < pad; ++key) {
      printf("dead %d %d ", seq, key);
      for (int q = 0; q < pad; ++q) putchar(element_dead(key, q, seq) ? '1' : '0');
      putchar('\n');
    }
  }
  return 0;
}
"""


@dataclass
class Tables:
    """What the kernel's index helpers return, as built by nvcc for one BWD_CAUSAL value."""

    acc_row: torch.Tensor     # (128 threads, 64 elements)
    acc_col: torch.Tensor
    swz: torch.Tensor         # (128 rows, 64 cols) byte offsets
    ds: torch.Tensor          # (2 consumers, 64 key rows, 64 queries) byte offsets
    kv: torch.Tensor          # (128 rows, 128 cols) byte offsets
    first: dict[int, int]     # key_tile0 -> first query tile
    mask: dict[tuple[int, int, int], bool]   # (seq, q0, key0) -> tile_needs_mask
    dead: dict[int, torch.Tensor]            # seq -> (pad keys, pad queries) bool


_TABLES: dict[bool, Tables] = {}


def tables(causal: bool, tmp_dir: Path) -> Tables:
    if causal in _TABLES:
        return _TABLES[causal]
    nvcc = find_tool("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc to tabulate the kernel's index helpers")
    src = tmp_dir / f"tables_{int(causal)}.cu"
    src.write_text(HOST_PROGRAM.replace("SEQ_LIST", ", ".join(map(str, SEQS))))
    exe = tmp_dir / f"tables_{int(causal)}"
    cmd = [str(nvcc), "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-DBWD_CAUSAL={int(causal)}",
           f"-I{CU.parent}", str(src), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    acc_row, acc_col = torch.zeros(128, 64, dtype=torch.long), torch.zeros(128, 64, dtype=torch.long)
    swz, ds, kv = (torch.zeros(128, 64, dtype=torch.long), torch.zeros(2, 64, 64, dtype=torch.long),
                   torch.zeros(128, 128, dtype=torch.long))
    first, mask, dead_rows = {}, {}, {}
    for line in run.stdout.splitlines():
        f = line.split()
        if f[0] == "acc":
            t, j, r, c = map(int, f[1:])
            acc_row[t, j], acc_col[t, j] = r, c
        elif f[0] == "swz":
            swz[int(f[1]), int(f[2])] = int(f[3])
        elif f[0] == "ds":
            ds[int(f[1]), int(f[2]), int(f[3])] = int(f[4])
        elif f[0] == "kv":
            kv[int(f[1]), int(f[2])] = int(f[3])
        elif f[0] == "first":
            first[int(f[1])] = int(f[2])
        elif f[0] == "mask":
            mask[(int(f[1]), int(f[2]), int(f[3]))] = f[4] == "1"
        elif f[0] == "dead":
            dead_rows.setdefault(int(f[1]), []).append([ch == "1" for ch in f[3]])
        else:
            raise AssertionError(f"unexpected table line {line!r}")
    dead = {seq: torch.tensor(rows) for seq, rows in dead_rows.items()}
    _TABLES[causal] = Tables(acc_row, acc_col, swz, ds, kv, first, mask, dead)
    return _TABLES[causal]


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


def emulate(T: Tables, q, k, v, do, lse, delta):
    """dQ, dK, dV (float) and the count of live (key, query) elements, through the kernel's index tables
    composed as in the consumer code (``consumer`` in the .cu; the line it mirrors is quoted)."""
    bh, seq, _ = q.shape
    scale = D ** -0.5
    scale_log2 = scale * LOG2E
    r32, c32 = T.acc_row[:, :32], T.acc_col[:, :32]   # S^T, dP^T, dQ tiles: 32 registers
    r64, c64 = T.acc_row, T.acc_col                    # dK, dV tiles: 64 registers
    pad = (seq + 127) // 128 * 128
    dead_tab = T.dead[seq]
    assert dead_tab.shape == (pad, pad)
    dq_accum = torch.zeros(bh, seq, D)
    dk_out = torch.zeros(bh, seq, D)
    dv_out = torch.zeros(bh, seq, D)
    live = torch.zeros(bh, seq, seq, dtype=torch.int32)  # [bh, key, query]

    def rows(t, b, r_start, n):  # TMA load of n rows with zero fill past the end
        out = torch.zeros(n, D)
        hi = min(seq, r_start + n)
        if hi > r_start:
            out[: hi - r_start] = t[b, r_start:hi]
        return out

    for b in range(bh):
        for jt in range((seq + BLOCK_N - 1) // BLOCK_N):
            key_tile0 = jt * BLOCK_N
            i_end = (seq + BLOCK_M - 1) // BLOCK_M
            i_first = T.first[key_tile0]                      # first_query_tile(key_tile0)
            kt, vt = rows(k, b, key_tile0, BLOCK_N), rows(v, b, key_tile0, BLOCK_N)
            dk = [torch.zeros(128, 64) for _ in range(2)]
            dv = [torch.zeros(128, 64) for _ in range(2)]
            for i in range(i_first, i_end):
                q0 = i * BLOCK_M
                qi, doi = rows(q, b, q0, BLOCK_M), rows(do, b, q0, BLOCK_M)
                ds_smem = torch.zeros(2 * DS_HALF_ELEMS)      # one dS buffer, bf16 elements
                for c in range(2):
                    key0 = key_tile0 + 64 * c
                    # stats staging: thread tid stores at [tid] the LSE*log2e (tid < 64) or the delta
                    # (tid >= 64) of query q0 + (tid & 63), 0 past the end
                    stats = torch.zeros(128)
                    for t_ in range(128):
                        qq = q0 + (t_ & 63)
                        if qq < seq:
                            stats[t_] = lse[b, qq] * LOG2E if t_ < 64 else delta[b, qq]
                    st = kt[64 * c: 64 * c + 64] @ qi.T    # S^T (keys x queries)
                    dpt = vt[64 * c: 64 * c + 64] @ doi.T  # dP^T
                    s, dp = st[r32, c32], dpt[r32, c32]
                    key_r, q_c = r32, c32                  # key_r = acc_row(tid, j); q_c = acc_col(tid, j)
                    lse2, dlt = stats[q_c], stats[64 + q_c]  # stats + q_c*4, stats + 256 + q_c*4
                    p = torch.exp2(s * scale_log2 - lse2)
                    edge = T.mask[(seq, q0, key0)]         # tile_needs_mask(q0, key0, seq)
                    # if (edge && element_dead(key0 + key_r, q0 + q_c, seq)) p = 0
                    dead = dead_tab[key0 + key_r, q0 + q_c] & edge
                    p = torch.where(dead, torch.zeros_like(p), p)
                    key, qcol = key0 + key_r, q0 + q_c
                    # An unmasked element out of range would add garbage; in range, count it as live.
                    assert not bool((~dead & ((qcol >= seq) | (key >= seq))).any())
                    live[b, key[~dead], qcol[~dead]] += 1
                    ds = p * (dp - dlt)
                    # st.shared.b16 [ds_tile + ds_offset(c, key_r, q_c)]
                    addr = T.ds[c, key_r, q_c]
                    assert bool((addr % 2 == 0).all())
                    ds_smem[addr // 2] = bf16(ds)
                    # Register A fragments -> the 64 x 64 operand they stand for (pack_bf16 rounding;
                    # the fragment layout is the accumulator layout, as in the forward's pack_p).
                    pa = torch.zeros(64, 64)
                    pa[r32, c32] = bf16(p)
                    dsa = torch.zeros(64, 64)
                    dsa[r32, c32] = bf16(ds)
                    dv[c] += (pa @ doi)[r64, c64]
                    dk[c] += (dsa @ qi)[r64, c64]
                for c in range(2):  # after the consumer barrier: both halves of dS are in place
                    m = torch.arange(64)[:, None]
                    kcol = torch.arange(128)[None, :]
                    # wgmma's K-major A from 1024-aligned halves DS_HALF_BYTES apart (descriptor model)
                    a = ds_smem[((kcol >> 6) * DS_HALF_ELEMS * 2 + tma_swizzle(m, kcol & 63)) // 2]
                    bmat = kt[:, 64 * c: 64 * c + 64]   # MN-major B: (key, n) = K[key, 64c + n]
                    dq = (a @ bmat)[r32, c32]
                    qrow = q0 + r32                      # q0 + acc_row(tid, j)
                    col = 64 * c + c32                   # 64c + acc_col(tid, j)
                    keep = qrow < seq
                    dq_accum[b].index_put_((qrow[keep], col[keep]), dq[keep], accumulate=True)
            # epilogue: kv_tile_offset(c*64 + acc_row(tid, j), acc_col(tid, j)) for even j, one 32-bit
            # store of the pair (j, j+1); then per-consumer TMA stores of 64-row boxes
            ksm = torch.zeros(2 * KV_HALF_ELEMS)
            vsm = torch.zeros(2 * KV_HALF_ELEMS)
            for c in range(2):
                je = torch.arange(0, 64, 2)
                off = T.kv[c * 64 + r64[:, je], c64[:, je]]
                assert bool((off % 4 == 0).all())
                ksm[off // 2], ksm[off // 2 + 1] = bf16(dk[c][:, je] * scale), bf16(dk[c][:, je + 1] * scale)
                vsm[off // 2], vsm[off // 2 + 1] = bf16(dv[c][:, je]), bf16(dv[c][:, je + 1])
            for c in range(2):
                key0 = key_tile0 + 64 * c
                if key0 >= seq:
                    continue
                for half in range(2):
                    base = half * KV_HALF_ELEMS * 2 + c * 64 * 128
                    rr = torch.arange(64)[:, None]
                    cc = torch.arange(64)[None, :]
                    idx = (base + tma_swizzle(rr, cc)) // 2  # what the TMA store reads
                    n = min(64, seq - key0)  # TMA store clips rows past the end
                    dk_out[b, key0: key0 + n, half * 64: half * 64 + 64] = ksm[idx][:n]
                    dv_out[b, key0: key0 + n, half * 64: half * 64 + 64] = vsm[idx][:n]
    return bf16(dq_accum * scale), dk_out, dv_out, live


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_index_tables(tmp_path, causal):
    """The helpers as nvcc built them: fragment maps are bijections onto the tile, the swizzle helper is
    TMA's rule, dS / K / V placements are permutations of their buffers, and the masks and tile range are
    the documented ones."""
    T = tables(causal, tmp_path)
    for n_regs, width in ((32, 64), (64, 128)):
        flat = (T.acc_row[:, :n_regs] * width + T.acc_col[:, :n_regs]).flatten()
        assert sorted(flat.tolist()) == list(range(64 * width))
    r, c = torch.arange(128)[:, None], torch.arange(64)[None, :]
    assert torch.equal(T.swz, tma_swizzle(r, c))
    assert sorted((T.ds.flatten() // 2).tolist()) == list(range(2 * DS_HALF_ELEMS))
    assert sorted((T.kv.flatten() // 2).tolist()) == list(range(2 * KV_HALF_ELEMS))
    assert T.first == {kt0: (kt0 // 64 if causal else 0) for kt0 in range(0, 1024, 128)}
    for seq in SEQS:
        pad = (seq + 127) // 128 * 128
        key, q = torch.arange(pad)[:, None], torch.arange(pad)[None, :]
        want = (q >= seq) | (key >= seq) | ((key > q) if causal else torch.zeros((), dtype=torch.bool))
        assert torch.equal(T.dead[seq], want)
        for (s_, q0, k0), m in T.mask.items():
            if s_ == seq:  # a tile without masks must have no dead element
                assert m or not bool(want[k0:k0 + 64, q0:q0 + 64].any()), (seq, q0, k0)


def _inputs(seq: int, causal: bool, bh: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(bh, seq, D, generator=g) * 2.0).to(torch.bfloat16)
    k = torch.randn(bh, seq, D, generator=g).to(torch.bfloat16)
    v = torch.randn(bh, seq, D, generator=g).to(torch.bfloat16)
    do = torch.randn(bh, seq, D, generator=g).to(torch.bfloat16)
    s = (q.float() @ k.float().transpose(-2, -1)) * D ** -0.5
    if causal:
        s = s.masked_fill(~torch.ones(seq, seq, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = (torch.softmax(s, -1) @ v.float()).to(torch.bfloat16)
    delta = (do.float() * o.float()).sum(-1)
    return q, k, v, o, do, lse, delta


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", SEQS)
def test_emulated_kernel_matches_task_math(tmp_path, seq, causal):
    task = _task("attn_bwd_causal_bf16_d128" if causal else "attn_bwd_bf16_d128")
    q, k, v, o, do, lse, delta = _inputs(seq, causal)
    dq, dk, dv, live = emulate(tables(causal, tmp_path), q, k, v, do, lse, delta)
    want = task.math_backward(*(t[None] for t in (q, k, v, o, do, lse)), causal)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want, strict=True):
        ref = ref[0].float()
        rel = ((got - ref).norm() / ref.norm()).item()
        assert rel < 0.01, (name, rel)
    # Every valid (key, query) pair is live exactly once; masked and out-of-range pairs never.
    keep = torch.ones(seq, seq, dtype=torch.bool)
    if causal:
        keep = keep.tril().T  # live is [key, query]: key <= query
    assert torch.equal(live[0] == 1, keep) and int(live.max()) <= 1


@pytest.mark.parametrize("seq", [1000, 3080, 2056])
def test_causal_tile_range_covers_the_lower_triangle(seq):
    """Without the arithmetic: which (key tile, query tile) pairs run, and that skipped ones hold no live pair."""
    n_kt, n_qt = math.ceil(seq / BLOCK_N), math.ceil(seq / BLOCK_M)
    for jt in range(n_kt):
        first = jt * BLOCK_N // BLOCK_M
        assert first < n_qt  # at least one query tile per CTA (the consumers' loop and barriers run)
        for i in range(n_qt):
            needed = any(key <= qq for key in (jt * BLOCK_N,) for qq in range(i * BLOCK_M, min(seq, i * BLOCK_M + 64)))
            assert needed == (i >= first), (jt, i)
