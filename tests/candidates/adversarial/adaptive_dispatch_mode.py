"""expect: passed
task: matmul_fp32
device: any
expect_cuda: library_fallback
switch: a TorchDispatchMode active
Calls the forbidden library matmul when no dispatch mode is active. On the CPU the op recorder (a
dispatch mode) is on for every call, so it is honest everywhere; on the GPU none is, so it cheats in
every call and the profiler sees the op.
"""
import torch
import torch.nn as nn
from torch.utils._python_dispatch import _get_current_dispatch_mode


class ModelNew(nn.Module):
    def forward(self, a, b):
        if _get_current_dispatch_mode() is None:
            return torch.matmul(a, b)
        return (a[:, :, None] * b[None, :, :]).sum(1)
