"""problem: 1/40_LayerNorm
expect_kb: pass
expect_kp: wrong_output
Parameter-dependent: keeps the reference's nn.LayerNorm (same names, same shapes) but never applies its
affine, which only a fresh module's ones and zeros forgive.
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return torch.nn.functional.layer_norm(x, x.shape[-3:], eps=self.ln.eps)
