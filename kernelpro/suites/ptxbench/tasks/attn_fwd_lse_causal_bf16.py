"""PTXBench headline: causal attention forward returning (O, LSE), bf16, 48 heads, head dim 128, sequence 4096."""

import torch
import torch.nn as nn

BATCH = 4
HEADS = 48
SEQ = 4096
HEAD_DIM = 128

META = {
    'name': 'attn_fwd_lse_causal_bf16',
    'level': 3,
    'dtype': 'bf16',
    'tolerance': {'atol': 0.005, 'rtol': 0.02, 'rel_norm': 0.01},
    'sizes': {
        'shown': [{'BATCH': 1, 'SEQ': 512}, {'BATCH': 2, 'SEQ': 1024}, {'BATCH': 4, 'SEQ': 2048}],
        'heldout': [{'BATCH': 1, 'SEQ': 1000}, {'BATCH': 4, 'SEQ': 3080}],
    },
    'features': {'sm_90a': ['wgmma', 'tma', 'mbarrier'], 'sm_100a': ['tcgen05_mma', 'tmem', 'tma', 'mbarrier']},
    'baseline': 'cudnn_sdpa',
    'forbid_ops': [
        'aten::scaled_dot_product_attention', 'aten::_scaled_dot_product_cudnn_attention',
        'aten::_scaled_dot_product_flash_attention', 'aten::_scaled_dot_product_efficient_attention',
        'aten::_scaled_dot_product_attention_math', 'aten::_flash_attention_forward',
        'aten::_efficient_attention_forward', 'aten::_cudnn_attention_forward', 'aten::softmax',
        'aten::_softmax', 'aten::mm', 'aten::matmul', 'aten::addmm', 'aten::linear', 'aten::bmm',
        'aten::baddbmm', 'aten::_scaled_mm', 'aten::_grouped_mm', 'aten::einsum', 'aten::tensordot',
    ],
    'forbid_kernels': r"^(void )?(pytorch_flash::|fmha_cutlass[FB]_|PyTorchMemEffAttention::|cudnn_generated_|cudnn::|sm\d+_flash_|nvjet_|sm\d+_xmma_|xmma_|cutlass3x_|cutlass_\d+_|cutlass::|cublasLt::|(ampere|volta|turing)_\w*gemm|gemv2[NT]_kernel|gemvNSP_kernel|internal::gemvx::|gemmk1_kernel|gemmSN_(NN|TN|NT)_kernel|splitKreduce_kernel)|at::native::(\(anonymous namespace\)::)?\w*(SoftMax|[Ss]oftmax)|^void \(anonymous namespace\)::softmax_warp_(forward|backward)<",
    'flops': '4*BATCH*HEADS*SEQ*SEQ*HEAD_DIM/2',
    'bytes': '2*4*BATCH*HEADS*SEQ*HEAD_DIM + 4*BATCH*HEADS*SEQ',
    'headline': True,
    'description': "PTXBench's mha_with_lse_d128_causal (B=4, H=48, S=4096, D=128): returns O = softmax(Q K^T / sqrt(128) + causal mask) V, bf16 (B, H, S, D), and LSE fp32 (B, H, S) = natural-log logsumexp of the scaled scores per query row. Q, K, V bf16 (B, H, S, D) contiguous. Baseline: cuDNN SDPA (aten._scaled_dot_product_cudnn_attention with compute_log_sumexp). PTXBench's own instruction check on Hopper is wgmma + cp.async.bulk.tensor.",
}


def attention_with_lse(q, k, v, causal):
    """(O, LSE) with LSE fp32 (B, H, S), natural log of sum(exp(q k^T / sqrt(d))) per query row."""
    if q.is_cuda:
        try:
            out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False)
        except RuntimeError:  # no usable cuDNN SDPA in this build: PyTorch's flash backend
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
        o, lse = out[0], out[1]
    else:
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    return o, lse.reshape(q.shape[0], q.shape[1], q.shape[2]).contiguous()


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return attention_with_lse(q, k, v, True)


def get_inputs():
    q = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16) * 2.0
    k = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16)
    v = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, dtype=torch.bfloat16)
    return [q, k, v]


def get_init_inputs():
    return []
