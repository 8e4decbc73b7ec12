// CLEAN: a float4 grid-stride copy sized to exactly one wave; should run near copy bandwidth and draw
// no finding from any tool.
#include "common.cuh"

__global__ void clean_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x)
        out[i] = in[i];
}

int main() {
    const size_t n = 1ull << 28;  // 1 GiB each way: far past the 60 MB L2
    float *a, *b;
    CHECK(cudaMalloc(&a, n * 4)); CHECK(cudaMalloc(&b, n * 4));
    CHECK(cudaMemset(a, 1, n * 4));
    int grid = sm_count() * 8;  // 8 blocks of 256 threads fill an SM's 64 warps: exactly one wave
    for (int r = 0; r < 2; ++r) clean_copy<<<grid, 256>>>((float4*)a, (float4*)b, n / 4);
    finish("clean_copy");
}
