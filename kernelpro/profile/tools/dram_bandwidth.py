"""DRAM / L2 bandwidth use for kernels on the memory side of the ridge."""

from __future__ import annotations

from kernelpro.profile.advice import Finding
from kernelpro.profile.roofline import memory_limiter
from kernelpro.profile.tools.registry import Context, tool


@tool("dram_bandwidth")
def dram_bandwidth(ctx: Context) -> list[Finding]:
    r, p = ctx.roofline, ctx.profile
    if r.side != "memory" or r.dram_bytes < 64e6 or r.pct_of_memory_ceiling >= 60:
        return []
    lim = memory_limiter(p)
    if lim is not None and lim[1] != "DRAM" and lim[2] >= 60:
        return []  # an on-chip unit (L2, its crossbar, L1/shared) is the wall: more DRAM bytes in flight won't help
    # DRAM traffic that is mostly bytes no lane asked for (under half of each fetched sector used) is
    # the coalescing tool's finding: more bytes in flight would move more waste, fewer sectors is the fix.
    used = [p.value(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct") for op in ("ld", "st")]
    sectors = [p.value(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum") or 0 for op in ("ld", "st")]
    if any(u is not None and u < 50 and n >= 1e5 for u, n in zip(used, sectors, strict=True)):
        return []
    l2 = p.value("lts__throughput.avg.pct_of_peak_sustained_elapsed")
    dram_pct = p.value("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    warps = p.value("sm__warps_active.avg.pct_of_peak_sustained_active")
    ev = {"dram_bytes": r.dram_bytes, "achieved_TBps": round(r.tbps, 3), "copy_ceiling_TBps": ctx.ceilings.copy_tbps,
          "dram__throughput.avg.pct_of_peak_sustained_elapsed": dram_pct,
          "lts__throughput.avg.pct_of_peak_sustained_elapsed": l2,
          "sm__warps_active.avg.pct_of_peak_sustained_active": warps}
    ev = {k: v for k, v in ev.items() if v is not None}
    few_in_flight = warps is not None and warps < 40
    return [Finding(
        "dram_bandwidth", p.name,
        f"memory-bound at {r.pct_of_memory_ceiling:.0f}% of copy bandwidth ({r.tbps:.2f} of {ctx.ceilings.copy_tbps} TB/s)",
        "high" if r.pct_of_memory_ceiling < 30 else "medium", ev,
        ["keep more bytes in flight: 16-byte vector loads (float4) and several independent loads per thread per iteration",
         "launch enough warps: at least a full wave of blocks with several warps each" if few_in_flight
         else "fuse with the neighbouring kernel so intermediate data never goes to DRAM"],
        f"The kernel moves {r.dram_bytes / 1e6:.0f} MB at {r.tbps:.2f} TB/s; a plain copy reaches {ctx.ceilings.copy_tbps} TB/s. "
        "Memory-bound kernels are limited by bytes in flight: too few outstanding loads leave DRAM idle.")]
