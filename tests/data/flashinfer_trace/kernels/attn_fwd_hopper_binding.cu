// TVM-FFI binding of KernelPro's Hopper attention forward (hopper_attn_fwd.cu, TMA + wgmma, head dim 128)
// for a PTXBench-form definition: run(Q, K, V, O, LSE), (B, H, S, 128) bf16 in/out, LSE (B, H, S) fp32
// natural log. Shipped as a solution bundle together with hopper_attn_fwd.cu (as hopper_attn_fwd.cuh) (tests/flashinfer_kernels.py).
#define ATTN_WITH_LSE 1
#include "hopper_attn_fwd.cuh"

#include <math.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

void run(TensorView Q, TensorView K, TensorView V, TensorView O, TensorView LSE) {
  TVM_FFI_ICHECK(Q.ndim() == 4 && Q.size(3) == 128) << "run(Q, K, V, O, LSE): (B, H, S, 128) expected";
  const int bh = static_cast<int>(Q.size(0) * Q.size(1)), seq = static_cast<int>(Q.size(2));
  cudaStream_t stream =
      static_cast<cudaStream_t>(TVMFFIEnvGetStream(Q.device().device_type, Q.device().device_id));
  const char* err = kp_attn_fwd_launch(Q.data_ptr(), K.data_ptr(), V.data_ptr(), O.data_ptr(),
                                       static_cast<float*>(LSE.data_ptr()), bh, seq, 128, 1.0f / sqrtf(128.0f), stream);
  if (err != nullptr) TVM_FFI_THROW(RuntimeError) << "hopper attention: " << err;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
