"""expect: timeout
task: vector_add
device: gpu
A Triton kernel that spins on a flag nothing ever sets (a GPU-side hang).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _spin(flag_ptr):
    v = tl.load(flag_ptr, volatile=True)
    while v == 0:
        v = tl.load(flag_ptr, volatile=True)


class ModelNew(nn.Module):
    def forward(self, a, b):
        flag = torch.zeros(1, dtype=torch.int32, device=a.device)
        _spin[(1,)](flag)
        torch.cuda.synchronize()
        return a + b
