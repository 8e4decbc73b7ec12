# Corpus: a KernelBench-style candidate that reads its CUDA from a sibling file (relative path).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

with open("sibling_kernel.cu") as f:
    cuda_src = f.read()

ext = load_inline(
    name="scale_sibling",
    cpp_sources="torch::Tensor scale(torch::Tensor x);",
    cuda_sources=cuda_src,
    functions=["scale"],
    extra_cuda_cflags=["-O3", "-gencode", "arch=compute_80,code=sm_80", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scale(x)
