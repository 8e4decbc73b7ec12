"""expect: passed
task: vector_add
device: any
Allocates its output with torch.empty and writes every element (torch.add(out=)); imports an optional
accelerator inside try/except (which must not be mistaken for a fallback).
"""
import torch
import torch.nn as nn

try:
    import kernelpro_missing_accelerator as accel  # noqa: F401
except ImportError:
    accel = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        torch.add(a, b, out=out)
        return out
