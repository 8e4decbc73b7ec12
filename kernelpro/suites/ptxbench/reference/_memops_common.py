"""Shared pieces of the Hopper (sm_90a) references for the memory-bound ptxbench tasks.

Used by ``softmax_rows_bf16.py``, ``rmsnorm_bf16.py`` and ``transpose_bf16.py`` next to this file, which
load it by path (``load_common()`` in each), so they work whether or not ``kernelpro`` is importable.

- ``CUDA_PRELUDE``: device helpers (mbarrier init / expect_tx / parity wait, 2-D TMA load and store,
  bulk async-group waits, proxy fence, named barriers, bf16 <-> fp32 packing), the host-side tensor-map
  encoder (``cuTensorMapEncodeTiled`` fetched with ``cudaGetDriverEntryPoint``, so nothing links
  libcuda), and the *row pipeline* shared by softmax and RMSNorm: a persistent kernel whose CTAs walk
  blocks of R rows; one thread keeps a ``ROW_STAGES``-deep ring of TMA loads in flight (each stage is
  ceil(cols/256) boxes of {256 cols, R rows}, completing on the stage's mbarrier), and teams of 32-256
  threads reduce one row each in fp32 and write bf16 results with 16-byte stores.
- ``build()``: ``load_inline`` with ``-gencode=arch=compute_90a,code=sm_90a``; the extension name carries
  a hash of every source and flag, so an edited kernel never reuses a stale build.

Row-pipeline limits (checked on the host, one-line errors): row length a multiple of 8 elements
(16-byte TMA row stride) and at most 16384 elements; base address 16-byte aligned.
"""

from __future__ import annotations

import hashlib

NVCC_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-O3"]  # torch adds the C++ standard its headers need

CUDA_PRELUDE = r"""
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace kpm {

// ------------------------------------------------------------------------------------------------ device

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Dynamic shared memory rounded up to 1024 bytes (the host adds 1024 bytes of slack): TMA needs 128-byte
// aligned boxes, and the 128B-swizzle pattern is a function of the address bits, so swizzled tiles must
// start on a 1024-byte boundary for the XOR formula used by the threads to match what TMA wrote.
__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) before the first copy names them.
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " KPM_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra KPM_WAIT;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void prefetch_tmap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Box whose first element is (x = inner coordinate, y = outer coordinate); out-of-bounds parts are
// zero-filled and still count in full towards the barrier's transaction bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_u32(bar))
      : "memory");
}

// Out-of-bounds parts of the box are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_u32(src)), "r"(x), "r"(y)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// The shared-memory source of every committed store has been read (the buffer may be rewritten).
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Every committed store has completed (before the CTA exits).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 8 bf16 (one 16-byte vector) <-> 8 fp32.
__device__ __forceinline__ void unpack8(const uint4& q, float* f) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ uint4 pack8(const float* f) {
  return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ------------------------------------------------------------------------------------------------ row pipeline

constexpr int ROW_THREADS = 256;     // 8 warps per CTA
constexpr int ROW_WARPS = ROW_THREADS / 32;
// Tunable with -DKP_ROW_STAGES / -DKP_ROW_STAGE_KB / -DKP_ROW_CTAS_PER_SM (build(defines=...)): the
// parameter search varies them; the defaults are the tuned reference.
#ifndef KP_ROW_STAGES
#define KP_ROW_STAGES 3
#endif
#ifndef KP_ROW_STAGE_KB
#define KP_ROW_STAGE_KB 32
#endif
#ifndef KP_ROW_CTAS_PER_SM
#define KP_ROW_CTAS_PER_SM 0
#endif
constexpr int ROW_STAGES = KP_ROW_STAGES;   // TMA ring depth (row blocks in flight per CTA)
constexpr int ROW_CHUNK = 256;       // TMA box inner size in elements (the 256 maximum, 512 bytes)
constexpr int ROW_CHUNK_BYTES = ROW_CHUNK * 2;
constexpr uint32_t ROW_STAGE_TARGET = KP_ROW_STAGE_KB * 1024;  // bytes per stage the host aims for (plan_rows never exceeds it)
constexpr int ROW_CTAS_PER_SM = KP_ROW_CTAS_PER_SM;  // resident CTAs per SM the launch allows (0: occupancy)
constexpr size_t ROW_SMEM_MAX = size_t(ROW_STAGES) * ROW_STAGE_TARGET + 1024;

// What a row team sees: its threads (T = 32 * team_warps of them, tt = index within the team), the
// row's vectors in shared memory (stage layout: chunk-major, [chunk][row][256 elements]), and a
// two-slot scratch for cross-warp reductions (alternating slots keeps one named barrier per reduction
// race-free: slot k is rewritten only after the team has passed the barrier of reduction k+1).
struct RowTeam {
  const uint8_t* stage;
  int R, r, tt, T, nv, team, team_warps, warp, lane;
  float* red;   // [2][ROW_WARPS]
  int* slot;

  __device__ __forceinline__ uint4 vec(int v) const {
    return *reinterpret_cast<const uint4*>(stage + ((v >> 5) * R + r) * ROW_CHUNK_BYTES + (v & 31) * 16);
  }

  template <bool kMax>
  __device__ __forceinline__ float reduce(float x) const {
    x = kMax ? warp_max(x) : warp_sum(x);
    if (team_warps == 1) return x;
    float* buf = red + (*slot) * ROW_WARPS;
    *slot ^= 1;
    if (lane == 0) buf[warp] = x;
    named_bar_sync(1 + team, 32 * team_warps);
    const int w0 = team * team_warps;
    float y = buf[w0];
    for (int k = 1; k < team_warps; ++k) y = kMax ? fmaxf(y, buf[w0 + k]) : y + buf[w0 + k];
    return y;
  }
};

// Op must provide: static constexpr int kV (16-byte vectors per thread per row: a row holds at most
// 8*kV*T elements; plan_rows picks kV 4 up to 8192 columns, else 8); struct Thread;
// __device__ void init(Thread&, int tt, int T, int nv) const;
// __device__ void row(Thread&, const RowTeam&, int64_t row, int cols) const.
template <class Op>
__global__ void __launch_bounds__(ROW_THREADS) row_kernel(const __grid_constant__ CUtensorMap xmap, const Op op,
                                                           const int rows, const int cols, const int team_warps,
                                                           const int R, const int nch, const int nblocks) {
  __shared__ __align__(8) uint64_t full[ROW_STAGES];
  __shared__ float red[2 * ROW_WARPS];
  extern __shared__ uint8_t dyn_smem[];
  uint8_t* smem = align1024(dyn_smem);
  const uint32_t stage_bytes = static_cast<uint32_t>(nch) * R * ROW_CHUNK_BYTES;
  const int tid = threadIdx.x;

  if (tid == 0) {
    prefetch_tmap(&xmap);
#pragma unroll
    for (int s = 0; s < ROW_STAGES; ++s) mbar_init(&full[s], 1);
    fence_mbar_init();
  }
  __syncthreads();

  auto issue = [&](int s, int blk) {  // one thread: a whole block of R rows into stage s
    uint8_t* dst = smem + s * stage_bytes;
    mbar_arrive_expect_tx(&full[s], stage_bytes);
    for (int c = 0; c < nch; ++c) tma_load_2d(dst + c * R * ROW_CHUNK_BYTES, &xmap, c * ROW_CHUNK, blk * R, &full[s]);
  };
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < ROW_STAGES; ++s) {
      const int blk = blockIdx.x + s * gridDim.x;
      if (blk < nblocks) issue(s, blk);
    }
  }

  const int warp = tid >> 5, lane = tid & 31;
  const int T = 32 * team_warps, team = warp / team_warps, tt = tid - team * T, nteams = ROW_WARPS / team_warps;
  const int nv = cols >> 3;
  int slot = 0;
  typename Op::Thread th;
  op.init(th, tt, T, nv);

  for (int i = 0;; ++i) {
    const int blk = blockIdx.x + i * gridDim.x;
    if (blk >= nblocks) break;
    const int s = i % ROW_STAGES;
    mbar_wait(&full[s], (i / ROW_STAGES) & 1);
    RowTeam t{smem + s * stage_bytes, R, 0, tt, T, nv, team, team_warps, warp, lane, red, &slot};
    for (int r = team; r < R; r += nteams) {
      const int64_t row = static_cast<int64_t>(blk) * R + r;
      if (row >= rows) break;  // uniform within the team (its named barriers stay matched)
      t.r = r;
      op.row(th, t, row, cols);
    }
    __syncthreads();  // every thread is done reading stage s: refill it
    if (tid == 0) {
      const int next = blk + ROW_STAGES * gridDim.x;
      if (next < nblocks) issue(s, next);
    }
  }
}

// ------------------------------------------------------------------------------------------------ host

typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiledFn encode_fn() {
  static EncodeTiledFn fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && p != nullptr) fn = reinterpret_cast<EncodeTiledFn>(p);
  }
  return fn;
}

// 2-D bf16 tensor map: `outer` rows of `inner` elements, `row_stride` elements apart; zero fill out of bounds.
static const char* make_map_2d(CUtensorMap* map, const void* ptr, uint64_t inner, uint64_t outer,
                               uint64_t row_stride, uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swz) {
  EncodeTiledFn enc = encode_fn();
  if (enc == nullptr) return "cuTensorMapEncodeTiled is not available from the CUDA driver (needs a CUDA 12+ driver)";
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {row_stride * 2};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box, estr,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, swz, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr
                           : "cuTensorMapEncodeTiled rejected the tensor (base not 16-byte aligned, row stride not a "
                             "multiple of 16 bytes, or sizes out of range)";
}

static int sm_count(int dev) {
  static int cache[64] = {0};
  if (dev < 0 || dev >= 64) return 132;
  if (cache[dev] == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    cache[dev] = n > 0 ? n : 132;
  }
  return cache[dev];
}

// Allows up to `bytes` of dynamic shared memory for `kernel` on `dev` (once per kernel and device).
template <class K>
static const char* allow_smem(K kernel, int dev, size_t bytes, bool* done) {
  if (dev >= 0 && dev < 64 && done[dev]) return nullptr;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) != cudaSuccess)
    return "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
  if (dev >= 0 && dev < 64) done[dev] = true;
  return nullptr;
}

// Vectors per thread the row kernel uses for rows of `cols` elements (Op::kV must match).
inline int row_vectors(int64_t cols) { return cols / 8 <= 4 * 256 ? 4 : 8; }

struct RowPlan {
  int V = 0, team_warps = 0, R = 0, nch = 0, nblocks = 0;
  uint32_t stage_bytes = 0;
  size_t smem = 0;
};

// Team size: the smallest team whose threads hold a row in 4 vectors each (8 vectors past 8192 columns).
// Rows per block: ~ROW_STAGE_TARGET bytes per stage, but no fewer blocks than SMs when the matrix has
// at least one row per team per SM.
inline const char* plan_rows(int64_t rows, int64_t cols, int sms, RowPlan* p) {
  if (cols % 8 != 0) return "the row length must be a multiple of 8 elements (TMA needs 16-byte row strides)";
  const int64_t nv = cols / 8;
  if (nv <= 4 * 32) { p->V = 4; p->team_warps = 1; }
  else if (nv <= 4 * 64) { p->V = 4; p->team_warps = 2; }
  else if (nv <= 4 * 128) { p->V = 4; p->team_warps = 4; }
  else if (nv <= 4 * 256) { p->V = 4; p->team_warps = 8; }
  else if (nv <= 8 * 256) { p->V = 8; p->team_warps = 8; }
  else return "rows longer than 16384 elements are not supported by this kernel";
  if (rows >= (int64_t(1) << 31)) return "more than 2^31-1 rows";
  const int nteams = ROW_WARPS / p->team_warps;
  p->nch = static_cast<int>((cols + ROW_CHUNK - 1) / ROW_CHUNK);
  const int64_t row_bytes = int64_t(p->nch) * ROW_CHUNK_BYTES;
  int64_t rpt = ROW_STAGE_TARGET / (nteams * row_bytes);
  const int64_t fill = rows / (int64_t(nteams) * sms);  // rows per team that still leave >= sms blocks
  rpt = rpt < fill ? rpt : fill;
  if (rpt < 1) rpt = 1;
  if (nteams * rpt > 256) rpt = 256 / nteams;  // TMA box dimension limit
  p->R = static_cast<int>(nteams * rpt);
  p->nblocks = static_cast<int>((rows + p->R - 1) / p->R);
  p->stage_bytes = static_cast<uint32_t>(p->nch) * p->R * ROW_CHUNK_BYTES;
  p->smem = size_t(ROW_STAGES) * p->stage_bytes + 1024;
  if (p->smem > ROW_SMEM_MAX) return "row block does not fit in shared memory";
  return nullptr;
}

// Plans, encodes the tensor map over x (rows x cols, row stride ld elements) and launches row_kernel<Op>.
// The caller picks Op with kV = row_vectors(cols).
template <class Op>
static const char* launch_rows(const Op& op, const void* x, int64_t rows, int64_t cols, int64_t ld,
                               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return nullptr;
  int dev = 0;
  cudaGetDevice(&dev);
  const int sms = sm_count(dev);
  RowPlan p;
  const char* err = plan_rows(rows, cols, sms, &p);
  if (err) return err;
  CUtensorMap map;
  err = make_map_2d(&map, x, cols, rows, ld, ROW_CHUNK, p.R, CU_TENSOR_MAP_SWIZZLE_NONE);
  if (err) return err;
  if (p.V != Op::kV) return "internal error: row op built for a different vectors-per-thread count than planned";
  static bool done[64] = {false};  // one per Op instantiation
  auto k = row_kernel<Op>;
  err = allow_smem(k, dev, ROW_SMEM_MAX, done);
  if (err) return err;
  int occ = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, ROW_THREADS, p.smem) != cudaSuccess || occ < 1) occ = 1;
  if (ROW_CTAS_PER_SM > 0 && occ > ROW_CTAS_PER_SM) occ = ROW_CTAS_PER_SM;
  const int64_t cap = int64_t(sms) * occ;
  const int grid = static_cast<int>(p.nblocks < cap ? p.nblocks : cap);
  k<<<grid, ROW_THREADS, p.smem, stream>>>(map, op, static_cast<int>(rows), static_cast<int>(cols), p.team_warps,
                                           p.R, p.nch, p.nblocks);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace kpm
"""

# Torch-side helpers every binding uses (prepended to each reference's cpp_sources).
CPP_PRELUDE = r"""
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

// A 2-D bf16 CUDA tensor whose rows TMA can read in place: unit column stride, 16-byte aligned base and
// a non-overlapping row stride that is a multiple of 16 bytes. Anything else is copied to a contiguous tensor first (where the caller allows copies).
static bool kpm_tma_rows_ok(const torch::Tensor& x) {
  return x.dim() == 2 && (x.size(1) <= 1 || x.stride(1) == 1) &&
         (x.size(0) <= 1 || (x.stride(0) >= x.size(1) && (x.stride(0) * 2) % 16 == 0)) &&
         reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}
"""

_BUILT: dict[str, object] = {}


def build(stem: str, cuda_src: str, cpp_src: str, functions: list[str], defines: dict | None = None):
    """Compile (once per process, source and `defines`, e.g. {"ROW_STAGES": 4} -> -DKP_ROW_STAGES=4)
    and return the extension module."""
    cuda = CUDA_PRELUDE + "\n" + cuda_src
    cpp = CPP_PRELUDE + "\n" + cpp_src
    flags = list(NVCC_FLAGS) + [f"-DKP_{k}={int(v)}" for k, v in sorted((defines or {}).items())]
    key = hashlib.sha256("\0".join([cuda, cpp, *functions, *flags]).encode()).hexdigest()[:16]
    if key not in _BUILT:
        # Looked up at call time so a caller that swaps load_inline (static verification) sees the call.
        import torch.utils.cpp_extension as ce

        _BUILT[key] = ce.load_inline(
            name=f"kp_{stem}_{key}",
            cpp_sources=cpp,
            cuda_sources=cuda,
            functions=functions,
            # An explicit -gencode keeps torch from adding a plain sm_90 pass (no arch-specific TMA forms).
            extra_cuda_cflags=flags,
            verbose=False,
        )
    return _BUILT[key]


# ---- parameter-search templates (kernelpro.agent.policy_param) ----
# The row pipeline's knobs (-DKP_ROW_*), shared by rmsnorm_bf16 and softmax_rows_bf16, and the helper
# every memops template uses to write a standalone candidate. The rules mirror the CUDA side: the ring
# (ROW_STAGES x ROW_STAGE_KB + 1 KB alignment slack) must fit the 227 KB of shared memory per block.

SMEM_LIMIT = 232448

ROW_PARAMS = {"ROW_STAGES": 3, "ROW_STAGE_KB": 32, "ROW_CTAS_PER_SM": 0}
# The untuned shape (the shallowest ring of small boxes, one CTA per SM) where `kernelpro ablate` starts.
ROW_GENERIC_START = {"ROW_STAGES": 2, "ROW_STAGE_KB": 8, "ROW_CTAS_PER_SM": 1}
ROW_LADDERS = {
    "ROW_STAGES": [2, 3, 4, 5, 6],
    "ROW_STAGE_KB": [8, 16, 32, 48, 64],
    "ROW_CTAS_PER_SM": [0, 1, 2, 3, 4],
}
# What each stage-two finding argues for on the row pipeline's knobs:
# (tool, regex over the finding's title, knob, direction, weight, why).
ROW_ADVICE = [
    ("dram_bandwidth", r"", "ROW_STAGES", +1, 2.0,
     "bytes in flight per CTA are ROW_STAGES x ROW_STAGE_KB: one more stage keeps DRAM busier"),
    ("dram_bandwidth", r"", "ROW_STAGE_KB", +1, 1.0, "bigger TMA boxes: more bytes per request in flight"),
    ("warp_stalls", r"barrier|long_scoreboard|mbarrier", "ROW_STAGES", +1, 2.0,
     "the team waits on the stage's mbarrier: a deeper ring has the next rows landed already"),
    ("occupancy", r"shared memory", "ROW_STAGE_KB", -1, 2.0, "smaller stages let more CTAs share an SM"),
    ("occupancy", r"shared memory", "ROW_STAGES", -1, 1.0, "a shallower ring frees shared memory"),
    ("occupancy", r"grid too small", "ROW_STAGE_KB", -1, 1.5, "smaller row blocks: work spreads over more CTAs"),
    ("tail_effect", r"", "ROW_STAGE_KB", -1, 1.5, "smaller row blocks even out the last wave of row blocks"),
    ("launch_overhead", r"", "ROW_STAGE_KB", +1, 0.5, "a short launch pays its ring fill once: fewer, larger boxes"),
]
ROW_GUIDANCE = [
    (r"latency|stall|long.?scoreboard|mbarrier|tma.*(wait|starv)", "ROW_STAGES", +1, 2.0),
    (r"shared.?memory|smem|occupancy", "ROW_STAGE_KB", -1, 1.5),
    (r"dram|memory.?bound|bandwidth", "ROW_CTAS_PER_SM", +1, 1.0),
]


def row_validate(p: dict) -> str | None:
    """Why ``p`` cannot build or launch the row pipeline; None if valid."""
    st, kb, ctas = p.get("ROW_STAGES", 3), p.get("ROW_STAGE_KB", 32), p.get("ROW_CTAS_PER_SM", 0)
    if not 2 <= st <= 8:
        return "ROW_STAGES must be in [2, 8]"
    if kb not in (8, 16, 32, 48, 64):
        return "ROW_STAGE_KB must be 8, 16, 32, 48 or 64"
    if st * kb * 1024 + 1024 > SMEM_LIMIT:
        return "ROW_STAGES * ROW_STAGE_KB over the 227 KB of shared memory per block"
    if not 0 <= ctas <= 8:
        return "ROW_CTAS_PER_SM must be in [0, 8] (0: as many as fit)"
    return None


def make_candidate(template_file: str, defaults: dict, params: dict) -> str:
    """A standalone candidate .py from a memops template file: its header (docstring, imports, globals
    up to ``PARAMS = {``), ``params`` merged over ``defaults``, this module embedded as _COMMON_SRC, and
    its candidate body (between the ``# ---- candidate body`` markers)."""
    from pathlib import Path

    merged = {**defaults, **params}
    unknown = sorted(set(merged) - set(defaults))
    if unknown:
        raise ValueError(f"unknown PARAMS keys {unknown}; valid keys: {list(defaults)}")
    common = Path(__file__).read_text()
    quotes = "'" * 3            # spelt out so that this file itself stays embeddable
    if quotes in common:
        raise ValueError("_memops_common.py cannot be embedded in a raw triple-quoted string")
    me = Path(template_file).read_text()
    head = me[:me.index("PARAMS = {")]
    body = me[me.index("# ---- candidate body"):me.index("# ---- end candidate body ----")]
    params_text = "{\n" + "".join(f'    "{k}": {int(v)},\n' for k, v in merged.items()) + "}"
    return f"{head}PARAMS = {params_text}\n\n_COMMON_SRC = r{quotes}{common}{quotes}\n\n{body}"
