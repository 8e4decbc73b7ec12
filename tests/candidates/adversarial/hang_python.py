"""expect: timeout
task: vector_add
device: any
Never returns from forward (a Python infinite loop).
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        while True:
            pass
