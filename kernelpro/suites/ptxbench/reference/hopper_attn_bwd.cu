// Hopper (sm_90a) attention backward, bf16 in/out, fp32 accumulation, head dim 128.
//
// Expert reference for the ptxbench attention-backward tasks. Status: compiled for sm_90a and checked
// statically (ptxas register/spill report, SASS opcodes, a CPU emulation of its index math); its numerical
// correctness on a GPU is established by the harness (`kernelpro bench`), not claimed here.
//
// FlashAttention-2/3 backward with the products transposed so that keys are the wgmma M dimension. One CTA
// owns BLOCK_N = 128 key rows of one (batch, head) (grid: key tiles x B*H) and walks the query sequence in
// BLOCK_M = 64-row tiles:
//   * warpgroup 0 is the producer: one thread issues TMA loads of the CTA's K and V tiles once, then of
//     Q_i and dO_i tiles into a BWD_STAGES-deep ring paced by full/empty mbarriers; the warpgroup gives
//     registers back with setmaxnreg.dec.
//   * warpgroups 1 and 2 are consumers (setmaxnreg.inc), consumer c owning key rows 64c..64c+63 of the
//     tile. Per query tile, with P^T, dS^T of shape (64 keys x 64 queries):
//       S^T  = K Q_i^T            wgmma m64n64k16, both operands shared memory, K-major    (8 k-steps)
//       dP^T = V dO_i^T           same shape                                                (8 k-steps)
//       P^T  = exp2(S^T * scale * log2 e - LSE * log2 e), masked; dS^T = P^T (dP^T - delta)
//       dV  += P^T dO_i           wgmma m64n128k16, A = P^T in registers, B = dO_i MN-major (4 k-steps)
//       dK  += dS^T Q_i           same, B = Q_i MN-major                                    (4 k-steps)
//       dQ_i += dS K  (the consumer's 64-column half of the head dim): dS is written to shared memory
//            (query-row-major, i.e. K-major for this product), a named barrier joins the two consumers,
//            wgmma m64n64k16 A = dS (K-major), B = K MN-major, 8 k-steps over the 128 keys; the fp32
//            result is added to a global fp32 dQ accumulator with red.global.add.
//   * epilogue: dK * scale and dV to bf16 through the (no longer needed) K and V tiles, TMA stores that
//     clip rows past the sequence end. A second small kernel converts dQ_accum * scale to bf16.
// Causal (BWD_CAUSAL): key tile j visits only query tiles i >= 2j (those with a query >= the tile's first
// key); tiles that cross the diagonal or the sequence end are masked element-wise. Ragged sequence
// lengths: TMA zero-fills rows past the end on loads, masks zero P there, the stores clip.
//
// Layout contract: q, k, v, do, dq, dk, dv are (B*H, S, 128) bf16 contiguous; lse, delta (B*H, S) fp32;
// dq_accum (B*H, S, 128) fp32 scratch (zeroed by the launcher). The host launcher takes raw pointers so
// that this file compiles without PyTorch headers.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#ifndef BWD_CAUSAL
#define BWD_CAUSAL 0
#endif
#ifndef BWD_STAGES
#define BWD_STAGES 2
#endif
// A lost TMA completion or a barrier-phase bug would otherwise hang the GPU; with the watchdog a wait
// that spins this many times traps, so the launch fails with an error instead (0 = off).
#ifndef BWD_WATCHDOG
#define BWD_WATCHDOG 0
#endif
// dQ reduced into the fp32 accumulator with red.global.add.v2.f32 (1, two columns per request) or one
// scalar atomicAdd per element (0).
#ifndef BWD_DQ_RED_V2
#define BWD_DQ_RED_V2 1
#endif

namespace kp_attn_bwd {

constexpr int HEAD_DIM = 128;
constexpr int CONSUMERS = 2;
constexpr int BLOCK_N = 64 * CONSUMERS;  // keys per CTA
constexpr int BLOCK_M = 64;              // queries per ring stage
constexpr int STAGES = BWD_STAGES;
constexpr int THREADS = 128 * (CONSUMERS + 1);
// A 128B-swizzled TMA box is at most 64 bf16 wide, so every 128-wide row is two 64-column "halves",
// each half a (rows x 128 B) swizzled block.
constexpr int HALF_COLS = 64;
constexpr int KV_HALF_BYTES = BLOCK_N * 128;        // 16 KiB: one half of the K (or V) tile
constexpr int KV_TILE_BYTES = 2 * KV_HALF_BYTES;    // 32 KiB
constexpr int QD_HALF_BYTES = BLOCK_M * 128;        // 8 KiB: one half of a Q_i (or dO_i) tile
constexpr int QD_TILE_BYTES = 2 * QD_HALF_BYTES;    // 16 KiB
constexpr int DS_HALF_BYTES = BLOCK_M * 128;        // dS (64 queries x 64 keys) of one consumer
constexpr int DS_TILE_BYTES = 2 * DS_HALF_BYTES;    // dS (64 queries x 128 keys), double-buffered below
constexpr int STATS_BYTES = 2 * BLOCK_M * 4;        // LSE and delta of one query tile (fp32)
constexpr int SMEM_DATA =
    2 * KV_TILE_BYTES + 2 * STAGES * QD_TILE_BYTES + 2 * DS_TILE_BYTES + 2 * CONSUMERS * STATS_BYTES;
constexpr int SMEM_BARRIERS = 8 * (1 + 2 * STAGES);
constexpr int SMEM_TOTAL = 1024 /* alignment slack */ + SMEM_DATA + SMEM_BARRIERS;
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
// Named barriers: 0 is __syncthreads; 1 joins both consumer warpgroups (256 threads); 2 + c is consumer
// c alone (128 threads) in the epilogue.
constexpr int BAR_CONSUMERS = 1;

static_assert(STAGES >= 2 && STAGES <= 3, "BWD_STAGES: 2 or 3 Q/dO stages fit in shared memory");
static_assert(SMEM_TOTAL <= 232448, "shared memory over the sm_90 per-block limit");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "register file over-committed");

// ---------------------------------------------------------------- PTX wrappers (as in hopper_attn_fwd.cu)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
#if BWD_WATCHDOG
  uint32_t spins = 0;
#endif
  while (true) {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
#if BWD_WATCHDOG
    if (++spins == BWD_WATCHDOG) __trap();
#endif
  }
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

// Shared-memory matrix descriptor, 128B swizzle. Addresses, LBO and SBO are in 16-byte units.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

#define KP_ACC64(d)                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define KP_ACC64_LIST                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "   \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define KP_ACC32(d)                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

#define KP_ACC32_LIST                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"

// d[64x64] (+)= A[64x16] * B[16x64]; A and B from shared memory, both K-major (S^T and dP^T).
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KP_ACC32_LIST
      ", %32, %33, p, 1, 1, 0, 0;\n}"
      : KP_ACC32(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64x64] (+)= A[64x16] * B[16x64]; A from shared memory K-major, B from shared memory MN-major
// (transposed): the dQ = dS K product.
__device__ __forceinline__ void wgmma_ss_m64n64k16_tb(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                      int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KP_ACC32_LIST
      ", %32, %33, p, 1, 1, 0, 1;\n}"
      : KP_ACC32(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64x128] += A[64x16] * B[16x128]; A from registers, B from shared memory MN-major (transposed):
// dV += P^T dO and dK += dS^T Q (exactly the forward's O += P V).
__device__ __forceinline__ void wgmma_rs_m64n128k16_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KP_ACC64_LIST
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"
      : KP_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}

// Register "fences": an empty volatile asm that reads and rewrites each register, so the compiler cannot
// move ordinary uses of wgmma accumulators across wgmma issue / wait (which only order memory).
__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void fence_regs(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void fence_regs(uint32_t (&d)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint16_t to_bf16_bits(float x) {
  __nv_bfloat16 v = __float2bfloat16_rn(x);
  return *reinterpret_cast<uint16_t*>(&v);
}

// ---------------------------------------------------------------- index math
//
// Every index the consumers compute goes through these host+device helpers, so that a host program can
// tabulate exactly what the kernel uses (tests/test_reference_attn_bwd_emulation.py does, and checks the
// tables against a CPU emulation of the whole backward pass).

// Byte offset of element (row, col) of a (rows x 64) bf16 block stored with the 128B swizzle that TMA
// writes and the wgmma descriptors read: row r is 128 B at r * 128; its eight 16-byte chunks are permuted
// by XOR with r % 8 (the pattern repeats every 8 rows = 1024 B, hence the 1024-byte base alignment).
__host__ __device__ __forceinline__ uint32_t swz128(int row, int col) {
  const int byte_in_row = col * 2;
  const int chunk = (byte_in_row >> 4) ^ (row & 7);
  return static_cast<uint32_t>(row * 128 + chunk * 16 + (byte_in_row & 15));
}

// Per-thread view of a wgmma accumulator (64 rows x N, N/2 registers): element j of thread tid (0..127
// in the warpgroup) sits in row (warp%4)*16 + lane/4 + 8*((j>>1)&1), column 8*(j>>2) + 2*(lane%4) + (j&1).
__host__ __device__ __forceinline__ int acc_row(int tid, int j) {
  return (tid >> 5) * 16 + ((tid & 31) >> 2) + 8 * ((j >> 1) & 1);
}
__host__ __device__ __forceinline__ int acc_col(int tid, int j) { return 8 * (j >> 2) + 2 * (tid & 3) + (j & 1); }

// Causal: query tile i holds a query >= the tile's first key iff i*64 + 63 >= key_tile0, i.e. i >= 2j.
__host__ __device__ __forceinline__ int first_query_tile(int key_tile0) {
  return BWD_CAUSAL ? key_tile0 / BLOCK_M : 0;
}

// Whether consumer keys key0..key0+63 x queries q0..q0+63 need element masks: the tile crosses the
// sequence end or (causal) some key is after some query.
__host__ __device__ __forceinline__ bool tile_needs_mask(int q0, int key0, int seq) {
  bool edge = q0 + BLOCK_M > seq || key0 + 64 > seq;
#if BWD_CAUSAL
  edge = edge || key0 + 63 > q0;
#endif
  return edge;
}

__host__ __device__ __forceinline__ bool element_dead(int key, int q, int seq) {
  bool dead = q >= seq || key >= seq;
#if BWD_CAUSAL
  dead = dead || key > q;
#endif
  return dead;
}

// dS (query q, key 64c + r) in a dS buffer: the K-major A operand of dQ = dS K, i.e. query rows of
// 128 keys, stored as two 64-key halves (consumer c's keys are half c).
__host__ __device__ __forceinline__ uint32_t ds_offset(int c, int r, int q) {
  return c * DS_HALF_BYTES + swz128(q, r);
}

// Element (row, col) of a 128 x 128 K or V tile (two 64-column halves of 128 rows).
__host__ __device__ __forceinline__ uint32_t kv_tile_offset(int row, int col) {
  return (col >> 6) * KV_HALF_BYTES + swz128(row, col & 63);
}

// ---------------------------------------------------------------- consumer pieces
//
// For the 64x64 S^T / dP^T tiles (32 registers) the accumulator rows are keys and the columns queries:
// element j of thread tid is key key0 + acc_row(tid, j), query q0 + acc_col(tid, j).

// S^T = K_c Q_i^T (acc 64 keys x 64 queries) or dP^T = V_c dO_i^T: A is this consumer's 64 rows of the
// K (or V) tile, B the 64 rows of Q_i (or dO_i); both K-major over the head dim, so k-step kk (head-dim
// columns 16kk..16kk+15) is column half kk/4 at byte offset 32 * (kk%4) inside each 128-byte row, exactly
// as the forward's S = Q K^T.
__device__ __forceinline__ void kmajor_gemm_n64(float (&acc)[32], uint32_t a_rows, uint32_t b_rows) {
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    const uint32_t off = (kk & 3) * 32;
    const uint64_t da = make_desc(a_rows + (kk >> 2) * KV_HALF_BYTES + off, 16, 1024);
    const uint64_t db = make_desc(b_rows + (kk >> 2) * QD_HALF_BYTES + off, 16, 1024);
    wgmma_ss_m64n64k16(acc, da, db, kk > 0);
  }
}

// acc (64 keys x 128 head-dim) += A (64 keys x 64 queries, registers) * B (64 queries x 128, the Q_i or
// dO_i tile read MN-major). k-step kk reads query rows 16kk..16kk+15 (16 * 128 B into each half); the two
// 64-column halves are LBO = QD_HALF_BYTES apart, 8-row swizzle atoms SBO = 1024 B apart: the forward's
// pv_gemm with the K/V half size replaced by the Q/dO half size.
__device__ __forceinline__ void mnmajor_gemm_n128(float (&acc)[64], const uint32_t (&a)[16], uint32_t b_tile) {
#pragma unroll
  for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
    const uint32_t f[4] = {a[4 * kk + 0], a[4 * kk + 1], a[4 * kk + 2], a[4 * kk + 3]};
    const uint64_t db = make_desc(b_tile + kk * 16 * 128, QD_HALF_BYTES, 1024);
    wgmma_rs_m64n128k16_tb(acc, f, db);
  }
}

// The CTA's 2 x 128-row tiles are read per consumer: K rows 64c.. for S^T, V rows 64c.. for dP^T.
__device__ __forceinline__ void consumer(const CUtensorMap& tm_dk, const CUtensorMap& tm_dv,
                                         const float* __restrict__ lse, const float* __restrict__ delta,
                                         float* __restrict__ dq_accum, int seq, float scale, float scale_log2,
                                         uint32_t s_k, uint32_t s_v, uint32_t s_q, uint32_t s_do, uint32_t s_ds,
                                         uint32_t s_stats, uint32_t bar_kv, uint32_t bar_base, int key_tile0,
                                         int bh, int i_first, int i_end, int c) {
  auto bar_full = [&](int s) { return bar_base + 8 * (1 + s); };
  auto bar_empty = [&](int s) { return bar_base + 8 * (1 + STAGES + s); };
  const int tid = threadIdx.x & 127;
  const int key0 = key_tile0 + 64 * c;            // first key row of this consumer
  const uint32_t k_rows = s_k + c * 64 * 128;     // this consumer's 64 rows of half 0 of K (8 KiB/64 rows)
  const uint32_t v_rows = s_v + c * 64 * 128;
  const size_t row_base = static_cast<size_t>(bh) * seq;  // (bh, 0) in lse / delta / dq_accum rows

  float dk[64], dv[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) dk[j] = dv[j] = 0.f;

  mbar_wait(bar_kv, 0);

  for (int i = i_first; i < i_end; ++i) {
    const int t = i - i_first;  // visit counter: ring slot and phase
    const int st = t % STAGES;
    const uint32_t phase = (t / STAGES) & 1;
    const int q0 = i * BLOCK_M;
    const uint32_t q_tile = s_q + st * QD_TILE_BYTES;
    const uint32_t do_tile = s_do + st * QD_TILE_BYTES;
    const uint32_t ds_tile = s_ds + (t & 1) * DS_TILE_BYTES;
    const uint32_t stats = s_stats + (c * 2 + (t & 1)) * STATS_BYTES;  // [64 LSE * log2 e | 64 delta]

    float s[32], dp[32];
    mbar_wait(bar_full(st), phase);
    fence_regs(s);
    fence_regs(dp);
    wgmma_fence();
    kmajor_gemm_n64(s, k_rows, q_tile);
    kmajor_gemm_n64(dp, v_rows, do_tile);
    wgmma_commit();

    // Stage this tile's LSE (log2 units) and delta in this consumer's own shared buffer t&1 (thread x < 64
    // loads query q0 + x's LSE, thread 64 + x its delta). Registers for 32 per-thread copies would not fit
    // next to the four accumulators. Reuse of buffer t&1 at tile t+2 is safe: every thread passes the
    // consumer barrier of tile t+1 only after its reads of tile t.
    {
      const int q = q0 + (tid & 63);
      const float x = q < seq ? (tid < 64 ? __ldg(lse + row_base + q) * 1.4426950408889634f
                                          : __ldg(delta + row_base + q))
                              : 0.f;  // rows past the sequence end: their P is masked to zero
      asm volatile("st.shared.f32 [%0], %1;" ::"r"(stats + tid * 4), "f"(x) : "memory");
      asm volatile("bar.sync %0, 128;" ::"r"(2 + c) : "memory");
    }

    wgmma_wait<0>();
    fence_regs(s);
    fence_regs(dp);

    // Element-wise masking only where the tile crosses the sequence end or (causal) the diagonal.
    const bool edge = tile_needs_mask(q0, key0, seq);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int key_r = acc_row(tid, j);  // key key0 + key_r
      const int q_c = acc_col(tid, j);    // query q0 + q_c
      // This query's LSE (log2 units) at stats[q_c], its delta at stats[64 + q_c].
      float lse2, dlt;
      asm volatile("ld.shared.f32 %0, [%1];" : "=f"(lse2) : "r"(stats + q_c * 4) : "memory");
      asm volatile("ld.shared.f32 %0, [%1];" : "=f"(dlt) : "r"(stats + 256 + q_c * 4) : "memory");
      float p = fast_exp2(fmaf(s[j], scale_log2, -lse2));
      if (edge && element_dead(key0 + key_r, q0 + q_c, seq)) p = 0.f;
      s[j] = p;                       // P^T
      dp[j] = p * (dp[j] - dlt);      // dS^T
      // dS (query q_c, key 64c + key_r) -> this tile's dS buffer. Scalar 16-bit stores: the two keys a
      // thread holds are 8 rows apart, so no two of its elements are adjacent in a query row. Buffer t&1:
      // the other one may still be read by the other consumer's dQ product of tile t-1.
      asm volatile("st.shared.b16 [%0], %1;" ::"r"(ds_tile + ds_offset(c, key_r, q_c)),
                   "h"(to_bf16_bits(dp[j]))
                   : "memory");
    }

    // P^T and dS^T as bf16 register A fragments: accumulator columns 16kk..16kk+15 (elements 8kk..8kk+7)
    // are exactly the A fragment of k-step kk, as in the forward's pack_p.
    uint32_t pp[16], pds[16];
#pragma unroll
    for (int x = 0; x < 16; ++x) {
      pp[x] = pack_bf16(s[2 * x], s[2 * x + 1]);
      pds[x] = pack_bf16(dp[2 * x], dp[2 * x + 1]);
    }
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(pp);
    fence_regs(pds);
    wgmma_fence();
    mnmajor_gemm_n128(dv, pp, do_tile);  // dV += P^T dO_i
    mnmajor_gemm_n128(dk, pds, q_tile);  // dK += dS^T Q_i
    wgmma_commit();

    // Make the generic-proxy dS stores visible to the async proxy (wgmma), then wait for the other
    // consumer's half. Each consumer arrives here only after its dQ product of tile t-1 (which read buffer
    // (t-1)&1) completed, so buffer (t+1)&1 is free to be overwritten after this barrier.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("bar.sync %0, %1;" ::"n"(BAR_CONSUMERS), "n"(128 * CONSUMERS) : "memory");

    // dQ_i[:, 64c..64c+63] = dS (64 queries x 128 keys) K[:, 64c..64c+63]. A = dS, K-major over keys:
    // k-step kk (keys 16kk..) is half kk/4 at byte 32 * (kk%4). B = K tile half c read MN-major: k-step kk
    // is key rows 16kk..16kk+15, 16 * 128 B into the half; n64 never crosses into the next half (LBO).
    float dq[32];
    fence_regs(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      const uint64_t da = make_desc(ds_tile + (kk >> 2) * DS_HALF_BYTES + (kk & 3) * 32, 16, 1024);
      const uint64_t db = make_desc(s_k + c * KV_HALF_BYTES + kk * 16 * 128, KV_HALF_BYTES, 1024);
      wgmma_ss_m64n64k16_tb(dq, da, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();  // dV, dK and dQ products all done: Q_i / dO_i and dS buffer t&1 no longer read
    fence_regs(dq);
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(pp);
    fence_regs(pds);
    mbar_arrive(bar_empty(st));

    // dq element j: query q0 + acc_row, head-dim column 64c + acc_col. Elements j and j+1 (j even) are
    // one row's adjacent columns (col even: 8-byte aligned), so one vector reduction adds both: the scalar
    // form sent one L2 request per element and saturated the crossbar into L2 (ncu: 75% with DRAM at 4%).
#if BWD_DQ_RED_V2
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const int q = q0 + acc_row(tid, j);
      const int col = 64 * c + acc_col(tid, j);
      if (q < seq)
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dq_accum + (row_base + q) * HEAD_DIM + col),
                     "f"(dq[j]), "f"(dq[j + 1])
                     : "memory");
    }
#else
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int q = q0 + acc_row(tid, j);
      const int col = 64 * c + acc_col(tid, j);
      if (q < seq) atomicAdd(dq_accum + (row_base + q) * HEAD_DIM + col, dq[j]);
    }
#endif
  }

  // -------------------------------------------------- epilogue
  // dK and dV go back through the K and V tiles (this consumer's 64 rows, both halves). V rows 64c.. are
  // read only by this consumer, but every consumer's dQ product read all K rows: join both first.
  asm volatile("bar.sync %0, %1;" ::"n"(BAR_CONSUMERS), "n"(128 * CONSUMERS) : "memory");
#pragma unroll
  for (int j = 0; j < 64; j += 2) {
    // j even: elements j, j+1 are columns col, col+1 of one row, adjacent in the same 16-byte chunk.
    const uint32_t off = kv_tile_offset(c * 64 + acc_row(tid, j), acc_col(tid, j));
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(s_k + off), "r"(pack_bf16(dk[j] * scale, dk[j + 1] * scale))
                 : "memory");
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(s_v + off), "r"(pack_bf16(dv[j], dv[j + 1])) : "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("bar.sync %0, 128;" ::"r"(2 + c) : "memory");
  if (tid == 0 && key0 < seq) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      tma_store_3d(&tm_dk, s_k + half * KV_HALF_BYTES + c * 64 * 128, half * HALF_COLS, key0, bh);
      tma_store_3d(&tm_dv, s_v + half * KV_HALF_BYTES + c * 64 * 128, half * HALF_COLS, key0, bh);
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// ---------------------------------------------------------------- the kernels

__global__ void __launch_bounds__(THREADS, 1)
    attn_bwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                    const __grid_constant__ CUtensorMap tm_dk, const __grid_constant__ CUtensorMap tm_dv,
                    const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq_accum,
                    int seq, float scale, float scale_log2) {
  extern __shared__ uint8_t smem_raw[];
  // 128B-swizzled tiles need 1024-byte alignment (the swizzle pattern repeats every 8 rows of 128 B).
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t s_k = smem_u32(smem);
  const uint32_t s_v = s_k + KV_TILE_BYTES;
  const uint32_t s_q = s_v + KV_TILE_BYTES;
  const uint32_t s_do = s_q + STAGES * QD_TILE_BYTES;
  const uint32_t s_ds = s_do + STAGES * QD_TILE_BYTES;
  const uint32_t s_stats = s_ds + 2 * DS_TILE_BYTES;
  const uint32_t bar_base = s_stats + 2 * CONSUMERS * STATS_BYTES;
  const uint32_t bar_kv = bar_base;
  auto bar_full = [&](int s) { return bar_base + 8 * (1 + s); };
  auto bar_empty = [&](int s) { return bar_base + 8 * (1 + STAGES + s); };

  // Key tile j = blockIdx.x: causal puts the heaviest tiles (small j, most query tiles) first.
  const int key_tile0 = static_cast<int>(blockIdx.x) * BLOCK_N;
  const int bh = blockIdx.y;
  const int i_end = (seq + BLOCK_M - 1) / BLOCK_M;
  const int i_first = first_query_tile(key_tile0);

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    mbar_init(bar_kv, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full(s), 1);
      mbar_init(bar_empty(s), 128 * CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ------------------------------------------------ producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_q)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_do)) : "memory");
      // K and V: 2 boxes of 64 columns x 128 rows each; rows past the end are zero-filled and still
      // count toward the transaction bytes.
      mbar_expect_tx(bar_kv, 2 * KV_TILE_BYTES);
      for (int half = 0; half < 2; ++half) {
        tma_load_3d(s_k + half * KV_HALF_BYTES, &tm_k, bar_kv, half * HALF_COLS, key_tile0, bh);
        tma_load_3d(s_v + half * KV_HALF_BYTES, &tm_v, bar_kv, half * HALF_COLS, key_tile0, bh);
      }
      for (int i = i_first; i < i_end; ++i) {
        const int t = i - i_first;
        const int s = t % STAGES;
        const uint32_t phase = (t / STAGES) & 1;
        // Slot s is free once all 256 consumer threads released its previous use; the first pass waits
        // on the parity of the (already complete) phase before phase 0, which returns at once.
        mbar_wait(bar_empty(s), phase ^ 1);
        mbar_expect_tx(bar_full(s), 2 * QD_TILE_BYTES);
        for (int half = 0; half < 2; ++half) {
          tma_load_3d(s_q + s * QD_TILE_BYTES + half * QD_HALF_BYTES, &tm_q, bar_full(s), half * HALF_COLS,
                      i * BLOCK_M, bh);
          tma_load_3d(s_do + s * QD_TILE_BYTES + half * QD_HALF_BYTES, &tm_do, bar_full(s), half * HALF_COLS,
                      i * BLOCK_M, bh);
        }
      }
    }
  } else {
    // ------------------------------------------------ consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
    consumer(tm_dk, tm_dv, lse, delta, dq_accum, seq, scale, scale_log2, s_k, s_v, s_q, s_do, s_ds, s_stats,
             bar_kv, bar_base, key_tile0, bh, i_first, i_end, wg - 1);
  }
}

// dq = bf16(dq_accum * scale), four elements per thread and step (n is a multiple of 128).
__global__ void dq_convert_kernel(const float4* __restrict__ acc, __nv_bfloat162* __restrict__ dq, size_t n4,
                                  float scale) {
  for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < n4;
       x += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 a = acc[x];
    dq[2 * x] = __floats2bfloat162_rn(a.x * scale, a.y * scale);
    dq[2 * x + 1] = __floats2bfloat162_rn(a.z * scale, a.w * scale);
  }
}

// ---------------------------------------------------------------- host side

static PFN_cuTensorMapEncodeTiled_v12000 get_encode_fn(const char** err) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess || p == nullptr) {
      *err = "cuTensorMapEncodeTiled is not available from the driver (needs a CUDA 12+ driver)";
      return nullptr;
    }
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}

// (B*H, S, 128) bf16 viewed as a 3-D tensor {128, S, B*H}; box {64, rows, 1}, 128B swizzle, zero fill.
static bool make_map(CUtensorMap* map, const void* ptr, int bh, int seq, int box_rows, const char** err) {
  auto encode = get_encode_fn(err);
  if (encode == nullptr) return false;
  cuuint64_t dims[3] = {static_cast<cuuint64_t>(HEAD_DIM), static_cast<cuuint64_t>(seq),
                        static_cast<cuuint64_t>(bh)};
  cuuint64_t strides[2] = {static_cast<cuuint64_t>(HEAD_DIM) * 2,
                           static_cast<cuuint64_t>(seq) * HEAD_DIM * 2};
  cuuint32_t box[3] = {static_cast<cuuint32_t>(HALF_COLS), static_cast<cuuint32_t>(box_rows), 1};
  cuuint32_t estr[3] = {1, 1, 1};
  CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims, strides, box, estr,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *err = "cuTensorMapEncodeTiled rejected the tensor (pointer not 16-byte aligned, or sizes out of range)";
    return false;
  }
  return true;
}

}  // namespace kp_attn_bwd

// Returns nullptr on success, else a message. Pointers: q, k, v, d_o, dq, dk, dv (B*H, S, 128) bf16;
// lse, delta (B*H, S) fp32; dq_accum (B*H, S, 128) fp32 scratch, zeroed here on `stream`.
const char* kp_attn_bwd_launch(const void* q, const void* k, const void* v, const void* d_o, const float* lse,
                               const float* delta, void* dq, void* dk, void* dv, float* dq_accum, int bh, int seq,
                               int head_dim, float softmax_scale, cudaStream_t stream) {
  using namespace kp_attn_bwd;
  if (head_dim != HEAD_DIM) return "head dim must be 128 for this kernel";
  if (bh <= 0 || seq <= 0) return nullptr;
  if (bh > 65535) return "batch*heads over 65535 (grid y limit)";
  const char* err = nullptr;
  CUtensorMap tq, tk, tv, tdo, tdk, tdv;
  if (!make_map(&tq, q, bh, seq, BLOCK_M, &err) || !make_map(&tk, k, bh, seq, BLOCK_N, &err) ||
      !make_map(&tv, v, bh, seq, BLOCK_N, &err) || !make_map(&tdo, d_o, bh, seq, BLOCK_M, &err) ||
      !make_map(&tdk, dk, bh, seq, 64, &err) || !make_map(&tdv, dv, bh, seq, 64, &err))
    return err;
  static bool attr_set = false;
  if (!attr_set) {
    if (cudaFuncSetAttribute(attn_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_TOTAL) !=
        cudaSuccess)
      return "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
    attr_set = true;
  }
  const size_t n = static_cast<size_t>(bh) * seq * HEAD_DIM;
  if (cudaMemsetAsync(dq_accum, 0, n * sizeof(float), stream) != cudaSuccess) return "cudaMemsetAsync failed";
  dim3 grid((seq + BLOCK_N - 1) / BLOCK_N, bh);
  const float scale_log2 = softmax_scale * 1.4426950408889634f;
  attn_bwd_kernel<<<grid, THREADS, SMEM_TOTAL, stream>>>(tq, tk, tv, tdo, tdk, tdv, lse, delta, dq_accum, seq,
                                                          softmax_scale, scale_log2);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cudaGetErrorString(e);
  const size_t n4 = n / 4;
  const int blocks = static_cast<int>(n4 / 256 + 1 < 8192 ? n4 / 256 + 1 : 8192);
  dq_convert_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(dq_accum),
                                               reinterpret_cast<__nv_bfloat162*>(dq), n4, softmax_scale);
  e = cudaGetLastError();
  if (e != cudaSuccess) return cudaGetErrorString(e);
  return nullptr;
}
