"""A tiny elementwise task for the profiler's end-to-end test: y = 2x + 1 over N floats."""

import torch
import torch.nn as nn

N = 4194304  # 2**22; a literal, since task globals are read without executing the file

META = {
    "name": "chunked_scale",
    "suite": "profile_corpus",
    "dtype": "fp32",
    "flops": "2*N",
    "bytes": "8*N",
    "description": "y = 2x + 1, elementwise, fp32.",
}


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
