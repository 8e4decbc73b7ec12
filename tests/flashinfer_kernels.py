"""KernelPro's own TVM-FFI test solutions for the FlashInfer-Trace test definitions, laid out as
PTXBench/FlashInfer-Bench lay them out: `<definition>/kernel.cu`, or a `solution.json` bundle.

Three variants per definition (GEMM gemm_n256_k512, attention forward mha_with_lse_d128_test):
- honest: KernelPro's Hopper references (TMA + wgmma) behind a TVM-FFI `run`, as a solution.json bundle
  holding the binding and the reference .cu it includes;
- wrong: the CUDA-core kernel with its mistake switched on (GEMM reads B transposed, attention writes
  LSE in base 2), as a self-contained kernel.cu;
- simt: the CUDA-core kernel, correct, but without the TMA and wgmma the task asks for.
Also run as `python tests/flashinfer_kernels.py DEST` (the GPU recipe), writing DEST/{honest,wrong,simt}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "flashinfer_trace"
KERNELS = DATA / "kernels"
REFERENCE = ROOT / "kernelpro" / "suites" / "ptxbench" / "reference"
VARIANTS = ("honest", "wrong", "simt")
# definition -> (binding of the Hopper reference, the reference it includes, the CUDA-core kernel)
DEFS = {"gemm_n256_k512": ("gemm_hopper_binding.cu", "hopper_gemm.cu", "gemm_simt.cu"),
        "mha_with_lse_d128_test": ("attn_fwd_hopper_binding.cu", "hopper_attn_fwd.cu", "attn_fwd_simt.cu")}


def write_solutions(dest: Path, variant: str) -> Path:
    """DEST with one solution per test definition, in `variant`'s form; returns DEST."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
    for name, (binding, ref, simt) in DEFS.items():
        d = dest / name
        d.mkdir(parents=True, exist_ok=True)
        if variant == "honest":
            bundle = {"name": f"{name}_kernelpro_hopper", "definition": name, "author": "kernelpro-tests",
                      "spec": {"language": "cuda", "binding": "tvm-ffi", "target_hardware": ["H100"],
                               "entry_point": "kernel.cu::run", "dependencies": [],
                               "destination_passing_style": True},
                      "sources": [{"path": "kernel.cu", "content": (KERNELS / binding).read_text()},
                                  {"path": ref + "h", "content": (REFERENCE / ref).read_text()}]}
            (d / "solution.json").write_text(json.dumps(bundle, indent=1))
        else:
            text = (KERNELS / simt).read_text()
            (d / "kernel.cu").write_text(("#define KP_WRONG 1\n" if variant == "wrong" else "") + text)
    return dest


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for v in VARIANTS:
        write_solutions(out / v, v)
    print(f"wrote {', '.join(VARIANTS)} solutions under {out}")
