"""Missing TMA / async copies: the task asks for them, and the executed SASS shows none."""

from __future__ import annotations

from kernelpro.profile.advice import Finding
from kernelpro.profile.executed import family_count, opcode_counts, sass_families
from kernelpro.profile.tools.registry import Context, tool

COPY_FEATURES = ("tma", "bulk_copy", "cp_async")
ACTIONS = {
    "tma": ["build a CUtensorMap on the host (cuTensorMapEncodeTiled) and load tiles with cp.async.bulk.tensor into "
            "shared memory, completing on an mbarrier",
            "issue the copies from one elected thread of a producer warp; consumers wait on the mbarrier phase"],
    "bulk_copy": ["copy contiguous tiles with cp.async.bulk.shared::cluster.global + mbarrier complete_tx"],
    "cp_async": ["stage tiles with cp.async.cg.shared.global (16-byte) and cp.async.wait_group, double-buffered"],
}


@tool("tma")
def tma(ctx: Context) -> list[Finding]:
    p = ctx.profile
    ops = opcode_counts(p)
    wanted = [f for f in COPY_FEATURES if f in ctx.requested]
    if not wanted or not ops:
        return []
    out = []
    ldg = sum(v for op, v in ops.items() if op.split(".")[0] in ("LDG", "LD"))
    for f in wanted:
        fam = sass_families(f, ctx.arch)
        n = family_count(ops, fam)
        if n > 0:
            continue
        if not ctx.dominant and family_count(ctx.executed, fam) > 0:
            continue  # a minor helper launch (a conversion, an epilogue) of a candidate that does use it
        out.append(Finding(
            "tma", p.name, f"task requests {f} but the kernel executed no {'/'.join(fam[:2])} instruction", "high",
            {f"executed_{fam[0]}": n, "executed_LDG": ldg},
            ACTIONS[f],
            f"The task's {ctx.arch} feature list includes '{f}'. Nsight Compute counted {ldg:,.0f} ordinary global "
            f"loads (LDG) and zero {fam[0]}: operands are moved by the threads themselves, so this candidate fails the "
            "feature check and keeps registers and issue slots busy with copies."))
    return out
