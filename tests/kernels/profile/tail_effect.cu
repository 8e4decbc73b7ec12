// PLANT (tail effect): long compute blocks, two fit per SM, and the grid is two full waves' worth plus
// 20 blocks: the last partial wave runs on 20 of the 264 slots while the rest of the GPU idles.
#include "common.cuh"

__global__ void __launch_bounds__(1024, 2) tail_wave(float* __restrict__ out, int iters) {
    float a = threadIdx.x * 1e-3f, b = 1.0001f;
    for (int it = 0; it < iters; ++it) { a = fmaf(a, b, 1e-7f); b = fmaf(b, a, -1e-7f); }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + b;
}

int main() {
    int grid = sm_count() * 2 + 20;
    float* o;
    CHECK(cudaMalloc(&o, (size_t)grid * 1024 * 4));
    for (int r = 0; r < 2; ++r) tail_wave<<<grid, 1024>>>(o, 20000);
    finish("tail_wave");
}
