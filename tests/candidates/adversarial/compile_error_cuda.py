"""expect: compile_error
task: vector_add
device: gpu
CUDA source that nvcc rejects (an undeclared identifier), built with load_inline at import.
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_src = r"""
#include <torch/extension.h>
__global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + undeclared_symbol;
}
torch::Tensor run(torch::Tensor a, torch::Tensor b) { return a; }
"""
ext = load_inline("kp_bad_add", cpp_sources="torch::Tensor run(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=_src, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.run(a, b)
