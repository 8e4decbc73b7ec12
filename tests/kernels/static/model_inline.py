# Corpus: a load_inline candidate whose CUDA side needs no torch headers (no_implicit_headers=True),
# so the end-to-end test compiles in about a second. The kernel copies a tile with the TMA bulk engine.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cstdint>
__global__ void bulk_scale(const float* x, float* y, int n) {
  __shared__ alignas(128) float buf[256];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const float* src = x + blockIdx.x * 256;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(1024) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                 :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(buf))), "l"(src), "r"(b) : "memory");
  }
  __syncthreads();
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                 " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(b) : "memory");
  }
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) y[i] = 2.0f * buf[threadIdx.x];
}
extern "C" void bulk_scale_launch(const float* x, float* y, int n) {
  bulk_scale<<<(n + 255) / 256, 256>>>(x, y, n);
}
"""

CPP = r"""
#include <torch/extension.h>
extern "C" void bulk_scale_launch(const float* x, float* y, int n);
torch::Tensor scale(torch::Tensor x) {
  auto y = torch::empty_like(x);
  bulk_scale_launch(x.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(x.numel()));
  return y;
}
"""

ext = load_inline(name="bulk_scale_ext", cpp_sources=CPP, cuda_sources=CUDA, functions=["scale"],
                  extra_cuda_cflags=["-O3", "-arch=sm_90a"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scale(x)
