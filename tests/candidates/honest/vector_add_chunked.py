"""expect: passed
task: vector_add
device: any
Processes the vector in fixed-size chunks, with a ragged tail (sizes that are not multiples of the tile).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        tile = 4096
        for s in range(0, a.numel(), tile):
            e = min(s + tile, a.numel())
            out[s:e] = a[s:e] + b[s:e]
        return out
