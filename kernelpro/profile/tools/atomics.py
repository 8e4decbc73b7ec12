"""Global reductions that saturate L2: many small RED/ATOM requests, where one bulk reduction per tile would do."""

from __future__ import annotations

from kernelpro.profile.advice import Finding
from kernelpro.profile.executed import family_count, opcode_counts
from kernelpro.profile.roofline import memory_limiter
from kernelpro.profile.tools.registry import Context, tool

GLOBAL_REDUCTIONS = ("REDG", "ATOMG", "RED", "ATOM")   # ncu's base opcodes; ATOMS (shared) is not one
ATOMIC_UNIT = "lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed"
XBAR = "lts__xbar2lts_cycles_active.avg.pct_of_peak_sustained_elapsed"
L2_UNITS = ("the crossbar into L2", "L2's atomic unit", "L2")


@tool("atomics")
def atomics(ctx: Context) -> list[Finding]:
    p = ctx.profile
    n = family_count(opcode_counts(p), GLOBAL_REDUCTIONS)
    lim = memory_limiter(p)
    atomic_busy = p.value(ATOMIC_UNIT) or 0.0
    # Specific: reductions ran, and the unit that sets the memory SOL is in L2, at a level that bounds
    # the kernel (60%, the roofline's SOL bar), or L2's atomic unit itself is a third busy.
    if not n or lim is None or lim[1] not in L2_UNITS or (lim[2] < 60 and atomic_busy < 33):
        return []
    requests = p.value("l1tex__t_requests_pipe_lsu_mem_global_op_red.sum")
    ev = {"executed_global_reductions": n, XBAR: p.value(XBAR), ATOMIC_UNIT: atomic_busy,
          "dram__throughput.avg.pct_of_peak_sustained_elapsed": p.value("dram__throughput.avg.pct_of_peak_sustained_elapsed")}
    if requests is not None:
        ev["l1tex__t_requests_pipe_lsu_mem_global_op_red.sum"] = requests
    ev = {k: v for k, v in ev.items() if v is not None}
    return [Finding(
        "atomics", p.name, f"global reductions saturate {lim[1]} ({lim[2]:.0f}%)",
        "high" if lim[2] >= 70 else "medium", ev,
        ["accumulate each tile's partial result in shared memory and add it with one bulk reduction "
         "(cp.reduce.async.bulk.tensor ... .add.f32, TMA reduce-add from a CUtensorMap): one 128-byte request "
         "per line instead of one per element",
         "vectorise the reductions that remain (red.global.add.v2.f32 / .v4.f32 on sm_90: 2-4x fewer requests)",
         "or write partial results to a buffer and reduce them in a separate pass"],
        f"The kernel executed {n:,.0f} warp-level global reductions (RED/ATOM); they reach L2 as small requests, "
        f"and {lim[1]} is the busiest memory unit at {lim[2]:.0f}% while DRAM stays near idle. The reduction "
        "traffic, not the arithmetic, is what the SMs wait on.")]
