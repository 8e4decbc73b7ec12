"""KernelBench as a suite: read a KernelBench checkout's level folders as they are.

A checkout keeps its problems in ``KernelBench/level{1,2,3,4}/<id>_<Name>.py``; each file is already in
KernelPro's task format (``Model``, ``get_inputs``, ``get_init_inputs``, size globals) without ``META``.
This module turns them into `Task`s with KernelBench's own evaluation settings, so a solution written
for KernelBench (``class ModelNew``) is judged the way KernelBench's ``eval.py`` judges it and the
results can be set beside published KernelBench numbers.

Facts taken from KernelBench's ``src/kernelbench/eval.py`` (read, not copied):
- correctness is ``torch.allclose(ref, new, atol=tol, rtol=tol)`` with ``tol`` by precision:
  fp32 1e-4, fp16 1e-2, bf16 1e-2 (``get_tolerance_for_precision``; v0/v0.1 used 1e-2 for fp32);
- the default precision is fp32, the reference and ``ModelNew`` are both built right after
  ``set_seed(42)``, and correctness runs ``num_correct_trials`` (5 in its scripts) input draws;
- there is no norm-relative check, so ``rel_norm`` here is set so that it never decides alone.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

from kernelpro.errors import TaskError
from kernelpro.suites.task import Task, load_task

LEVELS = (1, 2, 3, 4)

# atol = rtol per precision, as KernelBench's get_tolerance_for_precision returns them.
KB_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
# KernelBench v0 / v0.1 (the published leaderboard numbers) checked fp32 at 1e-2.
KB_LEGACY_TOLERANCE = 1e-2
# The two rules a KernelBench run can be judged by, by name (`--kb-tolerance`); every record says which.
TOLERANCE_PROFILES = ("current", "v0")
KB_SEED = 42
KB_CORRECT_TRIALS = 5
KB_PERF_TRIALS = 100

_PROBLEM = re.compile(r"^(\d+)_")
_SOLUTION = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


def problems_dir(path: str | Path | None) -> Path:
    """The ``KernelBench/`` folder holding ``level1``.. of a checkout (its root or that folder itself)."""
    if not path:
        raise TaskError("the kernelbench suite needs --path CHECKOUT (a clone of ScalingIntelligence/KernelBench)")
    root = Path(path).expanduser()
    for cand in (root / "KernelBench", root):
        if any((cand / f"level{n}").is_dir() for n in LEVELS):
            return cand
    raise TaskError(f"{root} is not a KernelBench checkout (no KernelBench/level1..level4 folders); "
                    "pass the root of a clone of ScalingIntelligence/KernelBench")


def problem_id(task: Task) -> int | None:
    """KernelBench's problem number (the file name's leading integer), None if the name has none."""
    m = _PROBLEM.match(task.path.stem)
    return int(m.group(1)) if m else None


def _tolerance(precision: str, legacy_tolerance: bool) -> dict[str, float]:
    if precision not in KB_TOLERANCE:
        raise TaskError(f"KernelBench precision {precision!r} is not one of {', '.join(KB_TOLERANCE)}")
    tol = KB_LEGACY_TOLERANCE if legacy_tolerance else KB_TOLERANCE[precision]
    # KernelBench checks allclose only; an infinite rel_norm makes KernelPro's norm check inert.
    return {"atol": tol, "rtol": tol, "rel_norm": float("inf")}


def tolerance_profile(name: str) -> bool:
    """`legacy_tolerance` for a profile name: ``v0`` (1e-2 at every precision) or ``current``."""
    if name not in TOLERANCE_PROFILES:
        raise TaskError(f"--kb-tolerance {name!r}: choose {' or '.join(TOLERANCE_PROFILES)} "
                        "(v0: atol=rtol=1e-2 as KernelBench v0 judged fp32; current: its release's 1e-4)")
    return name == "v0"


def tolerance_text(task: Task, profile: str | None = None) -> str:
    """One line naming the tolerance a task is judged by, e.g. ``atol=rtol=1e-4 (KernelBench current, fp32)``."""
    tol = task.tolerance
    from kernelpro.harness.profiles import tolerance_text as profile_text

    named = profile_text(tol)
    if named:
        return f"{named} ({task.dtype})"
    same = tol.get("atol") == tol.get("rtol")
    nums = f"atol=rtol={tol['atol']:g}" if same else f"atol={tol.get('atol'):g} rtol={tol.get('rtol'):g}"
    if task.suite == "kernelbench":
        return f"{nums} (KernelBench {profile or 'current'}, {task.dtype})"
    return f"{nums}, rel_norm={tol.get('rel_norm'):g} ({task.dtype})"


def kernelbench_task(path: str | Path, precision: str = "fp32", legacy_tolerance: bool = False) -> Task:
    """One KernelBench problem file as a Task; the level comes from its ``levelN`` folder.

    The harness's worker re-reads tasks from their files, so it must call this (not `load_task`) for
    tasks whose suite is ``kernelbench``, or KernelBench's tolerances are lost.
    """
    p = Path(path)
    m = re.fullmatch(r"level(\d+)", p.parent.name)
    level = int(m.group(1)) if m else 1
    t = load_task(p, suite="kernelbench")
    pid = _PROBLEM.match(p.stem)
    desc = t.description or f"KernelBench level {level} problem {pid.group(1) if pid else p.stem}"
    return dataclasses.replace(t, name=p.stem, suite="kernelbench", level=level, dtype=precision,
                               tolerance=_tolerance(precision, legacy_tolerance), description=desc)


def load_kernelbench(path: str | Path | None, level: int | None = None, precision: str = "fp32",
                     legacy_tolerance: bool = False) -> list[Task]:
    """All problems of a KernelBench checkout (or of one level), sorted by level then problem number.

    `precision` is KernelBench's ``--precision`` (fp32 | fp16 | bf16); `legacy_tolerance` uses the
    1e-2 that KernelBench v0/v0.1 applied at every precision, for comparison with numbers published
    under it.
    """
    base = problems_dir(path)
    _tolerance(precision, legacy_tolerance)
    if level is not None and level not in LEVELS:
        raise TaskError(f"KernelBench has levels {', '.join(map(str, LEVELS))}; got --level {level}")
    levels = [level] if level is not None else [n for n in LEVELS if (base / f"level{n}").is_dir()]
    if level is not None and not (base / f"level{level}").is_dir():
        raise TaskError(f"{base} has no level{level} folder; this checkout has "
                        f"{', '.join(p.name for p in sorted(base.glob('level*')) if p.is_dir()) or 'none'}")
    tasks = [kernelbench_task(p, precision, legacy_tolerance) for n in levels
             for p in sorted((base / f"level{n}").glob("*.py")) if not p.name.startswith("_")]
    # Problem numbers restart at 1 in every level; names stay unique in practice, but keys must be.
    seen = Counter(t.name for t in tasks)
    tasks = [dataclasses.replace(t, name=f"L{t.level}_{t.name}") if seen[t.name] > 1 else t for t in tasks]
    if not tasks:
        raise TaskError(f"{base}: no problem files under level{level if level is not None else '1..4'}")
    return sorted(tasks, key=lambda t: (t.level, problem_id(t) or 0, t.name))


def find_solution(task: Task, solutions: str | Path) -> Path | None:
    """The solution file for `task` in a folder laid out any of KernelBench's ways, or None.

    Accepted: ``DIR/level1/<problem file name>``, ``DIR/<problem file name>`` and the file names
    KernelBench's generate scripts write, ``level_<L>_problem_<ID>_sample_<S>_kernel.py`` (lowest S).
    """
    d = Path(solutions)
    stem = task.path.stem
    for p in (d / f"level{task.level}" / f"{stem}.py", d / f"{stem}.py"):
        if p.is_file():
            return p
    pid = problem_id(task)
    best: tuple[int, Path] | None = None
    for p in list(d.glob(f"level_{task.level}_problem_{pid}_sample_*_kernel.py")) + \
            list((d / f"level{task.level}").glob(f"level_{task.level}_problem_{pid}_sample_*_kernel.py")):
        m = _SOLUTION.match(p.name)
        if m and int(m.group(2)) == pid and (best is None or int(m.group(3)) < best[0]):
            best = (int(m.group(3)), p)
    return best[1] if best else None
