// KernelPro expert reference: grouped (mixture-of-experts) bf16 GEMM for Hopper (sm_90a).
//
// Y[start_e:end_e] = X[start_e:end_e] @ W[e].T for every expert e, in one launch. X (TOKENS, K) bf16 row-major
// holds the routed tokens sorted by expert; W (E, N, K) bf16 K-major; offsets (E,) int32 on the device are the
// cumulative group ends (start_e = offsets[e-1], start_0 = 0). Y (TOKENS, N) bf16, fp32 accumulation.
//
// Design: a persistent, warp-specialized kernel built on hopper_gemm.cu's device primitives (included with
// KP_GEMM_PRIMITIVES_ONLY, B_KMAJOR=1, no cluster). Work items are (expert, m-tile, n-tile); expert e owns
// ceil(size_e / BM) * ceil(N / BN) of them. Every CTA reads the E offsets once and writes the group row
// starts and the prefix sums of work items into shared memory (no host sync: the offsets never leave the
// device), then walks linear work indices blockIdx.x, blockIdx.x + gridDim.x, ... and maps each to its
// (expert, m-tile, n-tile) by a binary search over the prefix sums. Warpgroup 0 is the producer (one
// thread issues TMA loads into a STAGES-deep ring guarded by full/empty mbarriers, setmaxnreg.dec);
// warpgroups 1..CONSUMERS run wgmma m64nBNk16 (setmaxnreg.inc), each owning BM/CONSUMERS rows of the tile.
//
// Group edges: one tensor map over all of X (TOKENS x K) and one over W viewed as (E*N) x K, with a masked
// epilogue, rather than a tensor map per expert. Group starts are multiples of 8, not of BM, so a tile based
// at a group's start reads rows past the group's end (the next expert's tokens) and, when N % BN != 0, W rows
// of the next expert; those products land only in accumulator rows / columns the epilogue never stores
// (row < group end, col < N). Per-expert maps would need E*2 maps built on the host (a device->host copy of
// the offsets, or on-device tensor-map encoding plus tensormap fences) for no saving in bytes moved; reads
// past TOKENS rows, E*N rows or K columns are zero-filled by TMA.
//
// Compile-time parameters (-DKP_<NAME>): BM BN BK STAGES CONSUMERS PRODUCER_REGS CONSUMER_REGS MAX_EXPERTS.
// With KP_GROUPED_HELPERS_ONLY only the __host__ __device__ scheduler helpers are compiled (the CPU
// emulation test builds them on the host).

#include <stdint.h>

#ifndef KP_MAX_EXPERTS
#define KP_MAX_EXPERTS 256
#endif

namespace kp_grouped {

constexpr int MAX_EXPERTS = KP_MAX_EXPERTS;

// ---------------------------------------------------------------------------------------------
// Scheduler helpers (__host__ __device__: the same code runs in the kernel and in the host emulation).

// Rows of expert e: [group_start(offsets, e), offsets[e]).
__host__ __device__ __forceinline__ int group_start(const int* offsets, int e) { return e == 0 ? 0 : offsets[e - 1]; }

// Work items of one group: ceil(rows / bm) m-tiles times tiles_n n-tiles; an empty (or malformed,
// negative-size) group has none.
__host__ __device__ __forceinline__ int group_tiles(int rows, int bm, int tiles_n) {
  return rows > 0 ? (rows + bm - 1) / bm * tiles_n : 0;
}

// prefix[0..E]: prefix[e] = work items of experts 0..e-1; row_start[e] = first row of expert e. Returns the
// total work. Serial: E is small (<= MAX_EXPERTS) and one thread of each CTA runs it once.
__host__ __device__ inline int build_schedule(const int* offsets, int experts, int bm, int tiles_n, int* prefix,
                                              int* row_start) {
  int total = 0;
  prefix[0] = 0;
  for (int e = 0; e < experts; ++e) {
    const int s = group_start(offsets, e);
    row_start[e] = s;
    total += group_tiles(offsets[e] - s, bm, tiles_n);
    prefix[e + 1] = total;
  }
  return total;
}

// The expert owning work index t (0 <= t < prefix[E]): the largest e with prefix[e] <= t. Empty experts
// (prefix[e] == prefix[e+1]) are never returned since prefix[e+1] > t must hold for the answer.
__host__ __device__ __forceinline__ int find_expert(const int* prefix, int experts, int t) {
  int lo = 0, hi = experts;   // invariant: prefix[lo] <= t, answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Work index t -> (expert, m-tile, n-tile). Inside an expert the m-tiles run fastest, so CTAs working at
// the same time share the expert's W[n-tile] slab in L2.
__host__ __device__ __forceinline__ void work_tile(const int* prefix, const int* offsets, int experts, int bm,
                                                   int t, int& e, int& mt, int& nt) {
  e = find_expert(prefix, experts, t);
  const int local = t - prefix[e];
  const int rows = offsets[e] - group_start(offsets, e);
  const int tiles_m = (rows + bm - 1) / bm;
  mt = local % tiles_m;
  nt = local / tiles_m;
}

// Whether row r / column c of the tile (expert e, m-tile mt, n-tile nt) is stored by the epilogue.
__host__ __device__ __forceinline__ bool row_live(int row_start, int row_end, int bm, int mt, int r) {
  return row_start + mt * bm + r < row_end;
}
__host__ __device__ __forceinline__ bool col_live(int n, int bn, int nt, int c) { return nt * bn + c < n; }

// Upper bound on the work items (grid size) from host-known sizes only: each group wastes at most one
// partial m-tile, so sum_e ceil(size_e/bm) <= floor(tokens/bm) + experts.
__host__ __device__ __forceinline__ int max_work(int tokens, int experts, int bm, int tiles_n) {
  return (tokens / bm + experts) * tiles_n;
}

}  // namespace kp_grouped

#ifndef KP_GROUPED_HELPERS_ONLY

#ifndef KP_BM
#define KP_BM 128
#endif
#ifndef KP_BN
#define KP_BN 256
#endif
#ifndef KP_BK
#define KP_BK 64
#endif
#ifndef KP_STAGES
#define KP_STAGES 4
#endif
#ifndef KP_CONSUMERS
#define KP_CONSUMERS 2
#endif
#ifndef KP_PRODUCER_REGS
#define KP_PRODUCER_REGS 40
#endif
#ifndef KP_CONSUMER_REGS
#define KP_CONSUMER_REGS 232
#endif
// hopper_gemm.cu's primitives, for W (N, K) K-major per expert and no clusters (a cluster's CTAs would
// straddle group boundaries).
#undef KP_B_KMAJOR
#define KP_B_KMAJOR 1
#undef KP_CLUSTER_M
#define KP_CLUSTER_M 1
#define KP_GEMM_PRIMITIVES_ONLY 1
#include "hopper_gemm.cu"

namespace kp_grouped {

using namespace kp_gemm;

constexpr int kSchedBytes = (2 * MAX_EXPERTS + 1) * 4;   // prefix[E+1] + row_start[E]
constexpr int kGroupedSmemBytes = kSmemBytes + kSchedBytes;
static_assert(kGroupedSmemBytes <= 232448, "STAGES*(BM*BK + BK*BN)*2 + schedule exceeds the 227 KiB shared-memory limit");
static_assert(MAX_EXPERTS >= 1 && MAX_EXPERTS <= 4096, "MAX_EXPERTS must be in [1, 4096]");

__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_bf16_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                             __nv_bfloat16* __restrict__ y, const int* __restrict__ offsets, int experts, int N,
                             int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t sa = base;
  const uint32_t sb = base + STAGES * kABytes;
  const uint32_t full_bar = sb + STAGES * kBBytes;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  // The schedule follows the barriers (generic pointer: smem_raw plus the aligned offset).
  int* prefix = reinterpret_cast<int*>(smem_raw + (empty_bar + STAGES * 8 - raw));
  int* row_start = prefix + MAX_EXPERTS + 1;
  __shared__ int s_ends[MAX_EXPERTS];
  __shared__ int s_total;

  const int wg = threadIdx.x / 128;
  const int tid_wg = threadIdx.x % 128;

  for (int e = threadIdx.x; e < experts; e += blockDim.x) s_ends[e] = offsets[e];
  __syncthreads();
  if (threadIdx.x == 0) {
    s_total = build_schedule(s_ends, experts, BM, (N + BN - 1) / BN, prefix, row_start);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_x)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_w)) : "memory");
  }
  __syncthreads();

  const int total = s_total;
  const int k_tiles = (K + BK - 1) / BK;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
    if (tid_wg == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        int e, mt, nt;
        work_tile(prefix, s_ends, experts, BM, t, e, mt, nt);
        const int m0 = row_start[e] + mt * BM;       // row of X
        const int w0 = e * N + nt * BN;              // row of W viewed as (E*N, K)
        for (int kt = 0; kt < k_tiles; ++kt) {
          mbar_wait(empty_bar + 8 * stage, phase ^ 1);
          const uint32_t fb = full_bar + 8 * stage;
          mbar_expect_tx(fb, kStageBytes);
          const int k0 = kt * BK;
#pragma unroll
          for (int kb = 0; kb < BK / 64; ++kb) {
            tma_load_2d(sa + stage * kABytes + kb * kABox, &map_x, fb, k0 + kb * 64, m0);
            tma_load_2d(sb + stage * kBBytes + kb * kBSlab, &map_w, fb, k0 + kb * 64, w0);
          }
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
    const int cw = wg - 1;
    const int warp = tid_wg / 32;
    const int lane = tid_wg % 32;
    float acc[kMSub][kAccPerTile];
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      int e, mt, nt;
      work_tile(prefix, s_ends, experts, BM, t, e, mt, nt);
      const int rs = row_start[e];
      const int row_end = s_ends[e];
#pragma unroll
      for (int ms = 0; ms < kMSub; ++ms)
#pragma unroll
        for (int i = 0; i < kAccPerTile; ++i) acc[ms][i] = 0.f;

      int prev_stage = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(full_bar + 8 * stage, phase);
#pragma unroll
        for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);
        wgmma_fence();
        const uint32_t a_stage = sa + stage * kABytes + cw * kWgRows * 128;
        const uint32_t b_stage = sb + stage * kBBytes;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          // W: K-major SW128, laid out like X: k16 steps move 32 B inside the row; SBO = 8 rows.
          const uint64_t db = smem_desc(b_stage + (kk / 4) * kBSlab + (kk % 4) * 32, 16, 1024);
#pragma unroll
          for (int ms = 0; ms < kMSub; ++ms) {
            const uint64_t da = smem_desc(a_stage + (kk / 4) * kABox + ms * 64 * 128 + (kk % 4) * 32, 16, 1024);
            wgmma_tile(acc[ms], da, db);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);
        wgmma_wait<1>();
        if (prev_stage >= 0 && tid_wg == 0) mbar_arrive_cluster(empty_bar + 8 * prev_stage, 0);
        prev_stage = stage;
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);
      if (prev_stage >= 0 && tid_wg == 0) mbar_arrive_cluster(empty_bar + 8 * prev_stage, 0);

      // Epilogue: rows past the group's end belong to the next expert (or past TOKENS), columns past N to
      // the next expert's W rows: neither is stored.
#pragma unroll
      for (int ms = 0; ms < kMSub; ++ms) {
        const int r = cw * kWgRows + ms * 64 + warp * 16 + lane / 4;   // row inside the tile
        const int row = rs + mt * BM + r;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int c = j * 8 + (lane % 4) * 2;
          if (col_live(N, BN, nt, c)) {
            const int col = nt * BN + c;
            if (row_live(rs, row_end, BM, mt, r))
              *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(row) * N + col) =
                  __floats2bfloat162_rn(acc[ms][4 * j + 0], acc[ms][4 * j + 1]);
            if (row_live(rs, row_end, BM, mt, r + 8))
              *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(row + 8) * N + col) =
                  __floats2bfloat162_rn(acc[ms][4 * j + 2], acc[ms][4 * j + 3]);
          }
        }
      }
    }
  }
#endif
}

// Returns 0 on success; codes as kp_grouped_gemm_bf16_error names them.
static int launch_grouped(const void* x, const void* w, void* y, const int* offsets, int tokens, int experts, int N,
                          int K, cudaStream_t stream) {
  if (experts < 1 || experts > MAX_EXPERTS) return 4;
  CUtensorMap map_x, map_w;
  int e = make_map(&map_x, x, tokens, K, BM);
  if (e) return e;
  e = make_map(&map_w, w, static_cast<uint64_t>(experts) * N, K, BN);
  if (e) return e;

  static int sms = 0;
  if (!sms) {
    int dev;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaFuncSetAttribute(grouped_gemm_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kGroupedSmemBytes) != cudaSuccess) {
      sms = 0;
      return 3;
    }
  }
  const int grid = std::max(1, std::min(sms, max_work(tokens, experts, BM, (N + BN - 1) / BN)));
  grouped_gemm_bf16_kernel<<<grid, kThreads, kGroupedSmemBytes, stream>>>(
      map_x, map_w, static_cast<__nv_bfloat16*>(y), offsets, experts, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

}  // namespace kp_grouped

// C ABI for the Python binding (grouped_gemm_moe_bf16.py).
extern "C" int kp_grouped_gemm_bf16_launch(const void* x, const void* w, void* y, const int* offsets, int tokens,
                                           int experts, int N, int K, void* stream) {
  return kp_grouped::launch_grouped(x, w, y, offsets, tokens, experts, N, K, static_cast<cudaStream_t>(stream));
}

extern "C" int kp_grouped_gemm_bf16_max_experts() { return kp_grouped::MAX_EXPERTS; }

extern "C" const char* kp_grouped_gemm_bf16_error(int code) {
  switch (code) {
    case 0: return "ok";
    case 1: return "cuTensorMapEncodeTiled is not available from the CUDA driver";
    case 2: return "cuTensorMapEncodeTiled rejected a tensor map (shape, stride or alignment)";
    case 4: return "expert count outside [1, MAX_EXPERTS]";
    default: return cudaGetErrorString(cudaGetLastError());
  }
}

#endif  // KP_GROUPED_HELPERS_ONLY
