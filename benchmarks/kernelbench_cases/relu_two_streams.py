"""problem: 1/19_ReLU
expect_kb: pass
expect_kp: pass
Multi-stream, honest: each half of the rows on its own side stream, both ordered after the caller's
stream and joined back into it before returning.
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.streams = None

    def forward(self, x):
        if self.streams is None:
            self.streams = (torch.cuda.Stream(), torch.cuda.Stream())
        caller = torch.cuda.current_stream()
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        for s, sl in zip(self.streams, (slice(0, half), slice(half, x.shape[0])), strict=True):
            s.wait_stream(caller)
            with torch.cuda.stream(s):
                torch.clamp(x[sl], min=0.0, out=out[sl])
        for s in self.streams:
            caller.wait_stream(s)
            out.record_stream(s)
        return out
