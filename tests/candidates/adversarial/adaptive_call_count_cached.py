"""expect: wrong_output
task: vector_add
device: any
Honest for its first 40 calls, then returns the previous result whatever the inputs: a stale answer
only while timed. Fresh inputs swapped into random timed calls (outside the timed window) expose it.
"""
import torch.nn as nn

_state = {"n": 0, "last": None}


class ModelNew(nn.Module):
    def forward(self, a, b):
        _state["n"] += 1
        if _state["n"] > 40 and _state["last"] is not None and _state["last"].shape == a.shape:
            return _state["last"]
        _state["last"] = a + b
        return _state["last"]
