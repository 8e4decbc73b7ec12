"""problem: 1/40_LayerNorm
expect_kb: pass
expect_kp: param_mismatch
Parameter-dependent: replaces the (features, dim1, dim2) affine with a per-channel one. Equal to the
reference while a fresh nn.LayerNorm holds ones and zeros (all KernelBench ever runs), wrong for any
trained weights; the reference's weights have no place in it.
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape[0]))
        self.bias = nn.Parameter(torch.zeros(normalized_shape[0]))

    def forward(self, x):
        y = torch.nn.functional.layer_norm(x, x.shape[-3:], eps=1e-5)
        return y * self.weight[:, None, None] + self.bias[:, None, None]
