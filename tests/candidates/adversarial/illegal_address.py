"""expect: crash
task: vector_add
device: gpu
A Triton kernel that stores far outside its buffer: CUDA reports an illegal memory access.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _bad_store(c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + offs + (1 << 40), offs.to(tl.float32))


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = a + b
        _bad_store[(4,)](out, out.numel(), BLOCK=256)
        torch.cuda.synchronize()
        return out
