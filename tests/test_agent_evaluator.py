"""The search's view of evaluation: harness records -> outcomes, objectives, and the real worker path."""

import pytest

from kernelpro.agent.evaluator import EvalOutcome, HarnessEvaluator, objective_score, outcome_from_record
from kernelpro.harness.job import Job
from kernelpro.harness.worker import failure_record
from kernelpro.results.record import Result
from kernelpro.suites.task import load_task
from kernelpro.toolchain import no_gpu_reason

PASSED = Result.from_dict({
          "candidate": "c.py", "device": "cuda", "ok": True, "status": "passed", "correct": True, "compiled": True,
          "reason": None, "failed_checks": [], "speedup": {"eager": 1.25, "vendor": 0.97}, "compile_s": 41.0,
          "timing": {"stats": {"candidate": {"median_ms": 0.8}, "eager": {"median_ms": 1.0}}},
          "energy": {"candidate": {"j_per_call": 0.30}, "eager": {"j_per_call": 0.45}}})


def test_passing_record():
    o = outcome_from_record(PASSED, "eager")
    assert o.ok and o.stage == "ok" and o.speedup == 1.25 and o.correct
    assert o.energy_j == 0.30 and o.baseline_energy_j == 0.45
    assert o.timings == {"candidate_median_ms": 0.8, "eager_median_ms": 1.0, "compile_s": 41.0}
    assert outcome_from_record(PASSED, "vendor").speedup == 0.97


def test_failure_records_from_the_worker():
    job = Job(task_path="t/x.py", candidate_path="c.py", task_key="t/x")
    o = outcome_from_record(failure_record(job, "timeout", "killed after 300 s (stage: compile)"))
    assert not o.ok and o.stage == "timeout" and "killed after 300 s" in o.reason
    rec = PASSED.with_(ok=False, status="failed", correct=False, reason="compile_error",
                       failed_checks=["compile_error"], detail="x.cu(12): error: identifier \"foo\" is undefined")
    o = outcome_from_record(rec)
    assert o.stage == "compile" and "undefined" in o.compile_errors and "compile_error" in o.reason
    rec = PASSED.with_(ok=False, correct=False, reason="library_fallback", failed_checks=["library_fallback"],
                       detail="aten::mm called")
    o = outcome_from_record(rec)
    assert o.stage == "gaming" and o.flags == ["library_fallback"] and o.speedup == 1.25


def test_objectives():
    o = outcome_from_record(PASSED)
    assert objective_score(o, "speed") == 1.25
    assert objective_score(o, "energy") == pytest.approx(1.5)
    assert objective_score(o, "mix", 0.5) == pytest.approx((1.25 * 1.5) ** 0.5)
    assert objective_score(o, "mix", 0.0) == pytest.approx(1.25)
    assert objective_score(EvalOutcome(True, speedup=2.0), "energy") == 2.0  # no energy measured: speed
    assert objective_score(EvalOutcome(False, speedup=2.0), "speed") is None
    # below the speed floor an energy score is cut steeply; above it, and for speed, it is untouched
    assert objective_score(o, "energy", min_speedup=1.2) == pytest.approx(1.5)
    assert objective_score(o, "energy", min_speedup=1.25 / 0.98) == pytest.approx(1.5 * 0.98 ** 20)
    assert objective_score(o, "speed", min_speedup=2.0) == 1.25


def test_harness_evaluator_without_gpu_is_a_failed_outcome(tmp_path):
    if no_gpu_reason() is None:
        pytest.skip("this machine has a GPU")
    task_file = tmp_path / "t.py"
    task_file.write_text("import torch\nimport torch.nn as nn\nN = 4\nclass Model(nn.Module):\n"
                         "    def forward(self, x):\n        return x\ndef get_inputs():\n    return [torch.ones(N)]\n"
                         "def get_init_inputs():\n    return []\n")
    cand = tmp_path / "c.py"
    cand.write_text("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")
    o = HarnessEvaluator(feedback="none", timeout_s=120).evaluate(load_task(task_file, suite="t"), cand)
    assert not o.ok and o.stage == "crash" and "no CUDA device" in o.reason
