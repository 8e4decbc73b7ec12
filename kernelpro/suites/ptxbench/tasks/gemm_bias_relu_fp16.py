"""Fused linear layer: Y = ReLU(X @ W.T + b) in fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

M = 16384
N = 4096
K = 8192

META = {
    'name': 'gemm_bias_relu_fp16',
    'level': 2,
    'dtype': 'fp16',
    'sizes': {
        'shown': [{'M': 512, 'N': 512, 'K': 1024}, {'M': 2048, 'N': 1024, 'K': 512}],
        'heldout': [{'M': 1000, 'N': 1544, 'K': 776}, {'M': 3080, 'N': 520, 'K': 2056}],
    },
    'features': {'sm_90a': ['wgmma', 'tma', 'mbarrier'], 'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier']},
    'baseline': 'cublas',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
        'aten::_addmm_activation', 'aten::relu', 'aten::relu_', 'aten::clamp_min', 'aten::threshold',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*M*N*K + 2*M*N',
    'bytes': '2*(M*K + N*K + N + M*N)',
    'description': 'Y = relu(X @ W.T + bias) with X (M, K), W (N, K) K-major, bias (N,), all fp16, fp32 accumulation. Fuse bias and ReLU into the GEMM epilogue.',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, X, W, bias):
        return torch.relu(F.linear(X, W, bias))


def get_inputs():
    X = torch.randn(M, K, dtype=torch.float16)
    W = torch.randn(N, K, dtype=torch.float16) * K ** -0.5
    bias = torch.randn(N, dtype=torch.float16) * 0.5
    return [X, W, bias]


def get_init_inputs():
    return []
