"""expect: library_fallback
task: matmul_fp32
device: any
expect_cuda: passed
switch: torch profiler enabled
Calls the forbidden library matmul whenever the torch profiler is off. On the CPU no call runs under
the profiler (the op recorder watches instead), so it cheats in every call and is caught; on the GPU
every call, timed ones included, runs under the profiler, so it is honest everywhere.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        if not torch.autograd.profiler._is_profiler_enabled:
            return torch.matmul(a, b)
        return (a[:, :, None] * b[None, :, :]).sum(1)
