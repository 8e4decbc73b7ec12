"""PLANT (launch overhead, system view): correct, but splits the vector into 64 chunks and launches two
small kernels per chunk: 128 launches of a few microseconds each per call."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        for a, b in zip(x.chunk(64), out.chunk(64), strict=True):
            torch.mul(a, 2, out=b)
            b.add_(1)
        return out
