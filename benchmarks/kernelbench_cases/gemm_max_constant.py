"""problem: 2/80_Gemm_Max_Subtract_GELU
expect_kb: pass
expect_kp: degenerate_problem
Degenerate: the max over dim 1 leaves a size-1 dimension, minus its own mean is zero, GELU(0) = 0; the
output is zeros whatever the input. Returns the constant without computing anything.
"""
# Appended to the problem's own source, which defines torch, nn and Model.
# ruff: noqa: F821


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, max_dim):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.zeros(x.shape[0], 1, device=x.device, dtype=x.dtype)
