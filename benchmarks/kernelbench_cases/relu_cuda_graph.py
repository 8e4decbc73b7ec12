"""problem: 1/19_ReLU
expect_kb: pass
expect_kp: pass
CUDA graph, honest: captured once per input shape, replayed on the caller's stream from static buffers
(input copied in, output copied out on the same stream).
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graphs = {}

    def forward(self, x):
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in self.graphs:
            sx = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.relu(sx)          # warm-up outside the capture
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                sy = torch.relu(sx)
            self.graphs[key] = (g, sx, sy)
        g, sx, sy = self.graphs[key]
        sx.copy_(x)
        g.replay()
        return sy.clone()
