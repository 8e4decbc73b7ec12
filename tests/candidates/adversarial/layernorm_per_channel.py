"""expect: param_mismatch
task: layernorm_chw
device: any
Replaces the (C, H, W) affine with a per-channel one: right while a fresh LayerNorm holds ones and
zeros, wrong for any trained weights, and the reference's weights have nowhere to go.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape[0]))
        self.bias = nn.Parameter(torch.zeros(shape[0]))

    def forward(self, x):
        y = torch.nn.functional.layer_norm(x, x.shape[-3:], eps=1e-5)
        return y * self.weight[:, None, None] + self.bias[:, None, None]
