"""Launch overhead: kernels too short to amortize their launch, or too many small launches per call."""

from __future__ import annotations

from typing import Any

from kernelpro.profile.advice import Finding
from kernelpro.profile.tools.registry import Context, tool


@tool("launch_overhead")
def launch_overhead(ctx: Context) -> list[Finding]:
    p = ctx.profile
    dur_us = (p.duration_ns or 0) / 1e3
    ev: dict[str, Any] = {"gpu__time_duration.sum_us": round(dur_us, 2), "launch__grid_size": p.value("launch__grid_size")}
    sysv = ctx.system
    many = False
    if sysv is not None:
        ev.update({"launches_per_call": sysv.launches_per_call, "gpu_busy_share": round(sysv.gpu_busy_share, 2),
                   "host_syncs_per_call": sysv.syncs_per_call})
        many = sysv.launches_per_call >= 8 and sysv.mean_kernel_us < 20
    if not (0 < dur_us < 8) and not many:
        return []
    text = f"One launch runs {dur_us:.1f} us on the GPU, about what launching it costs (2-5 us)."
    if sysv is not None:
        text += (f" Each call launches {sysv.launches_per_call:.0f} kernels; the GPU is busy "
                 f"{100 * sysv.gpu_busy_share:.0f}% of the call's wall time.")
    return [Finding(
        "launch_overhead", p.name, "latency/launch-bound: too little work per launch", "high" if many or dur_us < 5 else "medium",
        {k: v for k, v in ev.items() if v is not None},
        ["fuse the small launches into one kernel that loops over the pieces (or a persistent kernel)",
         "if launches must stay separate, capture them in a CUDA graph to cut CPU launch cost"],
        text)]
