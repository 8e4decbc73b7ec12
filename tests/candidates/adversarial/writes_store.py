"""expect: writes_outside
task: vector_add
device: any
Tries to write into the run store / compile cache (and the task's folder), ignoring any failure.
"""
import os

import torch.nn as nn

from kernelpro import paths

for target in (paths.cache_root() / "poisoned.so", os.path.join(os.path.dirname(os.path.abspath(__file__)), "x.py")):
    try:
        with open(target, "w") as f:
            f.write("pwned")
        os.remove(target)   # (where no sandbox stopped it: leave no trace in the test tree)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a + b
