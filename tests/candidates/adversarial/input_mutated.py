"""expect: input_mutated
task: vector_add
device: any
Returns zeros and zeroes its inputs, so a reference run afterwards on the same tensors would agree.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        a.zero_()
        b.zero_()
        return torch.zeros_like(a)
