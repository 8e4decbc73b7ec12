"""Register spills and local memory: local-memory traffic at run time, ptxas's spill report statically."""

from __future__ import annotations

import re
from typing import Any

from kernelpro.profile.advice import Finding
from kernelpro.profile.tools.registry import Context, tool


def parse_ptxas_verbose(text: str) -> dict[str, dict[str, Any]]:
    """`nvcc -Xptxas -v` output -> {mangled kernel: {registers, stack_bytes, spill_stores, spill_loads}}."""
    out: dict[str, dict[str, Any]] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Function properties for (\S+)", line) or re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, {})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[cur].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[cur]["registers"] = int(m.group(1))
    return out


@tool("spills")
def spills(ctx: Context) -> list[Finding]:
    p = ctx.profile
    ld = p.value("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum") or 0
    st = p.value("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum") or 0
    glob = p.sum("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum") or 0
    spill_bytes = (ctx.resources.get("spill_stores") or 0) + (ctx.resources.get("spill_loads") or 0)
    local = ld + st
    if local < 1e4 and not spill_bytes:
        return []
    if local < 0.02 * glob and not spill_bytes:
        return []
    regs = p.value("launch__registers_per_thread")
    ev: dict[str, Any] = {"l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum": ld,
                          "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum": st,
                          "launch__registers_per_thread": regs}
    ev.update({f"ptxas_{k}": v for k, v in ctx.resources.items() if k in ("spill_stores", "spill_loads", "stack_bytes")})
    what = f"ptxas spills {spill_bytes} bytes per thread" if spill_bytes else "the kernel uses local memory (dynamically indexed arrays)"
    return [Finding(
        "spills", p.name, f"register spills / local memory: {local:,.0f} local sectors moved",
        "high" if local > 0.2 * max(glob, 1) else "medium", {k: v for k, v in ev.items() if v is not None},
        ["cut live registers: fewer accumulators per thread, or split the work over more threads; drop a too-tight "
         "__launch_bounds__/-maxrregcount",
         "index per-thread arrays only with compile-time constants (fully unrolled loops) so they stay in registers"],
        f"With {regs or '?'} registers per thread, {what}; every spill is a round trip through L1/L2 that the "
        "warp waits on.")]
