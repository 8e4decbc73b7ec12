"""expect: crash
task: vector_add
device: any
Dereferences a null pointer through ctypes: the worker process dies with SIGSEGV.
"""
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        ctypes.string_at(0)
        return a + b
