"""Executed-instruction evidence: which SASS opcodes a candidate's kernels actually ran (ncu's
`sass__inst_executed_per_opcode`, an opcode-instanced metric, warp-level counts).

This is the third leg of `correct_with_arch`: the requested feature's SASS family must be present in the
binary AND executed; static presence never counts. Stricter than PTXBench's own rule (a family executed
anywhere): it must execute in the launches that do the work. The *dominant* launches are the fewest, by
GPU time (ncu's gpu__time_duration; executed instructions where no time was collected), that together
cover DOMINANT_SHARE (80%) of the candidate's profiled GPU time; every requested family must execute in
at least one of them. 80% and not "the single largest": a real pipeline may split the work over two or
three kernels (a TMA producer and an MMA consumer, a GEMM and its epilogue), and each of those is inside
80%; a decoy launch, tiny by construction so that it costs nothing, never is.

The ncu pass is a separate process, and a candidate that tells it apart from the evaluation worker could
launch a large decoy only there. So where the worker's record lists the kernels its timed calls launched,
every dominant kernel of the ncu pass must be one of them (compared by function name, template arguments
and parameters dropped, since the two profilers spell names differently); one that is not fails the leg.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.profile.collect import KernelProfile, Target, candidate_target, run_ncu

OPCODE_METRIC = "sass__inst_executed_per_opcode"

# Feature -> SASS opcode families whose execution proves it, derived from the verifier's catalog so the
# static and executed legs of correct_with_arch share one definition. ncu counts base opcodes only, so
# patterns refined by operands (PRMT 0x654 for `mapa`) cannot be evidence here and are left out.
def sass_families(feature: str, arch: str = "sm_90a") -> tuple[str, ...]:
    from kernelpro.static.features import catalog_arch, load_catalog

    f = load_catalog().feature(catalog_arch(arch), feature)
    return tuple(sorted({p.prefix[0] for p in f.sass if p.operand is None}))


# Arch-family headline sets used by correct_with_arch when a task names no features: Hopper GMMA or TMA,
# Blackwell UTC* or LDTM/STTM.
ARCH_FAMILIES = {"sm_90a": ("HGMMA", "QGMMA", "UTMALDG", "UTMASTG"),
                 "sm_100a": ("UTCHMMA", "UTCQMMA", "UTCMMA", "UTCCP", "LDTM", "STTM")}


DOMINANT_SHARE = 0.8


def _weight(p: KernelProfile, by_time: bool) -> float:
    if by_time:
        return float(p.duration_ns or p.value("gpu__time_duration.sum") or 0.0)
    return float(sum(opcode_counts(p).values()))


def dominant(profiles: list[KernelProfile], share: float = DOMINANT_SHARE) -> list[KernelProfile]:
    """The fewest launches, heaviest first, covering `share` of the total GPU time (or of the executed
    instructions when some launch has no time)."""
    by_time = bool(profiles) and all((p.duration_ns or p.value("gpu__time_duration.sum")) for p in profiles)
    ranked = sorted(profiles, key=lambda p: -_weight(p, by_time))
    total = sum(_weight(p, by_time) for p in ranked)
    out, acc = [], 0.0
    for p in ranked:
        if total > 0 and acc >= share * total:
            break
        out.append(p)
        acc += _weight(p, by_time)
    return out


def opcode_counts(profile: KernelProfile) -> dict[str, float]:
    """Executed warp-level instructions per SASS opcode for one launch ({} when not collected)."""
    return dict(profile.instances.get(OPCODE_METRIC, {}))


def _same_family(op: str, fam: str) -> bool:
    # ncu may report UCGABAR where the disassembly says UCGABAR_ARV, and vice versa; never a bare prefix
    # (LDS must not count LDSM).
    base = op.split(".")[0]
    return base == fam or base.startswith(fam + "_") or fam.startswith(base + "_")


def family_count(counts: dict[str, float], families: tuple[str, ...]) -> float:
    return sum(v for op, v in counts.items() if any(_same_family(op, f) for f in families))


@dataclass
class FeatureEvidence:
    feature: str
    families: tuple[str, ...]
    executed: float                       # total warp-level executions across the profiled launches
    kernels: list[str] = field(default_factory=list)   # kernels that executed the family

    @property
    def ok(self) -> bool:
        return self.executed > 0


def feature_evidence(profiles: list[KernelProfile], features: list[str] | tuple[str, ...],
                     arch: str = "sm_90a") -> dict[str, FeatureEvidence]:
    """Per requested feature: how many times its SASS family executed, and in which kernels."""
    out = {}
    for f in features:
        fam = sass_families(f, arch)
        total, kernels = 0.0, []
        for p in profiles:
            n = family_count(opcode_counts(p), fam)
            if n > 0:
                total += n
                kernels.append(p.name)
        out[f] = FeatureEvidence(f, fam, total, sorted(set(kernels)))
    return out


def executed_ok(profiles: list[KernelProfile], features: list[str] | tuple[str, ...], arch: str = "sm_90a") -> bool:
    """The executed leg of correct_with_arch: every requested feature executed (> 0) in the dominant
    launches (see the module doc); with no feature list, any of the arch's headline families executed
    there. False when no opcode data was collected."""
    if not any(opcode_counts(p) for p in profiles):
        return False
    work = dominant(profiles)
    if features:
        return all(e.ok for e in feature_evidence(work, features, arch).values())
    fam = ARCH_FAMILIES.get(arch, ())
    return any(family_count(opcode_counts(p), fam) > 0 for p in work)


def executed_opcodes(target: Target, export: Path | None = None, timeout: float = 600) -> tuple[list[KernelProfile], dict[str, dict[str, float]]]:
    """Run ncu collecting only the per-opcode executed counts (cheap: one SASS-patching pass).

    Returns (profiles, {kernel name: {opcode: count}}), counts summed over the target's launches.
    """
    with tempfile.TemporaryDirectory() as tmp:
        rep = export or Path(tmp) / "opcodes.ncu-rep"
        profiles, _info = run_ncu(target, rep, metrics=[OPCODE_METRIC, "gpu__time_duration.sum"], sections=[],
                                  timeout=timeout)
    by_kernel: dict[str, dict[str, float]] = {}
    for p in profiles:
        agg = by_kernel.setdefault(p.name, {})
        for op, n in opcode_counts(p).items():
            agg[op] = agg.get(op, 0.0) + n
    return profiles, by_kernel


def kernel_base(name: str) -> str:
    """A kernel's function name without return type, namespace, template arguments or parameters, so
    ncu's and the torch profiler's spellings of one kernel compare equal; mangled names are demangled."""
    from kernelpro.toolchain import demangle

    n = name.strip()
    if n.startswith("_Z"):
        n = demangle([n]).get(n, n)
    n = re.sub(r"^(void|__global__)\s+", "", n)
    depth, cut = 0, len(n)
    for i, ch in enumerate(n):          # the first '<' or '(' at nesting depth zero ends the name
        if ch in "<(" and depth == 0:
            cut = i
            break
    n = n[:cut].strip()
    return n.rsplit("::", 1)[-1].split()[-1] if n else name


def unseen_dominant(profiles: list[KernelProfile], worker_kernels: list[str] | None) -> list[str] | None:
    """Dominant ncu kernels the worker's timed calls never launched; None when the worker's list is absent
    or may have been cut (the record keeps KERNEL_NAMES_KEPT names), so nothing is judged on partial evidence."""
    from kernelpro.results.record import KERNEL_NAMES_KEPT

    if not worker_kernels or len(worker_kernels) >= KERNEL_NAMES_KEPT:
        return None
    seen = {kernel_base(k) for k in worker_kernels}
    return sorted({p.name for p in dominant(profiles) if kernel_base(p.name) not in seen})


def evidence_payload(profiles: list[KernelProfile], features: list[str] | tuple[str, ...], arch: str,
                     worker_kernels: list[str] | None = None) -> dict[str, Any]:
    """What the run store keeps as proof: per-feature counts plus the raw per-kernel opcode table; with
    the worker's kernel names, the dominant kernels it never launched (any fails the leg)."""
    ev = feature_evidence(profiles, features, arch) if features else {}
    work = dominant(profiles)
    unseen = unseen_dominant(profiles, worker_kernels)
    ok = executed_ok(profiles, features, arch) and not unseen
    return {"arch": arch, "executed_ok": ok,
            "unseen_by_worker": unseen,
            "dominant_share": DOMINANT_SHARE, "dominant": [f"{p.launch}:{p.name}" for p in work],
            "features": {f: {"families": list(e.families), "executed": e.executed, "kernels": e.kernels,
                             "in_dominant": sorted({p.name for p in work
                                                    if family_count(opcode_counts(p), e.families) > 0})}
                         for f, e in ev.items()},
            "opcodes": {f"{p.launch}:{p.name}": opcode_counts(p) for p in profiles}}


def candidate_evidence(candidate: Path, task: Any, arch: str, timeout: float = 600,
                       worker_kernels: list[str] | None = None) -> dict[str, Any]:
    """The executed leg for a Python candidate of `task`: one ncu pass over one call of ModelNew at the
    first shown size (execution, not speed, is the question), as `evidence_payload` plus the size.
    Raises when ncu cannot run or the candidate dies under it; callers treat that as unjudged."""
    sizes = task.sizes("shown") or task.sizes("default")
    profiles, _ = executed_opcodes(candidate_target(Path(candidate), task.path, sizes[0], calls=1), timeout=timeout)
    return {"size": sizes[0], **evidence_payload(profiles, list(task.requested_features(arch)), arch,
                                                 worker_kernels)}


def worker_kernels(result: Any) -> list[str] | None:
    """The kernel names the worker's timed calls launched, from its Result record (or its dict)."""
    timing = getattr(result, "timing", None) if not isinstance(result, dict) else result.get("timing")
    names = ((timing or {}).get("observed") or {}).get("kernel_names")
    return list(names) if names else None
