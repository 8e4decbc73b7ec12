"""C = A @ B in fp32: a compute-bound task whose library path (aten::mm / cuBLAS) is forbidden to candidates."""

import torch
import torch.nn as nn

M = 256
N = 256
K = 256

META = {
    "name": "matmul_fp32",
    "suite": "harness_tests",
    "dtype": "fp32",
    "sizes": {"shown": [{"M": 128, "N": 128, "K": 64}], "heldout": [{"M": 100, "N": 72, "K": 136}]},
    "baseline": "cublas",
    "forbid_ops": ["aten::mm", "aten::matmul", "aten::bmm", "aten::addmm", "aten::linear", "aten::einsum"],
    "forbid_kernels": "gemm|cutlass|nvjet|cublas|sm90_xmma",
    "flops": "2*M*N*K",
    "bytes": "4*(M*K + K*N + M*N)",
    "description": "C = A @ B, fp32.",
}


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float32), torch.randn(K, N, dtype=torch.float32)]


def get_init_inputs():
    return []
