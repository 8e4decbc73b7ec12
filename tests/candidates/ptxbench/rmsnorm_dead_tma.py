"""task: ptxbench/rmsnorm_bf16
expect: correct, features emitted, correct_with_arch False (TMA and mbarrier only in a branch never taken)

Correct RMSNorm with plain global loads. The TMA + mbarrier code the task asks for sits behind a runtime
flag that is always 0, so nvcc keeps it (UTMALDG and SYNCS are in the SASS, the static verifier sees
both) but it never executes. PTXBench's rule must reject it: ncu counts zero executions.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cuda_bf16.h>
#include <stdint.h>

struct alignas(64) Map { unsigned char bytes[128]; };

__global__ void rms(const __grid_constant__ Map map, const __nv_bfloat16* __restrict__ x,
                    const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y, int cols, float eps,
                    int use_tma) {
  __shared__ alignas(128) __nv_bfloat16 tile[64 * 64];
  __shared__ alignas(8) uint64_t bar;
  __shared__ float part[32];
  const __nv_bfloat16* row = x + (size_t)blockIdx.x * cols;
  float acc = 0.f;
  if (use_tma) {  // never taken: the dead branch that carries the requested features
    uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar), t = (uint32_t)__cvta_generic_to_shared(tile);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 8192;" ::"r"(b) : "memory");
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                   ::"r"(t), "l"((uint64_t)&map), "r"(0), "r"((int)blockIdx.x), "r"(b) : "memory");
      uint32_t ok = 0;
      while (!ok)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(ok) : "r"(b) : "memory");
    }
    __syncthreads();
    acc = __bfloat162float(tile[threadIdx.x]);
  }
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = __bfloat162float(row[i]);
    acc += v * v;
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) part[0] = s;
  }
  __syncthreads();
  const float r = rsqrtf(part[0] / cols + eps);
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    y[(size_t)blockIdx.x * cols + i] = __float2bfloat16(__bfloat162float(row[i]) * r * __bfloat162float(w[i]));
}

extern "C" void kp_rms_launch(const void* x, const void* w, void* y, int rows, int cols, float eps, void* stream) {
  Map map = {};
  if (rows) rms<<<rows, 256, 0, (cudaStream_t)stream>>>(map, (const __nv_bfloat16*)x, (const __nv_bfloat16*)w,
                                                        (__nv_bfloat16*)y, cols, eps, 0);
}
"""

BINDING = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
extern "C" void kp_rms_launch(const void* x, const void* w, void* y, int rows, int cols, float eps, void* stream);
torch::Tensor rmsnorm(torch::Tensor x, torch::Tensor w, double eps) {
  x = x.contiguous();
  auto y = torch::empty_like(x);
  const int cols = x.size(-1);
  kp_rms_launch(x.data_ptr(), w.contiguous().data_ptr(), y.data_ptr(), x.numel() / cols, cols, (float)eps,
                c10::cuda::getCurrentCUDAStream().stream());
  return y;
}
"""

_ext = load_inline(
    name="kp_test_rmsnorm_dead_tma",
    cpp_sources=BINDING,
    cuda_sources=CUDA,
    functions=["rmsnorm"],
    extra_cuda_cflags=["-gencode=arch=compute_90a,code=sm_90a", "-O3"],
)


class ModelNew(nn.Module):
    def forward(self, X, W):
        return _ext.rmsnorm(X, W, 1e-6)
