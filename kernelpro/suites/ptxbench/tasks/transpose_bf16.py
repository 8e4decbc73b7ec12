"""Out-of-place transpose of a large bf16 matrix: Y = X.T, contiguous."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 16384

META = {
    'name': 'transpose_bf16',
    'level': 1,
    'dtype': 'bf16',
    'tolerance': {'atol': 0.0, 'rtol': 0.0, 'rel_norm': 0.0},
    'sizes': {
        'shown': [{'ROWS': 512, 'COLS': 256}, {'ROWS': 2048, 'COLS': 1024}],
        'heldout': [{'ROWS': 1000, 'COLS': 3080}, {'ROWS': 2056, 'COLS': 776}],
    },
    'features': {'sm_90a': ['tma'], 'sm_100a': ['tma']},
    'baseline': 'torch',
    'forbid_ops': [
        'aten::clone', 'aten::contiguous', 'aten::copy_', 'aten::transpose_copy', 'aten::permute_copy',
        'aten::t_copy',
    ],
    'forbid_kernels': 'at::native::.*(direct_copy_kernel|copy_kernel|transpose|permute)',
    'bytes': '2*2*ROWS*COLS',
    'description': 'Y = X.T.contiguous() for X (ROWS, COLS) bf16; Y is (COLS, ROWS) row-major. Exact (a copy). Pure bandwidth: move tiles global -> shared -> global with TMA (cp.async.bulk.tensor), transposing in shared memory; both row strides are 16-byte multiples.',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, X):
        return X.t().contiguous()


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
