"""FP8 (e4m3) GEMM with per-tensor scales: C = (sa*A) @ (sb*B).T, bf16 output."""

import torch
import torch.nn as nn

M = 8192
N = 8192
K = 8192

META = {
    'name': 'gemm_fp8_e4m3',
    'level': 2,
    'dtype': 'fp8_e4m3',
    'tolerance': {'atol': 0.05, 'rtol': 0.05, 'rel_norm': 0.02},
    'sizes': {
        'shown': [{'M': 512, 'N': 512, 'K': 512}, {'M': 1024, 'N': 2048, 'K': 1024}],
        'heldout': [{'M': 1000, 'N': 1552, 'K': 784}, {'M': 2056, 'N': 1040, 'K': 3088}],
    },
    'features': {
        'sm_90a': ['wgmma', 'fp8_wgmma', 'tma', 'mbarrier'],
        'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier'],
    },
    'baseline': 'cublas',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*M*N*K',
    'bytes': 'M*K + N*K + 2*M*N',
    'description': 'C = (scale_a * A) @ (scale_b * B).T with A (M, K) and B (N, K) float8_e4m3fn, both K-major; scale_a and scale_b are fp32 scalars (0-d tensors, read them on the device); fp32 accumulation, bf16 C (M, N). Hopper fp8 wgmma accumulates in reduced precision: promote partial sums to fp32 registers every few k-blocks. Reference: torch._scaled_mm (cuBLASLt).',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, scale_a, scale_b):
        if A.is_cuda:
            # cuBLASLt wants the second operand column-major: B (N, K) row-major transposed is exactly that.
            return torch._scaled_mm(A, B.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
        return ((A.float() @ B.float().t()) * (scale_a * scale_b)).to(torch.bfloat16)


def get_inputs():
    A = torch.randn(M, K).to(torch.float8_e4m3fn)
    B = torch.randn(N, K).to(torch.float8_e4m3fn)
    # The scales make C ~N(0, 1); they are data, not constants a kernel may fold in.
    scale_a = torch.full((), 0.5, dtype=torch.float32)
    scale_b = torch.full((), 2.0 * K ** -0.5, dtype=torch.float32)
    return [A, B, scale_a, scale_b]


def get_init_inputs():
    return []
