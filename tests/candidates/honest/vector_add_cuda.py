"""expect: passed
task: vector_add
device: gpu
A CUDA C++ vector add built with load_inline (exercises the content-hash compile cache).
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    long n = a.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    add_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    return c;
}
"""
_ext = load_inline("kp_honest_add", cpp_sources="torch::Tensor add(torch::Tensor a, torch::Tensor b);",
                   cuda_sources=_cuda, functions=["add"], extra_cuda_cflags=["-O3", "-arch=sm_90a"],
                   verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _ext.add(a.contiguous(), b.contiguous())
