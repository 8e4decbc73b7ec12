// POSITIVE CONTROL for executed-instruction evidence (issue 11's correct_with_arch): an sm_90a kernel
// that loads its operands with a non-tensor bulk copy (cp.async.bulk, completed on an mbarrier) and
// then issues warpgroup MMAs (wgmma.mma_async m64n8k16 bf16). ncu must show HGMMA, UBLKCP and SYNCS
// executed. The operand layout is not checked: the point is which instructions run, not the product.
#include "common.cuh"
#include <cstdint>

__device__ __forceinline__ uint64_t smem_desc(const void* p) {
    uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    uint64_t d = (uint64_t)((a & 0x3FFFF) >> 4);
    d |= (uint64_t)(128 >> 4) << 16;  // leading-dimension byte offset (no-swizzle core matrices)
    d |= (uint64_t)(256 >> 4) << 32;  // stride byte offset
    return d;                         // bits 62-63 = 0: no swizzle
}

__global__ void wgmma_bulk_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b,
                                  float* __restrict__ out, int iters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ alignas(128) uint16_t As[2048];  // 4 KB: covers every offset the descriptor can reach
    __shared__ alignas(128) uint16_t Bs[2048];
    __shared__ alignas(8) uint64_t bar;
    const uint32_t bar_a = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
    const uint32_t bytes = 2 * 4096;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_a));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar_a), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"((uint32_t)__cvta_generic_to_shared(As)), "l"(a), "r"(4096u), "r"(bar_a) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"((uint32_t)__cvta_generic_to_shared(Bs)), "l"(b), "r"(4096u), "r"(bar_a) : "memory");
    }
    asm volatile(
        "{\n .reg .pred P1;\n"
        "WAIT:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], 0;\n"
        " @!P1 bra WAIT;\n}\n" :: "r"(bar_a) : "memory");
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    const uint64_t da = smem_desc(As), db = smem_desc(Bs);
    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
            " wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(1));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = d0 + d1 + d2 + d3;
#endif
}

int main() {
    const int grid = 132, iters = 256;
    uint16_t *a, *b; float* o;
    CHECK(cudaMalloc(&a, 4096)); CHECK(cudaMalloc(&b, 4096));
    CHECK(cudaMalloc(&o, grid * 128 * 4));
    CHECK(cudaMemset(a, 0, 4096)); CHECK(cudaMemset(b, 0, 4096));
    for (int r = 0; r < 2; ++r) wgmma_bulk_kernel<<<grid, 128>>>(a, b, o, iters);
    finish("wgmma_bulk_kernel");
}
