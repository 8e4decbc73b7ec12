"""expect: impossible_speed
task: vector_add_big
device: gpu
Caches its result keyed on the input objects and their version counters (weakref + tensor._version):
every correctness check, including new values written in place, gets a fresh result, but the timed
loop calls it on unchanged inputs, so it "runs" faster than memory bandwidth allows.
"""
import weakref

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.refs = None
        self.versions = None
        self.out = None

    def forward(self, a, b):
        live = self.refs is not None and self.refs[0]() is a and self.refs[1]() is b
        if not (live and self.versions == (a._version, b._version)):
            self.out = a + b
            self.refs = (weakref.ref(a), weakref.ref(b))
            self.versions = (a._version, b._version)
        return self.out
