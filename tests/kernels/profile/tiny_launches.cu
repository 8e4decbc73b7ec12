// PLANT (launch overhead): 2000 launches of a one-block kernel that scales 256 floats; each launch does
// nanoseconds of work and costs microseconds of launch latency.
#include "common.cuh"

__global__ void tiny_scale(float* __restrict__ x, int n, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

int main() {
    const int n = 256, launches = 2000;
    float* x;
    CHECK(cudaMalloc(&x, n * 4)); CHECK(cudaMemset(x, 0, n * 4));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0)); CHECK(cudaEventCreate(&t1));
    tiny_scale<<<1, 256>>>(x, n, 1.0f);
    CHECK(cudaEventRecord(t0));
    for (int r = 0; r < launches; ++r) tiny_scale<<<1, 256>>>(x, n, 1.0001f);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    printf("launches=%d wall_us=%.1f us_per_launch=%.2f\n", launches, ms * 1e3f, ms * 1e3f / launches);
    finish("tiny_scale");
}
