"""One evaluation in the test's own process (no worker, no sandbox), with the options the CPU tests share:
the CPU, the eager baseline, no energy windows, the interleaved protocol. For tests that patch the
evaluator or look at what it leaves alive; everything else goes through `run_job` as `bench` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_problem(folder: Path, task_src: str, cand_src: str, name: str = "1_problem") -> tuple[Path, Path]:
    """A KernelBench-form task (under level1/, as KernelBench lays its problems out) and its candidate."""
    (folder / "level1").mkdir(parents=True, exist_ok=True)
    task = folder / "level1" / f"{name}.py"
    task.write_text(task_src)
    cand = folder / "cand.py"
    cand.write_text(cand_src)
    return task, cand


def evaluate_in_process(task: Path, cand: Path, *, suite: str = "kernelbench", sizes: str = "shown",
                        trials: int = 1, timeout_s: float = 60) -> dict[str, Any]:
    from kernelpro.harness.evaluate import Evaluator
    from kernelpro.harness.job import Job

    job = Job(task_path=str(task), candidate_path=str(cand), task_suite=suite, device="cpu", sizes=sizes,
              trials=trials, baselines=("eager",), energy=False, timeout_s=timeout_s, protocols=("interleaved",))
    return Evaluator(job.eval_config()).run()
