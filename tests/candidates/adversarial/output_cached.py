"""expect: output_cached
task: vector_add
device: any
Computes once per shape and returns the stored result on every later call.
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = tuple(a.shape)
        if key not in self.memo:
            self.memo[key] = a + b
        return self.memo[key]
