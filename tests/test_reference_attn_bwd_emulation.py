"""CPU emulation of the index math of ``hopper_attn_bwd.cu`` (no GPU).

The kernel's per-thread formulas are restated here one for one (fragment -> (row, column) maps, the LSE/delta
staging offsets, the causal tile range and element masks, the swizzled shared-memory placement of dS and of
the dK/dV epilogue, the dQ reduction addresses). Each wgmma is modelled as the matrix product it computes,
shared memory as a flat bf16 array, and the TMA/wgmma 128B-swizzle layout by the same XOR rule TMA uses, so
an error in any restated index (a swapped row/column, a wrong half, a missed mask, a skipped tile) shows as
a mismatch against the task's own ``math_backward``. What it cannot catch: a difference between these
restatements and the .cu text, or between the wgmma descriptor model and the hardware; those need the GPU.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

TASKS = Path(__file__).resolve().parents[1] / "kernelpro" / "suites" / "ptxbench" / "tasks"
LOG2E = 1.4426950408889634
BLOCK_N, BLOCK_M, D = 128, 64, 128
KV_HALF_ELEMS = BLOCK_N * 64       # KV_HALF_BYTES / 2
DS_HALF_ELEMS = BLOCK_M * 64       # DS_HALF_BYTES / 2


def _task(name: str):
    spec = importlib.util.spec_from_file_location(f"task_{name}", TASKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def acc_map(n_regs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) of accumulator element j of thread tid: shapes (128, n_regs)."""
    tid = torch.arange(128)[:, None]
    j = torch.arange(n_regs)[None, :]
    warp, lane = tid // 32, tid % 32
    row = warp * 16 + lane // 4 + 8 * ((j >> 1) & 1)
    col = 8 * (j >> 2) + 2 * (lane % 4) + (j & 1)
    return row.expand(128, n_regs), col.expand(128, n_regs)


def swz128(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """Byte offset of (row, col) in a (rows x 64) bf16 block with the 128B swizzle (the kernel's swz128)."""
    byte_in_row = col * 2
    chunk = (byte_in_row >> 4) ^ (row & 7)
    return row * 128 + chunk * 16 + (byte_in_row & 15)


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


def emulate(q, k, v, do, lse, delta, causal: bool):
    """dQ, dK, dV (float) and the count of live (key, query) elements, following the kernel's indices."""
    bh, seq, _ = q.shape
    scale = D ** -0.5
    scale_log2 = scale * LOG2E
    r32, c32 = acc_map(32)
    r64, c64 = acc_map(64)
    tid = torch.arange(128)
    lane = tid % 32
    r0 = ((tid // 32) * 16 + lane // 4)[:, None]
    cq = (2 * (lane % 4))[:, None]
    j32 = torch.arange(32)[None, :]
    j64 = torch.arange(64)[None, :]
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
        row_base = b
        for jt in range((seq + BLOCK_N - 1) // BLOCK_N):
            key_tile0 = jt * BLOCK_N
            i_end = (seq + BLOCK_M - 1) // BLOCK_M
            i_first = key_tile0 // BLOCK_M if causal else 0
            kt, vt = rows(k, b, key_tile0, BLOCK_N), rows(v, b, key_tile0, BLOCK_N)
            dk = [torch.zeros(128, 64) for _ in range(2)]
            dv = [torch.zeros(128, 64) for _ in range(2)]
            for i in range(i_first, i_end):
                q0 = i * BLOCK_M
                qi, doi = rows(q, b, q0, BLOCK_M), rows(do, b, q0, BLOCK_M)
                ds_smem = torch.zeros(2 * DS_HALF_ELEMS)
                for c in range(2):
                    key0 = key_tile0 + 64 * c
                    # stats staging: thread x < 64 -> LSE*log2e of query q0 + x at [x]; 64 + x -> delta at [64+x]
                    stats = torch.zeros(128)
                    qq = q0 + (tid & 63)
                    for t_ in range(128):
                        if qq[t_] < seq:
                            stats[t_] = lse[row_base, qq[t_]] * LOG2E if t_ < 64 else delta[row_base, qq[t_]]
                    st = kt[64 * c: 64 * c + 64] @ qi.T    # S^T (keys x queries)
                    dpt = vt[64 * c: 64 * c + 64] @ doi.T  # dP^T
                    s = st[r32, c32]
                    dp = dpt[r32, c32]
                    ci = 2 * (j32 >> 2) + (j32 & 1)
                    col_of_ci = 8 * (ci >> 1) + cq + (ci & 1)
                    lse2 = stats[col_of_ci]
                    dlt = stats[64 + col_of_ci]
                    p = torch.exp2(s * scale_log2 - lse2)
                    edge = q0 + BLOCK_M > seq or key0 + 64 > seq or (causal and key0 + 63 > q0)
                    key = key0 + r0 + 8 * ((j32 >> 1) & 1)
                    qcol = q0 + 8 * (j32 >> 2) + cq + (j32 & 1)
                    dead = torch.zeros_like(p, dtype=torch.bool)  # the kernel masks only edge tiles
                    if edge:
                        dead = (qcol >= seq) | (key >= seq)
                        if causal:
                            dead = dead | (key > qcol)
                        p = torch.where(dead, torch.zeros_like(p), p)
                    # An unmasked element out of range would add garbage; in range, count it as live.
                    assert not bool((~dead & ((qcol >= seq) | (key >= seq))).any())
                    live[b, key[~dead], qcol[~dead]] += 1
                    ds = p * (dp - dlt)
                    # dS^T (key r, query q) -> dS smem half c, row q, column r (16-bit stores).
                    r = r0 + 8 * ((j32 >> 1) & 1)
                    qloc = 8 * (j32 >> 2) + cq + (j32 & 1)
                    addr = c * DS_HALF_ELEMS * 2 + swz128(qloc, r)
                    assert bool((addr % 2 == 0).all())
                    ds_smem[addr // 2] = bf16(ds)
                    # Register A fragments -> the 64 x 64 operand they represent (pack_bf16 rounding).
                    pa = torch.zeros(64, 64)
                    pa[r32, c32] = bf16(p)
                    dsa = torch.zeros(64, 64)
                    dsa[r32, c32] = bf16(ds)
                    dv[c] += (pa @ doi)[r64, c64]
                    dk[c] += (dsa @ qi)[r64, c64]
                for c in range(2):  # after the consumer barrier: both halves of dS are in place
                    m = torch.arange(64)[:, None]
                    kcol = torch.arange(128)[None, :]
                    a = ds_smem[((kcol >> 6) * DS_HALF_ELEMS * 2 + swz128(m, kcol & 63)) // 2]  # K-major A
                    bmat = kt[:, 64 * c: 64 * c + 64]   # MN-major B: (key, n) = K[key, 64c + n]
                    dq = (a @ bmat)[r32, c32]
                    qrow = q0 + r0 + 8 * ((j32 >> 1) & 1)
                    col = 64 * c + 8 * (j32 >> 2) + cq + (j32 & 1)
                    keep = qrow < seq
                    dq_accum[b].index_put_((qrow[keep], col[keep]), dq[keep], accumulate=True)
            # epilogue: pairs (j, j+1) as one 32-bit store into the K / V tile, then per-consumer TMA stores
            ksm = torch.zeros(2 * KV_HALF_ELEMS)
            vsm = torch.zeros(2 * KV_HALF_ELEMS)
            for c in range(2):
                je = j64[:, 0::2]
                r = c * 64 + r0 + 8 * ((je >> 1) & 1)
                col = 8 * (je >> 2) + cq
                off = (col >> 6) * KV_HALF_ELEMS * 2 + swz128(r, col & 63)
                assert bool((off % 4 == 0).all())
                full_k = torch.zeros(128, 64)
                full_k[:, 0::2], full_k[:, 1::2] = dk[c][:, 0::2] * scale, dk[c][:, 1::2] * scale
                ksm[off // 2], ksm[off // 2 + 1] = bf16(full_k[:, 0::2]), bf16(full_k[:, 1::2])
                vsm[off // 2], vsm[off // 2 + 1] = bf16(dv[c][:, 0::2]), bf16(dv[c][:, 1::2])
            for c in range(2):
                key0 = key_tile0 + 64 * c
                if key0 >= seq:
                    continue
                for half in range(2):
                    base = half * KV_HALF_ELEMS * 2 + c * 64 * 128
                    rr = torch.arange(64)[:, None]
                    cc = torch.arange(64)[None, :]
                    idx = (base + swz128(rr, cc)) // 2
                    n = min(64, seq - key0)  # TMA store clips rows past the end
                    dk_out[b, key0: key0 + n, half * 64: half * 64 + 64] = ksm[idx][:n]
                    dv_out[b, key0: key0 + n, half * 64: half * 64 + 64] = vsm[idx][:n]
    return bf16(dq_accum * scale), dk_out, dv_out, live


def test_fragment_and_swizzle_maps_are_bijections():
    for n_regs, width in ((32, 64), (64, 128)):
        row, col = acc_map(n_regs)
        flat = (row * width + col).flatten()
        assert sorted(flat.tolist()) == list(range(64 * width))
    # The LSE/delta column index ci (16 per thread) reproduces the accumulator column of element j.
    row, col = acc_map(32)
    j = torch.arange(32)[None, :]
    cq = (2 * (torch.arange(128) % 4))[:, None]
    ci = 2 * (j >> 2) + (j & 1)
    assert torch.equal(8 * (ci >> 1) + cq + (ci & 1), col)
    r = torch.arange(64)[:, None]
    c = torch.arange(64)[None, :]
    offs = swz128(r, c).flatten()
    assert sorted((offs // 2).tolist()) == list(range(64 * 64))   # a permutation of one 8 KiB half
    assert bool((swz128(r + 64, c) == swz128(r, c) + 64 * 128).all())  # consumer 1's rows: base + 8 KiB


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
@pytest.mark.parametrize("seq", [64, 200, 257])
def test_emulated_kernel_matches_task_math(seq, causal):
    task = _task("attn_bwd_causal_bf16_d128" if causal else "attn_bwd_bf16_d128")
    q, k, v, o, do, lse, delta = _inputs(seq, causal)
    dq, dk, dv, live = emulate(q, k, v, do, lse, delta, causal)
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
