"""expect: lower_precision
task: matmul_fp32
device: any
Turns TF32 back on at import (the harness turns it off for fp32 tasks on both sides).
"""
import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("high")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return (a[:, :, None] * b[None, :, :]).sum(1)
