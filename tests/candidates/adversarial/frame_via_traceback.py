"""expect: frame_access
task: vector_add
device: any
Reaches the harness's frames without sys._getframe: through a caught exception's traceback.
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            raise LookupError
        except LookupError as e:
            frame = e.__traceback__.tb_frame
        depth = 0
        while frame is not None and depth < 50:
            frame, depth = frame.f_back, depth + 1
        return a + b
