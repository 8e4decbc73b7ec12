"""Row softmax of a bf16 matrix (fp32 math), one pass over HBM."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 8192

META = {
    'name': 'softmax_rows_bf16',
    'level': 1,
    'dtype': 'bf16',
    'tolerance': {'atol': 1e-05, 'rtol': 0.02, 'rel_norm': 0.01},
    'sizes': {
        'shown': [{'ROWS': 256, 'COLS': 1024}, {'ROWS': 1024, 'COLS': 4096}],
        'heldout': [{'ROWS': 1000, 'COLS': 3080}, {'ROWS': 4104, 'COLS': 1000}],
    },
    'features': {'sm_90a': ['tma', 'mbarrier'], 'sm_100a': ['tma', 'mbarrier']},
    'baseline': 'torch',
    'forbid_ops': [
        'aten::softmax', 'aten::_softmax', 'aten::log_softmax', 'aten::_log_softmax', 'aten::exp',
        'aten::amax', 'aten::max', 'aten::sum',
    ],
    'forbid_kernels': r"at::native::(\(anonymous namespace\)::)?\w*(SoftMax|[Ss]oftmax)|^void \(anonymous namespace\)::softmax_warp_(forward|backward)<",
    'flops': '5*ROWS*COLS',
    'bytes': '2*2*ROWS*COLS',
    'description': 'Y = softmax(X, dim=-1) for X (ROWS, COLS) bf16, computed in fp32, bf16 Y. Memory-bound: read X once (stage a row block in shared memory with TMA and an mbarrier), write Y once. Outputs are small (~1/COLS), so the absolute tolerance is tight.',
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, X):
        return torch.softmax(X, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.bfloat16) * 2.0]


def get_init_inputs():
    return []
