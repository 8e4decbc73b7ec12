"""expect: passed
task: vector_add
device: gpu
Captures the sum into a CUDA graph once per input shape and replays it on the caller's stream: the
inputs are copied into the graph's static buffers and the static output is copied out, all ordered on
the caller's stream, so the replay is inside the caller's timed window.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graphs = {}

    def _capture(self, a, b):
        sa, sb = torch.empty_like(a), torch.empty_like(b)
        sa.copy_(a)
        sb.copy_(b)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = sa + sb            # warm-up outside the capture, as CUDA graphs require
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = sa + sb
        return g, sa, sb, out

    def forward(self, a, b):
        key = (tuple(a.shape), a.dtype)
        if key not in self.graphs:
            self.graphs[key] = self._capture(a, b)
        g, sa, sb, out = self.graphs[key]
        sa.copy_(a)
        sb.copy_(b)
        g.replay()
        return out.clone()
