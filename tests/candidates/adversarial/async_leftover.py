"""expect: async_leftover
task: vector_add
device: cpu
Writes the output from a thread that is still running when forward returns (a CPU stand-in for work
left running after return; the GPU corpus has the stream version).
"""
import threading
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = a + b
        final = out.clone()
        out[-1] = 0.0

        def finish():
            time.sleep(0.005)
            out.copy_(final)

        threading.Thread(target=finish, daemon=True).start()
        return out
