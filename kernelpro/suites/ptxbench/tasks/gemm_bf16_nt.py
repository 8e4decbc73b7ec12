"""GEMM with B given transposed: C = A @ B.T, A (M, K) and B (N, K) both K-contiguous, bf16."""

import torch
import torch.nn as nn

M = 8192
N = 8192
K = 8192

META = {
    'name': 'gemm_bf16_nt',
    'level': 2,
    'dtype': 'bf16',
    'sizes': {
        'shown': [{'M': 512, 'N': 512, 'K': 512}, {'M': 1024, 'N': 2048, 'K': 1024}],
        'heldout': [{'M': 1000, 'N': 1544, 'K': 776}, {'M': 2056, 'N': 1032, 'K': 3080}],
    },
    'features': {'sm_90a': ['wgmma', 'tma', 'mbarrier'], 'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier']},
    'baseline': 'cublas',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*M*N*K',
    'bytes': '2*(M*K + N*K + M*N)',
    'description': 'C = A @ B.T (the nn.Linear layout): A (M, K), B (N, K), both K-major bf16, fp32 accumulation, bf16 C (M, N). Both operands are K-major, the native layout for wgmma and tcgen05.mma.',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B.t())


def get_inputs():
    A = torch.randn(M, K, dtype=torch.bfloat16)
    B = torch.randn(N, K, dtype=torch.bfloat16) * K ** -0.5
    return [A, B]


def get_init_inputs():
    return []
