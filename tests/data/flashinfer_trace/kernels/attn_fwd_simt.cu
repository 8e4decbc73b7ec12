// A plain CUDA-core attention forward with LSE for a PTXBench-form definition: run(Q, K, V, O, LSE),
// (B, H, S, 128) bf16, LSE (B, H, S) fp32 natural log of the scaled scores' sum of exponentials. One warp
// per query row, online softmax over the keys. Correct, but without TMA or wgmma. With -DKP_WRONG it
// writes the LSE in base 2 (a units mistake), and is wrong.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

constexpr int D = 128;

__global__ void attn_fwd_simt(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                              const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ o,
                              float* __restrict__ lse, int S, float scale) {
  const int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const size_t bh = blockIdx.y;
  if (row >= S) return;
  const __nv_bfloat16* qr = q + (bh * S + row) * D;
  float qv[D / 32], acc[D / 32];
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    qv[i] = __bfloat162float(qr[lane + 32 * i]);
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < S; ++j) {
    const __nv_bfloat16* kr = k + (bh * S + j) * D;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) s += qv[i] * __bfloat162float(kr[lane + 32 * i]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    s *= scale;
    const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
    l = l * corr + p;
    const __nv_bfloat16* vr = v + (bh * S + j) * D;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) acc[i] = acc[i] * corr + p * __bfloat162float(vr[lane + 32 * i]);
    m = mn;
  }
  __nv_bfloat16* orow = o + (bh * S + row) * D;
#pragma unroll
  for (int i = 0; i < D / 32; ++i) orow[lane + 32 * i] = __float2bfloat16(acc[i] / l);
#ifdef KP_WRONG
  if (lane == 0) lse[bh * S + row] = (m + logf(l)) * 1.4426950408889634f;
#else
  if (lane == 0) lse[bh * S + row] = m + logf(l);
#endif
}

void run(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView LSE) {
  TVM_FFI_ICHECK(Q.ndim() == 4 && Q.size(3) == D) << "run(Q, K, V, O, LSE): (B, H, S, 128) expected";
  const int bh = static_cast<int>(Q.size(0) * Q.size(1)), S = static_cast<int>(Q.size(2));
  cudaStream_t stream =
      static_cast<cudaStream_t>(TVMFFIEnvGetStream(Q.device().device_type, Q.device().device_id));
  const int rows_per_block = 4;
  dim3 grid((S + rows_per_block - 1) / rows_per_block, bh), block(32 * rows_per_block);
  attn_fwd_simt<<<grid, block, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(Q.data_ptr()), static_cast<const __nv_bfloat16*>(K.data_ptr()),
      static_cast<const __nv_bfloat16*>(V.data_ptr()), static_cast<__nv_bfloat16*>(O.data_ptr()),
      static_cast<float*>(LSE.data_ptr()), S, 1.0f / sqrtf(static_cast<float>(D)));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) TVM_FFI_THROW(RuntimeError) << cudaGetErrorString(e);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
