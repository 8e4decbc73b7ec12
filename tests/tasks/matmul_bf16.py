"""C = A @ B in bf16: a compute-bound task whose library path (aten::mm / cuBLAS) is forbidden to candidates."""

import torch
import torch.nn as nn

M = 256
N = 256
K = 256

META = {
    "name": "matmul_bf16",
    "suite": "harness_tests",
    "dtype": "bf16",
    "sizes": {"shown": [{"M": 128, "N": 128, "K": 64}], "heldout": [{"M": 100, "N": 72, "K": 136}]},
    "baseline": "cublas",
    "forbid_ops": ["aten::mm", "aten::matmul", "aten::bmm", "aten::addmm", "aten::linear", "aten::einsum"],
    "forbid_kernels": "gemm|cutlass|nvjet|cublas|sm90_xmma",
    "flops": "2*M*N*K",
    "bytes": "2*(M*K + K*N + M*N)",
    "description": "C = A @ B, bf16.",
}


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
