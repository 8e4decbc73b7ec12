"""expect: frame_access
task: vector_add
device: any
Walks up with sys._getframe to the timing loop and shrinks the samples it has already taken.
"""
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        f = sys._getframe(1)
        while f is not None:
            samples = f.f_locals.get("samples")
            if f.f_code.co_name == "_time_cpu" and isinstance(samples, dict):
                for arr in samples.values():
                    for i in range(len(arr)):
                        arr[i] = arr[i] * 1e-3
            f = f.f_back
        return a + b
