"""expect: output_cached
task: vector_add
device: any
Keys a result cache on the inputs' identity and address: new values written into the same tensors
are never seen.
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = (id(a), a.data_ptr(), id(b), b.data_ptr())
        if key not in self.memo:
            self.memo[key] = (a + b).clone()
        return self.memo[key]
