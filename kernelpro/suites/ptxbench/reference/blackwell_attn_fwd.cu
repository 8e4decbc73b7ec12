// Blackwell (sm_100a) attention forward, bf16 in/out, fp32 accumulation, head dim 128.
//
// Compiled and statically verified only: no B200 was available, so this kernel has never run.
//
// Expert reference for the ptxbench attention-forward tasks on sm_100a. One CTA owns BLOCK_M = 128 query
// rows of one (batch, head) and walks the keys in BLOCK_N = 128-row tiles. The design is serial inside a
// CTA on purpose (each step waits for the one before it), so that every hazard is covered by a barrier:
//   * warp 4, one lane: TMA producer. Q once (two 64-column boxes of the 128B-swizzled head), then K and
//     V tiles into an ATTN_STAGES-deep ring (full/empty mbarriers, expect_tx of the whole stage);
//   * warp 5, one lane: MMA issuer. S = Q K^T as 8 tcgen05.mma.kind::f16 (M=N=128, K=16; both operands
//     K-major in shared memory) into tensor-memory columns [0,128), commit -> `s_full`; then, once the
//     softmax warps signal `p_full`, O += P V (P K-major from shared memory, V MN-major) into columns
//     [128,256), commit -> `o_done` and -> the stage's `empty` barrier;
//   * warps 0-3 (128 threads, thread r owns query row r = TMEM lane r): online softmax in the log2
//     domain. Each reads its row of S with tcgen05.ld.32x32b.x32 (once for the max, once for P), waits
//     `o_done` of the previous step (so P's buffer is free and O is final), writes P as bf16 into
//     shared memory in the canonical 128B-swizzled K-major layout, rescales its row of O in TMEM
//     (tcgen05.ld / tcgen05.st) when the running max moved, and arrives on `p_full`. The epilogue reads
//     O from TMEM, divides by the row sum and stores bf16 to global memory (and the natural-log LSE).
// Warp 0 allocates the 256 TMEM columns (tcgen05.alloc, relinquish_alloc_permit) and frees them at the end.
// Causal (ATTN_CAUSAL): key tiles above the diagonal are never loaded; keys past the query or past the
// end of the sequence are masked to -inf. TMA zero-fills rows past the sequence; stores are masked.
//
// Layout contract: q, k, v, o are (B*H, S, 128) bf16 contiguous; lse is (B*H, S) fp32. The host
// launcher takes raw pointers (the same C entry point as hopper_attn_fwd.cu), so no PyTorch headers here.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <utility>

#include "blackwell_tcgen05.cuh"

#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif
#ifndef ATTN_WITH_LSE
#define ATTN_WITH_LSE 0
#endif
#ifndef ATTN_STAGES
#define ATTN_STAGES 2
#endif

namespace kp_bw_attn {

constexpr int HEAD_DIM = 128;
constexpr int BLOCK_M = 128;
constexpr int BLOCK_N = 128;
constexpr int STAGES = ATTN_STAGES;
constexpr int SOFTMAX_THREADS = 128;
constexpr int THREADS = SOFTMAX_THREADS + 64;            // + producer warp + MMA warp
constexpr int SLAB = 128 * 128;                           // one 64-column 128B-swizzled box of 128 rows
constexpr int Q_BYTES = 2 * SLAB;
constexpr int KV_BYTES = 2 * SLAB;                        // K or V tile
constexpr int STAGE_BYTES = 2 * KV_BYTES;                 // K and V
constexpr int P_BYTES = 2 * SLAB;
constexpr int BAR_BYTES = 8 * (2 * STAGES + 4) + 8;
constexpr int SMEM_TOTAL = 1024 + Q_BYTES + STAGES * STAGE_BYTES + P_BYTES + BAR_BYTES;
constexpr int TMEM_COLS = 256;                            // S in [0,128), O in [128,256)
constexpr uint32_t S_COL = 0, O_COL = 128;
constexpr uint32_t IDESC_QK = kp_bw::idesc_f16_bf16_f32(BLOCK_M, BLOCK_N, false);    // K: K-major
constexpr uint32_t IDESC_PV = kp_bw::idesc_f16_bf16_f32(BLOCK_M, HEAD_DIM, true);    // V: MN-major

static_assert(STAGES >= 1 && STAGES <= 2, "ATTN_STAGES must be 1 or 2 (shared memory)");
static_assert(SMEM_TOTAL <= 232448, "shared memory over the 227 KiB limit");

// Key tiles query tile `mb` visits: all of them, or (causal) those at or below the diagonal.
__host__ __device__ inline int kv_tiles(int mb, int seq) {
  const int all = (seq + BLOCK_N - 1) / BLOCK_N;
#if ATTN_CAUSAL
  return all < mb + 1 ? all : mb + 1;
#else
  (void)mb;
  return all;
#endif
}

// The query tile CTA `bx` of `gx` owns. Causal: the longest rows first, so the short tail tiles fill in
// behind them.
__host__ __device__ inline int query_tile(int bx, int gx) { return ATTN_CAUSAL ? gx - 1 - bx : bx; }

// Whether key `key` takes part in query row `q`'s softmax.
__host__ __device__ inline bool key_visible(int q, int key, int seq) {
#if ATTN_CAUSAL
  return key < seq && key <= q;
#else
  (void)q;
  return key < seq;
#endif
}

// Byte offset, inside P's two 64-key slabs, of the 16-byte unit holding keys 8u..8u+7 (u < 16) of row r:
// the 128B swizzle XORs the unit index inside a 128-byte row with the row's index inside its 8-row atom.
__host__ __device__ constexpr uint32_t p_unit_offset(int r, int u) {
  return static_cast<uint32_t>((u / 8) * SLAB + r * 128 + (((u % 8) ^ (r % 8)) * 16));
}

// Smem descriptors of k16 step kk (0..7) of S = Q K^T (K = head dim) and of O += P V (K = keys).
__host__ __device__ constexpr uint64_t q_desc(uint32_t q, int kk) { return kp_bw::kmajor_desc(q + (kk / 4) * SLAB, kk % 4); }
__host__ __device__ constexpr uint64_t k_desc(uint32_t k, int kk) { return kp_bw::kmajor_desc(k + (kk / 4) * SLAB, kk % 4); }
__host__ __device__ constexpr uint64_t p_desc(uint32_t p, int kk) { return kp_bw::kmajor_desc(p + (kk / 4) * SLAB, kk % 4); }
__host__ __device__ constexpr uint64_t v_desc(uint32_t v, int kk) { return kp_bw::mnmajor_desc(v, kk, SLAB); }

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__global__ void __launch_bounds__(THREADS, 1)
    attn_fwd_tcgen05_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                            const __grid_constant__ CUtensorMap tv, __nv_bfloat16* __restrict__ out,
                            float* __restrict__ lse, int seq, float scale_log2) {
  using namespace kp_bw;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t q_smem = base;
  const uint32_t kv_smem = q_smem + Q_BYTES;
  const uint32_t p_smem = kv_smem + STAGES * STAGE_BYTES;
  const uint32_t bars = p_smem + P_BYTES;
  auto kv_full = [&](int s) { return bars + 8 * s; };
  auto kv_empty = [&](int s) { return bars + 8 * (STAGES + s); };
  const uint32_t q_full = bars + 16 * STAGES;
  const uint32_t s_full = q_full + 8;
  const uint32_t p_full = q_full + 16;
  const uint32_t o_done = q_full + 24;
  const uint32_t tmem_slot = q_full + 32;
  uint8_t* p_ptr = smem_raw + (p_smem - raw);

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int mb = query_tile(static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
  const int bh = blockIdx.y;
  const int m0 = mb * BLOCK_M;
  const int nb = kv_tiles(mb, seq);

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(kv_full(s), 1);
      mbar_init(kv_empty(s), 1);
    }
    mbar_init(q_full, 1);
    mbar_init(s_full, 1);
    mbar_init(p_full, SOFTMAX_THREADS);
    mbar_init(o_done, 1);
    mbar_init_fence();
  }
  __syncwarp();                     // thread 0's branch above: the warp is whole again for .sync.aligned
  if (warp == 0) {
    tmem_alloc(tmem_slot, TMEM_COLS);
    tmem_relinquish();
  }
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem_base = *reinterpret_cast<volatile uint32_t*>(smem_raw + (tmem_slot - raw));

  if (warp == 4) {
    if (lane == 0) {                                   // TMA producer
      mbar_expect_tx(q_full, Q_BYTES);
      tma_load_3d(q_smem, &tq, q_full, 0, m0, bh);
      tma_load_3d(q_smem + SLAB, &tq, q_full, 64, m0, bh);
      for (int j = 0; j < nb; ++j) {
        const int s = j % STAGES;
        mbar_wait(kv_empty(s), ((j / STAGES) & 1) ^ 1);
        const uint32_t k_st = kv_smem + s * STAGE_BYTES, v_st = k_st + KV_BYTES;
        mbar_expect_tx(kv_full(s), STAGE_BYTES);
        tma_load_3d(k_st, &tk, kv_full(s), 0, j * BLOCK_N, bh);
        tma_load_3d(k_st + SLAB, &tk, kv_full(s), 64, j * BLOCK_N, bh);
        tma_load_3d(v_st, &tv, kv_full(s), 0, j * BLOCK_N, bh);
        tma_load_3d(v_st + SLAB, &tv, kv_full(s), 64, j * BLOCK_N, bh);
      }
    }
  } else if (warp == 5) {
    if (lane == 0) {                                   // MMA issuer
      mbar_wait(q_full, 0);
      for (int j = 0; j < nb; ++j) {
        const int s = j % STAGES;
        const uint32_t k_st = kv_smem + s * STAGE_BYTES, v_st = k_st + KV_BYTES;
        mbar_wait(kv_full(s), (j / STAGES) & 1);
        tc_fence_after();
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
          mma_f16(tmem_base + S_COL, q_desc(q_smem, kk), k_desc(k_st, kk), IDESC_QK, kk > 0);
        mma_commit(s_full);
        mbar_wait(p_full, j & 1);                      // P written, O rescaled, S read out
        tc_fence_after();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk)
          mma_f16(tmem_base + O_COL, p_desc(p_smem, kk), v_desc(v_st, kk), IDESC_PV, (j > 0) || (kk > 0));
        mma_commit(o_done);
        mma_commit(kv_empty(s));
      }
    }
  } else {                                             // softmax warps 0-3: thread r owns row r
    const int r = threadIdx.x;
    const int q = m0 + r;
    const uint32_t t_row = tmem_addr(tmem_base, static_cast<uint32_t>(warp * 32), 0);
    float m_run = -INFINITY, l_run = 0.f;
    for (int j = 0; j < nb; ++j) {
      mbar_wait(s_full, j & 1);
      tc_fence_after();
      const int key0 = j * BLOCK_N;
      const bool edge = key0 + BLOCK_N > seq || (ATTN_CAUSAL && key0 + BLOCK_N - 1 > m0);
      uint32_t v[32];
      float mx = -INFINITY;
#pragma unroll 1
      for (int cc = 0; cc < BLOCK_N / 32; ++cc) {
        tmem_ld32(t_row + S_COL + cc * 32, v);
        tmem_wait_ld();
#pragma unroll
        for (int e = 0; e < 32; ++e) {
          const float sv = (!edge || key_visible(q, key0 + cc * 32 + e, seq)) ? __uint_as_float(v[e]) : -INFINITY;
          mx = fmaxf(mx, sv);
        }
      }
      const float m_new = fmaxf(m_run, mx);            // finite: key 0 of tile 0 is visible to every row
      const float alpha = ex2((m_run - m_new) * scale_log2);
      const float m_scaled = m_new * scale_log2;
      if (j > 0) {
        mbar_wait(o_done, (j - 1) & 1);                // P V of the previous tile has finished
        tc_fence_after();
      }
      float rs = 0.f;
#pragma unroll 1
      for (int cc = 0; cc < BLOCK_N / 32; ++cc) {
        tmem_ld32(t_row + S_COL + cc * 32, v);
        tmem_wait_ld();
        uint32_t packed[16];
#pragma unroll
        for (int e = 0; e < 32; e += 2) {
          const int key = key0 + cc * 32 + e;
          const float p0 = (!edge || key_visible(q, key, seq)) ? ex2(__uint_as_float(v[e]) * scale_log2 - m_scaled) : 0.f;
          const float p1 = (!edge || key_visible(q, key + 1, seq)) ? ex2(__uint_as_float(v[e + 1]) * scale_log2 - m_scaled) : 0.f;
          rs += p0 + p1;
          packed[e / 2] = pack_bf16x2(p0, p1);
        }
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          uint4 w = make_uint4(packed[4 * g], packed[4 * g + 1], packed[4 * g + 2], packed[4 * g + 3]);
          *reinterpret_cast<uint4*>(p_ptr + p_unit_offset(r, cc * 4 + g)) = w;
        }
      }
      l_run = l_run * alpha + rs;
      m_run = m_new;
      // tcgen05.ld/st are warp-collective: rescale when any row of the warp needs it.
      if (j > 0 && __any_sync(0xffffffffu, alpha != 1.f)) {
#pragma unroll 1
        for (int cc = 0; cc < HEAD_DIM / 32; ++cc) {
          tmem_ld32(t_row + O_COL + cc * 32, v);
          tmem_wait_ld();
#pragma unroll
          for (int e = 0; e < 32; ++e) v[e] = __float_as_uint(__uint_as_float(v[e]) * alpha);
          tmem_st32(t_row + O_COL + cc * 32, v);
        }
        tmem_wait_st();
      }
      fence_proxy_async_smem();                        // P's generic stores -> the MMA's async reads
      tc_fence_before();
      mbar_arrive(p_full);
    }
    mbar_wait(o_done, (nb - 1) & 1);
    tc_fence_after();
    const float inv_l = 1.f / l_run;
    __nv_bfloat16* orow = out + (static_cast<size_t>(bh) * seq + q) * HEAD_DIM;
#pragma unroll 1
    for (int cc = 0; cc < HEAD_DIM / 32; ++cc) {
      uint32_t v[32];
      tmem_ld32(t_row + O_COL + cc * 32, v);
      tmem_wait_ld();
      if (q < seq) {
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          uint4 w;
          w.x = pack_bf16x2(__uint_as_float(v[8 * g + 0]) * inv_l, __uint_as_float(v[8 * g + 1]) * inv_l);
          w.y = pack_bf16x2(__uint_as_float(v[8 * g + 2]) * inv_l, __uint_as_float(v[8 * g + 3]) * inv_l);
          w.z = pack_bf16x2(__uint_as_float(v[8 * g + 4]) * inv_l, __uint_as_float(v[8 * g + 5]) * inv_l);
          w.w = pack_bf16x2(__uint_as_float(v[8 * g + 6]) * inv_l, __uint_as_float(v[8 * g + 7]) * inv_l);
          *reinterpret_cast<uint4*>(orow + cc * 32 + 8 * g) = w;
        }
      }
    }
#if ATTN_WITH_LSE
    if (q < seq) lse[static_cast<size_t>(bh) * seq + q] = (m_run * scale_log2 + log2f(l_run)) * 0.6931471805599453f;
#else
    (void)lse;
#endif
  }
  __syncwarp();
  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    tmem_dealloc(tmem_base, TMEM_COLS);
  }
}

// (B*H, S, 128) bf16 viewed as a 3-D tensor {128, S, B*H}; box {64, 128, 1}, 128B swizzle, zero fill.
static int make_map(CUtensorMap* map, const void* ptr, int bh, int seq) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(HEAD_DIM), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(bh)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(HEAD_DIM) * 2,
                                 static_cast<cuuint64_t>(seq) * HEAD_DIM * 2};
  return kp_bw::make_map_bf16(map, ptr, 3, dims, strides, 128);
}

}  // namespace kp_bw_attn

// Returns nullptr on success, else a message. Pointers: q, k, v, o (B*H, S, 128) bf16; lse (B*H, S) fp32
// (may be null when built without ATTN_WITH_LSE). The signature is the Hopper launcher's (one C++ wrapper
// serves both); this kernel is written for head dim 128 only.
const char* kp_attn_fwd_launch(const void* q, const void* k, const void* v, void* o, float* lse, int bh, int seq,
                               int head_dim, float softmax_scale, cudaStream_t stream) {
  using namespace kp_bw_attn;
  if (head_dim != HEAD_DIM) return "the Blackwell attention reference supports head dim 128 only";
  if (bh <= 0 || seq <= 0) return nullptr;
  if (bh > 65535) return "batch*heads over 65535 (grid y limit)";
  CUtensorMap tq, tk, tv;
  for (auto [map, ptr] : {std::pair<CUtensorMap*, const void*>{&tq, q}, {&tk, k}, {&tv, v}}) {
    const int e = make_map(map, ptr, bh, seq);
    if (e == 1) return "cuTensorMapEncodeTiled is not available from the driver (needs a CUDA 12+ driver)";
    if (e) return "cuTensorMapEncodeTiled rejected the tensor (pointer not 16-byte aligned, or sizes out of range)";
  }
  static bool attr_set = false;
  if (!attr_set) {
    if (cudaFuncSetAttribute(attn_fwd_tcgen05_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_TOTAL) !=
        cudaSuccess)
      return "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
    attr_set = true;
  }
  dim3 grid((seq + BLOCK_M - 1) / BLOCK_M, bh);
  attn_fwd_tcgen05_kernel<<<grid, THREADS, SMEM_TOTAL, stream>>>(tq, tk, tv, static_cast<__nv_bfloat16*>(o), lse,
                                                                 seq, softmax_scale * 1.4426950408889634f);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}
