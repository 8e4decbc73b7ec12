"""Shared loader for the Hopper attention-backward references (``hopper_attn_bwd.cu``).

One CUDA source, specialised by nvcc ``-D`` macros: ``BWD_CAUSAL``, ``BWD_STAGES`` (Q/dO ring depth, 2 or 3)
and ``BWD_WATCHDOG`` (trap after that many failed barrier polls; 0 = off, the default). Each combination
is built once per process with ``torch.utils.cpp_extension.load_inline``; the extension name carries a hash
of the source and the macros, so an edited kernel never reuses a stale build.

The kernel was compiled for sm_90a and checked statically (ptxas: no spills; SASS: HGMMA, UTMALDG/UTMASTG,
SYNCS, USETMAXREG) and its index math is emulated on the CPU in the tests; its numerical correctness on a
GPU is what ``kernelpro bench`` establishes, not something this file claims.

The ModelNew files next to this one load it by path (``load_common()``), so they work whether or not
``kernelpro`` is importable as a package.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import torch

CU_PATH = Path(__file__).with_name("hopper_attn_bwd.cu")
HEAD_DIM = 128
DEFAULTS = {"BWD_STAGES": 2, "BWD_WATCHDOG": 0, "BWD_DQ_RED_V2": 1}
NVCC_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17"]

# The torch-facing wrapper; the .cu itself has no PyTorch headers so it also builds with plain nvcc.
CPP_SRC = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

const char* kp_attn_bwd_launch(const void* q, const void* k, const void* v, const void* d_o, const float* lse,
                               const float* delta, void* dq, void* dk, void* dv, float* dq_accum, int bh,
                               int seq, int head_dim, float softmax_scale, cudaStream_t stream);

void attn_bwd_into(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor d_o, torch::Tensor lse,
                   torch::Tensor delta, torch::Tensor dq, torch::Tensor dk, torch::Tensor dv,
                   torch::Tensor dq_accum, double softmax_scale) {
  for (const auto* t : {&q, &k, &v, &d_o, &dq, &dk, &dv}) {
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == torch::kBFloat16 && t->is_contiguous() && t->dim() == 4,
                "attention backward reference: q, k, v, do, dq, dk, dv must be contiguous 4-D bf16 CUDA "
                "tensors (B, H, S, D)");
    TORCH_CHECK(t->sizes() == q.sizes(), "attention backward reference: q, k, v, do, dq, dk, dv must have "
                "the same shape");
  }
  TORCH_CHECK(q.size(3) == 128, "attention backward reference: head dim must be 128, got ", q.size(3));
  const int64_t bh = q.size(0) * q.size(1), seq = q.size(2);
  TORCH_CHECK(bh <= 65535 && seq <= (1LL << 30), "attention backward reference: B*H must be <= 65535");
  for (const auto* t : {&lse, &delta}) {
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == torch::kFloat32 && t->is_contiguous() &&
                    t->numel() == bh * seq,
                "attention backward reference: lse and delta must be contiguous fp32 CUDA tensors of B*H*S "
                "elements");
  }
  TORCH_CHECK(dq_accum.is_cuda() && dq_accum.scalar_type() == torch::kFloat32 && dq_accum.is_contiguous() &&
                  dq_accum.numel() == bh * seq * 128,
              "attention backward reference: dq_accum must be a contiguous fp32 CUDA tensor of B*H*S*128");
  const c10::cuda::CUDAGuard guard(q.device());
  const char* err = kp_attn_bwd_launch(
      q.data_ptr(), k.data_ptr(), v.data_ptr(), d_o.data_ptr(), lse.data_ptr<float>(), delta.data_ptr<float>(),
      dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), dq_accum.data_ptr<float>(), static_cast<int>(bh),
      static_cast<int>(seq), static_cast<int>(q.size(3)), static_cast<float>(softmax_scale),
      c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "attention backward reference kernel: ", err ? err : "");
}
"""

_BUILT: dict[str, object] = {}
_BY_MACROS: dict[tuple, object] = {}


def macros(causal: bool, **overrides: int) -> dict[str, int]:
    unknown = sorted(set(overrides) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown attention-backward macros {unknown}; valid: {sorted(DEFAULTS)}")
    m = {"BWD_CAUSAL": int(causal)}
    m.update(DEFAULTS)
    m.update({k: int(v) for k, v in overrides.items()})
    return m


def build(causal: bool, src: str | None = None, **overrides: int):
    """Compile (once per source + macros) and return the extension module. ``src`` is the CUDA source a
    generated candidate embeds; by default ``hopper_attn_bwd.cu`` beside this file."""
    m = macros(causal, **overrides)
    fast = (src is None, tuple(sorted(m.items())))
    if fast in _BY_MACROS:  # per-call path: no file read or hashing in front of every launch
        return _BY_MACROS[fast]
    if src is None:
        src = CU_PATH.read_text()
    defines = [f"-D{k}={v}" for k, v in sorted(m.items())]
    key = hashlib.sha256((src + "\n" + CPP_SRC + "\n" + " ".join(defines)).encode()).hexdigest()[:16]
    if key not in _BUILT:
        from torch.utils.cpp_extension import load_inline

        _BUILT[key] = load_inline(
            name=f"kp_attn_bwd_{key}",
            cpp_sources=CPP_SRC,
            cuda_sources=src,
            functions=["attn_bwd_into"],
            # An explicit -gencode keeps torch from adding a plain sm_90 pass, which rejects wgmma.
            extra_cuda_cflags=[*NVCC_FLAGS, *defines],
            verbose=False,
        )
    _BY_MACROS[fast] = _BUILT[key]
    return _BUILT[key]


def attn_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
                  delta: torch.Tensor, causal: bool, src: str | None = None, **overrides: int):
    """(dQ, dK, dV) bf16 of SDPA with scale 1/sqrt(D), from the forward's natural-log ``lse`` and
    ``delta = rowsum(dO * O)`` (both fp32 (B, H, S))."""
    if q.shape[-1] != HEAD_DIM:
        raise ValueError(f"attention backward reference: head dim must be {HEAD_DIM}, got {q.shape[-1]}")
    ext = build(causal, src, **overrides)
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    lse, delta = lse.float().contiguous(), delta.float().contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    # fp32 dQ accumulator; the launcher zeroes it on the current stream before the kernel adds into it.
    dq_accum = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    ext.attn_bwd_into(q, k, v, do, lse, delta, dq, dk, dv, dq_accum, 1.0 / math.sqrt(q.shape[-1]))
    return dq, dk, dv


# ---- parameter-search template support, shared by the four attn_bwd reference files ----

# Search space (kernelpro.agent.policy_param); its keys are the template's knobs.
LADDERS = {"BWD_STAGES": [2, 3], "BWD_DQ_RED_V2": [0, 1]}


def validate(params: dict) -> str | None:
    """Why ``params`` cannot build (the kernel's static_asserts); None if valid."""
    unknown = sorted(set(params) - set(LADDERS))
    if unknown:
        return f"unknown PARAMS keys {unknown}; the attention-backward template has {', '.join(LADDERS)}"
    if params.get("BWD_STAGES", 2) not in (2, 3):
        return "BWD_STAGES must be 2 or 3 (K, V, the Q/dO ring and two dS buffers in 227 KB of shared memory)"
    if params.get("BWD_DQ_RED_V2", 1) not in (0, 1):
        return "BWD_DQ_RED_V2 must be 0 (one scalar atomicAdd per dQ element) or 1 (red.global.add.v2.f32)"
    return None


# The profile findings that implicate each knob.
ADVICE = [
    ("atomics", r"global reductions saturate", "BWD_DQ_RED_V2", +1, 3.0,
     "two dQ columns per reduction request halve the requests that reach L2"),
    ("warp_stalls", r"barrier|long_scoreboard|mbarrier", "BWD_STAGES", +1, 1.5,
     "consumers wait on a Q/dO tile's full barrier: a third ring stage has it loaded ahead"),
    ("occupancy", r"shared memory", "BWD_STAGES", -1, 1.0, "each Q/dO stage is 32 KB of shared memory"),
]
GUIDANCE = [
    (r"atomic|global reduction|red\.global|crossbar", "BWD_DQ_RED_V2", +1, 2.0),
    (r"latency|stall|long.?scoreboard|mbarrier|tma.*(wait|starv)", "BWD_STAGES", +1, 1.5),
    (r"shared.?memory|smem|occupancy", "BWD_STAGES", -1, 1.0),
]
# A first version: a two-stage ring and one scalar atomicAdd per dQ element.
GENERIC_START = {"BWD_STAGES": 2, "BWD_DQ_RED_V2": 0}


def make_source(reference: Path, defaults: dict, params: dict) -> str:
    """A standalone candidate .py from the reference file ``reference`` for ``params`` (merged over its
    ``PARAMS``), with this loader and the CUDA source embedded."""
    merged = {**defaults, **params}
    why = validate(merged)
    if why:
        raise ValueError(why)
    common = Path(__file__).read_text()
    cuda = CU_PATH.read_text()
    for label, text in (("_attn_bwd_common.py", common), ("hopper_attn_bwd.cu", cuda)):
        if "\'\'\'" in text:
            raise ValueError(f"{label} cannot be embedded in a raw triple-quoted string")
    me = reference.read_text()
    head = me[:me.index("PARAMS = {")]
    body = me[me.index("# ---- candidate body"):me.index("# ---- end candidate body ----")]
    params_text = "{\n" + "".join(f'    "{k}": {int(v)},\n' for k, v in merged.items()) + "}"
    return (f"{head}PARAMS = {params_text}\n\n_COMMON_SRC = r\'\'\'{common}\'\'\'\n\n"
            f"CUDA_SRC = r\'\'\'{cuda}\'\'\'\n\n{body}")
