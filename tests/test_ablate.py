"""`kernelpro ablate`: the report's statistics on known cells, and the runner end to end on the CPU (real
harness jobs with --device cpu: real CPU timings of a CPU template), resumable; LLM arms against the
loopback endpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelpro.agent.ablate import Arm, CellResult, nodes_to_reach, parse_seeds, render_report
from kernelpro.cli import main
from kernelpro.errors import KernelProError
from kernelpro.results.store import Store

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from loopback_llm import LoopbackLLM  # noqa: E402

TASK = HERE / "tasks" / "vector_add.py"
TEMPLATE = HERE / "data" / "templates" / "repeat_add.py"


def cell(arm, task, seed, confirmed, best, traj, start=1.0, gpu=60.0):
    return CellResult(arm=arm, task=task, seed=seed, policy="param", optimize_run=1, nodes=len(traj),
                      working=len(traj), stop_reason="node budget spent", timed=True, start_speedup=start,
                      best_speedup=best, confirmed=confirmed, confirm_rounds=4, gpu_seconds=gpu, trajectory=traj)


def test_report_on_known_cells():
    cells = []
    for seed in range(5):
        # advice reaches 1.5x on its second node in every seed; blind search gets 1.2x on its fourth
        cells.append(cell("advice-mcts", "t/a", seed, 1.5, 1.5, [1.0, 1.5, 1.5, 1.5]))
        cells.append(cell("none-mcts", "t/a", seed, 1.2, 1.2, [1.0, 1.0, 1.0, 1.2]))
    out = render_report(cells, ["advice-mcts", "none-mcts"])
    assert all(len(line) <= 80 for line in out.splitlines()), out
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith(("advice-mcts", "none-mcts"))}
    # confirmed and search best are constant per arm, so the bootstrap interval is a point
    assert "1.500 [1.500,1.500]" in rows["advice-mcts"] and "1.200 [1.200,1.200]" in rows["none-mcts"]
    # 90% of the best any arm found (1.5x) is 1.35x: advice gets there at node 2, blind search never
    assert "2 (5/5)" in rows["advice-mcts"] and "- (0/5)" in rows["none-mcts"]
    assert rows["advice-mcts"].split()[-1] == "5.0"           # 5 cells x 60 s
    assert "exact two-sided sign test" in out
    assert "advice-mcts vs none-mcts: 5 pairs, 5 better, 0 worse, 0 tied; p = 0.0625" in out


def test_report_without_timings_says_so():
    c = CellResult(arm="none-mcts", task="t/a", seed=0, policy="param", optimize_run=1, nodes=3, working=2,
                   stop_reason="x", timed=False)
    out = render_report([c], ["none-mcts"])
    assert out.startswith("static evaluator (no GPU): nothing was timed") and "2 of 3 nodes" in out


def test_helpers_and_one_line_errors():
    assert nodes_to_reach([None, 1.0, 1.4, 1.6], 1.35) == 3 and nodes_to_reach([1.0], 2.0) is None
    assert Arm.parse("raw-greedy") == Arm("raw", "greedy") and Arm.parse("advice-mcts").name == "advice-mcts"
    with pytest.raises(KernelProError, match="FEEDBACK-STRATEGY"):
        Arm.parse("advice-beam")
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4] and parse_seeds("3,7") == [3, 7]
    with pytest.raises(KernelProError, match="--seeds"):
        parse_seeds("a-b")
    with pytest.raises(KernelProError, match="unknown keys"):
        CellResult.from_dict({**cell("a", "t", 0, 1.0, 1.0, [1.0]).to_dict(), "colour": 1})


def test_runner_end_to_end_on_the_cpu_and_resume(tmp_path, capsys):
    db = tmp_path / "r.db"
    base = ["ablate", str(TASK), "--template", str(TEMPLATE), "--start", "SLOW=4", "--arms",
            "advice-greedy,none-greedy", "--seeds", "0", "--budget-nodes", "2", "--confirm", "2", "--device", "cpu",
            "--evaluator", "harness", "--sizes", "default", "--db", str(db)]
    assert main(base) == 0
    raw = capsys.readouterr().out
    assert all(len(line) <= 80 for line in raw.splitlines()), raw
    out = " ".join(raw.split())          # lines are folded at 80 columns
    assert "2 cells = 2 arms x 1 tasks x 1 seeds" in out and "0 already recorded" in out
    st = Store(db)
    study = st.runs("ablate")[-1]
    cells = st.cells(study["id"])
    assert {(c["arm"], c["seed"]) for c in cells} == {("advice-greedy", 0), ("none-greedy", 0)}
    for c in cells:
        r = CellResult.from_dict(c["payload"])
        assert r.timed and r.device == "cpu" and r.nodes == 2 and r.gpu_seconds > 0
        assert r.best_speedup and r.start_speedup and r.best_speedup >= r.start_speedup
        # SLOW=4 -> 2 is a quarter of the work: the search finds it and the side-by-side rounds confirm it
        assert r.confirmed is not None and r.confirmed > 1.0 and r.confirm_rounds >= 1
        opt = st.get_run(c["optimize_run"])
        assert opt["config"]["ablate_study"] == study["id"] and opt["status"] == "done"
    assert "CPU-min" in out and "advice-greedy vs none-greedy: 1 pairs" in out
    n_opt = len(st.runs("optimize"))
    # a second call skips what is recorded and says so; a wider study runs only the new cells (none here)
    assert main(base) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 already recorded, skipped" in out and len(Store(db).runs("optimize")) == n_opt
    assert main(base[:-2] + ["--db", str(db), "--seeds", "0-1", "--max-cells", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "4 cells" in out and "2 already recorded" in out and "--max-cells 0 reached" in out
    assert Store(db).get_run(study["id"])["status"] == "interrupted"     # two cells left to run
    # the same study name with another budget is refused in one line
    assert main(base[:-2] + ["--db", str(db), "--budget-nodes", "3"]) == 1
    assert "was set up with budget_nodes 2 (now 3)" in capsys.readouterr().err


def test_llm_arm_against_the_loopback_endpoint(tmp_path, capsys):
    good = ("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
            "        return a + b\n")
    with LoopbackLLM([("reply", f"Change: plain add\n```python\n{good}```")]) as srv:
        cfg = tmp_path / "kp.toml"
        cfg.write_text(f'[llm]\nbase_url = "{srv.base_url}"\nmodel = "loop"\nmax_retries = 1\nbackoff_s = 0.01\n')
        rc = main(["ablate", str(TASK), "--policy", "llm", "--config", str(cfg), "--arms", "none-greedy",
                   "--seeds", "0", "--budget-nodes", "2", "--confirm", "0", "--device", "cpu", "--evaluator",
                   "harness", "--sizes", "default", "--db", str(tmp_path / "r.db"), "--study", "llm"])
        n_requests = len(srv.requests)
    out = capsys.readouterr().out
    assert rc == 0, out
    st = Store(tmp_path / "r.db")
    (c,) = st.cells(st.runs("ablate")[-1]["id"])
    r = CellResult.from_dict(c["payload"])
    assert r.policy == "llm" and r.arm == "none-greedy" and r.timed
    assert r.best_speedup is not None and r.confirmed is None      # the start is the reference: nothing to confirm
    assert n_requests >= 1 and st.get_run(r.optimize_run)["config"]["policy"] == "llm"


def test_task_without_template_is_refused_before_a_study_is_recorded(tmp_path, capsys):
    db = tmp_path / "r.db"
    assert main(["ablate", "ptxbench/attn_fwd_bf16_d64", "--evaluator", "static", "--arch", "sm_90a",
                 "--db", str(db)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no parameterized template for ptxbench/attn_fwd_bf16_d64" in err[0]
    assert not db.exists() or Store(db).runs("ablate") == []
    assert main(["ablate", str(TASK), "--arms", "advice-beam", "--db", str(db)]) == 1
    assert "FEEDBACK-STRATEGY" in capsys.readouterr().err
