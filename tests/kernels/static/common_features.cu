// Corpus for static verification: one kernel per architecture feature, valid on sm_90a and sm_100a.
// Each kernel uses its feature through inline PTX and stores a result so nothing is dead code.
#include <cstdint>

#define DEV static __device__ __forceinline__

DEV uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Stand-in for CUtensorMap: 128 opaque bytes, 64-byte aligned, passed as a __grid_constant__ param.
struct alignas(64) TensorMap { unsigned char bytes[128]; };

DEV void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

DEV void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

DEV bool mbar_try_wait(uint32_t bar, uint32_t phase) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(ok) : "r"(bar), "r"(phase) : "memory");
  return ok != 0;
}

extern "C" __global__ void k_tma(const __grid_constant__ TensorMap tmap, float* out) {
  __shared__ alignas(128) float tile[16 * 16];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_u32(&bar);
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];"
                 ::"l"(&tmap), "r"(16), "r"(0) : "memory");
    mbar_expect_tx(b, sizeof(tile));
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(smem_u32(tile)), "l"(&tmap), "r"(0), "r"(0), "r"(b) : "memory");
  }
  __syncthreads();
  while (!mbar_try_wait(b, 0)) {
  }
  tile[threadIdx.x] *= 2.0f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"(&tmap), "r"(0), "r"(0), "r"(smem_u32(tile)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
  out[threadIdx.x] = tile[threadIdx.x];
}

extern "C" __global__ void k_bulk_copy(const float* in, float* out) {
  __shared__ alignas(128) float buf[256];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_u32(&bar);
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    mbar_expect_tx(b, sizeof(buf));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(buf)), "l"(in), "r"(1024), "r"(b) : "memory");
  }
  __syncthreads();
  while (!mbar_try_wait(b, 0)) {
  }
  buf[threadIdx.x] += 1.0f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(out), "r"(smem_u32(buf)), "r"(1024) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

extern "C" __global__ void k_mbarrier(float* out) {
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_u32(&bar);
  if (threadIdx.x == 0) mbar_init(b, blockDim.x);
  __syncthreads();
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(b) : "memory");
  while (!mbar_try_wait(b, 0)) {
  }
  out[threadIdx.x] = static_cast<float>(state & 1);
}

extern "C" __global__ void __launch_bounds__(384, 1) k_setmaxnreg(float* out) {
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
    out[threadIdx.x] = 1.0f;
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
    out[threadIdx.x] = 2.0f;
  }
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) k_cluster(float* out) {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<float>(rank);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) k_dsmem(float* out) {
  __shared__ float mine[128];
  mine[threadIdx.x] = static_cast<float>(threadIdx.x + blockIdx.x);
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
  uint32_t rank, remote;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(&mine[threadIdx.x])), "r"(rank ^ 1));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

extern "C" __global__ void k_stmatrix(const uint32_t* in, uint32_t* out) {
  __shared__ alignas(16) uint16_t tile[8 * 8];
  const uint32_t v = in[threadIdx.x];
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};"
               ::"r"(smem_u32(&tile[(threadIdx.x % 8) * 8])), "r"(v) : "memory");
  __syncwarp();
  out[threadIdx.x] = tile[threadIdx.x];
}

extern "C" __global__ void k_ldmatrix(const uint16_t* in, uint32_t* out) {
  __shared__ alignas(16) uint16_t tile[8 * 8];
  tile[threadIdx.x] = in[threadIdx.x];
  tile[threadIdx.x + 32] = in[threadIdx.x + 32];
  __syncwarp();
  uint32_t v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(v) : "r"(smem_u32(&tile[(threadIdx.x % 8) * 8])) : "memory");
  out[threadIdx.x] = v;
}

extern "C" __global__ void k_cp_async(const float4* in, float4* out) {
  __shared__ alignas(16) float4 buf[128];
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               ::"r"(smem_u32(&buf[threadIdx.x])), "l"(&in[threadIdx.x]) : "memory");
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x + 1) % 128];
}

extern "C" __global__ void k_mma_sync(const uint32_t* a, const uint32_t* b, float* c) {
  const int t = threadIdx.x;
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a[t * 4]), "r"(a[t * 4 + 1]), "r"(a[t * 4 + 2]), "r"(a[t * 4 + 3]), "r"(b[t * 2]), "r"(b[t * 2 + 1]));
  c[t * 4] = d0;
  c[t * 4 + 1] = d1;
  c[t * 4 + 2] = d2;
  c[t * 4 + 3] = d3;
}

extern "C" __global__ void k_fence_proxy_async(float* out) {
  __shared__ float buf[128];
  buf[threadIdx.x] = 1.0f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  out[threadIdx.x] = buf[127 - threadIdx.x];
}

extern "C" __global__ void k_elect_sync(uint32_t* out) {
  uint32_t leader, is_leader;
  asm volatile("{\n .reg .pred p;\n elect.sync %0|p, 0xffffffff;\n selp.u32 %1, 1, 0, p;\n}"
               : "=r"(leader), "=r"(is_leader));
  out[threadIdx.x] = leader * 2 + is_leader;
}

// The feature sits in a non-inlined device function; only the call graph links it to the kernel.
__device__ __noinline__ uint32_t ldmatrix_helper(const uint16_t* tile) {
  uint32_t v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
               : "=r"(v) : "r"(smem_u32(&tile[(threadIdx.x % 8) * 8])) : "memory");
  return v;
}

extern "C" __global__ void k_ldmatrix_via_call(const uint16_t* in, uint32_t* out) {
  __shared__ alignas(16) uint16_t tile[8 * 8];
  tile[threadIdx.x] = in[threadIdx.x];
  tile[threadIdx.x + 32] = in[threadIdx.x + 32];
  __syncwarp();
  out[threadIdx.x] = ldmatrix_helper(tile);
}

// No architecture feature at all: the control kernel.
extern "C" __global__ void k_plain(const float* in, float* out) {
  out[threadIdx.x] = in[threadIdx.x] * 3.0f + 1.0f;
}
