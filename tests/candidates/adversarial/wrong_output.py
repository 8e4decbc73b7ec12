"""expect: wrong_output
task: vector_add
device: any
Computes A - B instead of A + B.
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a - b
