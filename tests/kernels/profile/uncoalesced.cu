// PLANT (coalescing): each lane of a warp reads a float 32 floats (128 B) away from its neighbour, so
// every warp load touches 32 sectors and uses 4 bytes of each 32-byte sector.
#include "common.cuh"

__global__ void uncoalesced_gather(const float* __restrict__ in, float* __restrict__ out, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t lanes = 32;
    size_t j = (i % lanes) * (n / lanes) + i / lanes;  // transpose-like strided read
    out[i] = in[j] * 2.0f;
}

int main() {
    const size_t n = 1ull << 26;
    float *a, *b;
    CHECK(cudaMalloc(&a, n * 4)); CHECK(cudaMalloc(&b, n * 4));
    CHECK(cudaMemset(a, 0, n * 4));
    for (int r = 0; r < 2; ++r) uncoalesced_gather<<<(unsigned)(n / 256), 256>>>(a, b, n);
    finish("uncoalesced_gather");
}
