"""expect: memory_reuse
task: vector_add
device: gpu
Returns torch.empty_like(a) and relies on the caching allocator handing back the block in which the
reference just left its (correct) output.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.empty_like(a)
