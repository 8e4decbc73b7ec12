"""expect: library_fallback
task: matmul_fp32
device: any
Calls torch.matmul (aten::mm / cuBLAS), the op the task asks to replace.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
