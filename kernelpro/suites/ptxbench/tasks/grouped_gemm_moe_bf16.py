"""Grouped GEMM of a mixture-of-experts layer: rows of X, sorted by expert, each multiply their expert's W[e].T."""

import torch
import torch.nn as nn

EXPERTS = 8
TOKENS = 16384
N = 4096
K = 4096

META = {
    'name': 'grouped_gemm_moe_bf16',
    'level': 2,
    'dtype': 'bf16',
    'sizes': {
        'shown': [{'EXPERTS': 4, 'TOKENS': 1024, 'N': 512, 'K': 512}, {'EXPERTS': 8, 'TOKENS': 4096, 'N': 1024, 'K': 1024}],
        'heldout': [{'EXPERTS': 6, 'TOKENS': 3000, 'N': 776, 'K': 1032}, {'EXPERTS': 16, 'TOKENS': 8200, 'N': 1544, 'K': 520}],
    },
    'features': {'sm_90a': ['wgmma', 'tma', 'mbarrier'], 'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier']},
    'baseline': 'torch',
    'triton': 'grouped_mm',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*TOKENS*N*K',
    'bytes': '2*(TOKENS*K + EXPERTS*N*K + TOKENS*N)',
    'description': 'Y[offsets[e-1]:offsets[e]] = X[offsets[e-1]:offsets[e]] @ W[e].T for each expert e. X (TOKENS, K) bf16 holds the routed tokens already sorted by expert; W (EXPERTS, N, K) bf16 K-major; offsets (EXPERTS,) int32 on the device are the cumulative group ends (offsets[-1] == TOKENS). Group sizes are uneven multiples of 8, not of the tile size, so tiles must not cross group boundaries. One launch for all experts. Reference: torch._grouped_mm (CUTLASS) on CUDA, a per-expert loop elsewhere.',
}


_GROUPED_MM_WORKS = [True]  # flips once if this torch build has no usable torch._grouped_mm


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, X, W, offsets):
        if X.is_cuda and hasattr(torch, "_grouped_mm") and _GROUPED_MM_WORKS[0]:
            try:
                return torch._grouped_mm(X, W.transpose(-2, -1), offs=offsets, out_dtype=torch.bfloat16)
            except (RuntimeError, TypeError):
                _GROUPED_MM_WORKS[0] = False
        Y = X.new_empty(X.shape[0], W.shape[1])
        start = 0
        for e, end in enumerate(offsets.tolist()):
            Y[start:end] = X[start:end] @ W[e].t()
            start = end
        return Y


def group_sizes():
    """Uneven, deterministic tokens-per-expert: multiples of 8 (aligned rows), rarely of 64 or 128."""
    weights = [1 + (3 * e) % 5 for e in range(EXPERTS)]
    sizes = [TOKENS * w // sum(weights) // 8 * 8 for w in weights]
    sizes[-1] += TOKENS - sum(sizes)
    return sizes


def get_inputs():
    ends, total = [], 0
    for s in group_sizes():
        total += s
        ends.append(total)
    X = torch.randn(TOKENS, K, dtype=torch.bfloat16)
    W = torch.randn(EXPERTS, N, K, dtype=torch.bfloat16) * K ** -0.5
    offsets = torch.tensor(ends, dtype=torch.int32)
    return [X, W, offsets]


def get_init_inputs():
    return []
