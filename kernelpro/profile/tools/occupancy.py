"""Occupancy limiters: what caps resident warps (registers, shared memory, block size, grid size)."""

from __future__ import annotations

from kernelpro.profile.advice import Finding
from kernelpro.profile.executed import family_count, opcode_counts
from kernelpro.profile.roofline import tensor_instructions
from kernelpro.profile.tools.registry import Context, tool

LIMITS = {
    "launch__occupancy_limit_registers": ("registers", "use fewer registers per thread (__launch_bounds__, fewer live values)"),
    "launch__occupancy_limit_shared_mem": ("shared memory", "use less shared memory per block (smaller tiles, fewer stages) or more threads per block to share it"),
    "launch__occupancy_limit_warps": ("block size", "use blocks whose warp count divides the SM's 64 warp slots"),
    "launch__occupancy_limit_blocks": ("blocks per SM", "use larger blocks: the SM holds at most 32 blocks"),
}


@tool("occupancy")
def occupancy(ctx: Context) -> list[Finding]:
    p = ctx.profile
    theo = p.value("sm__maximum_warps_per_active_cycle_pct")
    achieved = p.value("sm__warps_active.avg.pct_of_peak_sustained_active")
    waves = p.value("launch__waves_per_multiprocessor")
    limits = {k: p.value(k) for k in LIMITS if p.value(k) is not None}
    ev = {"sm__maximum_warps_per_active_cycle_pct": theo, "sm__warps_active.avg.pct_of_peak_sustained_active": achieved,
          "launch__waves_per_multiprocessor": waves, **limits,
          "launch__registers_per_thread": p.value("launch__registers_per_thread"),
          "launch__block_size": p.value("launch__block_size"), "launch__grid_size": p.value("launch__grid_size")}
    ev = {k: v for k, v in ev.items() if v is not None}
    # A warp-specialised MMA kernel (setmaxnreg moves registers from its producer to its consumer warps)
    # is one CTA per SM on purpose: its registers hold the accumulators and its shared memory the tile
    # ring, as in FlashAttention-3 and CUTLASS's ping-pong GEMMs. Fewer registers there means spills.
    specialised = tensor_instructions(p) > 0 and family_count(opcode_counts(p), ("USETMAXREG",)) > 0
    if theo is not None and theo < 50 and limits and not specialised:
        key = min(limits, key=lambda k: limits[k])
        what, action = LIMITS[key]
        return [Finding(
            "occupancy", p.name, f"theoretical occupancy {theo:.0f}%, limited by {what}", "high" if theo <= 25 else "medium",
            ev, [action, "or raise work per warp (more independent loads/FMAs in flight) if occupancy cannot grow"],
            f"Only {limits[key]:.0f} block(s) fit per SM because of {what}, so at most {theo:.0f}% of the warp slots "
            "are filled and there are few warps to switch to while others wait on memory.")]
    grid = p.value("launch__grid_size") or 0
    # One block per SM that issues tensor-core MMAs is the persistent shape of a Hopper GEMM or attention
    # kernel: wgmma is asynchronous and one warpgroup keeps an SM's tensor cores fed, so the empty block
    # slots are by design, not a grid too small. A grid short of the SM count still leaves SMs idle.
    persistent_mma = grid >= ctx.ceilings.sms and tensor_instructions(p) > 0
    if waves is not None and waves < 0.9 and (p.duration_ns or 0) > 5e3 and not persistent_mma:
        return [Finding(
            "occupancy", p.name, f"grid too small: {grid:.0f} blocks fill {waves:.2f} of one wave", "high" if waves < 0.5 else "medium",
            ev, ["launch more blocks (at least one full wave: SMs x blocks-per-SM), e.g. shrink the work per block",
                 "or split the reduction/loop dimension across blocks"],
            f"The GPU can hold {grid / waves:.0f} blocks at once but gets {grid:.0f}: "
            f"{100 * (1 - waves):.0f}% of the block slots stay empty for the whole kernel.")]
    if theo and achieved is not None and achieved < 0.5 * theo and waves is not None and waves >= 1:
        return [Finding(
            "occupancy", p.name, f"achieved occupancy {achieved:.0f}% of a possible {theo:.0f}%", "low", ev,
            ["look for load imbalance between blocks and warps (early-exiting warps, uneven loops)"],
            "Resident warps fall well short of what resources allow: warps or blocks finish unevenly.")]
    return []
