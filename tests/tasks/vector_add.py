"""C = A + B in fp32: the smallest memory-bound task (harness tests)."""

import torch
import torch.nn as nn

N = 1048576

META = {
    "name": "vector_add",
    "suite": "harness_tests",
    "dtype": "fp32",
    "sizes": {"shown": [{"N": 8192}], "heldout": [{"N": 5003}]},
    "flops": "N",
    "bytes": "12*N",
    "description": "C = A + B, fp32 vectors.",
}


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
