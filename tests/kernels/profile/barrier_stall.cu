// PLANT (warp stalls): in each round one warp of 32 does a long dependent FMA chain while the other 31
// wait at __syncthreads: stall time is dominated by the barrier.
#include "common.cuh"

__global__ void barrier_imbalance(float* __restrict__ out, int rounds) {
    __shared__ float v[32];
    float a = threadIdx.x;
    for (int r = 0; r < rounds; ++r) {
        if ((threadIdx.x >> 5) == (r & 31)) {
            for (int k = 0; k < 256; ++k) a = fmaf(a, 1.0001f, 0.5f);
            v[threadIdx.x & 31] = a;
        }
        __syncthreads();
        a += v[(threadIdx.x + r) & 31];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

int main() {
    int grid = sm_count() * 2;
    float* o;
    CHECK(cudaMalloc(&o, (size_t)grid * 1024 * 4));
    for (int r = 0; r < 2; ++r) barrier_imbalance<<<grid, 1024>>>(o, 64);
    finish("barrier_imbalance");
}
