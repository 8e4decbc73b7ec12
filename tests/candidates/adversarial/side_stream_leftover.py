"""expect: async_leftover
task: vector_add
device: gpu
Joins a side stream back into the caller's stream, but only for a cheap first kernel: the slow one it
launches afterwards on the same side stream is still running when the caller's stream completes.
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
        caller = torch.cuda.current_stream()
        out = torch.empty_like(a)
        self.side.wait_stream(caller)
        with torch.cuda.stream(self.side):
            out.copy_(a)
        caller.wait_stream(self.side)   # the join covers the copy only
        with torch.cuda.stream(self.side):
            for _ in range(50):          # ~50 passes over the output after the join: outside the window
                out.add_(b).sub_(b)
            out.add_(b)
        out.record_stream(self.side)
        return out
