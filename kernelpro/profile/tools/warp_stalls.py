"""Warp-stall reasons: what warps wait on most (long scoreboard, barrier, MIO throttle, ...)."""

from __future__ import annotations

import re

from kernelpro.profile.advice import Finding
from kernelpro.profile.tools.registry import Context, tool

STALL = re.compile(r"^smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active\.ratio$")
ADVICE = {
    "long_scoreboard": ("waiting on global/local memory loads",
                        ["issue loads earlier and keep several independent loads in flight (unroll, prefetch to registers or shared memory)",
                         "on Hopper, move bulk loads to TMA/cp.async so warps do not wait on them"]),
    "barrier": ("waiting at __syncthreads barriers",
                ["balance the work between the warps of a block so they reach the barrier together",
                 "replace block-wide barriers with mbarriers / named barriers, or warp-specialize producers and consumers"]),
    "mio_throttle": ("the shared-memory/special-function queue is full",
                     ["cut shared-memory instructions: wider (16-byte) accesses, fewer bank conflicts, ldmatrix",
                      "mix in independent arithmetic between shared accesses"]),
    "short_scoreboard": ("waiting on shared memory or special-function results",
                         ["remove shared-memory bank conflicts and reuse loaded values from registers",
                          "interleave independent work between a shared load and its use"]),
    "lg_throttle": ("the global-memory instruction queue is full",
                    ["use wider loads (float4) so fewer instructions move the same bytes", "coalesce the accesses"]),
    "math_pipe_throttle": ("an arithmetic pipe is saturated",
                           ["move the dominant math to a faster pipe (tensor cores, FMA instead of separate MUL/ADD)"]),
    "wait": ("fixed-latency dependencies between back-to-back instructions",
             ["expose instruction-level parallelism: several independent accumulators per thread"]),
    "not_selected": ("eligible but another warp was picked (the scheduler is busy: good)", []),
    "membar": ("memory fences", ["remove unneeded __threadfence / fence instructions"]),
    "dispatch_stall": ("dispatch stalls", []),
    "no_instruction": ("instruction-cache misses or branch targets", ["shrink the unrolled code"]),
    "sleeping": ("sleeping warps", []),
    "branch_resolving": ("branch resolution", ["make branches warp-uniform"]),
    "drain": ("draining memory stores at exit", []),
    "imc_miss": ("constant-cache misses", []),
    "tex_throttle": ("texture pipe queue full", []),
}
BENIGN = {"not_selected", "selected", "dispatch_stall", "sleeping", "drain"}


@tool("warp_stalls")
def warp_stalls(ctx: Context) -> list[Finding]:
    p, r = ctx.profile, ctx.roofline
    # A kernel already running a unit at >= 60% of its ceiling stalls because it is bound there; the
    # bound's own tool (bandwidth, tensor cores, bank conflicts, coalescing) says what to do, not the
    # stall breakdown. The units include ncu's SOL throughputs: a shared pipe saturated by bank-conflict
    # replays or by a shared-memory FFMA loop, or an L1 flooded by uncoalesced sectors, shows up there
    # (99%, 92%, 91% on the recorded plants) and not in the roofline's DRAM and FLOP percentages.
    sol = max(p.value("sm__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0,
              p.value("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed") or 0.0)
    if max(r.pct_of_memory_ceiling, r.pct_of_compute_ceiling, sol) >= 60:
        return []
    # Stall cycles are counted per issued instruction of each resident warp. With few resident warps
    # (< 25% of the slots) every warp's latency is exposed by construction: the limiter is the warp
    # count, which the occupancy tool reports with its cause; the breakdown would only restate it.
    warps = p.value("sm__warps_active.avg.pct_of_peak_sustained_active")
    if warps is not None and warps < 25:
        return []
    stalls = {}
    for name, (val, _unit) in p.metrics.items():
        m = STALL.match(name)
        if m and isinstance(val, int | float) and not m.group(1).endswith("not_issued"):
            stalls[m.group(1)] = float(val)
    total = sum(v for k, v in stalls.items() if k != "selected")
    if total <= 0:
        return []
    top = max((k for k in stalls if k not in BENIGN), key=lambda k: stalls[k], default=None)
    if top is None:
        return []
    share = stalls[top] / total
    if share < 0.35 or stalls[top] < 2.0:  # < 2 cycles per issued instruction: not worth a note
        return []
    what, actions = ADVICE.get(top, (top.replace("_", " "), []))
    ranked = sorted(stalls.items(), key=lambda kv: -kv[1])[:4]
    ev = {f"smsp__average_warps_issue_stalled_{k}_per_issue_active.ratio": round(v, 2) for k, v in ranked}
    ev["top_stall_share"] = round(share, 2)
    return [Finding(
        "warp_stalls", p.name, f"warps mostly stall on {top} ({100 * share:.0f}% of stall cycles): {what}",
        "high" if share >= 0.5 else "medium", ev,
        actions or ["reduce the dependency behind this stall"],
        f"Between issued instructions a warp waits {stalls[top]:.1f} cycles on average for '{top}' ({what}), "
        f"{100 * share:.0f}% of all its stall time.")]
