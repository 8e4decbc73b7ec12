"""expect: nan_inf
task: vector_add
device: any
Correct except that one element is NaN.
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = a + b
        out[out.numel() // 3] = float("nan")
        return out
