"""C = A + B in fp32 with a large timed size (64M elements), so the speed-of-light floor is well above launch and sync latency."""

import torch
import torch.nn as nn

N = 67108864

META = {
    "name": "vector_add_big",
    "suite": "harness_tests",
    "dtype": "fp32",
    "sizes": {"shown": [{"N": 1048576}], "heldout": [{"N": 100003}]},
    "flops": "N",
    "bytes": "12*N",
    "description": "C = A + B, fp32 vectors, 64M elements timed.",
}


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
