"""expect: compile_error
task: vector_add
device: any
Does not define ModelNew under that name (a typo an LLM makes).
"""
import torch.nn as nn


class ModelNw(nn.Module):
    def forward(self, a, b):
        return a + b
