"""problem: 2/83_Conv3d_GroupNorm_Min_Clamp_Dropout
expect_kb: pass
expect_kp: degenerate_problem
Degenerate: min(x, 0) then clamp to [0, 1] pins every element to 0 (dropout of zeros is zeros). Computes
the output shape once and returns zeros.
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(Model):
    def __init__(self, *args):
        super().__init__(*args)
        self.shapes = {}

    def forward(self, x):
        key = tuple(x.shape)
        if key not in self.shapes:
            self.shapes[key] = tuple(super().forward(x[:1]).shape[1:])
        return torch.zeros((x.shape[0], *self.shapes[key]), device=x.device, dtype=x.dtype)
