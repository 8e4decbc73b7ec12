"""expect: async_leftover
task: vector_add
device: gpu
Launches its kernel on a private stream and returns without making the caller's stream wait, so
CUDA events on the caller's stream time nothing: the work is invisible to the caller's window.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, a, b):
        if self.side is None:
            self.side = torch.cuda.Stream()
        with torch.cuda.stream(self.side):
            out = a + b
        return out
