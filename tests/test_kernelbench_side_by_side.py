"""The side-by-side script's verdict logic (pure functions; the runs themselves need a GPU)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import kernelbench_side_by_side as sbs  # noqa: E402


def _entry(label, kb_cur, kb_v0, kp, expect=None):
    return {"label": label, "kb": {"current": kb_cur, "v0": kb_v0}, "kp": kp, "expect": expect, "perf_trials": 20}


def test_v0_verdict_of_kernelpro_is_derived_from_recorded_errors_only_for_output_failures():
    near = {"correct": False, "reason": "wrong_output", "failed_checks": ["wrong_output"], "tol_needed": 3e-3}
    far = {**near, "tol_needed": 0.5}
    gamed = {**near, "reason": "async_leftover", "failed_checks": ["async_leftover", "wrong_output"]}
    assert sbs.kp_v0(near) == "pass" and sbs.kp_v0(far) == "wrong_output" and sbs.kp_v0(gamed) == "async_leftover"
    assert sbs.kp_v0({**near, "tol_needed": None}) == "wrong_output"   # no record: never a derived pass


def test_compare_counts_disagreements_tolerance_changes_and_unreached_rows():
    ok = {"compiled": True, "correct": True, "runtime_ms": 1.0, "ref_runtime_ms": 2.0}
    bad = {"compiled": True, "correct": False, "metadata": {"correctness_issue": "Output mismatch"}}
    rows = [
        _entry("agree", ok, ok, {"correct": True, "speedup": {"eager": 1.9}}),
        _entry("deg", ok, ok, {"correct": True, "degenerate": True, "speedup": {"eager": 400.0}}),
        _entry("tol", bad, ok, {"correct": False, "reason": "wrong_output", "failed_checks": ["wrong_output"],
                                "tol_needed": 5e-3, "detail": "max_abs 5e-3"}),
        _entry("unreached", {}, {}, {"correct": None, "reason": "not_run"}),
    ]
    lines, dis, counts = sbs.compare(rows)
    assert max(len(line) for line in lines) <= 80
    assert counts == {"problems": 4, "agree": 2, "disagree": 1, "kb_pass": 2, "kp_pass": 1, "kb_tol_changes": 1,
                      "kp_tol_changes": 1}
    text = "\n".join(dis)
    assert "deg:" in text and "degenerate_problem" in text
    assert "KernelBench verdict moves with the tolerance: FAIL at 1e-4, pass at 1e-2" in text
    assert lines[-1].rstrip().endswith("?")


def test_kernelbench_side_splits_items_over_parallel_children(monkeypatch, tmp_path):
    calls = []

    def one(items, kb_path, out, perf_trials, deadline, tag=""):
        calls.append((tag, [i["key"] for i in items]))
        return {i["key"]: {"key": i["key"]} for i in items}, ["litellm"], None

    monkeypatch.setattr(sbs, "_run_kb_one", one)
    items = [{"key": f"k{i}", "problem": "p", "solution": "s"} for i in range(5)]
    got, stubbed, fatal = sbs.run_kb(items, "kb", tmp_path, 10, 0.0, parallel=2)
    assert sorted(got) == [f"k{i}" for i in range(5)] and stubbed == ["litellm"] and fatal is None
    assert sorted(calls) == [("0", ["k0", "k2", "k4"]), ("1", ["k1", "k3"])]   # disjoint, own spec files


def test_out_of_memory_on_either_side_is_not_compared():
    # Seen on an H100 with both evaluators in five processes on one GPU: most rows ran out of memory on
    # one side or both, and "both failed" was counted as agreement.
    ok = {"compiled": True, "correct": True, "runtime_ms": 1.0, "ref_runtime_ms": 2.0}
    kb_oom = {"compiled": True, "correct": False, "runtime_ms": -1.0,
              "metadata": {"runtime_error": "CUDA out of memory. Tried to allocate 6.00 GiB.",
                           "runtime_error_name": "torch.OutOfMemoryError"}}
    kp_oom = {"correct": False, "reason": "oom", "detail": "OutOfMemoryError: CUDA out of memory."}
    rows = [_entry("both", kb_oom, kb_oom, kp_oom), _entry("kb only", kb_oom, ok, {"correct": True}),
            _entry("kp only", ok, ok, kp_oom)]
    lines, dis, counts = sbs.compare(rows)
    assert counts["agree"] == 0 and counts["disagree"] == 0 and counts["kb_tol_changes"] == 0
    assert all(line.rstrip().endswith("?") for line in lines[2:])
    text = "\n".join(dis)
    assert "not compared: KernelBench and kernelpro ran out of GPU memory" in text
    assert "not compared: kernelpro ran out of GPU memory" in text


def test_prior_runs_keep_what_each_side_finished_and_rerun_the_rest(tmp_path):
    import json

    ok = {"compiled": True, "correct": True, "runtime_ms": 1.0, "ref_runtime_ms": 2.0}
    oom = {"compiled": True, "correct": False, "metadata": {"runtime_error_name": "torch.OutOfMemoryError"}}
    first = {"entries": [
        {"key": "solutions:a", "kb": {"current": ok, "v0": ok}, "kp": {"correct": None, "reason": "not_run"}},
        {"key": "solutions:b", "kb": {"current": oom, "v0": oom}, "kp": {"correct": True, "reason": None}},
        {"key": "solutions:c", "kb": {}, "kp": {"correct": False, "reason": "oom"}}]}
    second = {"entries": [{"key": "solutions:a", "kb": {}, "kp": {"correct": False, "reason": "wrong_output"}}]}
    paths = []
    for i, d in enumerate((first, second)):
        p = tmp_path / f"run{i}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    kb, kp = sbs.load_prior(paths)
    assert set(kb) == {"solutions:a"}                      # b ran out of memory: KernelBench runs it again
    assert set(kp) == {"solutions:a", "solutions:b"}       # a from the second run; c ran out of memory
    assert kp["solutions:a"]["reason"] == "wrong_output"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="not a side_by_side.json"):
        sbs.load_prior([str(bad)])


def test_problems_are_sized_on_the_meta_device_in_a_child(tmp_path):
    # 6 GiB level-1 problems beside other processes ran out of GPU memory: sizes decide what runs alone
    big = tmp_path / "big.py"
    big.write_text("import torch, torch.nn as nn\n"
                   "class Model(nn.Module):\n"
                   "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(1000, 500)\n"
                   "    def forward(self, x):\n        return self.lin(x)\n"
                   "def get_inputs():\n    return [torch.randn(1 << 30, 1000)]\n"    # 4 TB: only meta can hold it
                   "def get_init_inputs():\n    return []\n")
    bad = tmp_path / "bad.py"
    bad.write_text("def get_inputs():\n    raise ValueError('no')\n")
    got = sbs.problem_bytes([str(big), str(bad)])
    assert got == {str(big): (1 << 30) * 1000 * 4 + (1000 * 500 + 500) * 4}
    small, large = sbs.split_by_memory([str(big), str(bad)], got, 2**30)
    assert small == [] and large == [str(big), str(bad)]    # the unsized one runs alone too


def test_small_problems_run_in_parallel_then_large_ones_one_at_a_time(monkeypatch, tmp_path):
    calls = []

    def one(items, kb_path, out, perf_trials, deadline, tag=""):
        calls.append((tag, [i["key"] for i in items]))
        return {i["key"]: {"key": i["key"]} for i in items}, [], None

    monkeypatch.setattr(sbs, "_run_kb_one", one)
    items = [{"key": f"k{i}", "problem": "p", "solution": "s"} for i in range(5)]
    got, _, _ = sbs.run_kb_phased(items, "kb", tmp_path, 10, time.time() + 60, 2, {"k0", "k1", "k3"})
    assert sorted(got) == [f"k{i}" for i in range(5)]
    assert sorted(calls[:2]) == [("0", ["k0", "k3"]), ("1", ["k1"])] and calls[2] == ("", ["k2", "k4"])
    sol, case = tmp_path / "solutions", tmp_path / "solutions_relu_cuda_graph"
    wide, alone = sbs.plan_kp([(sol, ["a", "b", "c", "d"]), (case, ["e"])], tmp_path, 2, {"a", "c", "d"})
    assert [(j[0].name, j[1]) for j in wide] == [("solutions", ["a", "d"]), ("solutions", ["c"])]
    assert [(j[0].name, j[1]) for j in alone] == [("solutions", ["b"]), ("solutions_relu_cuda_graph", ["e"])]
