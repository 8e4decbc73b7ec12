// PLANT (tensor-core path): a bf16 GEMM (fp32 accumulate) written as a shared-memory tiled FFMA loop.
// The task asks for wgmma; the kernel never touches the tensor cores.
#include "common.cuh"
#include <cuda_bf16.h>

#define T 32
__global__ void ffma_gemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                               float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[T][T + 1], Bs[T][T + 1];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
        As[threadIdx.y][threadIdx.x] = __bfloat162float(A[(size_t)row * K + k0 + threadIdx.x]);
        Bs[threadIdx.y][threadIdx.x] = __bfloat162float(B[(size_t)(k0 + threadIdx.y) * N + col]);
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < T; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    C[(size_t)row * N + col] = acc;
}

int main() {
    const int M = 2048, N = 2048, K = 2048;
    __nv_bfloat16 *A, *B; float* C;
    CHECK(cudaMalloc(&A, (size_t)M * K * 2)); CHECK(cudaMalloc(&B, (size_t)K * N * 2));
    CHECK(cudaMalloc(&C, (size_t)M * N * 4));
    CHECK(cudaMemset(A, 0, (size_t)M * K * 2)); CHECK(cudaMemset(B, 0, (size_t)K * N * 2));
    dim3 grid(N / T, M / T), block(T, T);
    for (int r = 0; r < 2; ++r) ffma_gemm_bf16<<<grid, block>>>(A, B, C, M, N, K);
    finish("ffma_gemm_bf16");
}
