"""Batched GEMM C[b] = A[b] @ B[b] in bf16 (torch.bmm), row-major operands."""

import torch
import torch.nn as nn

BATCH = 16
M = 2048
N = 2048
K = 2048

META = {
    'name': 'gemm_bf16_batched',
    'level': 2,
    'dtype': 'bf16',
    'sizes': {
        'shown': [{'BATCH': 2, 'M': 256, 'N': 256, 'K': 256}, {'BATCH': 4, 'M': 512, 'N': 1024, 'K': 512}],
        'heldout': [{'BATCH': 3, 'M': 1000, 'N': 776, 'K': 520}, {'BATCH': 6, 'M': 520, 'N': 1544, 'K': 1032}],
    },
    'features': {'sm_90a': ['wgmma', 'tma', 'mbarrier'], 'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier']},
    'baseline': 'cublas',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*BATCH*M*N*K',
    'bytes': '2*BATCH*(M*K + K*N + M*N)',
    'description': 'C = torch.bmm(A, B) with A (BATCH, M, K), B (BATCH, K, N) row-major bf16, fp32 accumulation, bf16 C (BATCH, M, N). Use a 3-D tensor map (or one per batch) so tiles never straddle batches.',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.bmm(A, B)


def get_inputs():
    A = torch.randn(BATCH, M, K, dtype=torch.bfloat16)
    B = torch.randn(BATCH, K, N, dtype=torch.bfloat16) * K ** -0.5
    return [A, B]


def get_init_inputs():
    return []
