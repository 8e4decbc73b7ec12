"""Fused linear layer: Y = GELU(X @ W.T + b) in bf16 (exact erf GELU)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

M = 8192
N = 16384
K = 4096

META = {
    'name': 'gemm_bias_gelu_bf16',
    'level': 2,
    'dtype': 'bf16',
    'sizes': {
        'shown': [{'M': 512, 'N': 1024, 'K': 512}, {'M': 1024, 'N': 2048, 'K': 1024}],
        'heldout': [{'M': 1000, 'N': 1544, 'K': 776}, {'M': 2056, 'N': 3080, 'K': 1032}],
    },
    'features': {'sm_90a': ['wgmma', 'tma', 'mbarrier'], 'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier']},
    'baseline': 'cublas',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
        'aten::_addmm_activation', 'aten::gelu',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*M*N*K + 8*M*N',
    'bytes': '2*(M*K + N*K + N + M*N)',
    'description': 'Y = gelu(X @ W.T + bias) with X (M, K), W (N, K) K-major, bias (N,), all bf16; GELU is the exact erf form 0.5*x*(1+erf(x/sqrt(2))). Fuse bias and GELU into the GEMM epilogue (fp32 accumulator -> bias -> GELU -> bf16).',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, X, W, bias):
        return F.gelu(F.linear(X, W, bias))


def get_inputs():
    X = torch.randn(M, K, dtype=torch.bfloat16)
    W = torch.randn(N, K, dtype=torch.bfloat16) * K ** -0.5
    bias = torch.randn(N, dtype=torch.bfloat16) * 0.5
    return [X, W, bias]


def get_init_inputs():
    return []
