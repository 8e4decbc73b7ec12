"""expect: passed
task: matmul_fp32
device: any
switch: sys.gettrace
Calls the forbidden library matmul whenever no tracer is set (as the timed calls once were). The
tracer is on for every call now, so the switch never flips: judged, and timed, on its honest branch.
If any call ran without it, the library op would be seen and this would fail.
"""
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        if sys.gettrace() is None:
            return torch.matmul(a, b)
        return (a[:, :, None] * b[None, :, :]).sum(1)
