// PLANT (shared-memory bank conflicts): lanes of a warp read a column of a 32x32 float tile, so all 32
// lanes hit the same bank: each shared load is replayed as 32 wavefronts.
#include "common.cuh"

__global__ void bank_conflict_column(const float* __restrict__ in, float* __restrict__ out, int iters) {
    __shared__ float tile[32][32];  // no padding column: the plant
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (int r = ty; r < 32; r += blockDim.x / 32) tile[r][tx] = in[blockIdx.x * 1024 + r * 32 + tx];
    __syncthreads();
    float acc = 0.f;
    for (int it = 0; it < iters; ++it) {
        #pragma unroll 8
        for (int k = 0; k < 32; ++k) acc += tile[tx][(k + it) & 31];  // column read: 32-way conflict
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

int main() {
    const int blocks = 132 * 16, threads = 256;
    float *a, *b;
    CHECK(cudaMalloc(&a, (size_t)blocks * 1024 * 4)); CHECK(cudaMalloc(&b, (size_t)blocks * threads * 4));
    CHECK(cudaMemset(a, 0, (size_t)blocks * 1024 * 4));
    for (int r = 0; r < 2; ++r) bank_conflict_column<<<blocks, threads>>>(a, b, 16);
    finish("bank_conflict_column");
}
