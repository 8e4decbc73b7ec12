// Hopper (sm_90a) attention forward, bf16 in/out, fp32 accumulation, head dim 64 or 128 (ATTN_HEAD_DIM).
//
// Expert reference for the ptxbench attention-forward tasks. One CTA owns BLOCK_M = 64 * ATTN_CONSUMERS
// query rows of one (batch, head) and walks the key/value sequence in BLOCK_N-row tiles:
//   * warpgroup 0 is the producer: one thread issues TMA (cp.async.bulk.tensor) loads of Q once and of
//     K/V tiles into an ATTN_STAGES-deep shared-memory ring, paced by mbarrier full/empty barriers; the
//     warpgroup gives registers back with setmaxnreg.dec.
//   * warpgroups 1..ATTN_CONSUMERS are consumers (setmaxnreg.inc), each owning 64 query rows:
//     S = Q K^T by wgmma with both operands in shared memory (K-major, 128B swizzle), online softmax in
//     registers (log2 domain), P converted to bf16 in registers and fed as the register A operand of
//     O += P V, whose B operand (V) is read MN-major ("transposed") from the same swizzled tiles.
//   * with ATTN_OVERLAP the consumer issues S(j+1) = Q K(j+1)^T and O += P(j) V(j) back to back and does
//     the softmax of S(j+1) while the P V product runs on the tensor cores (FlashAttention-3's
//     intra-warpgroup pipelining); without it each step is GEMM, softmax, GEMM in turn.
//   * the epilogue writes O (bf16) through shared memory with a TMA store that clips rows past the end of
//     the sequence; with ATTN_WITH_LSE it also writes the natural-log logsumexp of the scaled scores.
// Causal (ATTN_CAUSAL): key tiles entirely above the diagonal are never loaded; tiles that cross the
// diagonal or the end of the sequence are masked element-wise. Sequence lengths that are not a multiple
// of a tile are handled by TMA zero fill on loads, masking, and clipping on the store.
//
// Layout contract: q, k, v, o are (B*H, S, HEAD_DIM) bf16 contiguous; lse is (B*H, S) fp32.
// Head dim 64 is one 64-column half: S = Q K^T takes 4 k-steps, O is a 64x64 accumulator (32 registers)
// fed by m64n64k16 wgmmas, and every load and store has one box instead of two.
// The host launcher below takes raw pointers so that this file compiles without PyTorch headers.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#ifndef ATTN_CAUSAL
#define ATTN_CAUSAL 0
#endif
#ifndef ATTN_WITH_LSE
#define ATTN_WITH_LSE 0
#endif
#ifndef ATTN_CONSUMERS
#define ATTN_CONSUMERS 2
#endif
#ifndef ATTN_BLOCK_N
#define ATTN_BLOCK_N 128
#endif
#ifndef ATTN_STAGES
#define ATTN_STAGES 2
#endif
#ifndef ATTN_OVERLAP
#define ATTN_OVERLAP 1
#endif
// A lost TMA completion or a barrier-phase bug would otherwise hang the GPU forever; with the watchdog a
// wait that spins this many times traps, so the launch fails with an error instead.
#ifndef ATTN_HEAD_DIM
#define ATTN_HEAD_DIM 128
#endif
#ifndef ATTN_WATCHDOG
#define ATTN_WATCHDOG 0
#endif

namespace kp_attn {

constexpr int HEAD_DIM = ATTN_HEAD_DIM;
constexpr int CONSUMERS = ATTN_CONSUMERS;
constexpr int BLOCK_M = 64 * CONSUMERS;
constexpr int BLOCK_N = ATTN_BLOCK_N;
constexpr int STAGES = ATTN_STAGES;
constexpr int THREADS = 128 * (CONSUMERS + 1);
// A 128B-swizzled TMA box is at most 64 bf16 wide, so a 128-wide head is two "column halves", a 64-wide
// head one.
constexpr int HALF_COLS = 64;
constexpr int HALVES = HEAD_DIM / HALF_COLS;
constexpr int O_REGS = HEAD_DIM / 2;   // fp32 accumulator registers per thread of the 64 x HEAD_DIM O tile
constexpr int Q_HALF_BYTES = BLOCK_M * 128;
constexpr int KV_HALF_BYTES = BLOCK_N * 128;
constexpr int Q_BYTES = HALVES * Q_HALF_BYTES;
constexpr int KV_TILE_BYTES = HALVES * KV_HALF_BYTES;
constexpr int SMEM_DATA = Q_BYTES + 2 * STAGES * KV_TILE_BYTES;
constexpr int SMEM_BARRIERS = 8 * (1 + 3 * STAGES);
constexpr int SMEM_TOTAL = 1024 /* alignment slack */ + SMEM_DATA + SMEM_BARRIERS;
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "head dim 64 or 128");
static_assert(BLOCK_N == 128, "the S = Q K^T wgmma is written for n128 (BLOCK_N = 128)");
static_assert(CONSUMERS == 2 || CONSUMERS == 3, "BLOCK_M = 128 or 192");
static_assert(STAGES >= 2 && STAGES <= 3, "2 or 3 K/V stages fit in shared memory");
static_assert(SMEM_TOTAL <= 232448, "shared memory over the sm_90 per-block limit");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536, "register file over-committed");

// ---------------------------------------------------------------- PTX wrappers

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
#if ATTN_WATCHDOG
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
#if ATTN_WATCHDOG
    if (++spins == ATTN_WATCHDOG) __trap();
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

// d[64x128] (+)= A[64x16] * B[16x128]; A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                    int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KP_ACC64_LIST
      ", %64, %65, p, 1, 1, 0, 0;\n}"
      : KP_ACC64(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d[64x128] += A[64x16] * B[16x128]; A from registers, B from shared memory MN-major (transposed).
__device__ __forceinline__ void wgmma_rs_m64n128k16_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KP_ACC64_LIST
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"
      : KP_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}

// d[64x64] += A[64x16] * B[16x64]; A from registers, B from shared memory MN-major (transposed): the
// P V product of a 64-wide head.
__device__ __forceinline__ void wgmma_rs_m64n64k16_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KP_ACC32_LIST
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}"
      : KP_ACC32(d)
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
__device__ __forceinline__ void fence_regs(uint32_t (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+r"(d[i])::"memory");
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

// ---------------------------------------------------------------- consumer pieces

// Per-thread view of a 64x128 wgmma accumulator: element j sits in row (warp%4)*16 + lane/4 + 8*((j>>1)&1)
// of the warpgroup's 64 rows, column 8*(j>>2) + 2*(lane%4) + (j&1). Each thread owns two rows ("h" = 0/1).
struct Softmax {
  float m[2];  // running max of the scaled scores, log2 domain
  float l[2];  // running sum of exp2(score - m), this thread's columns only (reduced across the quad at end)
};

__device__ __forceinline__ void s_gemm(float (&s)[64], uint32_t q_base, uint32_t k_base) {
  fence_regs(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
    // Step kk reads head-dim columns 16kk..16kk+15: column half kk/4, 32-byte step kk%4 inside the row.
    const uint32_t off = (kk & 3) * 32;
    uint64_t da = make_desc(q_base + (kk >> 2) * Q_HALF_BYTES + off, 16, 1024);
    uint64_t db = make_desc(k_base + (kk >> 2) * KV_HALF_BYTES + off, 16, 1024);
    wgmma_ss_m64n128k16(s, da, db, kk > 0);
  }
  wgmma_commit();
}

__device__ __forceinline__ void pv_gemm(float (&o)[O_REGS], uint32_t (&p)[32], uint32_t v_base) {
  fence_regs(o);
  fence_regs(p);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
    // Step kk reads key rows 16kk..16kk+15 (16 * 128 B); the two 64-wide head-dim halves are LBO apart
    // (a 64-wide head has one, and n64 never reads past it), 8-row swizzle atoms SBO = 1024 B apart.
    const uint32_t a[4] = {p[4 * kk + 0], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    uint64_t db = make_desc(v_base + kk * 16 * 128, KV_HALF_BYTES, 1024);
#if ATTN_HEAD_DIM == 128
    wgmma_rs_m64n128k16_tb(o, a, db);
#else
    wgmma_rs_m64n64k16_tb(o, a, db);
#endif
  }
  wgmma_commit();
}

// Masks S in place (scores past the end of the sequence, and above the diagonal when causal).
__device__ __forceinline__ void apply_mask(float (&s)[64], int kv0, int row0, int seq) {
  const int lane = threadIdx.x & 31;
  const int col_base = kv0 + 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < 64; ++j) {
    const int col = col_base + 8 * (j >> 2) + (j & 1);
    bool dead = col >= seq;
#if ATTN_CAUSAL
    const int row = row0 + 8 * ((j >> 1) & 1);
    dead = dead || col > row;
#endif
    if (dead) s[j] = -INFINITY;
  }
}

// Online-softmax step: updates the running max/sum, turns S into unnormalised probabilities in place
// and returns the factor by which the existing O rows must be rescaled.
__device__ __forceinline__ void softmax_step(float (&s)[64], Softmax& st, float (&alpha)[2], float scale_log2) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 64; ++j) mx[(j >> 1) & 1] = fmaxf(mx[(j >> 1) & 1], s[j]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
    const float m_new = fmaxf(st.m[h], mx[h] * scale_log2);
    // A row with nothing unmasked yet keeps m = -inf; use 0 as the offset so exp2 gives 0, not NaN.
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    alpha[h] = fast_exp2(st.m[h] - m_use);
    st.m[h] = m_new;
    mx[h] = m_use;  // reused below as the subtrahend
    st.l[h] *= alpha[h];
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 64; ++j) {
    const int h = (j >> 1) & 1;
    s[j] = fast_exp2(fmaf(s[j], scale_log2, -mx[h]));
    sum[h] += s[j];
  }
  st.l[0] += sum[0];
  st.l[1] += sum[1];
}

// P as bf16 in the register A-operand layout of the P V wgmma.
__device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&p)[32]) {
  // Accumulator columns 16kk..16kk+15 are exactly the A fragment of k-step kk: {row r, cols 0-1},
  // {row r+8, cols 0-1}, {row r, cols 8-9}, {row r+8, cols 8-9} (quad-lane offsets implied).
#pragma unroll
  for (int i = 0; i < 32; ++i) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
}

__device__ __forceinline__ void rescale(float (&o)[O_REGS], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < O_REGS; ++j) o[j] *= alpha[(j >> 1) & 1];
}

// ---------------------------------------------------------------- the kernel

// One consumer warpgroup (index c): 64 query rows of the CTA's BLOCK_M.
__device__ __forceinline__ void consumer(const CUtensorMap& tm_o, float* __restrict__ lse, int seq,
                                         float scale_log2, uint32_t s_q, uint32_t s_k, uint32_t s_v,
                                         uint32_t bar_q, uint32_t bar_base, int m0, int bh, int n_tiles, int c) {
  auto bar_kfull = [&](int s) { return bar_base + 8 * (1 + s); };
  auto bar_vfull = [&](int s) { return bar_base + 8 * (1 + STAGES + s); };
  auto bar_empty = [&](int s) { return bar_base + 8 * (1 + 2 * STAGES + s); };
  const int tid = threadIdx.x & 127;
  const int warp = tid / 32;
  const int lane = tid & 31;
  const int wg_row0 = m0 + 64 * c;                        // first query row of this warpgroup
  const int my_row0 = wg_row0 + warp * 16 + (lane >> 2);  // this thread's rows: my_row0, my_row0 + 8
  const uint32_t q_base = s_q + c * 64 * 128;

  float o[O_REGS];
#pragma unroll
  for (int j = 0; j < O_REGS; ++j) o[j] = 0.f;
  Softmax st;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;
  float s[64];
  uint32_t p[32];
  float alpha[2];

  mbar_wait(bar_q, 0);

  auto needs_mask = [&](int it) {
    const int kv0 = it * BLOCK_N;
    bool m = kv0 + BLOCK_N > seq;
#if ATTN_CAUSAL
    m = m || (kv0 + BLOCK_N - 1 > wg_row0);
#endif
    return m;
  };

#if ATTN_OVERLAP
  // Prologue: S(0) and its softmax.
  mbar_wait(bar_kfull(0), 0);
  s_gemm(s, q_base, s_k);
  wgmma_wait<0>();
  fence_regs(s);
  if (needs_mask(0)) apply_mask(s, 0, my_row0, seq);
  softmax_step(s, st, alpha, scale_log2);
  pack_p(s, p);
  for (int it = 1; it < n_tiles; ++it) {
    const int sn = it % STAGES;
    const int sp = (it - 1) % STAGES;
    mbar_wait(bar_kfull(sn), (it / STAGES) & 1);
    s_gemm(s, q_base, s_k + sn * KV_TILE_BYTES);
    mbar_wait(bar_vfull(sp), ((it - 1) / STAGES) & 1);
    pv_gemm(o, p, s_v + sp * KV_TILE_BYTES);
    wgmma_wait<1>();  // S(it) is done; O += P(it-1) V(it-1) may still run
    fence_regs(s);
    if (needs_mask(it)) apply_mask(s, it * BLOCK_N, my_row0, seq);
    softmax_step(s, st, alpha, scale_log2);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(p);
    mbar_arrive(bar_empty(sp));
    // P(it) is packed only now: keeping a second P live across the P V product costs 32 registers and
    // makes ptxas serialise the wgmmas.
    pack_p(s, p);
    rescale(o, alpha);
  }
  {
    const int sp = (n_tiles - 1) % STAGES;
    mbar_wait(bar_vfull(sp), ((n_tiles - 1) / STAGES) & 1);
    pv_gemm(o, p, s_v + sp * KV_TILE_BYTES);
    wgmma_wait<0>();
    fence_regs(o);
    mbar_arrive(bar_empty(sp));
  }
#else
  for (int it = 0; it < n_tiles; ++it) {
    const int sn = it % STAGES;
    const uint32_t phase = (it / STAGES) & 1;
    mbar_wait(bar_kfull(sn), phase);
    s_gemm(s, q_base, s_k + sn * KV_TILE_BYTES);
    wgmma_wait<0>();
    fence_regs(s);
    if (needs_mask(it)) apply_mask(s, it * BLOCK_N, my_row0, seq);
    softmax_step(s, st, alpha, scale_log2);
    pack_p(s, p);
    rescale(o, alpha);
    mbar_wait(bar_vfull(sn), phase);
    pv_gemm(o, p, s_v + sn * KV_TILE_BYTES);
    wgmma_wait<0>();
    fence_regs(o);
    mbar_arrive(bar_empty(sn));
  }
#endif

  // -------------------------------------------------- epilogue
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = st.l[h];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    inv_l[h] = l > 0.f ? 1.f / l : 0.f;
#if ATTN_WITH_LSE
    const int row = my_row0 + 8 * h;
    if ((lane & 3) == 0 && row < seq) {
      // logsumexp of the scaled scores, natural log: (m + log2 l) * ln 2 with m in log2 units.
      lse[static_cast<size_t>(bh) * seq + row] = (st.m[h] + __log2f(l)) * 0.69314718055994531f;
    }
#endif
  }
  // O goes back through this warpgroup's own Q rows (its last S GEMM has completed), in the same
  // 128B-swizzled layout TMA uses, then one TMA store per column half clips rows past the sequence end.
#pragma unroll
  for (int j = 0; j < O_REGS; j += 2) {
    const int h = (j >> 1) & 1;
    const int r = warp * 16 + (lane >> 2) + 8 * h;  // row within the warpgroup's 64
    const int col = 8 * (j >> 2) + 2 * (lane & 3);  // 0..HEAD_DIM-1
    const int half = col >> 6;
    const int byte_in_row = (col & 63) * 2;
    const int chunk = (byte_in_row >> 4) ^ (r & 7);
    const uint32_t addr = q_base + half * Q_HALF_BYTES + r * 128 + chunk * 16 + (byte_in_row & 15);
    const uint32_t v = pack_bf16(o[j] * inv_l[h], o[j + 1] * inv_l[h]);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
  if (tid == 0) {
#pragma unroll
    for (int half = 0; half < HALVES; ++half)
      tma_store_3d(&tm_o, q_base + half * Q_HALF_BYTES, half * HALF_COLS, wg_row0, bh);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

__global__ void __launch_bounds__(THREADS, 1)
    attn_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                    float* __restrict__ lse, int seq, float scale_log2) {
  extern __shared__ uint8_t smem_raw[];
  // 128B-swizzled tiles need 1024-byte alignment (the swizzle pattern repeats every 8 rows of 128 B).
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t s_q = smem_u32(smem);
  const uint32_t s_k = s_q + Q_BYTES;
  const uint32_t s_v = s_k + STAGES * KV_TILE_BYTES;
  const uint32_t bar_base = s_v + STAGES * KV_TILE_BYTES;
  const uint32_t bar_q = bar_base;
  auto bar_kfull = [&](int s) { return bar_base + 8 * (1 + s); };
  auto bar_vfull = [&](int s) { return bar_base + 8 * (1 + STAGES + s); };
  auto bar_empty = [&](int s) { return bar_base + 8 * (1 + 2 * STAGES + s); };

  const int num_m = (seq + BLOCK_M - 1) / BLOCK_M;
  // Causal: heaviest query tiles (those near the end) first, so the tail of the grid is short work.
  const int m_blk = ATTN_CAUSAL ? num_m - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int bh = blockIdx.y;
  const int m0 = m_blk * BLOCK_M;
  int n_tiles = (seq + BLOCK_N - 1) / BLOCK_N;
#if ATTN_CAUSAL
  n_tiles = min(n_tiles, (m0 + BLOCK_M - 1) / BLOCK_N + 1);
#endif

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    mbar_init(bar_q, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_kfull(s), 1);
      mbar_init(bar_vfull(s), 1);
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
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_k)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tm_v)) : "memory");
      mbar_expect_tx(bar_q, Q_BYTES);
      for (int half = 0; half < HALVES; ++half)
        tma_load_3d(s_q + half * Q_HALF_BYTES, &tm_q, bar_q, half * HALF_COLS, m0, bh);
      for (int it = 0; it < n_tiles; ++it) {
        const int s = it % STAGES;
        const uint32_t phase = (it / STAGES) & 1;
        // Slot s is free once every consumer thread released its previous use; the first pass waits on
        // the parity of the (already complete) phase before phase 0, which returns at once.
        mbar_wait(bar_empty(s), phase ^ 1);
        const int kv0 = it * BLOCK_N;
        const uint32_t k_dst = s_k + s * KV_TILE_BYTES;
        const uint32_t v_dst = s_v + s * KV_TILE_BYTES;
        // Rows past the end of the sequence are zero-filled by TMA and still count toward the bytes.
        mbar_expect_tx(bar_kfull(s), KV_TILE_BYTES);
        for (int half = 0; half < HALVES; ++half)
          tma_load_3d(k_dst + half * KV_HALF_BYTES, &tm_k, bar_kfull(s), half * HALF_COLS, kv0, bh);
        mbar_expect_tx(bar_vfull(s), KV_TILE_BYTES);
        for (int half = 0; half < HALVES; ++half)
          tma_load_3d(v_dst + half * KV_HALF_BYTES, &tm_v, bar_vfull(s), half * HALF_COLS, kv0, bh);
      }
    }
  } else {
    // ------------------------------------------------ consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
    consumer(tm_o, lse, seq, scale_log2, s_q, s_k, s_v, bar_q, bar_base, m0, bh, n_tiles, wg - 1);
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

// (B*H, S, HEAD_DIM) bf16 viewed as a 3-D tensor {HEAD_DIM, S, B*H}; box {64, rows, 1}, 128B swizzle, zero fill.
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

}  // namespace kp_attn

// Returns nullptr on success, else a message. Pointers: q, k, v, o (B*H, S, head_dim) bf16; lse (B*H, S)
// fp32 (may be null when built without ATTN_WITH_LSE). head_dim must be the one this build was made for.
const char* kp_attn_fwd_launch(const void* q, const void* k, const void* v, void* o, float* lse, int bh, int seq,
                               int head_dim, float softmax_scale, cudaStream_t stream) {
  using namespace kp_attn;
  if (head_dim != HEAD_DIM) return "head dim does not match this build (ATTN_HEAD_DIM)";
  if (bh <= 0 || seq <= 0) return nullptr;
  if (bh > 65535) return "batch*heads over 65535 (grid y limit)";
  const char* err = nullptr;
  CUtensorMap tq, tk, tv, to;
  if (!make_map(&tq, q, bh, seq, BLOCK_M, &err) || !make_map(&tk, k, bh, seq, BLOCK_N, &err) ||
      !make_map(&tv, v, bh, seq, BLOCK_N, &err) || !make_map(&to, o, bh, seq, 64, &err))
    return err;
  static bool attr_set = false;
  if (!attr_set) {
    if (cudaFuncSetAttribute(attn_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_TOTAL) !=
        cudaSuccess)
      return "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
    attr_set = true;
  }
  dim3 grid((seq + BLOCK_M - 1) / BLOCK_M, bh);
  const float scale_log2 = softmax_scale * 1.4426950408889634f;
  attn_fwd_kernel<<<grid, THREADS, SMEM_TOTAL, stream>>>(tq, tk, tv, to, lse, seq, scale_log2);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cudaGetErrorString(e);
  return nullptr;
}
