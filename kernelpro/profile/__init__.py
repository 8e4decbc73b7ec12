"""`kernelpro profile`: Nsight Compute metrics -> roofline class -> expert tools -> advice.

Python API for the agent:

    from kernelpro.profile import profile_candidate
    result = profile_candidate("cand.py", task, size="default", mode="advice")
    prompt_text = result.text            # or format_for_prompt(result.findings, "raw", result.raw_metrics)

Offline (recorded profiles): `analyze(profiles, ...)` runs stages one and two without a GPU.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError
from kernelpro.profile.advice import MODES, Finding, format_for_prompt, sort_findings

__all__ = ["Analysis", "ProfileResult", "analyze", "profile_candidate", "format_for_prompt", "add_arguments", "main"]

# Core metrics shown in raw mode for every kernel, with or without findings.
RAW_CORE = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
            "dram__bytes_write.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
            "launch__registers_per_thread", "launch__waves_per_multiprocessor")


@dataclass
class Analysis:
    rooflines: list[Any]
    findings: list[Finding]
    raw_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)

    def text(self, mode: str = "advice") -> str:
        return format_for_prompt(self.findings, mode, self.raw_metrics)


def analyze(profiles: list[Any], *, ceilings: Any = None, arch: str = "sm_90a", dtype: str | None = None,
            requested: tuple[str, ...] | list[str] = (), system: Any = None,
            resources: dict[str, dict[str, Any]] | None = None, task_flops: float | None = None) -> Analysis:
    """Stage one (roofline) and stage two (the tools it selects) over profiled launches.

    resources: ptxas/static-verifier report keyed by kernel (mangled or plain name).
    task_flops: FLOPs of everything profiled (the task's per-call FLOPs x calls); split by duration over
    the launches that executed tensor-core MMAs (over all launches when none did), used only where ncu's FP
    counters show less (tensor-core work). A matmul task's FLOPs are its MMAs: an elementwise helper launch
    (a dQ conversion, an epilogue) does none of them and must not be credited with them.
    """
    from kernelpro.profile.executed import dominant, opcode_counts
    from kernelpro.profile.roofline import H200, classify, tensor_instructions
    from kernelpro.profile.tools.registry import Context, load_all

    tools = load_all()
    ceilings = ceilings or H200
    ran_mma = [tensor_instructions(p) > 0 for p in profiles]
    credited = ran_mma if any(ran_mma) else [True] * len(profiles)
    total_ns = sum(p.duration_ns or 0 for p, c in zip(profiles, credited, strict=True) if c) or 1
    # What the candidate as a whole executed: a compliance tool judges the candidate, not each launch.
    executed: dict[str, float] = {}
    for p in profiles:
        for op, n in opcode_counts(p).items():
            executed[op] = executed.get(op, 0.0) + n
    heavy = {id(p) for p in dominant(profiles)}
    rooflines, findings, raw = [], [], {}
    for p, c in zip(profiles, credited, strict=True):
        share = (task_flops or 0) * (p.duration_ns or 0) / total_ns if c else 0.0
        r = classify(p, ceilings, share or None)
        rooflines.append(r)
        res = {}
        for k, v in (resources or {}).items():
            if k == p.name or p.name in k:
                res = v
        ctx = Context(p, r, ceilings, arch, dtype, tuple(requested), system, res, executed, id(p) in heavy)
        for name in r.tools:
            findings += tools[name](ctx)
        if p.name in raw:  # repeated launches of one kernel: the first stands for them
            continue
        label = p.name
        raw[label] = {k: p.value(k) for k in RAW_CORE if p.value(k) is not None}
        raw[label].update({"roofline_class": r.klass, "achieved_TFLOPs": round(r.tflops, 2),
                           "achieved_TBps": round(r.tbps, 3)})
    return Analysis(rooflines, _dedupe(findings), raw)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """Launches of the same kernel give the same diagnosis; keep the first (most severe) of each."""
    seen, out = set(), []
    for f in sort_findings(findings):
        key = (f.tool, f.kernel, f.title.split(":")[0])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


@dataclass
class ProfileResult:
    profiles: list[Any]
    analysis: Analysis
    system: Any = None
    mode: str = "advice"
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def findings(self) -> list[Finding]:
        return self.analysis.findings

    @property
    def raw_metrics(self) -> dict[str, dict[str, Any]]:
        return self.analysis.raw_metrics

    @property
    def text(self) -> str:
        return self.analysis.text(self.mode)


def profile_candidate(candidate: str | Path, task: Any, size: str | dict[str, Any] = "default", mode: str = "advice",
                      arch: str | None = None, calls: int = 3, timeout: float = 600, system: bool = True,
                      export: Path | None = None, max_kernels: int = 64) -> ProfileResult:
    """Profile a Python candidate (ModelNew) for `task` on the local GPU and return its advice."""
    from kernelpro.profile.collect import candidate_target, run_ncu
    from kernelpro.profile.system import system_view
    from kernelpro.toolchain import gpus, no_gpu_reason

    if mode not in MODES:
        raise KernelProError(f"--mode must be one of {', '.join(MODES)}")
    reason = no_gpu_reason()
    if reason:
        raise KernelProError(f"profiling needs a GPU: {reason}")
    candidate = Path(candidate)
    if candidate.suffix != ".py" or not candidate.is_file():
        raise KernelProError(f"{candidate}: give a Python candidate file defining ModelNew (or a .cu driver with main())")
    sz = size if isinstance(size, dict) else _size(task, size)
    arch = arch or gpus()[0].arch
    with tempfile.TemporaryDirectory() as tmp:
        rep = export or Path(tmp) / "profile.ncu-rep"
        profiles, info = run_ncu(candidate_target(candidate, task.path, sz, calls, max_kernels), rep, timeout=timeout)
    sysv = system_view(candidate, task.path, sz, calls=max(calls, 3), timeout=timeout) if system else None
    flops, _ = task.work(sz)
    analysis = analyze(profiles, arch=arch, dtype=task.dtype, requested=task.requested_features(arch), system=sysv,
                       task_flops=flops * calls if flops else None)
    return ProfileResult(profiles, analysis, sysv, mode, info)


def profile_binary(source: Path, arch: str = "sm_90a", mode: str = "advice", timeout: float = 600,
                   requested: tuple[str, ...] = (), dtype: str | None = None, launch_count: int = 1,
                   export: Path | None = None) -> ProfileResult:
    """Profile a standalone .cu driver (main() launches its kernel twice; the first launch is skipped)."""
    from kernelpro.profile.collect import Target, build_cu, run_ncu
    from kernelpro.profile.tools.spills import parse_ptxas_verbose

    with tempfile.TemporaryDirectory() as tmp:
        exe, ptxas_log = build_cu(source, Path(tmp), arch)
        rep = export or Path(tmp) / "profile.ncu-rep"
        profiles, info = run_ncu(Target([str(exe)], launch_skip=1, launch_count=launch_count), rep, timeout=timeout)
    resources = parse_ptxas_verbose(ptxas_log)
    info["ptxas"] = resources
    analysis = analyze(profiles, arch=arch, dtype=dtype, requested=requested, resources=resources)
    return ProfileResult(profiles, analysis, None, mode, info)


def _size(task: Any, which: str) -> dict[str, Any]:
    if which == "default":
        return task.sizes("default")[0]
    if which.startswith(("shown", "heldout")):
        kind, _, idx = which.partition(":")
        sizes = task.sizes(kind)
        i = int(idx or 0)
        if i >= len(sizes):
            raise KernelProError(f"task {task.key} has {len(sizes)} {kind} size(s); use {kind}:0..{len(sizes) - 1}")
        return sizes[i]
    try:
        return {**task.default_size, **json.loads(which)}
    except json.JSONDecodeError:
        raise KernelProError("--size takes default, shown[:i], heldout[:i] or a JSON dict of size globals") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("candidate", help="candidate .py (ModelNew) or a standalone .cu driver with main()")
    p.add_argument("--task", help="task file, suite/name, or ptxbench name (required for .py candidates)")
    p.add_argument("--size", default="default", help="default | shown[:i] | heldout[:i] | JSON dict (default: default)")
    p.add_argument("--mode", default="advice", choices=MODES, help="advice (diagnoses), raw (metrics), none")
    p.add_argument("--json", action="store_true", help="print the profiles, roofline and findings as JSON")
    p.add_argument("--arch", help="target arch (default: the GPU's, e.g. sm_90a)")
    p.add_argument("--calls", type=int, default=3, help="ModelNew calls profiled (default 3)")
    p.add_argument("--timeout", type=float, default=600, help="seconds before ncu is stopped (default 600)")
    p.add_argument("--max-kernels", type=int, default=64, help="most kernel launches profiled (default 64)")
    p.add_argument("--no-system", action="store_true", help="skip the PyTorch-profiler pass")


def main(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from kernelpro.results.store import Store
    from kernelpro.suites.task import find_task

    cand = Path(args.candidate)
    if not cand.is_file():
        raise KernelProError(f"{cand}: no such candidate file")
    task = None
    if cand.suffix == ".cu":
        requested: tuple[str, ...] = ()
        if args.task:
            task = find_task(args.task)
            requested = task.requested_features(args.arch or "sm_90a")
        result = profile_binary(cand, arch=args.arch or "sm_90a", mode=args.mode, timeout=args.timeout,
                                requested=requested, dtype=task.dtype if task else None)
    else:
        if not args.task:
            raise KernelProError("a .py candidate needs --task (file path, suite/name or ptxbench task name)")
        task = find_task(args.task)
        result = profile_candidate(cand, task, args.size, args.mode, args.arch, args.calls, args.timeout,
                                   system=not args.no_system, max_kernels=args.max_kernels)
    store = Store(args.db) if args.db else Store()
    run_id = store.new_run("profile", task.suite if task else None,
                           {"candidate": str(cand), "task": task.key if task else None, "size": args.size,
                            "mode": args.mode, "arch": args.arch})
    cid = store.add_candidate(run_id, task.key if task else cand.stem, cand.read_text(errors="replace"),
                              kind=cand.suffix.lstrip("."), origin="user")
    for p, r in zip(result.profiles, result.analysis.rooflines, strict=True):
        mine = [f.to_dict() for f in result.findings if f.kernel == p.name]
        store.record("profiles", cid, True, {"profile": p.to_dict(), "roofline": asdict(r), "findings": mine,
                                             "system": result.system.to_dict() if result.system else None},
                     arch=args.arch)
    store.set_run_status(run_id, "done")
    if args.json:
        print(json.dumps({"run_id": run_id, "candidate_id": cid, "rooflines": [asdict(r) for r in result.analysis.rooflines],
                          "findings": [f.to_dict() for f in result.findings],
                          "system": result.system.to_dict() if result.system else None,
                          "dropped_metrics": result.info.get("dropped", [])}, indent=1, default=str))
    else:
        for r in result.analysis.rooflines:
            print(f"{r.kernel}: {r.klass}{' (near ceiling)' if r.near_ceiling else ''}; {r.reasons[0]}")
        text = result.text
        if text:
            print(text)
    return 0
