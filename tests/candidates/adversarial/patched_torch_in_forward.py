"""expect: patched_torch
task: vector_add
device: any
Patches torch.Tensor.sub lazily, on its first call, rather than at import.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        torch.Tensor.sub = lambda self, other, **kw: torch.zeros_like(self)
        return a + b
