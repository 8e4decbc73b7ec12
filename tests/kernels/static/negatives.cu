// Corpus: feature names that appear only where they are not code.
// wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 -- only in this C++ comment.
#include <cstdio>

extern "C" __global__ void k_comment(float* out) {
  // This inline asm is nothing but PTX comments: the text lands in the .ptx, no instruction does.
  asm volatile(
      "// setmaxnreg.inc.sync.aligned.u32 240;\n\t"
      "/* wgmma.fence.sync.aligned; tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 32; */" ::: "memory");
  out[threadIdx.x] = 1.0f;
}

extern "C" __global__ void k_string(float* out) {
  // The string becomes a byte array in the PTX and a printf call, never an instruction.
  if (threadIdx.x == 0) printf("cp.async.bulk.tensor.2d.shared::cluster.global; wgmma.mma_async; mbarrier.init\n");
  out[threadIdx.x] = 2.0f;
}
