// TVM-FFI binding of KernelPro's Hopper attention backward (hopper_attn_bwd.cu: TMA + wgmma, head dim 128)
// for a PTXBench-form definition: run(Q, K, V, O, dO, L, dQ, dK, dV), (B, H, S, 128) bf16, L (B, H, S)
// fp32 natural-log LSE of QK^T/sqrt(128). Shipped as a solution bundle together with hopper_attn_bwd.cu
// (as hopper_attn_bwd.cuh) (tests/flashinfer_kernels.py); BWD_CAUSAL is set by the bundle's first line.
// PTXBench passes O, not delta = rowsum(dO * O): a small kernel here computes delta first, on the same
// stream. dQ is accumulated in fp32 scratch (zeroed by the launcher), kept between calls and grown as needed.
#include "hopper_attn_bwd.cuh"

#include <math.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

namespace {

// One warp per row of 128: each lane reads 4 elements of O and dO, the warp sums their products.
__global__ void kp_bwd_delta_kernel(const __nv_bfloat16* __restrict__ o, const __nv_bfloat16* __restrict__ d_o,
                                    float* __restrict__ delta, long rows) {
  const long row = static_cast<long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(o + row * 128);
  const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(d_o + row * 128);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = __bfloat1622float2(o2[lane + 32 * i]);
    const float2 b = __bfloat1622float2(g2[lane + 32 * i]);
    s += a.x * b.x + a.y * b.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) delta[row] = s;
}

// Scratch (the fp32 dQ accumulator, then delta) for the largest call so far; freed only at exit.
float* scratch(size_t floats, cudaStream_t stream, const char** err) {
  static float* buf = nullptr;
  static size_t have = 0;
  if (floats > have) {
    if (buf != nullptr) {
      cudaStreamSynchronize(stream);   // the previous, smaller buffer may still be in use on the stream
      cudaFree(buf);
      buf = nullptr;
      have = 0;
    }
    if (cudaMalloc(&buf, floats * sizeof(float)) != cudaSuccess) {
      *err = "cudaMalloc of the dQ scratch failed";
      return nullptr;
    }
    have = floats;
  }
  return buf;
}

bool bf16_bhsd(const TensorView& t, const TensorView& q) {
  return t.ndim() == 4 && t.size(0) == q.size(0) && t.size(1) == q.size(1) && t.size(2) == q.size(2) &&
         t.size(3) == 128 && t.dtype().code == kDLBfloat && t.dtype().bits == 16;
}

}  // namespace

void run(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView dO, TensorView L, TensorView dQ,
         TensorView dK, TensorView dV) {
  TVM_FFI_ICHECK(bf16_bhsd(Q, Q)) << "run(Q, K, V, O, dO, L, dQ, dK, dV): Q must be (B, H, S, 128) bf16";
  for (const TensorView* t : {&K, &V, &O, &dO, &dQ, &dK, &dV})
    TVM_FFI_ICHECK(bf16_bhsd(*t, Q)) << "run(Q, K, V, O, dO, L, dQ, dK, dV): every tensor but L must be "
                                        "(B, H, S, 128) bf16, as Q is";
  TVM_FFI_ICHECK(L.ndim() == 3 && L.dtype().code == kDLFloat && L.dtype().bits == 32)
      << "run(...): L must be (B, H, S) fp32";
  const long bh = static_cast<long>(Q.size(0) * Q.size(1)), seq = static_cast<long>(Q.size(2));
  cudaStream_t stream =
      static_cast<cudaStream_t>(TVMFFIEnvGetStream(Q.device().device_type, Q.device().device_id));
  const char* err = nullptr;
  const long rows = bh * seq;
  float* buf = scratch(static_cast<size_t>(rows) * (128 + 1), stream, &err);
  if (buf == nullptr) TVM_FFI_THROW(RuntimeError) << "hopper attention backward: " << err;
  float* dq_accum = buf;           // first: the kernel's vector reductions need its 16-byte alignment
  float* delta = buf + rows * 128;
  if (rows > 0) {
    kp_bwd_delta_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(O.data_ptr()), static_cast<const __nv_bfloat16*>(dO.data_ptr()), delta,
        rows);
  }
  err = kp_attn_bwd_launch(Q.data_ptr(), K.data_ptr(), V.data_ptr(), dO.data_ptr(),
                           static_cast<const float*>(L.data_ptr()), delta, dQ.data_ptr(), dK.data_ptr(),
                           dV.data_ptr(), dq_accum, static_cast<int>(bh), static_cast<int>(seq), 128,
                           1.0f / sqrtf(128.0f), stream);
  if (err != nullptr) TVM_FFI_THROW(RuntimeError) << "hopper attention backward: " << err;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
