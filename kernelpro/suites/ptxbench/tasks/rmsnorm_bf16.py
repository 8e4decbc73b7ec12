"""RMSNorm over the last dimension, bf16 in/out with fp32 statistics."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 16384
HIDDEN = 8192
EPS = 1e-06

META = {
    'name': 'rmsnorm_bf16',
    'level': 1,
    'dtype': 'bf16',
    'sizes': {
        'shown': [{'ROWS': 256, 'HIDDEN': 1024}, {'ROWS': 1024, 'HIDDEN': 4096}],
        'heldout': [{'ROWS': 1000, 'HIDDEN': 3080}, {'ROWS': 4104, 'HIDDEN': 5128}],
    },
    'features': {'sm_90a': ['tma', 'mbarrier'], 'sm_100a': ['tma', 'mbarrier']},
    'baseline': 'torch',
    'forbid_ops': [
        'aten::rms_norm', 'aten::_fused_rms_norm', 'aten::layer_norm', 'aten::native_layer_norm',
        'aten::mean', 'aten::pow', 'aten::rsqrt', 'aten::norm', 'aten::linalg_vector_norm',
    ],
    'forbid_kernels': 'at::native::.*([Ll]ayer_?[Nn]orm|[Rr]ms_?[Nn]orm|RMSNorm|RowwiseMoments|MeanOps|NormTwoOps)',
    'flops': '4*ROWS*HIDDEN',
    'bytes': '2*(2*ROWS*HIDDEN + HIDDEN)',
    'description': 'Y = X * rsqrt(mean(X^2, -1) + EPS) * W for X (ROWS, HIDDEN) bf16, weight W (HIDDEN,) bf16, EPS = 1e-6, statistics in fp32, bf16 Y. Memory-bound: one read of X (TMA into shared memory, completion on an mbarrier), one write of Y.',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, X, W):
        return F.rms_norm(X, (X.shape[-1],), W, EPS)


def get_inputs():
    X = torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)
    W = 1.0 + 0.1 * torch.randn(HIDDEN, dtype=torch.bfloat16)
    return [X, W]


def get_init_inputs():
    return []
