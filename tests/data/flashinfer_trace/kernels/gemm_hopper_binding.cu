// TVM-FFI binding of KernelPro's Hopper GEMM (hopper_gemm.cu, TMA + wgmma, warp-specialized) for a
// PTXBench-form GEMM definition: run(A, B, C) with C = A @ B.T, A (M, K), B (N, K), C (M, N), bf16.
// Shipped as a FlashInfer-Bench solution bundle together with hopper_gemm.cu (as hopper_gemm.cuh) (tests/flashinfer_kernels.py).
#define KP_B_KMAJOR 1
#include "hopper_gemm.cuh"

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

void run(TensorView A, TensorView B, TensorView C) {
  TVM_FFI_ICHECK(A.ndim() == 2 && B.ndim() == 2 && C.ndim() == 2) << "run(A, B, C): 2-D tensors expected";
  const int M = static_cast<int>(A.size(0)), K = static_cast<int>(A.size(1)), N = static_cast<int>(B.size(0));
  TVM_FFI_ICHECK(B.size(1) == K && C.size(0) == M && C.size(1) == N) << "run(A, B, C): shapes disagree";
  cudaStream_t stream =
      static_cast<cudaStream_t>(TVMFFIEnvGetStream(A.device().device_type, A.device().device_id));
  const int rc = kp_gemm_bf16_launch(A.data_ptr(), B.data_ptr(), C.data_ptr(), M, N, K, stream);
  if (rc != 0) TVM_FFI_THROW(RuntimeError) << "hopper GEMM: " << kp_gemm_bf16_error(rc);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
