"""Tail effect: a last partial wave of blocks leaves most SMs idle for its duration."""

from __future__ import annotations

import math

from kernelpro.profile.advice import Finding
from kernelpro.profile.tools.registry import Context, tool


@tool("tail_effect")
def tail_effect(ctx: Context) -> list[Finding]:
    p = ctx.profile
    waves = p.value("launch__waves_per_multiprocessor")
    if waves is None or waves < 1.0 or waves > 8 or (p.duration_ns or 0) < 20e3:
        return []
    full = math.ceil(waves - 1e-9)
    idle = (full - waves) / full  # share of SM-block slots left empty over the kernel's waves
    if idle < 0.2:
        return []
    grid = p.value("launch__grid_size") or 0
    per_wave = grid / waves if waves else 0
    return [Finding(
        "tail_effect", p.name, f"tail effect: {waves:.2f} waves, the last one {100 * (waves - math.floor(waves)):.0f}% full",
        "high" if idle >= 0.35 else "medium",
        {"launch__waves_per_multiprocessor": waves, "launch__grid_size": grid, "blocks_per_wave": round(per_wave),
         "idle_slot_share": round(idle, 2)},
        [f"size the grid to a whole number of waves ({round(per_wave)} blocks per wave): smaller or larger tiles",
         "or use a persistent kernel (one block per slot) that loops over tiles"],
        f"{grid:.0f} blocks run in {full} waves of {per_wave:.0f}; the last wave keeps only part of the GPU busy, "
        f"so about {100 * idle:.0f}% of the block slots idle while it runs.")]
