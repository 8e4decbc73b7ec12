"""Hardware peaks, in one place, each named for where it comes from.

Two kinds of figure serve two purposes and must not be mixed up:
- `DATASHEET`: the vendor's dense peaks. The harness's speed-of-light check uses these, because a floor
  must never flag an honest kernel: only a time below what the datasheet allows is impossible. fp32 uses
  the TF32 tensor-core rate, since 3xTF32 emulation gives fp32-accurate results that fast.
- `MEASURED`: what this project measured on the H200 (docs/measurements: cuBLAS bf16 GEMM ~780 TFLOP/s,
  device copy 4.2 TB/s read + write, plain FFMA ~60 TFLOP/s). The profiler's roofline uses these, since
  advice is about the ceiling a kernel can actually reach.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    name: str
    source: str                      # "datasheet" or "measured"
    tensor_flops: dict[str, float]   # dense tensor-core FLOP/s by dtype
    fp32_flops: float                # plain FFMA FLOP/s
    bandwidth: float                 # DRAM bytes/s
    sms: int

    def flops_for(self, dtype: str) -> float:
        """The peak for a task's dtype (bf16's when the dtype is not listed)."""
        return self.tensor_flops.get(dtype, self.tensor_flops["bf16"])


H200_DATASHEET = Peaks(
    name="H200 SXM (datasheet)", source="datasheet",
    tensor_flops={"bf16": 990e12, "fp16": 990e12, "fp8_e4m3": 1979e12, "tf32": 495e12, "fp32": 495e12},
    fp32_flops=67e12, bandwidth=4.8e12, sms=132)

H200_MEASURED = Peaks(
    name="H200 (measured)", source="measured",
    tensor_flops={"bf16": 780e12, "fp16": 780e12, "fp8_e4m3": 1271e12, "tf32": 390e12, "fp32": 390e12},
    fp32_flops=60e12, bandwidth=4.2e12, sms=132)

DATASHEET = H200_DATASHEET
MEASURED = H200_MEASURED
