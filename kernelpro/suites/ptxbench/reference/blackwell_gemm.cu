// KernelPro expert reference: bf16 GEMM C = A @ B (or A @ B.T) for Blackwell (sm_100a).
//
// Compiled and statically verified only: no B200 was available, so this kernel has never run.
//
// A (M,K) row-major = K-major; B (K,N) row-major = N-major (MN-major for tcgen05), or with B_KMAJOR=1
// B (N,K) row-major = K-major (C = A @ B.T, the nn.Linear layout); C (M,N) row-major bf16; fp32 accumulate.
//
// Design, chosen to be simple enough to be right by construction:
//   * one CTA per BM x BN = 128 x BN output tile (no persistence, no clusters), 4 warps;
//   * warp 0 allocates BN tensor-memory columns (tcgen05.alloc, then relinquish_alloc_permit) for the
//     fp32 accumulator: D row i is TMEM lane i, D column j is TMEM column j (M = 128, cta_group::1);
//   * warp 0, one lane: TMA producer. Each k-tile (BK = 64) brings a 128x64 A box and the B tile
//     (one BNx64 box K-major, or BN/64 boxes of 64x64 N-major) into a STAGES-deep ring of 128B-swizzled
//     shared memory, completing on the stage's `full` mbarrier (expect_tx of the whole stage);
//   * warp 1, one lane: MMA issuer. It waits `full`, issues BK/16 tcgen05.mma.kind::f16 (M=128, N=BN,
//     K=16) from shared-memory descriptors, and tcgen05.commit's the stage's `empty` mbarrier, which
//     fires when those MMAs have read the stage; after the last k-tile it commits `done`;
//   * all 4 warps: epilogue. Wait `done`, then each warp reads its 32-lane quarter of TMEM with
//     tcgen05.ld.32x32b.x32 (thread t <- lane 32*warp + t, 32 columns per load), converts to bf16 and
//     stores 16-byte vectors straight to global memory, masking rows >= M and columns >= N;
//   * warp 0 frees the columns (tcgen05.dealloc) after every warp's loads have completed.
// Tails: TMA zero-fills out-of-bounds boxes (ragged M, N, K add zeros), the epilogue masks; N % 8 == 0.
//
// Compile-time parameters (-DKP_<NAME>): BN (64, 128 or 256), STAGES (2..8), B_KMAJOR (0/1).

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "blackwell_tcgen05.cuh"

#ifndef KP_BN
#define KP_BN 256
#endif
#ifndef KP_STAGES
#define KP_STAGES 4
#endif
#ifndef KP_B_KMAJOR
#define KP_B_KMAJOR 0
#endif

namespace kp_bw_gemm {

constexpr int BM = 128;
constexpr int BN = KP_BN;
constexpr int BK = 64;                       // one 128-byte swizzle row of bf16
constexpr int STAGES = KP_STAGES;
constexpr int UMMA_K = 16;                   // K of one kind::f16 MMA
constexpr int kThreads = 128;
constexpr int kABytes = BM * BK * 2;         // 16 KiB
constexpr int kBBytes = BN * BK * 2;
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kBSlabBytes = BK * 128;        // N-major B: one 64-wide N slab of BK rows
constexpr int kTmemCols = BN;                // fp32 accumulator, one column per output column
constexpr int kBarBytes = 8 * (2 * STAGES + 1) + 8;   // full[], empty[], done, TMEM base slot
constexpr int kSmemBytes = 1024 + STAGES * kStageBytes + kBarBytes;   // 1024: alignment slack
constexpr uint32_t kIdesc = kp_bw::idesc_f16_bf16_f32(BM, BN, !KP_B_KMAJOR);

static_assert(BN == 64 || BN == 128 || BN == 256,
              "BN must be 64, 128 or 256 (M=128 MMA N, a power-of-two TMEM allocation >= 32 columns)");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES must be in [2, 8]");
static_assert(kSmemBytes <= 232448, "STAGES * (BM + BN) * BK * 2 bytes exceeds the 227 KiB shared-memory limit");
static_assert(BK % UMMA_K == 0 && BK * 2 == 128, "BK must be one 128-byte swizzle row");

// The tile a CTA owns and its output origin. Tiles run along N fastest inside a column of M tiles.
__host__ __device__ constexpr int tiles_n(int N) { return (N + BN - 1) / BN; }
__host__ __device__ constexpr int tiles_m(int M) { return (M + BM - 1) / BM; }
__host__ __device__ inline void tile_origin(int tile, int N, int* m0, int* n0) {
  *m0 = (tile / tiles_n(N)) * BM;
  *n0 = (tile % tiles_n(N)) * BN;
}

// TMA coordinates {innermost, outer} of k-tile kt: A box {64 k, 128 m}.
__host__ __device__ inline void a_box(int m0, int kt, int* c0, int* c1) { *c0 = kt * BK; *c1 = m0; }
// B box j of k-tile kt: K-major {64 k, BN n} (j = 0 only); N-major {64 n, BK k}, j < BN/64.
__host__ __device__ inline void b_box(int n0, int kt, int j, int* c0, int* c1) {
#if KP_B_KMAJOR
  (void)j;
  *c0 = kt * BK;
  *c1 = n0;
#else
  *c0 = n0 + 64 * j;
  *c1 = kt * BK;
#endif
}
constexpr int kBBoxes = KP_B_KMAJOR ? 1 : BN / 64;

// Which output element thread `t` stores for column chunk `cc`, element `e` (0..31) of tile (m0, n0):
// its TMEM lane is t (warp quarter 32*(t/32) + lane), its column cc*32 + e.
__host__ __device__ inline void epilogue_element(int m0, int n0, int t, int cc, int e, int* row, int* col) {
  *row = m0 + t;
  *col = n0 + cc * 32 + e;
}

// Smem descriptors of k16 step `kk` inside a stage (addresses relative to the stage's A or B base).
__host__ __device__ constexpr uint64_t a_desc(uint32_t a_stage, int kk) { return kp_bw::kmajor_desc(a_stage, kk); }
__host__ __device__ constexpr uint64_t b_desc(uint32_t b_stage, int kk) {
#if KP_B_KMAJOR
  return kp_bw::kmajor_desc(b_stage, kk);
#else
  return kp_bw::mnmajor_desc(b_stage, kk, kBSlabBytes);
#endif
}

__global__ void __launch_bounds__(kThreads, 1)
    gemm_bf16_tcgen05_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                             __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  using namespace kp_bw;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;      // 128B-swizzle atoms need 1024-byte alignment
  const uint32_t a_smem = base;
  const uint32_t b_smem = base + STAGES * kABytes;
  const uint32_t bars = b_smem + STAGES * kBBytes;
  const uint32_t done_bar = bars + 16 * STAGES;
  const uint32_t tmem_slot = done_bar + 8;
  auto full_bar = [&](int s) { return bars + 8 * s; };
  auto empty_bar = [&](int s) { return bars + 8 * (STAGES + s); };

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  int m0, n0;
  tile_origin(blockIdx.x, N, &m0, &n0);
  const int k_tiles = (K + BK - 1) / BK;

  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar(s), 1);    // the producer's arrive.expect_tx
      mbar_init(empty_bar(s), 1);   // one tcgen05.commit
    }
    mbar_init(done_bar, 1);
    mbar_init_fence();
  }
  __syncwarp();                     // thread 0's branch above: the warp is whole again for .sync.aligned
  if (warp == 0) {                  // a whole warp allocates, then gives up the right to allocate more
    tmem_alloc(tmem_slot, kTmemCols);
    tmem_relinquish();
  }
  // The allocator wrote the base address to shared memory through the tensor-core proxy: order it
  // before the barrier and every tcgen05 operation of other threads after it.
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem_base = *reinterpret_cast<volatile uint32_t*>(smem_raw + (tmem_slot - raw));

  if (warp == 0) {
    if (lane == 0) {                // TMA producer
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t parity = (kt / STAGES) & 1;
        mbar_wait(empty_bar(s), parity ^ 1);   // a fresh barrier passes parity 1 at once
        mbar_expect_tx(full_bar(s), kStageBytes);
        int c0, c1;
        a_box(m0, kt, &c0, &c1);
        tma_load_2d(a_smem + s * kABytes, &map_a, full_bar(s), c0, c1);
        for (int j = 0; j < kBBoxes; ++j) {
          b_box(n0, kt, j, &c0, &c1);
          tma_load_2d(b_smem + s * kBBytes + j * kBSlabBytes, &map_b, full_bar(s), c0, c1);
        }
      }
    }
  } else if (warp == 1) {
    if (lane == 0) {                // MMA issuer
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t parity = (kt / STAGES) & 1;
        mbar_wait(full_bar(s), parity);
        tc_fence_after();
#pragma unroll
        for (int kk = 0; kk < BK / UMMA_K; ++kk)
          mma_f16(tmem_base, a_desc(a_smem + s * kABytes, kk), b_desc(b_smem + s * kBBytes, kk), kIdesc,
                  (kt | kk) != 0);
        mma_commit(empty_bar(s));   // frees the stage once these MMAs have read it
      }
      mma_commit(done_bar);         // the accumulator is final
    }
  }
  __syncwarp();

  // Epilogue: TMEM -> registers -> global.
  mbar_wait(done_bar, 0);
  tc_fence_after();
  const uint32_t lane_base = tmem_addr(tmem_base, static_cast<uint32_t>(warp * 32), 0);
#pragma unroll 1
  for (int cc = 0; cc < BN / 32; ++cc) {
    uint32_t v[32];
    tmem_ld32(lane_base + cc * 32, v);
    tmem_wait_ld();
    int row, col;
    epilogue_element(m0, n0, threadIdx.x, cc, 0, &row, &col);
    if (row < M) {
      __nv_bfloat16* crow = c + static_cast<size_t>(row) * N;
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        if (col + 8 * g < N) {      // N % 8 == 0: a group of 8 is all in or all out
          uint4 w;
          w.x = pack_bf16x2(__uint_as_float(v[8 * g + 0]), __uint_as_float(v[8 * g + 1]));
          w.y = pack_bf16x2(__uint_as_float(v[8 * g + 2]), __uint_as_float(v[8 * g + 3]));
          w.z = pack_bf16x2(__uint_as_float(v[8 * g + 4]), __uint_as_float(v[8 * g + 5]));
          w.w = pack_bf16x2(__uint_as_float(v[8 * g + 6]), __uint_as_float(v[8 * g + 7]));
          *reinterpret_cast<uint4*>(crow + col + 8 * g) = w;
        }
      }
    }
  }
  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    tmem_dealloc(tmem_base, kTmemCols);
  }
}

// Returns 0 on success; otherwise a code the caller turns into a message.
//  1: cuTensorMapEncodeTiled unavailable  2: tensor map rejected  3: launch/attribute failure
static int launch_gemm(const void* a, const void* b, void* c, int M, int N, int K, cudaStream_t stream) {
  CUtensorMap map_a, map_b;
  const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(M)};
  const cuuint64_t a_str[1] = {static_cast<cuuint64_t>(K) * 2};
  int e = kp_bw::make_map_bf16(&map_a, a, 2, a_dims, a_str, BM);
  if (e) return e;
#if KP_B_KMAJOR
  const cuuint64_t b_dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(N)};
  const cuuint64_t b_str[1] = {static_cast<cuuint64_t>(K) * 2};
  e = kp_bw::make_map_bf16(&map_b, b, 2, b_dims, b_str, BN);
#else
  const cuuint64_t b_dims[2] = {static_cast<cuuint64_t>(N), static_cast<cuuint64_t>(K)};
  const cuuint64_t b_str[1] = {static_cast<cuuint64_t>(N) * 2};
  e = kp_bw::make_map_bf16(&map_b, b, 2, b_dims, b_str, BK);
#endif
  if (e) return e;
  static bool attr_set = false;
  if (!attr_set) {
    if (cudaFuncSetAttribute(gemm_bf16_tcgen05_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) !=
        cudaSuccess)
      return 3;
    attr_set = true;
  }
  const int tiles = tiles_m(M) * tiles_n(N);
  gemm_bf16_tcgen05_kernel<<<tiles, kThreads, kSmemBytes, stream>>>(map_a, map_b,
                                                                     static_cast<__nv_bfloat16*>(c), M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

}  // namespace kp_bw_gemm

// C ABI for the Python binding (gemm_bf16.py), the same as hopper_gemm.cu's.
extern "C" int kp_gemm_bf16_launch(const void* a, const void* b, void* c, int M, int N, int K, void* stream) {
  return kp_bw_gemm::launch_gemm(a, b, c, M, N, K, static_cast<cudaStream_t>(stream));
}

// Which B layout this build expects: 1 = (N,K) K-major, 0 = (K,N) N-major.
extern "C" int kp_gemm_bf16_b_kmajor() { return KP_B_KMAJOR; }

extern "C" const char* kp_gemm_bf16_error(int code) {
  switch (code) {
    case 0: return "ok";
    case 1: return "cuTensorMapEncodeTiled is not available from the CUDA driver";
    case 2: return "cuTensorMapEncodeTiled rejected a tensor map (shape, stride or alignment)";
    default: return cudaGetErrorString(cudaGetLastError());
  }
}
