"""`kernelpro bench`: evaluate a suite's candidates (static verification, correctness, anti-gaming checks,
timing vs baselines, energy) and record everything in the run store.

    kernelpro bench ptxbench --solutions reference
    kernelpro bench SUITE_OR_TASK --solutions DIR [--task NAME ...] [--sizes shown|heldout|all]
        [--arch sm_90a] [--baselines eager,compile,vendor] [--graphs] [--sanitizer memcheck|racecheck]
        [--no-energy] [--timeout S] [--resume RUN_ID] [--json] [--gpus N] [--device auto|cuda|cpu] [--ray]

Without a GPU it still compiles and statically verifies every CUDA candidate for each --arch and says in
one line what it skipped. Each candidate's records are committed as soon as they exist, so an
interrupted run continues with `--resume RUN_ID`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from kernelpro.bench.table import (
    build_report,
    device_label,
    no_gpu_line,
    print_report,
    skipped_note,
    start_line,
    verified_line,
)
from kernelpro.errors import KernelProError
from kernelpro.harness.job import Job

BASELINES = ("eager", "compile", "vendor")
STATIC_ARCHS = ("sm_90a", "sm_100a")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help="suite name (ptxbench), a folder of task files, a task file, or suite/task")
    p.add_argument("--solutions", default="reference",
                   help="'reference' (the suite's reference/<task>.py) or a folder holding <task>.py per task")
    p.add_argument("--protocol", choices=("ptxbench",),
                   help="run PTXBench's multi-turn refinement protocol against an LLM endpoint instead; a suite "
                        "name means its headline tasks; takes `kernelpro optimize`'s protocol and endpoint flags")
    p.add_argument("--path", help="a KernelBench checkout, with `kernelbench` as the suite")
    p.add_argument("--level", type=int, help="only this KernelBench level")
    p.add_argument("--kb-tolerance", choices=("current", "v0"), default=None,
                   help="KernelBench's rule: current (fp32 atol=rtol=1e-4) or v0 (1e-2, as its published v0 "
                        "numbers were judged); the table and every record name the one used")
    p.add_argument("--degenerate", choices=("check", "skip"), default="check",
                   help="KernelBench: probe each reference on the CPU for outputs that ignore its inputs and "
                        "parameters; their candidates are left out of fast_p and the geomean (default check)")
    p.add_argument("--task", action="append", default=[], metavar="NAME", help="only this task (repeatable)")
    p.add_argument("--sizes", choices=("shown", "heldout", "all"), default="all",
                   help="which declared sizes the correctness checks use (default all)")
    p.add_argument("--arch", action="append", default=[], metavar="ARCH",
                   help="static-verification target(s) (default sm_90a and sm_100a)")
    p.add_argument("--baselines", default="eager,compile,vendor",
                   help="comma list of eager, compile, vendor (default all three)")
    p.add_argument("--graphs", action="store_true", help="time CUDA-graph replays (launch-bound problems)")
    p.add_argument("--sanitizer", choices=("memcheck", "racecheck"),
                   help="also run each candidate's correctness pass under compute-sanitizer")
    p.add_argument("--energy", action=argparse.BooleanOptionalAction, default=True,
                   help="joules per call and J/TFLOP from NVML's energy counter beside every timing (default on; "
                        "--no-energy skips the energy windows)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="wall-clock limit per candidate (s)")
    p.add_argument("--trials", type=int, default=3, help="fresh random seeds per size (default 3)")
    p.add_argument("--resume", type=int, metavar="RUN_ID", help="continue an interrupted bench run")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--gpus", type=int, metavar="N", help="use the first N visible GPUs (default all)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="where correctness/timing run: auto = the GPU if there is one, else static checks "
                        "only; cpu = run pure-PyTorch candidates on the CPU (no GPU evidence)")
    p.add_argument("--ray", action="store_true", help="spread candidates over a Ray cluster (multi-host)")
    p.add_argument("--executed", choices=("auto", "on", "off"), default="auto",
                   help="PTXBench's correct_with_arch: run ncu on each correct candidate of a task that requests "
                        "features and count the requested SASS families executed (auto = on when a GPU and ncu "
                        "are there)")


def _resolve_tasks(spec: str, names: list[str], kb_path: str | None = None,
                   level: int | None = None, kb_tolerance: str | None = None) -> tuple[str, list[Any]]:
    from kernelpro.suites.task import find_task, load_suite

    p = Path(spec)
    from kernelpro.suites.suite import get_suite, is_named

    if is_named(spec):
        tasks = get_suite(spec).tasks(path=kb_path, level=level, tolerance=kb_tolerance)
    elif p.suffix == ".py" and p.is_file():
        tasks = [find_task(spec)]
    elif p.is_dir() or "/" not in spec:
        tasks = load_suite(spec)
    else:
        tasks = [find_task(spec)]
    suite = tasks[0].suite if tasks else spec
    if names:
        known = {t.name for t in tasks}
        missing = [n for n in names if n not in known]
        if missing:
            raise KernelProError(f"no task(s) {missing} in {spec}; list them with `kernelpro tasks {spec}`")
        tasks = [t for t in tasks if t.name in names]
    if not tasks:
        raise KernelProError(f"{spec} has no tasks; pass a suite name, a folder of task files or a task file")
    return suite, tasks


def _solution_path(task: Any, solutions: str) -> Path | None:
    from kernelpro.suites.suite import get_suite

    return get_suite(task.suite).solution_for(task, solutions)


def _verify(task: Any, path: Path, arch: str) -> tuple[bool | None, dict[str, Any]]:
    """(features ok, payload) from the static verifier; None when it cannot judge this candidate."""
    try:
        from kernelpro.static import verify as _v
    except ImportError as e:
        return None, {"error": f"static verifier unavailable ({e})"}
    try:
        rep = _v.verify_task_candidate(task, path, arch)
    except KernelProError as e:
        return (None if not task.requested_features(arch) else False), {"error": str(e), "arch": arch}
    return bool(rep.passed), rep.to_dict()


def _job(task: Any, cand: Any, args: argparse.Namespace, device: str, baselines: list[str]) -> Job:
    return Job(task_path=str(task.path), task_suite=task.suite, task_key=task.key,
               candidate_path=str(cand.path), candidate_hash=cand.hash, device=device,
               sizes=args.sizes, trials=args.trials, baselines=tuple(baselines), graphs=args.graphs,
               energy=args.energy, timeout_s=args.timeout, check_only=False,
               # the headline is isolated (each kernel alone at the power cap, as PTXBench and KernelBench time
               # kernels); interleaved (both sides at one clock) is stored beside it
               protocols=("isolated", "interleaved"),
               kb_tolerance=getattr(args, "kb_tolerance", None) or "current")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelpro.results.store import Store
    from kernelpro.suites.candidate import load_candidate
    from kernelpro.toolchain import gpus, no_gpu_reason

    # Tables fit the terminal, or $COLUMNS, or 80 columns in a pipe: wide ones switch to a list layout.
    console = Console(stderr=args.json)
    store = Store(args.db)
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise KernelProError(f"--baselines: unknown {bad}; choose from {', '.join(BASELINES)}")
    from kernelpro.static.compile import check_target

    archs = [check_target(a) for a in args.arch] or list(STATIC_ARCHS)
    if args.resume:
        run = store.get_run(args.resume)
        if run["kind"] != "bench":
            raise KernelProError(f"run {args.resume} is a {run['kind']} run, not a bench run")
        cfg = run["config"]
        for k in ("suite", "path", "level", "solutions", "task", "sizes", "baselines", "graphs", "energy", "timeout", "trials",
                  "device", "sanitizer", "executed", "kb_tolerance", "degenerate"):
            if k in cfg:
                setattr(args, k, cfg[k])
        archs = cfg.get("archs", archs)
        baselines = cfg.get("baseline_list", baselines)
    kb_tol = getattr(args, "kb_tolerance", None)
    suite, tasks = _resolve_tasks(args.suite, args.task, args.path, args.level, kb_tol)
    # Solution files are found (and a bad --solutions refused) before a run is created.
    solution = {t.key: _solution_path(t, args.solutions) for t in tasks}
    missing = [t.name for t in tasks if solution[t.key] is None]
    degenerate = _degeneracy([t for t in tasks if solution[t.key] is not None], args, console)

    # where correctness and timing can run
    device = args.device
    visible = list(gpus())
    if device == "auto":
        device = "cuda" if visible else "none"
    if device == "cuda" and not visible:
        raise KernelProError(f"--device cuda: {no_gpu_reason()}; drop --device to verify statically only")
    gpu_ids: list[int | None] = [g.index for g in visible][: args.gpus] if device == "cuda" else [None]
    run_arch = visible[0].arch if device == "cuda" and visible else None

    if args.resume:
        run_id = args.resume
        store.set_run_status(run_id, "running")
    else:
        run_id = store.new_run("bench", suite, {
            "suite": args.suite, "path": args.path, "level": args.level, "solutions": args.solutions, "task": args.task, "sizes": args.sizes,
            "baselines": args.baselines, "baseline_list": baselines, "graphs": args.graphs, "energy": args.energy,
            "timeout": args.timeout, "trials": args.trials, "device": args.device, "sanitizer": args.sanitizer,
            "executed": args.executed, "archs": archs, "kb_tolerance": kb_tol,
            "degenerate": getattr(args, "degenerate", "check")})
    done = store.finished_tasks(run_id, "evaluations" if device != "none" else "verifications")
    label = device_label(device, visible[: args.gpus] if args.gpus else visible)
    print(start_line(run_id, store.path.resolve(), suite, len(tasks) - len(missing), len(missing), archs, label),
          file=sys.stderr if args.json else sys.stdout, flush=True)

    notes: list[str] = [n for n in [skipped_note(missing, args.solutions)] if n]
    jobs: list[Job] = []
    job_cids: list[int] = []
    rows: dict[str, dict[str, Any]] = {}
    status = "interrupted"
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            with_candidate = [t for t in tasks if solution[t.key] is not None]
            bar = progress.add_task("verify", total=len(with_candidate))
            # nvcc dominates static verification and runs as a subprocess, so verify every
            # (candidate, arch) pair concurrently before the loop records them in order; the bar moves as
            # each task's targets finish, and without a terminal each finished task prints one line.
            pending = [(t.key, arch, t, solution[t.key]) for t in with_candidate if t.key not in done for arch in archs]
            verified: dict[tuple[str, str], tuple[bool | None, dict[str, Any]]] = {}
            left = {t.key: len(archs) for t in with_candidate if t.key not in done}
            tty = console.is_terminal
            with ThreadPoolExecutor(max_workers=max(1, min(len(pending), os.cpu_count() or 1))) as ex:
                futures = {ex.submit(_verify, t, path, arch): (key, arch, t) for key, arch, t, path in pending}
                for fut in as_completed(futures):
                    key, arch, t = futures[fut]
                    verified[(key, arch)] = fut.result()
                    left[key] -= 1
                    if left[key] == 0:
                        progress.update(bar, description=f"verify {t.name}")
                        progress.advance(bar)
                        if not tty:
                            print(verified_line(t.name, {a: verified[(key, a)] for a in archs}),
                                  file=sys.stderr if args.json else sys.stdout, flush=True)
            for task in tasks:
                path = solution[task.key]
                if path is None:
                    continue
                cand = load_candidate(path)
                cid = store.add_candidate(run_id, task.key, cand.source, cand.kind,
                                          "reference" if args.solutions == "reference" else "user",
                                          info={"path": str(path), "tolerance": _tolerance_text(task, kb_tol),
                                                **({"degenerate": degenerate[task.key]}
                                                   if task.key in degenerate else {})})
                rows[task.key] = {"task": task, "cid": cid, "cand": cand, "degenerate": degenerate.get(task.key)}
                if task.key in done:
                    progress.advance(bar)
                    continue
                if not store.results("verifications", cid):
                    for arch in archs:
                        ok, payload = verified.get((task.key, arch)) or _verify(task, path, arch)
                        store.record("verifications", cid, bool(ok), {**payload, "features_ok": ok}, arch=arch)
                if device != "none" and cand.kind == "py" and not store.results("evaluations", cid):
                    jobs.append(_job(task, cand, args, device, baselines))
                    job_cids.append(cid)
                elif device != "none" and cand.kind != "py":
                    notes.append(f"{task.name}: raw .{cand.kind} candidate, verified statically only (no ModelNew to run)")
            if jobs:
                ebar = progress.add_task("evaluate", total=len(jobs))

                def on_result(i: int, r: dict[str, Any]) -> None:
                    store.record("evaluations", job_cids[i], bool(r.get("ok")), r, arch=run_arch or device)
                    progress.update(ebar, description=f"evaluate {jobs[i].task_key}: {r.get('reason') or 'ok'}")
                    progress.advance(ebar)

                if args.ray:
                    from kernelpro.harness.pool import run_jobs_ray

                    run_jobs_ray(jobs, timeout_s=args.timeout, on_result=on_result)
                else:
                    from kernelpro.harness.pool import run_jobs

                    run_jobs(jobs, gpus=gpu_ids, timeout_s=args.timeout, on_result=on_result)
                    if args.sanitizer and device == "cuda":
                        san_jobs = [dataclasses.replace(j, check_only=True, timing=False) for j in jobs]

                        def on_san(i: int, r: dict[str, Any]) -> None:
                            store.record("evaluations", job_cids[i], bool(r.get("ok")),
                                         {**r, "mode": f"sanitizer:{args.sanitizer}"}, arch=f"sanitizer:{args.sanitizer}")

                        run_jobs(san_jobs, gpus=gpu_ids, timeout_s=args.timeout * 4, on_result=on_san,
                                 sanitizer=args.sanitizer)
            if device == "cuda" and run_arch:
                _executed_leg(store, rows, run_arch, args, notes, progress)
        status = "done"
    finally:
        store.set_run_status(run_id, status)

    report = build_report(store, run_id, rows, archs, run_arch, baselines)
    report.update(run_id=run_id, suite=suite, device=label, notes=notes,
                  skipped=no_gpu_line(no_gpu_reason(), archs, report["rows"]) if device == "none" else None,
                  tolerance=sorted({_tolerance_text(t, kb_tol) for t in tasks}),
                  degenerate=sorted(k for k, d in degenerate.items() if d["status"] == "degenerate"),
                  not_checked=sorted(k for k, d in degenerate.items() if d["status"] == "not_checked"))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_report(console, report, baselines)
    return 0


def _tolerance_text(task: Any, profile: str) -> str:
    from kernelpro.suites.kernelbench import tolerance_text

    return tolerance_text(task, profile)


def _degeneracy(tasks: list[Any], args: argparse.Namespace, console: Any) -> dict[str, dict[str, Any]]:
    """{task key: degeneracy record} for KernelBench tasks (probed on the CPU, cached); {} otherwise."""
    kb = [t for t in tasks if t.suite == "kernelbench"]
    if not kb or getattr(args, "degenerate", "check") == "skip":
        return {}
    from dataclasses import asdict

    from kernelpro.suites.degenerate import check_tasks

    tol = kb[0].tolerance["atol"]
    with console.status(f"probing {len(kb)} KernelBench references for degenerate outputs (CPU)"):
        found = check_tasks(kb, tol=tol)
    return {k: asdict(d) for k, d in found.items()}


def _executed_leg(store: Any, rows: dict[str, dict[str, Any]], arch: str, args: argparse.Namespace,
                  notes: list[str], progress: Any) -> None:
    """The executed leg of correct_with_arch: ncu's per-opcode counts for every correct candidate of a
    task that requests features on `arch`, stored in the `profiles` table as the evidence."""
    from kernelpro.toolchain import find_tool

    if args.executed == "off":
        return
    todo = []
    for key, row in rows.items():
        task, cid = row["task"], row["cid"]
        ev = store.latest("evaluations", cid)
        if (ev and ev["ok"] and ev["payload"].get("correct") and task.requested_features(arch)
                and not any(p["payload"].get("kind") == "executed" for p in store.results("profiles", cid))):
            todo.append((key, row))
    if not todo:
        return
    if find_tool("ncu") is None:
        msg = "ncu (Nsight Compute) not found: correct_with_arch left unjudged; install Nsight Compute or put ncu on PATH"
        if args.executed == "on":
            raise KernelProError(msg)
        notes.append(msg)
        return
    from kernelpro.profile.executed import candidate_evidence

    bar = progress.add_task("ncu executed", total=len(todo))
    for _key, row in todo:
        task, cid = row["task"], row["cid"]
        progress.update(bar, description=f"ncu executed {task.name}")
        try:
            payload = {"kind": "executed", **candidate_evidence(row["cand"].path, task, arch, timeout=args.timeout)}
        except Exception as e:  # noqa: BLE001 - ncu refused or the candidate died under it: unjudged, never a pass
            payload = {"kind": "executed", "executed_ok": None, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            notes.append(f"{task.name}: ncu executed-instruction pass failed: {payload['error'][:160]}")
        store.record("profiles", cid, bool(payload.get("executed_ok")), payload, arch=arch)
        progress.advance(bar)
