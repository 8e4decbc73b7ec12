"""Write solutions for a whole KernelBench level: each problem's own `Model` as `ModelNew` (a valid,
compile-light honest baseline: correct by construction, speedup ~1x), plus custom `load_inline` CUDA
kernels for the level-1 elementwise problems, so the build stage has real builds to do.

    python3 benchmarks/kernelbench_solutions.py --path KERNELBENCH_CHECKOUT --level 1 --out /tmp/kb-sol
    kernelpro bench kernelbench --path KERNELBENCH_CHECKOUT --level 1 --solutions /tmp/kb-sol
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# level-1 elementwise problems (file stem prefix -> CUDA expression of v); KernelBench's own defaults
ELEMENTWISE = {
    "19_ReLU": "fmaxf(v, 0.f)",
    "21_Sigmoid": "1.f / (1.f + expf(-v))",
    "22_Tanh": "tanhf(v)",
    "25_Swish": "v / (1.f + expf(-v))",
    "30_Softsign": "v / (1.f + fabsf(v))",
    "32_HardTanh": "fminf(fmaxf(v, -1.f), 1.f)",
}

CUSTOM = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
__global__ void kb_op(const float* __restrict__ x, float* __restrict__ y, long n) {{
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {{ float v = x[i]; y[i] = {expr}; }}
}}
torch::Tensor kb_apply(torch::Tensor x) {{
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "kb_apply: fp32 CUDA tensor");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  long n = xc.numel();
  kb_op<<<(unsigned)((n + 255) / 256), 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}}
"""

_ext = load_inline(name="kb_{name}", cpp_sources="torch::Tensor kb_apply(torch::Tensor x);",
                   cuda_sources=_CUDA, functions=["kb_apply"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return _ext.kb_apply(x)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", required=True, help="a KernelBench checkout")
    ap.add_argument("--level", type=int, required=True)
    ap.add_argument("--out", required=True, help="folder to write <problem file name> solutions into")
    ap.add_argument("--no-custom", action="store_true", help="Model-as-ModelNew for every problem")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernelpro.suites.kernelbench import load_kernelbench

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    custom = 0
    tasks = load_kernelbench(args.path, level=args.level)
    for t in tasks:
        stem = t.path.stem
        expr = None if args.no_custom or args.level != 1 else next(
            (e for k, e in ELEMENTWISE.items() if stem.startswith(k)), None)
        if expr is not None:
            src = CUSTOM.format(expr=expr, name="".join(ch if ch.isalnum() else "_" for ch in stem))
            custom += 1
        else:
            src = t.path.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
        (out / f"{stem}.py").write_text(src)
    print(f"wrote {len(tasks)} solutions for level {args.level} into {out} ({custom} custom CUDA kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
