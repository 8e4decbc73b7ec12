"""The side-by-side script's verdict logic (pure functions; the runs themselves need a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

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
