"""`kernelpro compare` and `optimize --confirm`: candidates timed side by side in one worker, rounds rotating
the judged file. Run on the CPU with pure-PyTorch candidates (real worker processes, real timing loop);
the GPU test checks that a rival's load_inline build is found in its own compile cache."""

import json
from pathlib import Path

import pytest

from kernelpro.cli import main
from kernelpro.harness.compare import compare
from kernelpro.report.html import render
from kernelpro.results.comparison import load_comparison
from kernelpro.results.facts import load_run
from kernelpro.results.store import Store
from kernelpro.suites.task import load_task
from kernelpro.toolchain import no_gpu_reason

HERE = Path(__file__).parent
TASK = HERE / "tasks" / "vector_add.py"
TEMPLATE = HERE / "data" / "templates" / "repeat_add.py"

ADD = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n        return {expr}\n"
SLOW = ("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
        "        for _ in range(15):\n            c = a + b\n        return c\n")


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    slow, fast, wrong = tmp_path / "slow.py", tmp_path / "fast.py", tmp_path / "wrong.py"
    slow.write_text(SLOW)
    fast.write_text(ADD.format(expr="a + b"))
    wrong.write_text(ADD.format(expr="a - b"))
    return slow, fast, wrong


def test_compare_times_rivals_in_one_loop_and_leaves_out_a_wrong_one(tmp_path):
    slow, fast, wrong = _files(tmp_path)
    cmp = compare(load_task(TASK), [slow, fast, wrong], rounds=3, device="cpu", timeout_s=300)
    assert cmp.judged == ["slow", "fast", "wrong"]
    # rounds 1 and 2 time slow and fast together; round 3 judges the wrong one, which fails
    assert all(r["slow"] and r["fast"] for r in cmp.rounds[:2])
    assert all(x > 2.0 for x in cmp.ratios("fast"))         # 15 adds vs 1, measured side by side
    assert all(r["wrong"] is None for r in cmp.rounds)
    notes = " | ".join(cmp.notes)
    assert "wrong: rival left out: wrong output at the timing size" in notes
    assert "round 3: wrong failed: wrong_output" in notes
    summ = {s["label"]: s for s in cmp.summary()}
    assert summ["fast"]["rounds"] == 2 and summ["fast"]["faster_in"] == 2
    assert summ["wrong"]["rounds"] == 0 and summ["wrong"]["ratio_median"] is None


def test_compare_cli_stores_every_round_and_fails_when_a_candidate_was_never_timed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")   # rich wraps the table to the terminal's width
    slow, fast, wrong = _files(tmp_path)
    db, js = tmp_path / "runs.db", tmp_path / "cmp.json"
    rc = main(["compare", str(TASK), str(slow), str(fast), str(wrong), "--rounds", "3", "--device", "cpu",
               "--db", str(db), "--json", str(js)])
    assert rc == 1                                           # 'wrong' has no timed round
    out = capsys.readouterr().out
    assert "ratio fast" in out and "median" in out
    st = Store(db)
    run = st.runs("compare")[-1]
    assert run["status"] == "done" and run["config"]["labels"] == ["slow", "fast", "wrong"]
    cands = st.candidates(run["id"])
    rounds = {c["info"]["label"]: [r["payload"]["compare_round"] for r in st.results("evaluations", c["id"])]
              for c in cands}
    assert rounds == {"slow": [1], "fast": [2], "wrong": [3]}
    # the judged candidate's speedup is against the baseline only; rivals are reported apart
    rec = st.results("evaluations", cands[0]["id"])[0]["payload"]
    assert set(rec["speedup"]) == {"eager"} and set(rec["rivals"]) == {"rival:fast"}
    assert json.loads(js.read_text())["summary"][1]["faster_in"] == 2
    # the stored rounds rebuild the same comparison, and the report shows it
    again = load_comparison(st, run["id"])
    assert again.summary() == json.loads(js.read_text())["summary"]
    assert "Side by side in one worker" in render([load_run(st, run["id"])])


def test_a_rival_that_fails_its_own_round_does_not_count(tmp_path):
    # A try/except fallback gives the right answer, so it passes the rival's output check; the round that
    # judges it in full flags it, and then none of its timings count.
    slow, fast, _ = _files(tmp_path)
    cheat = tmp_path / "cheat.py"
    cheat.write_text("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
                     "        try:\n            raise RuntimeError('kernel failed')\n"
                     "        except RuntimeError:\n            return a + b\n")
    cmp = compare(load_task(TASK), [slow, fast, cheat], rounds=3, device="cpu", timeout_s=300)
    assert cmp.rounds[0]["cheat"] is not None                 # timed as a rival while slow was judged
    assert cmp.rounds[2]["cheat"] is None and cmp.disqualified == {"cheat"}
    assert "round 3: cheat failed: try_except_fallback" in " | ".join(cmp.notes)
    summ = {s["label"]: s for s in cmp.summary()}
    assert summ["cheat"]["rounds"] == 0 and summ["cheat"]["disqualified"] and cmp.ratios("cheat") == []
    assert summ["fast"]["rounds"] == 2 and not summ["fast"]["disqualified"]


def test_compare_rejects_bad_input_in_one_line(tmp_path, capsys):
    slow, _, _ = _files(tmp_path)
    assert main(["compare", str(TASK), str(slow), "--device", "cpu", "--db", str(tmp_path / "r.db")]) == 1
    assert "at least two candidate files" in capsys.readouterr().err
    assert main(["compare", str(TASK), str(slow), str(tmp_path / "nope.py"), "--device", "cpu",
                 "--db", str(tmp_path / "r.db")]) == 1
    assert "nope.py not found" in capsys.readouterr().err
    assert main(["compare", str(TASK), str(slow), str(slow), "--labels", "x", "--device", "cpu",
                 "--db", str(tmp_path / "r.db")]) == 1
    assert "--labels needs 2 distinct names" in capsys.readouterr().err
    assert main(["compare", str(TASK), str(slow), str(slow), "--rounds", "1", "--device", "cpu",
                 "--db", str(tmp_path / "r.db")]) == 1
    assert "give at least 2, one round judging each candidate in full" in capsys.readouterr().err


def test_optimize_param_search_from_a_start_then_confirms_start_vs_best(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "runs.db"
    rc = main(["optimize", str(TASK), "--policy", "param", "--template", str(TEMPLATE), "--start", "SLOW=8",
               "--search", "greedy", "--budget-nodes", "3", "--evaluator", "harness", "--device", "cpu",
               "--confirm", "2", "--quiet", "--db", str(db), "--workdir", str(tmp_path / "w")])
    out = capsys.readouterr().out
    assert rc == 0, out
    st = Store(db)
    opt = st.runs("optimize")[-1]
    nodes = {n["node_key"]: n["payload"] for n in st.nodes(opt["id"])}
    assert nodes["n0"]["info"]["params"] == {"SLOW": 8} and nodes["n0"]["what"].startswith("start (SLOW 2->8)")
    assert nodes["n1"]["info"]["params"]["SLOW"] == 4            # one step down the x2 ladder (16 is invalid)
    best = max(nodes, key=lambda k: nodes[k]["outcome"]["speedup"])
    assert nodes[best]["info"]["params"]["SLOW"] < 8
    cmp_run = st.runs("compare")[-1]
    assert cmp_run["config"]["optimize_run"] == opt["id"] and cmp_run["status"] == "done"
    assert cmp_run["config"]["labels"] == ["start n0", f"best {best}"]
    assert "ratio best" in out and "side by side" in out
    cmp = load_comparison(st, cmp_run["id"])
    assert cmp.judged == ["start n0", f"best {best}"] and all(r["start n0"] and r[f"best {best}"] for r in cmp.rounds)
    assert all(x > 1.0 for x in cmp.ratios(f"best {best}"))   # a quarter of the work is faster, side by side too
    # the report shows the confirmation with the search, and a node keeps its own verdict (not a round's)
    view = load_run(st, opt["id"])
    assert len(view.comparisons) == 1 and "Side by side in one worker" in render([view])
    best_facts = next(f for f in view.facts if f.info.get("node") == best)
    assert list(best_facts.speedups.values()) == [pytest.approx(nodes[best]["outcome"]["speedup"])]
    assert opt["config"]["start"] == "SLOW=8" and opt["config"]["confirm"] == 2


def test_optimize_rejects_a_bad_start(tmp_path, capsys):
    base = ["optimize", str(TASK), "--policy", "param", "--template", str(TEMPLATE), "--evaluator", "static",
            "--db", str(tmp_path / "r.db"), "--quiet"]
    assert main(base + ["--start", "TILE=3"]) == 1
    assert "TILE not a parameter" in capsys.readouterr().err
    assert main(base + ["--start", "SLOW=99"]) == 1
    assert "SLOW must be in [1, 8]" in capsys.readouterr().err
    assert main(base + ["--start", "SLOW"]) == 1
    assert "expected KEY=VALUE pairs" in capsys.readouterr().err
    assert main(base + ["--confirm", "1"]) == 1
    assert "give at least 2 rounds" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(no_gpu_reason() is not None, reason=f"needs a CUDA GPU ({no_gpu_reason()})")
def test_compare_on_gpu_loads_a_rivals_build_from_its_own_cache(tmp_path):
    honest = HERE / "candidates" / "honest"
    cmp = compare(load_task(TASK), [honest / "vector_add_torch.py", honest / "vector_add_cuda.py"], rounds=2)
    assert cmp.notes == [], cmp.notes
    assert all(r["vector_add_torch"] and r["vector_add_cuda"] for r in cmp.rounds)
