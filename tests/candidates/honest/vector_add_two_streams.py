"""expect: passed
task: vector_add
device: gpu
Splits the sum over two side streams, each ordered after the caller's stream, and joins both back
into the caller's stream before returning: all of its work is inside the caller's timed window.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.streams = None

    def forward(self, a, b):
        if self.streams is None:
            self.streams = (torch.cuda.Stream(), torch.cuda.Stream())
        caller = torch.cuda.current_stream()
        out = torch.empty_like(a)
        half = a.numel() // 2
        for s, sl in zip(self.streams, (slice(0, half), slice(half, a.numel())), strict=True):
            s.wait_stream(caller)
            with torch.cuda.stream(s):
                torch.add(a[sl], b[sl], out=out[sl])
        for s in self.streams:
            caller.wait_stream(s)
        out.record_stream(self.streams[0])
        out.record_stream(self.streams[1])
        return out
