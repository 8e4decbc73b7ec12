"""Dense GEMM C = A @ B in fp16 with fp32 accumulation; A (M, K), B (K, N), both row-major."""

import torch
import torch.nn as nn

M = 8192
N = 8192
K = 8192

META = {
    'name': 'gemm_fp16',
    'level': 2,
    'dtype': 'fp16',
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
    'bytes': '2*(M*K + K*N + M*N)',
    'description': 'C = A @ B with A (M, K) and B (K, N) row-major fp16, fp32 accumulation, fp16 C (M, N).',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K, dtype=torch.float16)
    B = torch.randn(K, N, dtype=torch.float16) * K ** -0.5
    return [A, B]


def get_init_inputs():
    return []
