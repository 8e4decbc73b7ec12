"""expect: spawned_threads
task: vector_add
device: any
Computes the output in a background thread and returns before it is written.
"""
import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.zeros_like(a)

        def work():
            time.sleep(0.01)
            torch.add(a, b, out=out)

        threading.Thread(target=work, daemon=True).start()
        return out
