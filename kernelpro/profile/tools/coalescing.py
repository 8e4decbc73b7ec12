"""Global-memory coalescing: how many of the bytes in each fetched 32-byte sector a warp actually used."""

from __future__ import annotations

from kernelpro.profile.advice import Finding
from kernelpro.profile.tools.registry import Context, tool


@tool("coalescing")
def coalescing(ctx: Context) -> list[Finding]:
    p = ctx.profile
    out = []
    for op, verb in (("ld", "loads"), ("st", "stores")):
        sectors = p.value(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum") or 0
        requests = p.value(f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum") or 0
        used_pct = p.value(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct")
        if sectors < 1e5:  # too little global traffic to matter
            continue
        per_req = sectors / requests if requests else 0.0
        # The exact measure (bytes used per sector) when ncu gave it; else sectors/request, where 16 is
        # the most a fully coalesced warp needs (16-byte vector loads).
        bad = used_pct < 50 if used_pct is not None else per_req > 16
        if not bad:
            continue
        ev = {f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum": sectors,
              f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum": requests, "sectors_per_request": round(per_req, 1)}
        if used_pct is not None:
            ev[f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct"] = used_pct
        used = f"{used_pct:.0f}% of each 32-byte sector" if used_pct is not None else f"{per_req:.1f} sectors per warp request"
        out.append(Finding(
            "coalescing", p.name, f"uncoalesced global {verb}: {used} used", "high" if (used_pct or 100) < 25 or per_req > 24 else "medium",
            ev,
            ["make consecutive lanes touch consecutive addresses (index with threadIdx.x in the fastest-moving dimension)",
             "if the access is a transpose, stage the tile through shared memory (padded) and read it back coalesced"],
            f"Each warp-wide {verb[:-1]} touches {per_req:.1f} sectors; only {used} carries data the kernel uses, "
            "so most DRAM/L2 bandwidth moves bytes that are thrown away."))
    return out
