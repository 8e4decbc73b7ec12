"""expect: oom
task: vector_add
device: any
Asks for 4 TiB of memory.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        scratch = torch.empty(1 << 40, dtype=torch.float32, device=a.device)
        return a + b + scratch[:1]
