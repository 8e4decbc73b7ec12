// A plain CUDA-core GEMM for a PTXBench-form definition: run(A, B, C), C = A @ B.T in bf16 with fp32
// accumulation, 16x16 shared-memory tiles. Correct, but it uses neither TMA nor wgmma, which the
// PTXBench architecture check asks for on sm_90a. With -DKP_WRONG it reads B as (K, N), i.e. computes
// A @ B (the transpose mistake), and is wrong.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

constexpr int TILE = 16;

__global__ void gemm_nt_simt(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                             __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  __shared__ float sa[TILE][TILE + 1];
  __shared__ float sb[TILE][TILE + 1];
  const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    const int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    sa[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? __bfloat162float(a[(size_t)row * K + ka]) : 0.f;
#ifdef KP_WRONG
    sb[threadIdx.y][threadIdx.x] = (col < N && kb < K) ? __bfloat162float(b[(size_t)kb * N + col]) : 0.f;
#else
    sb[threadIdx.y][threadIdx.x] = (col < N && kb < K) ? __bfloat162float(b[(size_t)col * K + kb]) : 0.f;
#endif
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) c[(size_t)row * N + col] = __float2bfloat16(acc);
}

void run(TensorView A, TensorView B, TensorView C) {
  TVM_FFI_ICHECK(A.ndim() == 2 && B.ndim() == 2 && C.ndim() == 2) << "run(A, B, C): 2-D tensors expected";
  const int M = static_cast<int>(A.size(0)), K = static_cast<int>(A.size(1)), N = static_cast<int>(B.size(0));
  cudaStream_t stream =
      static_cast<cudaStream_t>(TVMFFIEnvGetStream(A.device().device_type, A.device().device_id));
  dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
  gemm_nt_simt<<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(A.data_ptr()),
                                           static_cast<const __nv_bfloat16*>(B.data_ptr()),
                                           static_cast<__nv_bfloat16*>(C.data_ptr()), M, N, K);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << cudaGetErrorString(e);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
