"""What a suite is to the rest of KernelPro, so no stage branches on a suite's name.

A `Suite` lists its tasks, reloads one task from its file (the worker gets only a path) and finds a
task's solution in a folder. Three kinds exist: folders of task files (the shipped PTXBench suite, or
any folder of KernelBench-format files with `META`), KernelBench checkouts, whose files carry no `META`
and take KernelBench's own evaluation settings, and FlashInfer-Trace trace sets (PTXBench's own JSON
definitions and JSONL workloads, `suites/flashinfer.py`). `get_suite` is the one place that tells them apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from kernelpro.errors import KernelProError
from kernelpro.suites.task import Task, load_suite, load_task

SOLUTION_EXTS = (".py", ".cu", ".ptx")


class Suite(Protocol):
    name: str

    def tasks(self, *, path: str | None = None, level: int | None = None,
              tolerance: str | None = None) -> list[Task]: ...

    def task_from_file(self, path: str | Path, tolerance: str | None = None) -> Task: ...

    def solution_for(self, task: Task, solutions: str) -> Path | None: ...


class FolderSuite:
    """A shipped suite by name (its tasks/ and reference/ folders) or a folder of task files."""

    def __init__(self, name: str):
        self.name = name

    def tasks(self, *, path: str | None = None, level: int | None = None,
              tolerance: str | None = None) -> list[Task]:
        _no_rule(self.name, tolerance)
        tasks = load_suite(path or self.name)
        return [t for t in tasks if level is None or t.level == level]

    def task_from_file(self, path: str | Path, tolerance: str | None = None) -> Task:
        _no_rule(self.name, tolerance)
        return load_task(path, suite=self.name)

    def solution_for(self, task: Task, solutions: str) -> Path | None:
        if solutions == "reference":
            base = task.path.parent.parent / "reference"
        else:
            base = Path(solutions)
            if not base.is_dir():
                raise KernelProError(f"--solutions {solutions}: not a folder; pass 'reference' or a folder of "
                                     "<task>.py files")
        return next((p for p in (base / f"{task.name}{e}" for e in SOLUTION_EXTS) if p.is_file()), None)


class KernelBenchSuite:
    """A KernelBench checkout's level folders, judged with KernelBench's settings."""

    name = "kernelbench"

    def tasks(self, *, path: str | None = None, level: int | None = None,
              tolerance: str | None = None) -> list[Task]:
        """`tolerance`: KernelBench's rule by name, current (fp32 1e-4, the default) or v0 (1e-2)."""
        from kernelpro.suites.kernelbench import load_kernelbench, tolerance_profile

        return load_kernelbench(path, level=level, legacy_tolerance=tolerance_profile(tolerance or "current"))

    def task_from_file(self, path: str | Path, tolerance: str | None = None) -> Task:
        # The files carry no META: KernelBench's tolerances come from the suite loader.
        from kernelpro.suites.kernelbench import kernelbench_task, tolerance_profile

        return kernelbench_task(path, legacy_tolerance=tolerance_profile(tolerance or "current"))

    def solution_for(self, task: Task, solutions: str) -> Path | None:
        from kernelpro.suites.kernelbench import find_solution

        if solutions == "reference":
            raise KernelProError("KernelBench ships no reference solutions; pass --solutions DIR")
        if not Path(solutions).is_dir():
            raise KernelProError(f"--solutions {solutions}: not a folder of KernelBench solutions")
        return find_solution(task, solutions)


def _no_rule(suite: str, tolerance: str | None) -> None:
    if tolerance not in (None, "current"):
        raise KernelProError(f"--kb-tolerance applies to KernelBench checkouts; {suite} tasks carry their own "
                             "tolerance in META")


def _flashinfer() -> Suite:
    from kernelpro.suites.flashinfer import FlashInferSuite

    return FlashInferSuite()


# Suites with their own loader; every other name is a folder suite.
NAMED: dict[str, Any] = {"kernelbench": KernelBenchSuite, "flashinfer-trace": _flashinfer}


def is_named(name: str) -> bool:
    """True for a suite that is not a folder of task files (it needs its own loader, e.g. --path)."""
    return name in NAMED


def get_suite(name: str | None) -> Suite:
    """The suite a task belongs to, by the name stored on the task (None: a loose task file)."""
    cls = NAMED.get(name or "")
    return cls() if cls else FolderSuite(name or "tasks")
