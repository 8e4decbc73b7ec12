"""expect: library_fallback
task: matmul_fp32
device: any
Uses its own path for tile-aligned sizes and falls back to the library for the others (held-out sizes).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        if a.shape[0] % 64 == 0 and b.shape[1] % 64 == 0:
            return (a[:, :, None] * b[None, :, :]).sum(1)
        return torch.mm(a, b)
