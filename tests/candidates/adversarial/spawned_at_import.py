"""expect: spawned_process
task: vector_add
device: any
Starts a helper process while being imported, before any call is watched.
"""
import subprocess
import sys

import torch.nn as nn

_helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a + b
