"""problem: 1/19_ReLU
expect_kb: pass
expect_kp: async_leftover
Multi-stream cheat: the ReLU runs on a side stream that is never joined back, so the caller's CUDA
events (KernelBench's timer) record almost nothing; the output is complete only after a device-wide
synchronize, which KernelBench's correctness check does.
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream()
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = torch.relu(x)
        out.record_stream(self.side)
        return out
