"""Triton baselines a task can name (META ``'triton': '<name>'``, a key of ``TRITON_KERNELS``; timed as the
``triton`` baseline, which `kernelpro bench` adds to its default set for every task that names one).

``grouped_mm``: the grouped GEMM of a mixture-of-experts layer, ``Y[rows of e] = X[rows of e] @ W[e].T``
with X (T, K), W (E, N, K) K-major, offsets (E,) int32 on the device (cumulative group ends, offsets[-1]
== T). One launch for all experts and no host sync: the grid is an upper bound on the (expert, m-tile,
n-tile) work items computed from host-known sizes, (T // BLOCK_M + E) * ceil(N / BLOCK_N); each program
scans the E offsets to find its item and returns if it has none. Tiles start at their group's first row
and mask rows at the group's end, so no tile crosses a group boundary. Autotuned over a few tile shapes
keyed on (N, K, E).

Triton is optional (``pip install 'kernelpro[triton]'``): it is imported on first use, and a missing
install is a one-line KernelProError. Under ``TRITON_INTERPRET=1`` (Triton's CPU interpreter) the kernel
runs one fixed small config without autotuning.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kernelpro.errors import KernelProError

EXTRA = "triton"   # the pyproject extra that installs Triton


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def _triton() -> tuple[Any, Any]:
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        raise KernelProError(f"the triton baseline needs Triton: pip install 'kernelpro[{EXTRA}]' ({e})") from None
    return triton, tl


_KERNELS: dict[str, Any] = {}


def _grouped_kernels() -> tuple[Any, Any]:
    """(the jit kernel, its autotuned wrapper), built once per process."""
    if "grouped_mm" in _KERNELS:
        return _KERNELS["grouped_mm"]
    triton, tl = _triton()

    @triton.jit
    def grouped_mm_kernel(x_ptr, w_ptr, y_ptr, offs_ptr, E, N, K, stride_xm, stride_we, stride_wn, stride_ym,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          FP32_DOT: tl.constexpr):
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        # This program's work item: expert e owns ceil(rows_e / BLOCK_M) * tiles_n consecutive indices.
        e_sel = -1
        row0 = 0
        row1 = 0
        local = 0
        tiles_m = 1
        base = 0
        prev_end = 0
        for e in range(0, E):
            end = tl.load(offs_ptr + e)
            tm = tl.cdiv(tl.maximum(end - prev_end, 0), BLOCK_M)
            hit = (pid >= base) & (pid < base + tm * tiles_n)
            e_sel = tl.where(hit, e, e_sel)
            row0 = tl.where(hit, prev_end, row0)
            row1 = tl.where(hit, end, row1)
            local = tl.where(hit, pid - base, local)
            tiles_m = tl.where(hit, tm, tiles_m)
            base += tm * tiles_n
            prev_end = end
        if e_sel < 0:   # past the last work item: the grid is an upper bound
            return
        mt = local % tiles_m
        nt = local // tiles_m
        offs_m = row0 + mt * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = nt * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        mask_m = offs_m < row1          # rows past the group's end belong to the next expert
        mask_n = offs_n < N
        x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
        w_ptrs = (w_ptr + e_sel.to(tl.int64) * stride_we + offs_n.to(tl.int64)[None, :] * stride_wn
                  + offs_k[:, None])
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kmask = offs_k + k0 < K
            a = tl.load(x_ptrs, mask=mask_m[:, None] & kmask[None, :], other=0.0)
            b = tl.load(w_ptrs, mask=kmask[:, None] & mask_n[None, :], other=0.0)
            if FP32_DOT:
                # Triton's CPU interpreter computes bf16 tl.dot wrongly in some versions (Triton 3.9 returns
                # values off by ~1e10 here); fp32 operands give the fp32-accumulated products of the same bf16
                # values, as the GPU's bf16 MMA does. Set only under TRITON_INTERPRET, never on the GPU.
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        y_ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])

    configs = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=4),
    ]
    tuned = triton.autotune(configs=configs, key=["N", "K", "E"])(grouped_mm_kernel)
    _KERNELS["grouped_mm"] = (grouped_mm_kernel, tuned)
    return _KERNELS["grouped_mm"]


def grouped_mm(X: Any, W: Any, offsets: Any) -> Any:
    """Y (T, N) in X's dtype: rows offsets[e-1]:offsets[e] of X times W[e].T, one launch for all experts."""
    import torch

    if X.dim() != 2 or W.dim() != 3 or X.shape[1] != W.shape[2] or offsets.shape != (W.shape[0],):
        raise KernelProError(f"grouped_mm: need X (T, K), W (E, N, K), offsets (E,); got {tuple(X.shape)}, "
                             f"{tuple(W.shape)}, {tuple(offsets.shape)}")
    triton, _ = _triton()
    kernel, tuned = _grouped_kernels()
    X, W = X.contiguous(), W.contiguous()
    offsets = offsets.to(torch.int32).contiguous()
    T, K = X.shape
    E, N, _ = W.shape
    Y = torch.empty(T, N, dtype=X.dtype, device=X.device)
    if T == 0 or N == 0:
        return Y
    args = (X, W, Y, offsets, E, N, K, X.stride(0), W.stride(0), W.stride(1), Y.stride(0))

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return ((T // meta["BLOCK_M"] + E) * triton.cdiv(N, meta["BLOCK_N"]),)

    if _interpreting():
        kernel[grid](*args, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, FP32_DOT=True)
    else:
        tuned[grid](*args, FP32_DOT=False)
    return Y


# META 'triton' names one of these; each takes the task's inputs as get_inputs() returns them.
TRITON_KERNELS: dict[str, Callable[..., Any]] = {
    "grouped_mm": grouped_mm,
}


def triton_baseline(name: str, args: list[Any]) -> Callable[[], None]:
    """A zero-argument call of TRITON_KERNELS[name] over the task's inputs, compiled (and autotuned) here,
    before timing, so a timed call does the kernel's work alone."""
    if name not in TRITON_KERNELS:
        raise KernelProError(f"META triton names {name!r}; known Triton kernels: {', '.join(sorted(TRITON_KERNELS))}")
    _triton()   # a missing Triton is one line here, before the task's inputs are looked at
    fn = TRITON_KERNELS[name]
    fn(*args)   # compile + autotune outside the timed calls

    def call() -> None:
        fn(*args)
    return call
