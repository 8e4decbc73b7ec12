"""expect: spawned_process
task: vector_add
device: any
Starts a Python interpreter through a symlink named `cc` (a name on the JIT tools' allow-list).
"""
import os
import subprocess
import sys
import tempfile

import torch.nn as nn

_cc = os.path.join(tempfile.mkdtemp(), "cc")
os.symlink(sys.executable, _cc)


class ModelNew(nn.Module):
    def forward(self, a, b):
        subprocess.run([_cc, "-c", "pass"], check=False)
        return a + b
