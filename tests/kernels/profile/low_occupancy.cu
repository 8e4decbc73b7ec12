// PLANT (occupancy): a streaming kernel that reserves 160 KB of dynamic shared memory per 128-thread
// block, so one block (4 warps of 64) fits on an SM: too few warps to hide memory latency.
#include "common.cuh"

__global__ void low_occupancy_smem(const float* __restrict__ in, float* __restrict__ out, size_t n) {
    extern __shared__ float scratch[];
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    scratch[threadIdx.x] = i < n ? in[i] : 0.f;  // touches the reservation so it is not optimized out
    __syncthreads();
    if (i < n) out[i] = scratch[threadIdx.x] + 1.0f;
}

int main() {
    const size_t n = 1ull << 26;
    const int smem = 160 * 1024;
    float *a, *b;
    CHECK(cudaMalloc(&a, n * 4)); CHECK(cudaMalloc(&b, n * 4));
    CHECK(cudaMemset(a, 0, n * 4));
    CHECK(cudaFuncSetAttribute(low_occupancy_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int r = 0; r < 2; ++r) low_occupancy_smem<<<(unsigned)(n / 128), 128, smem>>>(a, b, n);
    finish("low_occupancy_smem");
}
