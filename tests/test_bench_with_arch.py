"""PTXBench's correct_with_arch in `kernelpro bench`: correct AND requested SASS present AND executed (ncu).
Static presence alone never counts; missing ncu leaves it unjudged (None), never a pass."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kernelpro.bench.pipeline import _executed_leg
from kernelpro.bench.table import build_report
from kernelpro.errors import KernelProError
from kernelpro.results.store import Store
from kernelpro.suites.task import find_task

GEMM = "ptxbench/gemm_bf16_headline"


class _Progress:
    """The progress bar `_executed_leg` drives, doing nothing."""

    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass

    def advance(self, *a, **k):
        pass


def _row(store: Store, run: int, task, correct: bool, features_ok: bool, executed: bool | None) -> dict:
    cid = store.add_candidate(run, task.key + f"#{len(store.candidates(run))}", "src", "py", "user")
    store.record("verifications", cid, features_ok, {"features_ok": features_ok, "requested": ["wgmma"]},
                 arch="sm_90a")
    store.record("evaluations", cid, correct, {"candidate": "c.py", "device": "cuda", "ok": correct,
                                                    "correct": correct, "compiled": True}, arch="sm_90a")
    if executed is not None:
        store.record("profiles", cid, executed, {"kind": "executed", "executed_ok": executed,
                                                 "features": {"wgmma": {"executed": 7.0 if executed else 0.0}}},
                     arch="sm_90a")
    return {"task": task, "cid": cid, "cand": None}


def test_rule_needs_all_three_legs(tmp_path):
    task = find_task(GEMM)
    store = Store(tmp_path / "r.db")
    run = store.new_run("bench", "ptxbench", {})
    cases = {"all": (True, True, True), "no_ncu": (True, True, None), "static_only": (True, True, False),
             "not_emitted": (True, False, True), "wrong": (False, True, True)}
    rows = {k: _row(store, run, task, *v) for k, v in cases.items()}
    rep = build_report(store, run, rows, ["sm_90a"], "sm_90a", ["eager"])
    got = {k: r["correct_with_arch"] for k, r in zip(rows, rep["rows"], strict=True)}
    assert got == {"all": True, "no_ncu": None, "static_only": False, "not_emitted": False, "wrong": False}
    assert rep["rows"][0]["executed"] == {"wgmma": 7.0}
    assert rep["summary"]["eager"]["correct_with_arch_rate"] == 0.25   # 1 of the 4 judged
    # A task that requests no features is not scored by the rule, even when the candidate is wrong.
    plain = find_task(str(Path(__file__).parent / "tasks/vector_add.py"))
    rows = {"plain_wrong": _row(store, run, plain, False, True, None)}
    assert build_report(store, run, rows, ["sm_90a"], "sm_90a", ["eager"])["rows"][0]["correct_with_arch"] is None


def test_missing_ncu_is_a_note_or_a_one_line_error(tmp_path, monkeypatch):
    import kernelpro.toolchain as tc

    monkeypatch.setattr(tc, "find_tool", lambda name: None)
    task = find_task(GEMM)
    store = Store(tmp_path / "r.db")
    run = store.new_run("bench", "ptxbench", {})
    rows = {"t": _row(store, run, task, True, True, None)}

    notes: list[str] = []
    _executed_leg(store, rows, "sm_90a", argparse.Namespace(executed="auto", timeout=10), notes, _Progress())
    assert len(notes) == 1 and "ncu" in notes[0] and "unjudged" in notes[0]
    with pytest.raises(KernelProError, match="ncu"):
        _executed_leg(store, rows, "sm_90a", argparse.Namespace(executed="on", timeout=10), [], _Progress())
    assert not store.results("profiles", rows["t"]["cid"])   # nothing invented


@pytest.mark.gpu
def test_dead_branch_features_fail_and_the_reference_passes_on_gpu(tmp_path, capsys):
    """On a GPU with ncu: TMA + mbarrier compiled into a branch never taken are emitted (the static leg
    passes) but execute zero times, so correct_with_arch is False; the TMA reference executes them."""
    import json
    import shutil
    from pathlib import Path

    from kernelpro.cli import main
    from kernelpro.toolchain import find_tool

    if find_tool("ncu") is None:
        pytest.skip("needs Nsight Compute (ncu)")
    sol = tmp_path / "sol"
    sol.mkdir()
    shutil.copy(Path(__file__).parent / "candidates/ptxbench/rmsnorm_dead_tma.py", sol / "rmsnorm_bf16.py")
    common = ["--task", "rmsnorm_bf16", "--arch", "sm_90a", "--baselines", "eager", "--trials", "1",
              "--sizes", "shown", "--executed", "on", "--json", "--db", str(tmp_path / "r.db")]
    got = {}
    for name, solutions in (("dead", str(sol)), ("reference", "reference")):
        assert main(["bench", "ptxbench", "--solutions", solutions, *common]) == 0
        got[name] = json.loads(capsys.readouterr().out)["rows"][0]
    dead, ref = got["dead"], got["reference"]
    assert dead["correct"] is True and dead["features_ok"] is True, dead
    assert dead["executed_ok"] is False and dead["executed"]["tma"] == 0 and dead["correct_with_arch"] is False
    assert ref["correct"] is True and ref["executed"]["tma"] > 0 and ref["executed"]["mbarrier"] > 0
    assert ref["correct_with_arch"] is True


def test_each_profile_row_has_its_own_verdict_and_the_ncu_pass_follows_either(tmp_path, monkeypatch):
    # Seen on an H100: the attention-backward bundle was correct under the kernelpro profile and wrong
    # under PTXBench's (one element past atol 0.01). Both rows read wrong_output (the candidate's latest
    # evaluation), and the ncu pass was skipped because that latest evaluation was the wrong one.
    task = find_task(GEMM)
    store = Store(tmp_path / "r.db")
    run = store.new_run("bench", "ptxbench", {})
    cid = store.add_candidate(run, task.key, "src", "py", "user")
    store.record("verifications", cid, True, {"features_ok": True, "requested": ["wgmma"]}, arch="sm_90a")
    for profile, ok in (("kernelpro", True), ("ptxbench", False)):
        store.record("evaluations", cid, ok, {"candidate": "c.py", "device": "cuda", "ok": ok, "correct": ok,
                                              "compiled": True, "profile": profile,
                                              "reason": None if ok else "wrong_output",
                                              "failed_checks": [] if ok else ["wrong_output"]}, arch="sm_90a")
    rows = {"t": {"task": task, "cid": cid, "cand": None}}
    rep = build_report(store, run, rows, ["sm_90a"], "sm_90a", ["eager"], profiles=["kernelpro", "ptxbench"])
    by = {r["profile"]: r for r in rep["rows"]}
    assert by["kernelpro"]["correct"] is True and by["ptxbench"]["correct"] is False
    assert by["kernelpro"]["verdict"] != by["ptxbench"]["verdict"]
    assert "wrong" in by["ptxbench"]["verdict"] and "wrong" not in by["kernelpro"]["verdict"]

    import kernelpro.toolchain as tc

    monkeypatch.setattr(tc, "find_tool", lambda name: None)
    notes: list[str] = []

    _executed_leg(store, rows, "sm_90a", argparse.Namespace(executed="auto", timeout=10, resume=False), notes, _Progress())
    assert notes and "unjudged" in notes[0]   # it was due an ncu pass (none here): not skipped as incorrect
