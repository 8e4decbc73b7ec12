// KernelPro expert reference: fp8 (e4m3) GEMM with per-tensor scales for Hopper (sm_90a).
//
// C = (scale_a * A) @ (scale_b * B).T: A (M,K) and B (N,K) float8_e4m3fn, both row-major = K-major;
// scale_a, scale_b fp32 scalars in device memory (read by the kernel, never by the host); C (M,N) bf16.
// Design: persistent, warp-specialized kernel, the structure of hopper_gemm.cu with B_KMAJOR=1.
// Warpgroup 0 is the producer (one thread issues TMA loads, 128-byte swizzle, into a STAGES-deep
// shared-memory ring guarded by full/empty mbarriers); warpgroups 1..CONSUMERS each own BM/CONSUMERS
// rows of the BM x BN tile and run wgmma m64nBNk32 e4m3 out of shared memory. A 128-byte swizzle row
// holds 128 fp8 values, so one K slab is 128 wide and a k32 step moves 32 bytes inside it.
// Hopper's fp8 wgmma keeps fewer mantissa bits in its accumulator than fp32, so the sum is promoted:
// PROMOTE_EVERY k-blocks accumulate in the wgmma accumulator (the first of each window overwrites
// it, scale-d 0), then the consumer waits for them and adds the accumulator into a separate fp32
// register sum. PROMOTE_EVERY=0 keeps the whole K sum in the wgmma accumulator (half the registers).
// With CLUSTER_M > 1, the CTAs of a cluster work on vertically adjacent tiles that share one B tile:
// each CTA loads BN/CLUSTER_M of its rows and multicasts them to all.
// Tails: TMA zero-fills out-of-bounds boxes (so a ragged K adds zeros), the epilogue masks rows and
// columns. The index helpers are __host__ __device__ so a CPU test can tabulate them.
//
// Compile-time parameters (-DKP_<NAME>): BM BN BK STAGES CONSUMERS CLUSTER_M GROUP_M PROMOTE_EVERY
// PRODUCER_REGS CONSUMER_REGS.

#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <algorithm>

#ifndef KP_BM
#define KP_BM 128
#endif
#ifndef KP_BN
#define KP_BN 192
#endif
#ifndef KP_BK
#define KP_BK 128
#endif
#ifndef KP_STAGES
#define KP_STAGES 5
#endif
#ifndef KP_CONSUMERS
#define KP_CONSUMERS 2
#endif
#ifndef KP_CLUSTER_M
#define KP_CLUSTER_M 1
#endif
#ifndef KP_GROUP_M
#define KP_GROUP_M 8
#endif
#ifndef KP_PROMOTE_EVERY
#define KP_PROMOTE_EVERY 4
#endif
#ifndef KP_PRODUCER_REGS
#define KP_PRODUCER_REGS 40
#endif
#ifndef KP_CONSUMER_REGS
#define KP_CONSUMER_REGS 232
#endif

#if defined(__CUDACC__)
#define KP_HD __host__ __device__ __forceinline__
#else
#define KP_HD inline
#endif

namespace kp_gemm_fp8 {

constexpr int BM = KP_BM;
constexpr int BN = KP_BN;
constexpr int BK = KP_BK;
constexpr int STAGES = KP_STAGES;
constexpr int CONSUMERS = KP_CONSUMERS;
constexpr int CLUSTER_M = KP_CLUSTER_M;
constexpr int GROUP_M = KP_GROUP_M;
constexpr int PROMOTE_EVERY = KP_PROMOTE_EVERY;
constexpr int PRODUCER_REGS = KP_PRODUCER_REGS;
constexpr int CONSUMER_REGS = KP_CONSUMER_REGS;

constexpr int kThreads = 128 * (CONSUMERS + 1);
constexpr int kWgRows = BM / CONSUMERS;        // rows of the tile one consumer warpgroup owns
constexpr int kMSub = kWgRows / 64;            // m64 wgmma tiles per consumer warpgroup
constexpr int kAccPerTile = BN / 2;            // fp32 accumulators per thread per m64 tile
constexpr int kSums = PROMOTE_EVERY > 0 ? 2 : 1;   // wgmma accumulator (+ the promoted fp32 sum)
constexpr int kSlab = 128;                     // fp8 elements in one 128-byte swizzle row
constexpr int kABytes = BM * BK;               // one stage of A (1 byte per element)
constexpr int kBBytes = BN * BK;               // one stage of B
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kABox = BM * 128;                // one 128-wide K slab of A: BM rows of 128 B
constexpr int kBSlab = BN * 128;               // one 128-wide K slab of B: BN rows of 128 B
constexpr int kBRowsPerCta = BN / CLUSTER_M;   // B rows each CTA loads (and multicasts)
constexpr int kSmemBytes = 1024 /*alignment slack*/ + STAGES * kStageBytes + 2 * STAGES * 8;

static_assert(CONSUMERS == 1 || CONSUMERS == 2, "CONSUMERS must be 1 or 2");
static_assert(BM % (64 * CONSUMERS) == 0, "BM must be a multiple of 64*CONSUMERS (each consumer runs m64 wgmmas)");
static_assert(BM <= 256, "BM must be <= 256 (one TMA box spans BM rows)");
static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN must be 64, 128, 192 or 256");
static_assert(BK == 128 || BK == 256, "BK must be 128 or 256 (128-element 128B-swizzle slabs of fp8)");
static_assert(STAGES >= 2 && STAGES <= 16, "STAGES must be in [2, 16]");
static_assert(PROMOTE_EVERY >= 0 && PROMOTE_EVERY <= 64, "PROMOTE_EVERY must be in [0, 64] (0: never promote)");
static_assert(kSums * kMSub * kAccPerTile <= 192,
              "fp32 registers per thread ((PROMOTE_EVERY ? 2 : 1) * BM/CONSUMERS/64 * BN/2) must be <= 192");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2 || CLUSTER_M == 4, "CLUSTER_M must be 1, 2 or 4");
static_assert(kBRowsPerCta % 8 == 0, "BN/CLUSTER_M must be a multiple of 8 (swizzle atoms)");
static_assert(GROUP_M >= 1, "GROUP_M must be >= 1");
static_assert(kSmemBytes <= 232448, "STAGES*(BM+BN)*BK bytes exceeds the 227 KiB shared-memory limit");
static_assert(PRODUCER_REGS % 8 == 0 && CONSUMER_REGS % 8 == 0, "setmaxnreg counts must be multiples of 8");
static_assert(PRODUCER_REGS >= 24 && CONSUMER_REGS <= 256, "setmaxnreg counts must lie in [24, 256]");
static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 65536,
              "PRODUCER_REGS + CONSUMERS*CONSUMER_REGS exceeds the 64K-register file (x128 threads)");

// ---------------------------------------------------------------------------------------------
// Index helpers (host and device: tests/test_reference_gemm_fp8_emulation.py tabulates them).

// Tile order: super-tiles of (CLUSTER_M*BM) x BN, grouped GROUP_M super-rows at a time so the
// CTAs running together share A rows and B columns in L2.
KP_HD void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = GROUP_M * tiles_n;
  const int group = t / per_group;
  const int first_m = group * GROUP_M;
  const int rows = (tiles_m - first_m) < GROUP_M ? (tiles_m - first_m) : GROUP_M;
  const int in_group = t - group * per_group;
  tm = first_m + in_group % rows;
  tn = in_group / rows;
}

// Row / column (within the m64 x BN wgmma tile) of accumulator i of thread tid (0..127) of a warpgroup.
KP_HD int acc_row(int tid, int i) { return (tid / 32) * 16 + (tid % 32) / 4 + 8 * ((i / 2) % 2); }
KP_HD int acc_col(int tid, int i) { return (i / 4) * 8 + (tid % 4) * 2 + (i % 2); }

// The first k-block of a promotion window starts the wgmma accumulator from zero (scale-d 0).
// kWindow keeps the modulo's divisor non-zero at PROMOTE_EVERY=0, where its result is unused
// (nvcc warns on a literal `% 0` even in a branch that is never taken).
constexpr int kWindow = PROMOTE_EVERY > 0 ? PROMOTE_EVERY : 1;
KP_HD bool window_first(int kt) { return PROMOTE_EVERY > 0 ? kt % kWindow == 0 : kt == 0; }
// After the last k-block of a window (or of the tile) the accumulator is added into the fp32 sum.
KP_HD bool window_last(int kt, int k_tiles) {
  return kt == k_tiles - 1 || (PROMOTE_EVERY > 0 && (kt + 1) % kWindow == 0);
}

// ---------------------------------------------------------------------------------------------
// PTX wrappers (those of hopper_gemm.cu)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Release one stage: arrive on the empty barrier of CTA `rank` of the cluster (own CTA when 1).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
#if KP_CLUSTER_M > 1
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
#else
  (void)rank;
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                                      int c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
      : "memory");
}

__device__ __forceinline__ void cluster_sync_all() {
#if KP_CLUSTER_M > 1
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
#else
  __syncthreads();
#endif
}

__device__ __forceinline__ uint32_t cluster_rank() {
#if KP_CLUSTER_M > 1
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

// wgmma shared-memory descriptor with the 128-byte swizzle (layout type 1 in bits 62-63).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= 1ull << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving accumulator reads/writes across wgmma fences and waits.
template <int N>
__device__ __forceinline__ void acc_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#if KP_BN == 64
// One m64n64k32 e4m3 wgmma: A and B K-major from shared memory, fp32 accumulate; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_tile(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
#endif
#if KP_BN == 128
// One m64n128k32 e4m3 wgmma: A and B K-major from shared memory, fp32 accumulate; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_tile(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
}
#endif
#if KP_BN == 192
// One m64n192k32 e4m3 wgmma: A and B K-major from shared memory, fp32 accumulate; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_tile(float (&d)[96], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(da), "l"(db), "r"(scale_d));
}
#endif
#if KP_BN == 256
// One m64n256k32 e4m3 wgmma: A and B K-major from shared memory, fp32 accumulate; scale_d 0 overwrites d.
__device__ __forceinline__ void wgmma_tile(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d));
}
#endif

// ---------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads, 1)
    gemm_fp8_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const float* __restrict__ scale_a, const float* __restrict__ scale_b,
                    __nv_bfloat16* __restrict__ c, int M, int N, int K) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint8_t smem_raw[];
  // 128B-swizzled tiles must start on 1024-byte boundaries.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t sa = base;                              // STAGES x kABytes
  const uint32_t sb = base + STAGES * kABytes;           // STAGES x kBBytes
  const uint32_t full_bar = sb + STAGES * kBBytes;       // STAGES x 8 bytes
  const uint32_t empty_bar = full_bar + STAGES * 8;      // STAGES x 8 bytes

  const int wg = threadIdx.x / 128;
  const int tid_wg = threadIdx.x % 128;
  const uint32_t rank = cluster_rank();

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, CONSUMERS * CLUSTER_M);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
  }
  cluster_sync_all();

  const int tiles_m = (M + CLUSTER_M * BM - 1) / (CLUSTER_M * BM);
  const int tiles_n = (N + BN - 1) / BN;
  const int num_tiles = tiles_m * tiles_n;
  const int k_tiles = (K + BK - 1) / BK;
  const int cluster_id = blockIdx.x / CLUSTER_M;
  const int num_clusters = gridDim.x / CLUSTER_M;

  if (wg == 0) {
    // Producer warpgroup: give registers to the consumers, one thread issues all copies.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PRODUCER_REGS));
    if (tid_wg == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int t = cluster_id; t < num_tiles; t += num_clusters) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        const int m0 = (tm * CLUSTER_M + rank) * BM;
        const int n0 = tn * BN;
        for (int kt = 0; kt < k_tiles; ++kt) {
          mbar_wait(empty_bar + 8 * stage, phase ^ 1);
          const uint32_t fb = full_bar + 8 * stage;
          mbar_expect_tx(fb, kStageBytes);
          const int k0 = kt * BK;
#pragma unroll
          for (int kb = 0; kb < BK / kSlab; ++kb) {
            tma_load_2d(sa + stage * kABytes + kb * kABox, &map_a, fb, k0 + kb * kSlab, m0);
#if KP_CLUSTER_M > 1
            // Each CTA loads BN/CLUSTER_M rows of the B slab and multicasts them to the whole cluster.
            tma_load_2d_multicast(sb + stage * kBBytes + kb * kBSlab + rank * kBRowsPerCta * 128, &map_b, fb,
                                  k0 + kb * kSlab, n0 + rank * kBRowsPerCta,
                                  static_cast<uint16_t>((1u << CLUSTER_M) - 1));
#else
            tma_load_2d(sb + stage * kBBytes + kb * kBSlab, &map_b, fb, k0 + kb * kSlab, n0);
#endif
          }
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(CONSUMER_REGS));
    const int cw = wg - 1;  // consumer index
    // Per-tensor scales live in device memory: read once, applied in the epilogue.
    const float scale = __ldg(scale_a) * __ldg(scale_b);
    float acc[kMSub][kAccPerTile];
#if KP_PROMOTE_EVERY > 0
    float sum[kMSub][kAccPerTile];
#endif
#pragma unroll
    for (int ms = 0; ms < kMSub; ++ms)
#pragma unroll
      for (int i = 0; i < kAccPerTile; ++i) acc[ms][i] = 0.f;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = cluster_id; t < num_tiles; t += num_clusters) {
      int tm, tn;
      tile_coords(t, tiles_m, tiles_n, tm, tn);
      const int m0 = (tm * CLUSTER_M + rank) * BM;
      const int n0 = tn * BN;
#if KP_PROMOTE_EVERY > 0
#pragma unroll
      for (int ms = 0; ms < kMSub; ++ms)
#pragma unroll
        for (int i = 0; i < kAccPerTile; ++i) sum[ms][i] = 0.f;
#endif

      int prev_stage = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(full_bar + 8 * stage, phase);
#pragma unroll
        for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);
        wgmma_fence();
        const uint32_t a_stage = sa + stage * kABytes + cw * kWgRows * 128;
        const uint32_t b_stage = sb + stage * kBBytes;
        const int first = window_first(kt) ? 0 : 1;   // scale-d of the window's first wgmma
#pragma unroll
        for (int kk = 0; kk < BK / 32; ++kk) {
          // K-major SW128 operands: k32 steps move 32 B inside the 128 B row; SBO = 8 rows (1024 B).
          const uint64_t db = smem_desc(b_stage + (kk / 4) * kBSlab + (kk % 4) * 32, 16, 1024);
#pragma unroll
          for (int ms = 0; ms < kMSub; ++ms) {
            const uint64_t da =
                smem_desc(a_stage + (kk / 4) * kABox + ms * 64 * 128 + (kk % 4) * 32, 16, 1024);
            wgmma_tile(acc[ms], da, db, kk == 0 ? first : 1);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);
        if (window_last(kt, k_tiles)) {
          // End of a promotion window: drain the wgmma queue, free both stages, fold into fp32.
          wgmma_wait<0>();
#pragma unroll
          for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);
          if (tid_wg < CLUSTER_M) {
            if (prev_stage >= 0) mbar_arrive_cluster(empty_bar + 8 * prev_stage, tid_wg);
            mbar_arrive_cluster(empty_bar + 8 * stage, tid_wg);
          }
          prev_stage = -1;
#if KP_PROMOTE_EVERY > 0
#pragma unroll
          for (int ms = 0; ms < kMSub; ++ms)
#pragma unroll
            for (int i = 0; i < kAccPerTile; ++i) sum[ms][i] += acc[ms][i];
#endif
        } else {
          // Keep one wgmma group in flight; the one before it is done, so its stage can be refilled.
          wgmma_wait<1>();
          if (prev_stage >= 0 && tid_wg < CLUSTER_M) mbar_arrive_cluster(empty_bar + 8 * prev_stage, tid_wg);
          prev_stage = stage;
        }
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      // The queue is already empty here (the tile's last k-block ends a window), but ptxas cannot prove
      // it: without this wait it injects one (C7517) where the two paths above merge, draining the
      // queue on every k-block.
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < kMSub; ++ms) acc_fence(acc[ms]);

      // Epilogue: fragment of m64nBN, scaled, -> bf16, masked at the matrix edges.
      const bool pairs = (N % 2) == 0;   // bf16x2 stores need an even row length for 4-byte alignment
#pragma unroll
      for (int ms = 0; ms < kMSub; ++ms) {
#pragma unroll
        for (int i = 0; i < kAccPerTile; i += 2) {
          const int row = m0 + cw * kWgRows + ms * 64 + acc_row(tid_wg, i);
          const int col = n0 + acc_col(tid_wg, i);
#if KP_PROMOTE_EVERY > 0
          const float v0 = sum[ms][i] * scale, v1 = sum[ms][i + 1] * scale;
#else
          const float v0 = acc[ms][i] * scale, v1 = acc[ms][i + 1] * scale;
#endif
          if (row < M && col < N) {
            __nv_bfloat16* p = c + static_cast<size_t>(row) * N + col;
            if (pairs) {
              *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
            } else {
              p[0] = __float2bfloat16_rn(v0);
              if (col + 1 < N) p[1] = __float2bfloat16_rn(v1);
            }
          }
        }
      }
    }
  }
  // No CTA may leave while a cluster peer can still arrive on its barriers or multicast into it.
  cluster_sync_all();
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side. The driver's cuTensorMapEncodeTiled is fetched through the runtime, so nothing links
// against libcuda.

typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
#else
    cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q);
#endif
    if (q == cudaDriverEntryPointSuccess) fn = reinterpret_cast<EncodeTiledFn>(p);
  }
  return fn;
}

// 2-D fp8 (1-byte) tensor map over a row-major (rows, cols) matrix, box (box_rows, 128 cols), 128B swizzle.
static int make_map(CUtensorMap* map, const void* ptr, uint64_t rows, uint64_t cols, uint32_t box_rows) {
  EncodeTiledFn enc = encode_tiled_fn();
  if (!enc) return 1;
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {cols};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(kSlab), box_rows};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(ptr), dims, strides, box, estr,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : 2;
}

// Returns 0 on success; otherwise a code the caller turns into a message.
//  1: cuTensorMapEncodeTiled unavailable  2: tensor map rejected  3: launch/attribute failure
static int launch_gemm(const void* a, const void* b, const float* scale_a, const float* scale_b, void* c, int M,
                       int N, int K, cudaStream_t stream) {
  CUtensorMap map_a, map_b;
  int e = make_map(&map_a, a, M, K, BM);
  if (e) return e;
  e = make_map(&map_b, b, N, K, kBRowsPerCta);
  if (e) return e;

  static int sms = 0, max_ctas = 0;
  if (!sms) {
    int dev;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaFuncSetAttribute(gemm_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) !=
        cudaSuccess)
      return 3;
    max_ctas = sms / CLUSTER_M * CLUSTER_M;
#if KP_CLUSTER_M > 1
    // Not every GPC holds a whole number of clusters: ask how many fit at once.
    cudaLaunchConfig_t qc = {};
    cudaLaunchAttribute qa[1];
    qa[0].id = cudaLaunchAttributeClusterDimension;
    qa[0].val.clusterDim.x = CLUSTER_M;
    qa[0].val.clusterDim.y = 1;
    qa[0].val.clusterDim.z = 1;
    qc.gridDim = dim3(max_ctas);
    qc.blockDim = dim3(kThreads);
    qc.dynamicSmemBytes = kSmemBytes;
    qc.attrs = qa;
    qc.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, gemm_fp8_kernel, &qc) == cudaSuccess && clusters > 0)
      max_ctas = std::min(max_ctas, clusters * CLUSTER_M);
    cudaGetLastError();
#endif
  }
  const int tiles = ((M + CLUSTER_M * BM - 1) / (CLUSTER_M * BM)) * ((N + BN - 1) / BN);
  const int grid = std::min(max_ctas, tiles * CLUSTER_M);

  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CLUSTER_M;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  __nv_bfloat16* cp = static_cast<__nv_bfloat16*>(c);
  if (cudaLaunchKernelEx(&cfg, gemm_fp8_kernel, map_a, map_b, scale_a, scale_b, cp, M, N, K) != cudaSuccess)
    return 3;
  return 0;
}

}  // namespace kp_gemm_fp8

// C ABI for the Python binding (gemm_fp8_e4m3.py): no torch headers here, so nvcc compiles only CUDA.
extern "C" int kp_gemm_fp8_launch(const void* a, const void* b, const void* scale_a, const void* scale_b, void* c,
                                  int M, int N, int K, void* stream) {
  return kp_gemm_fp8::launch_gemm(a, b, static_cast<const float*>(scale_a), static_cast<const float*>(scale_b), c,
                                  M, N, K, static_cast<cudaStream_t>(stream));
}

extern "C" const char* kp_gemm_fp8_error(int code) {
  switch (code) {
    case 0: return "ok";
    case 1: return "cuTensorMapEncodeTiled is not available from the CUDA driver";
    case 2: return "cuTensorMapEncodeTiled rejected a tensor map (shape, stride or alignment)";
    default: return cudaGetErrorString(cudaGetLastError());
  }
}
