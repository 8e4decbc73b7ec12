"""LayerNorm over (C, H, W) with its (C, H, W) affine weight and bias (harness tests)."""

import torch
import torch.nn as nn

B = 8
C = 4
H = 16
W = 16

META = {
    "name": "layernorm_chw",
    "suite": "harness_tests",
    "dtype": "fp32",
    "sizes": {"shown": [{"H": 8, "W": 8}], "heldout": [{"C": 3, "H": 5, "W": 7}]},
    "description": "LayerNorm over the last three dimensions with an elementwise affine of that shape.",
}


class Model(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.ln = nn.LayerNorm(shape)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(B, C, H, W)]


def get_init_inputs():
    return [(C, H, W)]
