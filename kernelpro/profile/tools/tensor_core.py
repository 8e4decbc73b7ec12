"""Tensor-core path: a matrix kernel on FFMA instead of tensor cores, or on HMMA (mma.sync) where Hopper
offers wgmma (HGMMA), or tensor pipes mostly idle in a compute-bound kernel."""

from __future__ import annotations

import re

from kernelpro.profile.advice import Finding
from kernelpro.profile.executed import opcode_counts
from kernelpro.profile.tools.registry import Context, tool

MATRIX_NAME = re.compile(r"gemm|matmul|mma|conv|attn|attention|bmm|linear", re.I)
MATRIX_FEATURES = {"wgmma", "fp8_wgmma", "mma_sync", "tcgen05_mma"}


def _count(ops: dict[str, float], *names: str) -> float:
    return sum(v for op, v in ops.items() if op.split(".")[0] in names)


@tool("tensor_core")
def tensor_core(ctx: Context) -> list[Finding]:
    p = ctx.profile
    ops = opcode_counts(p)
    if not ops:
        return []
    ffma, hfma = _count(ops, "FFMA"), _count(ops, "HFMA2", "HFMA")
    hmma, hgmma = _count(ops, "HMMA", "IMMA", "QMMA"), _count(ops, "HGMMA", "QGMMA", "IGMMA", "BGMMA")
    utc = _count(ops, "UTCHMMA", "UTCQMMA", "UTCIMMA", "UTCMMA")
    total = sum(ops.values()) or 1
    wants_matrix = bool(MATRIX_FEATURES & set(ctx.requested)) or bool(MATRIX_NAME.search(p.name)) and (
        ctx.dtype in (None, "fp16", "bf16", "tf32", "fp8_e4m3"))
    ev = {"FFMA": ffma, "HFMA2": hfma, "HMMA": hmma, "HGMMA": hgmma, "instructions": total}
    if utc:
        ev["UTC*MMA"] = utc
    if not wants_matrix:
        return []
    if hmma + hgmma + utc == 0 and (ffma + hfma) > 0.1 * total:
        return [Finding(
            "tensor_core", p.name, "matrix kernel not using tensor cores: the product runs on FFMA", "high", ev,
            ["rewrite the inner product with warpgroup MMA (wgmma.mma_async, bf16 in / fp32 accumulate) on tiles "
             "staged in shared memory" if ctx.arch == "sm_90a" else "use the tensor-core MMA for this arch (tcgen05.mma on sm_100a)",
             "keep the fp32 accumulator in registers; convert inputs only when loading tiles"],
            f"{ffma + hfma:,.0f} FMA instructions ({100 * (ffma + hfma) / total:.0f}% of all) and no MMA instructions: "
            f"the kernel is capped near the fp32 ceiling ({ctx.ceilings.fp32_tflops:.0f} TFLOP/s) instead of the tensor "
            f"cores' ~{ctx.ceilings.bf16_tensor_tflops:.0f}.")]
    if ctx.arch == "sm_90a" and hmma > 0 and hgmma == 0:
        return [Finding(
            "tensor_core", p.name, "tensor cores used through mma.sync (HMMA), not wgmma (HGMMA)", "high" if "wgmma" in ctx.requested else "medium",
            ev, ["move to warpgroup MMA: wgmma.mma_async with operands described in shared memory, 4 warps per MMA",
                 "feed it with TMA (cp.async.bulk.tensor) and an mbarrier pipeline"],
            "On Hopper, HMMA reaches roughly half of the tensor-core peak; full rate needs HGMMA (wgmma).")]
    for name in ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                 "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"):
        util = p.value(name)
        if util is not None and (hgmma or hmma) and util < 30 and ctx.roofline.klass == "compute-bound":
            ev[name] = util
            return [Finding(
                "tensor_core", p.name, f"tensor pipe busy only {util:.0f}% of the time", "medium", ev,
                ["overlap loads with MMAs: multi-stage shared-memory pipeline (TMA + mbarriers), producer/consumer warpgroups",
                 "grow the tile (more MMAs per loaded byte)"],
                "The kernel uses tensor cores but they mostly wait for operands.")]
    return []
