"""Expert reference for ptxbench/softmax_rows_bf16 on Hopper (sm_90a): Y = softmax(X, -1), bf16 in/out, fp32 math.

One pass over HBM. A persistent kernel (``row_kernel`` in ``_memops_common.py``) streams blocks of rows
into shared memory with TMA (``cp.async.bulk.tensor.2d``, boxes of {256 columns, R rows}, zero fill past
the ragged edges) through a 3-stage ring whose stages complete on mbarriers. A team of 32-256 threads
owns a row: each thread loads its 16-byte vectors from shared memory once into registers, the team
reduces the maximum, exponentiates in place (``ex2.approx``), reduces the sum, and writes bf16 results
with 16-byte global stores. The extension is built with the model (``ModelNew()``), for ``PARAMS``.

A parameter-search template too (``PARAMS``, ``make_source``, ``validate``, ``LADDERS``, ``ADVICE``): the
row pipeline's ring depth, bytes per stage and resident CTAs per SM, passed to nvcc as ``-DKP_<NAME>``;
the rules are the row pipeline's own, in ``_memops_common.py`` (shared with rmsnorm_bf16).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import torch
import torch.nn as nn

PARAMS = {
    "ROW_STAGES": 3,
    "ROW_STAGE_KB": 32,
    "ROW_CTAS_PER_SM": 0,
}

# ---- candidate body (make_source copies everything from here to the end marker) ----


def load_common():
    """_memops_common.py beside this file, or the copy a generated candidate embeds (_COMMON_SRC)."""
    embedded = globals().get("_COMMON_SRC")
    name = "kp_ptxbench_memops_common" + ("_embedded" if embedded else "")
    if name not in sys.modules:
        if embedded:
            mod = types.ModuleType(name)
            exec(compile(embedded, "_memops_common.py", "exec"), mod.__dict__)  # noqa: S102 - our own source
        else:
            spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_memops_common.py"))
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        sys.modules[name] = mod
    return sys.modules[name]


CUDA_SRC = r"""
namespace kpm {

template <int V>
struct SoftmaxRow {
  static constexpr int kV = V;
  __nv_bfloat16* y;
  struct Thread {};
  __device__ __forceinline__ void init(Thread&, int, int, int) const {}

  __device__ __forceinline__ void row(Thread&, const RowTeam& t, int64_t row, int cols) const {
    constexpr float kLog2e = 1.4426950408889634f;
    float x[V][8];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int v = t.tt + k * t.T;
      if (v < t.nv) {
        unpack8(t.vec(v), x[k]);
#pragma unroll
        for (int e = 0; e < 8; ++e) m = fmaxf(m, x[k][e]);
      }
    }
    m = t.reduce<true>(m);
    const float mb = m * kLog2e;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (t.tt + k * t.T < t.nv) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          x[k][e] = ex2_approx(fmaf(x[k][e], kLog2e, -mb));
          s += x[k][e];
        }
      }
    }
    s = t.reduce<false>(s);
    const float inv = 1.0f / s;
    uint4* out = reinterpret_cast<uint4*>(y + row * cols);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int v = t.tt + k * t.T;
      if (v < t.nv) {
#pragma unroll
        for (int e = 0; e < 8; ++e) x[k][e] *= inv;
        out[v] = pack8(x[k]);
      }
    }
  }
};

}  // namespace kpm

// Row softmax of x (rows x cols, row stride ld elements) into contiguous y. nullptr on success.
const char* kp_softmax_rows_launch(const void* x, void* y, int64_t rows, int64_t cols, int64_t ld,
                                   cudaStream_t stream) {
  using namespace kpm;
  if (row_vectors(cols) == 4) return launch_rows(SoftmaxRow<4>{static_cast<__nv_bfloat16*>(y)}, x, rows, cols, ld, stream);
  return launch_rows(SoftmaxRow<8>{static_cast<__nv_bfloat16*>(y)}, x, rows, cols, ld, stream);
}
"""

CPP_SRC = r"""
const char* kp_softmax_rows_launch(const void* x, void* y, int64_t rows, int64_t cols, int64_t ld,
                                   cudaStream_t stream);

torch::Tensor softmax_rows_bf16(torch::Tensor X) {
  TORCH_CHECK(X.is_cuda() && X.scalar_type() == torch::kBFloat16 && X.dim() >= 1,
              "softmax_rows_bf16: X must be a bfloat16 CUDA tensor");
  const int64_t cols = X.size(-1);
  TORCH_CHECK(cols % 8 == 0, "softmax_rows_bf16: the last dimension (", cols,
              ") must be a multiple of 8 (TMA needs 16-byte row strides)");
  const c10::cuda::CUDAGuard guard(X.device());
  auto Y = torch::empty(X.sizes(), X.options());
  if (X.numel() == 0) return Y;
  torch::Tensor X2 = X.dim() == 2 ? X : X.reshape({-1, cols});
  if (!kpm_tma_rows_ok(X2)) X2 = X2.contiguous();
  const int64_t ld = X2.size(0) > 1 ? X2.stride(0) : cols;
  const char* err = kp_softmax_rows_launch(X2.data_ptr(), Y.data_ptr(), X2.size(0), cols, ld,
                                           c10::cuda::getCurrentCUDAStream(X.device().index()).stream());
  TORCH_CHECK(err == nullptr, "softmax_rows_bf16: ", err ? err : "");
  return Y;
}
"""

def _build(params: dict):
    return load_common().build("softmax_rows_bf16", CUDA_SRC, CPP_SRC, ["softmax_rows_bf16"], defines=params)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._ext = _build(PARAMS)   # built with the model: the compile stays out of the first timed call

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self._ext.softmax_rows_bf16(X)
# ---- end candidate body ----


def make_source(params: dict) -> str:
    """A standalone candidate .py for ``params`` (merged over PARAMS), _memops_common.py embedded."""
    return load_common().make_candidate(__file__, PARAMS, params)


# ---- search space, read by the LLM-free parameter policy (kernelpro.agent.policy_param) ----
# The row pipeline's rules live with it, in _memops_common.py (rmsnorm_bf16 shares them).

LADDERS = load_common().ROW_LADDERS
ADVICE = load_common().ROW_ADVICE
GENERIC_START = load_common().ROW_GENERIC_START
GUIDANCE = load_common().ROW_GUIDANCE
validate = load_common().row_validate
