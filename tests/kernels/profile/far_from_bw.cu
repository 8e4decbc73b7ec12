// PLANT (DRAM bandwidth): a coalesced streaming sum launched with one 128-thread block per SM; each
// thread keeps a single 4-byte load in flight, so the kernel is memory-bound yet far below bandwidth.
#include "common.cuh"

__global__ void far_from_bw_stream(const float* __restrict__ in, float* __restrict__ out, size_t n) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += in[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main() {
    const size_t n = 1ull << 26;
    float *a, *b;
    int grid = sm_count();
    CHECK(cudaMalloc(&a, n * 4)); CHECK(cudaMalloc(&b, (size_t)grid * 128 * 4));
    CHECK(cudaMemset(a, 0, n * 4));
    for (int r = 0; r < 2; ++r) far_from_bw_stream<<<grid, 128>>>(a, b, n);
    finish("far_from_bw_stream");
}
