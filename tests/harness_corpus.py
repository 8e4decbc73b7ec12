"""The harness's candidate corpus: each file's docstring names its task, its device and its expected verdict."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from kernelpro.results.record import Result

HERE = Path(__file__).parent
TASKS = HERE / "tasks"
CANDIDATES = HERE / "candidates"


@dataclass(frozen=True)
class Entry:
    path: Path
    kind: str      # adversarial | honest
    expect: str    # a check name, or "passed"
    task: str      # file stem under tests/tasks
    device: str    # any | cpu | gpu
    expect_cuda: str = ""   # where the verdict on a GPU differs (an adaptive candidate whose switch reads
                            # an observation present on one device and not the other)
    switch: str = ""        # adaptive candidates: the signal they read to tell checked from timed calls

    def expected(self, device: str) -> str:
        return self.expect_cuda if device.startswith("cuda") and self.expect_cuda else self.expect

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.path.stem}"

    @property
    def task_path(self) -> Path:
        return TASKS / f"{self.task}.py"


def entries(kind: str | None = None) -> list[Entry]:
    out = []
    for k in ("adversarial", "honest"):
        if kind and k != kind:
            continue
        for p in sorted((CANDIDATES / k).glob("*.py")):
            doc = ast.get_docstring(ast.parse(p.read_text())) or ""
            fields = dict(line.split(": ", 1) for line in doc.splitlines()[:5] if ": " in line)
            out.append(Entry(p, k, fields["expect"], fields["task"], fields.get("device", "any"),
                             fields.get("expect_cuda", ""), fields.get("switch", "")))
    return out


def job_for(e: Entry, device: str, **extra):
    from kernelpro.harness.job import Job
    from kernelpro.suites.candidate import load_candidate

    c = load_candidate(e.path)
    return Job.from_dict({"task_path": str(e.task_path), "task_suite": "harness_tests",
                          "task_key": f"harness_tests/{e.task}", "candidate_path": str(c.path),
                          "candidate_hash": c.hash, "device": device, **extra})


def verdict_ok(e: Entry, result: Result, device: str = "cpu") -> bool:
    want = e.expected(device)
    if want == "passed":
        return bool(result.ok)
    return (not result.ok) and want in result.failed_checks
