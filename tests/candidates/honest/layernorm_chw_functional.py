"""expect: passed
task: layernorm_chw
device: any
Computes the normalisation by hand and applies the reference's affine, held under other names
(`weight`, `bias`) of the reference's shape: the perturbed values map onto them by name and shape.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.eps = 1e-5

    def forward(self, x):
        dims = (-3, -2, -1)
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
