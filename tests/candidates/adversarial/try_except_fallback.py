"""expect: try_except_fallback
task: matmul_fp32
device: any
Its "kernel" always raises; the exception is swallowed and the reference's own op runs instead.
"""
import torch
import torch.nn as nn

try:
    from kernelpro_missing_extension import fast_mm  # never exists
except ImportError:
    fast_mm = None


class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            return fast_mm(a, b)
        except Exception:
            return torch.matmul(a, b)
