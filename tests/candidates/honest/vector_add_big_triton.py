"""expect: passed
task: vector_add_big
device: gpu
The same Triton vector add, timed at 64M elements (runs near copy bandwidth; must not trip the
speed-of-light check).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        n = a.numel()
        _add[(triton.cdiv(n, 2048),)](a, b, out, n, BLOCK=2048)
        return out
