// PLANT (register spills): 96 live accumulators per thread, compiled with -maxrregcount=32, so ptxas
// spills them to local memory and every iteration reloads them.
// nvcc-flags: -maxrregcount=32
#include "common.cuh"

#define NACC 96
__global__ void spill_heavy(const float* __restrict__ in, float* __restrict__ out, int iters) {
    float acc[NACC];
    #pragma unroll
    for (int k = 0; k < NACC; ++k) acc[k] = in[(threadIdx.x + k) & 1023];
    for (int it = 0; it < iters; ++it) {
        float x = in[(blockIdx.x * 7 + it) & 1023];
        #pragma unroll
        for (int k = 0; k < NACC; ++k) acc[k] = fmaf(acc[k], x, acc[(k + 1) % NACC]);
    }
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < NACC; ++k) s += acc[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

int main() {
    const int blocks = 132 * 8, threads = 256;
    float *a, *b;
    CHECK(cudaMalloc(&a, 1024 * 4)); CHECK(cudaMalloc(&b, (size_t)blocks * threads * 4));
    CHECK(cudaMemset(a, 0, 1024 * 4));
    for (int r = 0; r < 2; ++r) spill_heavy<<<blocks, threads>>>(a, b, 64);
    finish("spill_heavy");
}
