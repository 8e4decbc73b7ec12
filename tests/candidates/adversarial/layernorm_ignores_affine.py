"""expect: wrong_output
task: layernorm_chw
device: any
Keeps the reference's LayerNorm (same names and shapes) but never applies its affine: it matches a
fresh module's ones and zeros only, so with the weights perturbed its output is wrong.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.ln = nn.LayerNorm(shape)

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, x.shape[-3:], eps=1e-5)
