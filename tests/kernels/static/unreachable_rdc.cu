// Corpus: compiled with -rdc=true so the unused device function is kept in both PTX (.func) and SASS.
// No kernel calls it, so its wgmma must not be credited to k_live.
#include <cstdint>

extern "C" __device__ __noinline__ void never_called(uint64_t da, uint64_t db, float* out) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}

extern "C" __device__ __noinline__ uint32_t live_elect() {
  uint32_t leader;
  asm volatile("{\n .reg .pred p;\n elect.sync %0|p, 0xffffffff;\n}" : "=r"(leader));
  return leader;
}

extern "C" __global__ void k_live(uint32_t* out) { out[threadIdx.x] = live_elect(); }
