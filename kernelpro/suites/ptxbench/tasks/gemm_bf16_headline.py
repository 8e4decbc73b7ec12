"""PTXBench headline GEMM: C = A @ B.T with M=8192, N=7168, K=5120 in bf16 (Qwen3-14B qkv_proj shape)."""

import torch
import torch.nn as nn

M = 8192
N = 7168
K = 5120

META = {
    'name': 'gemm_bf16_headline',
    'level': 3,
    'dtype': 'bf16',
    'sizes': {'shown': [{'M': 232}, {'M': 972}], 'heldout': [{'M': 70}, {'M': 2379}]},
    'features': {
        'sm_90a': ['wgmma', 'tma', 'mbarrier', 'setmaxnreg'],
        'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier'],
    },
    'baseline': 'cublas',
    'forbid_ops': [
        'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm', 'aten::baddbmm',
        'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
    ],
    'forbid_kernels': r"^(void )?(nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)",
    'flops': '2*M*N*K',
    'bytes': '2*(M*K + N*K + M*N)',
    'headline': True,
    'description': "PTXBench's gemm_n7168_k5120 at its headline workload M=8192: C = A @ B.T with A (M, K) and B (N, K) bf16 K-major, fp32 accumulation, bf16 C (M, N); N=7168 and K=5120 are fixed, M varies (PTXBench's other workloads M=70, 232, 972, 2379 are the shown and held-out sizes; M need not be a multiple of 8, only K and N are strides). Baseline: cuBLAS through torch.matmul. PTXBench's own instruction check on Hopper is wgmma + cp.async.bulk.tensor.",
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B.T)


def get_inputs():
    A = torch.randn(M, K, dtype=torch.bfloat16)
    B = torch.randn(N, K, dtype=torch.bfloat16) * K ** -0.5
    return [A, B]


def get_init_inputs():
    return []
