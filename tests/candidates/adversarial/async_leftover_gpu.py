"""expect: async_leftover
task: vector_add
device: gpu
Returns while a slow side-stream kernel (a spin of ~2 ms before writing) is still filling the output.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _slow_add(a_ptr, b_ptr, c_ptr, n, spins, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask)
    x = acc * 0.0
    for _ in range(spins):  # data-dependent busy work the compiler cannot drop
        x = x * 0.999 + 1e-30
    tl.store(c_ptr + offs, acc + x * 0.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, a, b):
        if self.side is None:
            self.side = torch.cuda.Stream()
        out = torch.zeros_like(a)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            n = a.numel()
            _slow_add[(triton.cdiv(n, 1024),)](a, b, out, n, 200000, BLOCK=1024)
        return out
