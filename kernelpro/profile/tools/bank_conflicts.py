"""Shared-memory bank conflicts: wavefronts per shared-memory instruction above the ideal of ~1."""

from __future__ import annotations

from kernelpro.profile.advice import Finding
from kernelpro.profile.tools.registry import Context, tool


@tool("bank_conflicts")
def bank_conflicts(ctx: Context) -> list[Finding]:
    p = ctx.profile
    out = []
    for op, verb in (("ld", "loads"), ("st", "stores")):
        wavefronts = p.value(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum") or 0
        insts = p.value(f"smsp__sass_inst_executed_op_shared_{op}.sum") or 0
        conflicts = p.value(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum") or 0
        if insts < 1e4:
            continue
        ways = wavefronts / insts if insts else 0.0
        # 16-byte accesses legitimately take 4 wavefronts; more than that, or most wavefronts being
        # conflicts, is a layout problem.
        if ways <= 4.0 and conflicts < 0.5 * wavefronts:
            continue
        if ways < 1.5:
            continue
        out.append(Finding(
            "bank_conflicts", p.name, f"shared-memory {verb} are {ways:.1f}-way bank-conflicted",
            "high" if ways >= 8 else "medium",
            {f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum": wavefronts,
             f"smsp__sass_inst_executed_op_shared_{op}.sum": insts,
             f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum": conflicts,
             "wavefronts_per_instruction": round(ways, 2)},
            ["pad the shared array's row by one element (e.g. float tile[32][33]) or XOR-swizzle the column index",
             "or transpose the tile when storing it so the hot loop reads along rows"],
            f"Each warp-wide shared {verb[:-1]} is replayed {ways:.1f} times on average because several lanes hit "
            "the same bank; the shared-memory pipe serializes them."))
    return out
