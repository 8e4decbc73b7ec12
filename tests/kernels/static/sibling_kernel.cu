// Corpus: CUDA source that a .py candidate reads from its own folder and hands to load_inline.
#include <cstdint>

__global__ void scale_mbarrier_kernel(const float* x, float* y, int n) {
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(blockDim.x) : "memory");
  __syncthreads();
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b) : "memory");
  }
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}

torch::Tensor scale(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const int n = static_cast<int>(x.numel());
  scale_mbarrier_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
