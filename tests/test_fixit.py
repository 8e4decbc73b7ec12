"""fixit export: failed->fixed pairs mined from a store holding realistic search trajectories."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from trajectory_data import TASKS, add, multiturn_run, populated_store

from kernelpro.cli import main as cli
from kernelpro.errors import KernelProError
from kernelpro.fixit import CATEGORIES, export, normalized_hash
from kernelpro.results.facts import candidate_facts, verdict
from kernelpro.results.store import Store


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture()
def store(tmp_path: Path):
    s, ids = populated_store(tmp_path / "runs.db")
    yield s, ids
    s.close()


def test_export_mix_and_cli_report(store, tmp_path: Path, capsys):
    s, ids = store
    out = tmp_path / "data"
    rc = cli(["fixit", "--db", str(s.path), "export", "-o", str(out), "--holdout-tasks", "gemm_bf16"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "fixit mix" in printed and "held-out tasks: ptxbench/gemm_bf16" in printed
    mix = json.loads((out / "mix.json").read_text())
    train, evals = _rows(out / "train.jsonl"), _rows(out / "eval.jsonl")
    # Every failure kind the searches produced, for every training task, once per cell.
    cells = Counter((r["task"], r["category"]) for r in train)
    assert set(cells) == {(t, c) for t in TASKS if t != "ptxbench/gemm_bf16" for c in CATEGORIES}
    assert set(cells.values()) == {1}
    assert mix["kept_by_category"] == {c: 4 for c in CATEGORIES}  # 3 train tasks + 1 held out
    assert mix["train"] == len(train) == 15 and mix["eval"] == len(evals) == 5
    # softmax has a second compile error and wrong output from the multi-turn run: found 2, kept 1.
    assert mix["tasks"]["ptxbench/softmax_fp32"]["compile_error"] == {"found": 2, "kept": 1}
    assert mix["duplicates"] == 5 and mix["dropped_by_balance"] == 2
    assert mix["stats"]["unfixed:compile_error"] >= 4  # dead-end nodes have no fix and yield nothing


def test_pairs_are_failed_then_fixed(store, tmp_path: Path):
    s, _ = store
    export(s, tmp_path / "d", holdout_frac=0.0)
    rows = _rows(tmp_path / "d" / "train.jsonl")
    assert rows
    for r in rows:
        m = r["meta"]
        before = candidate_facts(s, s.candidate(m["failed_id"]))
        after = candidate_facts(s, s.candidate(m["fixed_id"]))
        assert verdict(before) == r["category"]
        assert verdict(after) in (("pass",) if r["category"] == "slow" else ("pass", "slow"))
        if r["category"] == "slow":
            assert after.speedup() > before.speedup()
        roles = [x["role"] for x in r["messages"]]
        assert roles == ["system", "user", "assistant"]
        assert before.source.rstrip() in r["messages"][1]["content"]
        assert r["messages"][2]["content"].rstrip().endswith(after.source.rstrip() + "\n```")
        assert m["failed_hash"] == normalized_hash(before.source)


def test_explanations_model_first_then_findings(store, tmp_path: Path):
    s, ids = store
    export(s, tmp_path / "d", run_ids=[ids["optimize"][0]], holdout_frac=0.0)
    by_cat = {r["category"]: r for r in _rows(tmp_path / "d" / "train.jsonl")}
    assert set(by_cat) == set(CATEGORIES)
    comp = by_cat["compile_error"]
    assert comp["meta"]["explanation_from"] == "model"
    assert comp["messages"][2]["content"].startswith("The kernel used `scale_factor` without declaring it")
    assert 'identifier "scale_factor" is undefined' in comp["messages"][1]["content"]  # the compiler's words
    wrong = by_cat["wrong_output"]["messages"][2]["content"]
    assert wrong.startswith("The guard was `i <= n`") and "class ModelNew: ..." not in wrong  # reply prose only
    feat = by_cat["missing_feature"]
    assert feat["meta"]["explanation_from"] == "findings"
    text = feat["messages"][2]["content"]
    assert "not using the requested features (wgmma)" in text and "uses wgmma, tma, mbarrier" in text
    assert "`wgmma.fence.sync.aligned`" in text  # the construct the fix introduced, from the diff
    slow = by_cat["slow"]
    assert "0.60x" in slow["messages"][1]["content"] and "vector loads" in slow["messages"][1]["content"]
    assert "runs at 1.10x vs cublas" in slow["messages"][2]["content"]
    assert "output_reused_across_calls" in by_cat["flagged"]["messages"][1]["content"]


def test_heldout_tasks_and_sizes_never_reach_training(store, tmp_path: Path):
    s, _ = store
    mix = export(s, tmp_path / "d", holdout_frac=0.5)
    train, evals = _rows(tmp_path / "d" / "train.jsonl"), _rows(tmp_path / "d" / "eval.jsonl")
    held = set(mix["heldout_tasks"])
    assert len(held) == 2 and held == {r["task"] for r in evals}
    assert not held & {r["task"] for r in train}
    assert {r["eval_sizes"] for r in evals} == {"heldout"}
    text = json.dumps(train)
    # The harness recorded a failure at held-out size M=1000: it is summarised, never spelled out.
    assert "M=1000" not in text and "held-out size" in text and "M=<held-out>" in text
    # Same store, same arguments: the same split (stable, not random per call).
    assert export(s, tmp_path / "d2", holdout_frac=0.5)["heldout_tasks"] == mix["heldout_tasks"]


def test_dedupe_by_normalised_code_hash(tmp_path: Path):
    s = Store(tmp_path / "db.sqlite")
    r1 = multiturn_run(s)
    # A second multi-turn run whose failing attempts differ only in whitespace: duplicates.
    r2 = s.new_run("bench", "ptxbench", {"turns": 3})
    task = "ptxbench/softmax_fp32"
    first = s.candidate(s.candidates(r1)[0]["id"])
    cid = s.add_candidate(r2, task, first["source"].replace("\n", "   \n\n"), "py", "llm")
    s.record("evaluations", cid, False, s.latest("evaluations", first["id"])["payload"], "sm_90a")
    add(s, r2, task, "pass", 777, origin="llm", speedup=1.25)
    mix = export(s, tmp_path / "d", holdout_frac=0.0)
    rows = _rows(tmp_path / "d" / "train.jsonl")
    assert mix["mined"] == 3 and mix["duplicates"] == 1
    assert len({r["meta"]["failed_hash"] for r in rows}) == len(rows) == 2
    links = {r["category"]: (r["meta"]["link"], r["meta"]["hops"]) for r in rows}
    # No parent links in multi-turn runs: the next attempts at the task are the fix.
    assert links == {"compile_error": ("consecutive", 1), "wrong_output": ("consecutive", 1)}
    # Of the two copies of the compile error, the one fixed in one step (run 2) is kept.
    assert {r["meta"]["run_id"] for r in rows if r["category"] == "compile_error"} == {r2}


def test_balance_cap(store, tmp_path: Path):
    s, _ = store
    mix = export(s, tmp_path / "d", holdout_frac=0.0, per_cell=2)
    cells = Counter((r["task"], r["category"]) for r in _rows(tmp_path / "d" / "train.jsonl"))
    assert max(cells.values()) == 2 and mix["dropped_by_balance"] == 0
    assert cells[("ptxbench/softmax_fp32", "compile_error")] == 2


def test_jsonl_loads_with_datasets(store, tmp_path: Path):
    datasets = pytest.importorskip("datasets", reason="HF datasets not installed (pip install 'kernelpro[train]')")
    s, _ = store
    export(s, tmp_path / "d", holdout_frac=0.25)
    ds = datasets.load_dataset("json", data_files={"train": str(tmp_path / "d" / "train.jsonl"),
                                                   "eval": str(tmp_path / "d" / "eval.jsonl")})
    assert ds["train"].num_rows > 0 and ds["eval"].num_rows > 0
    row = ds["train"][0]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
    assert set(ds["train"].column_names) >= {"messages", "task", "category", "meta"}


def test_nothing_to_export_is_one_line(tmp_path: Path, capsys):
    s = Store(tmp_path / "empty.db")
    with pytest.raises(KernelProError, match="no failed-then-fixed attempts"):
        export(s, tmp_path / "d")
    assert cli(["fixit", "--db", str(s.path), "export", "-o", str(tmp_path / "d")]) == 1
    err = capsys.readouterr().err
    assert "no failed-then-fixed" in err and "Traceback" not in err
    assert cli(["fixit", "--db", str(s.path), "export", "-o", str(tmp_path / "d"), "--runs", "x"]) == 1
    assert cli(["fixit", "--db", str(s.path), "export", "-o", str(tmp_path / "d"), "--runs", "99"]) == 1
    assert "no run 99" in capsys.readouterr().err
