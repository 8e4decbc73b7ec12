"""expect: other_stream
task: vector_add
device: gpu
Does its work on a private stream and leaves that stream current when it returns, so whatever the
caller enqueues next (the timer's end event) goes to a stream that never ran the candidate's work.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, a, b):
        if self.side is None:
            self.side = torch.cuda.Stream()
        self.side.wait_stream(torch.cuda.current_stream())
        torch.cuda.set_stream(self.side)
        return a + b
