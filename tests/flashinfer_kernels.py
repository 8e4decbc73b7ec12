"""KernelPro's own TVM-FFI test solutions for the FlashInfer-Trace test definitions, laid out as
PTXBench/FlashInfer-Bench lay them out: `<definition>/kernel.cu`, or a `solution.json` bundle.

Three variants per definition (GEMM gemm_n256_k512, attention forward mha_with_lse_d128_test; the
attention backward mha_bwd_d128_test has the honest one only):
- honest: KernelPro's Hopper references (TMA + wgmma) behind a TVM-FFI `run`, as a solution.json bundle
  holding the binding and the reference .cu it includes;
- wrong: the CUDA-core kernel with its mistake switched on (GEMM reads B transposed, attention writes
  LSE in base 2), as a self-contained kernel.cu;
- simt: the CUDA-core kernel, correct, but without the TMA and wgmma the task asks for.
Also run as `python tests/flashinfer_kernels.py DEST` (the GPU recipe), writing DEST/{honest,wrong,simt}.
`honest_bundle` makes the same bundle for any definition of the three kinds (PTXBench's headline ones).
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
# kind -> (binding of the Hopper reference, the reference it includes, its causal macro)
KINDS = {"gemm": ("gemm_hopper_binding.cu", "hopper_gemm.cu", None),
         "attn_fwd": ("attn_fwd_hopper_binding.cu", "hopper_attn_fwd.cu", "ATTN_CAUSAL"),
         "attn_bwd": ("attn_bwd_hopper_binding.cu", "hopper_attn_bwd.cu", "BWD_CAUSAL")}
# test definition -> (kind, the CUDA-core kernel of the wrong and simt variants, or None: honest only)
DEFS = {"gemm_n256_k512": ("gemm", "gemm_simt.cu"),
        "mha_with_lse_d128_test": ("attn_fwd", "attn_fwd_simt.cu"),
        "mha_bwd_d128_test": ("attn_bwd", None)}


def honest_bundle(definition: str, kind: str, causal: bool = False) -> dict:
    """The solution.json bundle of KernelPro's Hopper reference of `kind` for `definition`."""
    binding, ref, macro = KINDS[kind]
    if causal and macro is None:
        raise ValueError(f"{kind} has no causal form")
    head = f"#define {macro} 1\n" if causal else ""
    return {"name": f"{definition}_kernelpro_hopper", "definition": definition, "author": "kernelpro-tests",
            "spec": {"language": "cuda", "binding": "tvm-ffi", "target_hardware": ["H100"],
                     "entry_point": "kernel.cu::run", "dependencies": [], "destination_passing_style": True},
            "sources": [{"path": "kernel.cu", "content": head + (KERNELS / binding).read_text()},
                        {"path": ref + "h", "content": (REFERENCE / ref).read_text()}]}


def write_solutions(dest: Path, variant: str) -> Path:
    """DEST with one solution per test definition, in `variant`'s form; returns DEST."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
    for name, (kind, simt) in DEFS.items():
        if variant != "honest" and simt is None:
            continue
        d = dest / name
        d.mkdir(parents=True, exist_ok=True)
        if variant == "honest":
            (d / "solution.json").write_text(json.dumps(honest_bundle(name, kind), indent=1))
        else:
            text = (KERNELS / simt).read_text()
            (d / "kernel.cu").write_text(("#define KP_WRONG 1\n" if variant == "wrong" else "") + text)
    return dest


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for v in VARIANTS:
        write_solutions(out / v, v)
    print(f"wrote {', '.join(VARIANTS)} solutions under {out}")
