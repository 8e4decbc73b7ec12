"""expect: unwritten_output
task: vector_add
device: any
Writes only the first half of a fresh torch.empty output (a kernel whose grid misses the tail).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        h = a.numel() // 2
        out[:h] = a[:h] + b[:h]
        return out
