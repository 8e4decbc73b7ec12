"""`kernelpro compare TASK A.py B.py [...]`: time candidates side by side, in one worker, over several rounds.

A search reports the best of many noisy measurements, which is biased upward (the winner's curse); two
separate runs of one kernel differ by about a percent on an H200. To say that B beats A, time them in one
interleaved loop (same process, same inputs, same clocks and L2 flushes) and repeat in fresh processes.
Round r judges candidate r mod n in full (correctness at the sizes asked, anti-gaming checks, timing against
the baseline) and loads the others as rivals: each must match the reference at the timing size and is then
timed in the same loop. Rotating the judged candidate keeps process state and build order from favouring
one of them. The figure reported is the per-round ratio ms(first) / ms(other), its median and its range,
timed under the interleaved protocol (both sides at one clock), with the clock and power of each round;
beside it, where NVML works, joules per call per round and the ratio J(first) / J(other).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError
from kernelpro.results.comparison import Comparison, add_round
from kernelpro.results.fidelity import format_short
from kernelpro.results.record import Result


def _labels(paths: list[Path], given: str | None) -> list[str]:
    if given:
        labels = [s.strip() for s in given.split(",")]
        if len(labels) != len(paths) or len(set(labels)) != len(labels) or not all(labels):
            raise KernelProError(f"--labels needs {len(paths)} distinct names, one per candidate")
        return labels
    labels = [p.stem for p in paths]
    return labels if len(set(labels)) == len(labels) else [f"{i}:{s}" for i, s in enumerate(labels)]


def compare(task: Any, paths: list[Path], rounds: int = 5, labels: list[str] | None = None, *,
            baseline: str = "eager", sizes: str = "default", device: str = "cuda", timeout_s: float = 900.0,
            gpu: int | None = None, on_round: Callable[[int, int, Result], None] | None = None) -> Comparison:
    """Run `rounds` harness jobs, each timing every candidate in one interleaved loop (see module doc)."""
    from kernelpro.harness.job import Job
    from kernelpro.harness.worker import extension_dir, run_job
    from kernelpro.results.store import source_hash

    if len(paths) < 2:
        raise KernelProError("compare needs at least two candidate files")
    if rounds < len(paths):
        # A rival is only output-checked; each file must be judged in full (anti-gaming checks) in some round.
        raise KernelProError(f"--rounds {rounds}: give at least {len(paths)}, one round judging each candidate in full")
    paths = [Path(p).resolve() for p in paths]
    for p in paths:
        if not p.is_file():
            raise KernelProError(f"candidate {p} not found")
    labels = labels or _labels(paths, None)
    hashes = [source_hash(p.read_text()) for p in paths]
    cmp = Comparison(task=task.key, labels=labels, paths=[str(p) for p in paths])
    for r in range(rounds):
        i = r % len(paths)
        rivals = [{"label": f"rival:{labels[j]}", "path": str(paths[j]), "ext_dir": str(extension_dir(hashes[j]))}
                  for j in range(len(paths)) if j != i]
        job = Job(task_path=str(task.path), task_suite=task.suite, task_key=task.key,
                  candidate_path=str(paths[i]), candidate_hash=hashes[i], device=device, sizes=sizes,
                  baselines=(baseline,), rivals=tuple(rivals))
        rec = run_job(job, timeout_s=timeout_s, gpu=gpu)
        add_round(cmp, r, labels[i], rec, baseline)
        if on_round:
            on_round(r, i, rec)
    return cmp


def stored_compare(store: Any, task: Any, paths: list[Path], labels: list[str], rounds: int, *,
                   candidate_ids: list[int] | None = None, link: dict[str, Any] | None = None,
                   baseline: str = "eager", sizes: str = "default", device: str = "cuda", timeout_s: float = 900.0,
                   on_round: Callable[[int, int, Result], None] | None = None) -> tuple[int, Comparison]:
    """`compare` as a `compare` run of the store: each round is an evaluation of the judged file's candidate
    (`candidate_ids`, e.g. a search's nodes, named in `link`; by default the files are added to the new run),
    tagged with the run, round and label so that `load_comparison` rebuilds it."""
    run_id = store.new_run("compare", task.suite, {"task": str(task.path), "task_key": task.key,
                                                  "candidates": [str(p) for p in paths], "labels": labels,
                                                  "rounds": rounds, "baseline": baseline, "sizes": sizes,
                                                  "device": device, **(link or {})})
    try:
        if candidate_ids is None:
            candidate_ids = []
            for lab, p in zip(labels, paths, strict=True):
                if not Path(p).is_file():
                    raise KernelProError(f"candidate {p} not found")
                candidate_ids.append(store.add_candidate(run_id, task.key, Path(p).read_text(), origin="user",
                                                         info={"label": lab, "path": str(p)}))

        def record(r: int, i: int, rec: Result) -> None:
            store.record("evaluations", candidate_ids[i], rec.ok,
                         rec.with_(compare_run=run_id, compare_round=r + 1, compare_label=labels[i]).to_dict())
            if on_round:
                on_round(r, i, rec)

        cmp = compare(task, paths, rounds, labels, baseline=baseline, sizes=sizes, device=device,
                      timeout_s=timeout_s, on_round=record)
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise
    store.set_run_status(run_id, "done")
    return run_id, cmp


def render(cmp: Comparison, baseline: str = "eager") -> Any:
    from rich.table import Table

    t = Table(title=f"{cmp.task}: {len(cmp.rounds)} rounds side by side, ratio = ms({cmp.labels[0]}) / ms(x)")
    t.add_column("round")
    t.add_column("judged")
    for lab in cmp.labels:
        t.add_column(f"{lab} ms" + (" (failed its own round)" if lab in cmp.disqualified else ""), justify="right")
    t.add_column(f"{baseline} ms", justify="right")
    for lab in cmp.labels[1:]:
        t.add_column(f"ratio {lab}", justify="right")
    energy = any(v for e in cmp.energy for v in e.values())
    if energy:
        for lab in cmp.labels:
            t.add_column(f"{lab} mJ", justify="right")
        for lab in cmp.labels[1:]:
            t.add_column(f"J ratio {lab}", justify="right")
    t.add_column("SM MHz / W (interleaved)")
    first = cmp.labels[0]
    energies = cmp.energy or [{} for _ in cmp.rounds]
    tels = cmp.telemetry or [{} for _ in cmp.rounds]
    for k, (row, judged, b, e, tel) in enumerate(zip(cmp.rounds, cmp.judged, cmp.baseline_ms, energies, tels,
                                                     strict=True), 1):
        cells = [str(k), judged] + [f"{row[lab]:.4f}" if row.get(lab) else "-" for lab in cmp.labels]
        cells.append(f"{b:.4f}" if b else "-")
        cells += [f"{row[first] / row[lab]:.3f}" if row.get(first) and row.get(lab) else "-" for lab in cmp.labels[1:]]
        if energy:
            cells += [f"{e[lab] * 1e3:.4g}" if e.get(lab) else "-" for lab in cmp.labels]
            cells += [f"{e[first] / e[lab]:.3f}" if e.get(first) and e.get(lab) else "-" for lab in cmp.labels[1:]]
        cells.append(format_short(tel.get("*")))
        t.add_row(*cells)
    summ = cmp.summary()
    cells = ["median", ""] + [f"{s['median_ms']:.4f}" if s["median_ms"] else "-" for s in summ]
    bs = [b for b in cmp.baseline_ms if b]
    cells.append(f"{statistics.median(bs):.4f}" if bs else "-")
    cells += [f"{s['ratio_median']:.3f} [{s['ratio_min']:.3f}, {s['ratio_max']:.3f}]" if s["ratio_median"] else "-"
              for s in summ[1:]]
    if energy:
        cells += [f"{s['j_per_call_median'] * 1e3:.4g}" if s["j_per_call_median"] else "-" for s in summ]
        cells += [f"{s['energy_ratio_median']:.3f} [{s['energy_ratio_min']:.3f}, {s['energy_ratio_max']:.3f}]"
                  if s["energy_ratio_median"] else "-" for s in summ[1:]]
    cells.append("")
    t.add_row(*cells)
    t.caption = "; ".join(cmp.notes) if cmp.notes else None
    return t


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", help="task: suite/name, bare ptxbench name, or a task file")
    p.add_argument("candidates", nargs="+", help="candidate files; ratios are relative to the first")
    p.add_argument("--rounds", type=int, default=5, help="fresh worker processes, rotating the judged file (default 5)")
    p.add_argument("--labels", help="comma-separated names for the candidates (default: file names)")
    p.add_argument("--baseline", default="eager", help="the harness baseline timed alongside (eager|compile|vendor)")
    p.add_argument("--sizes", default="default",
                   help="sizes the judged candidate is checked on each round (default: the timing size)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="where the rounds run: cuda (default) or cpu for pure-PyTorch candidates")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per round")
    p.add_argument("--json", help="also write the comparison as JSON")


def main(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from kernelpro.results.store import Store
    from kernelpro.suites.task import find_task

    console = Console()
    task = find_task(args.task)
    if args.device == "cuda":
        from kernelpro.toolchain import no_gpu_reason

        reason = no_gpu_reason()
        if reason:
            raise KernelProError(f"compare times on a GPU ({reason}); --device cpu compares pure-PyTorch candidates")
    paths = [Path(c) for c in args.candidates]
    labels = _labels(paths, args.labels)
    store = Store(args.db)

    def on_round(r: int, i: int, rec: Result) -> None:
        shown = ", ".join(f"{labels[i] if k == 'candidate' else k.removeprefix('rival:')} {v['median_ms']:.4f} ms"
                          for k, v in rec.stats.items())
        console.print(f"round {r + 1}/{args.rounds}: " + (shown or f"failed: {rec.reason}"),
                      markup=False, highlight=False)

    run_id, cmp = stored_compare(store, task, paths, labels, args.rounds, baseline=args.baseline, sizes=args.sizes,
                                 device=args.device, timeout_s=args.timeout, on_round=on_round)
    console.print(render(cmp, args.baseline))
    if args.json:
        Path(args.json).write_text(json.dumps(cmp.to_dict(), indent=1))
    console.print(f"run {run_id} in {store.path}", highlight=False)
    return 0 if all(s["rounds"] for s in cmp.summary()) else 1
