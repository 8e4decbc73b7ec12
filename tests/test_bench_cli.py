"""`kernelpro bench` end to end on the CPU: static-only mode, --device cpu, missing solutions, resume, JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kernelpro.cli import main
from kernelpro.results.store import Store

HERE = Path(__file__).parent
TASKS = HERE / "tasks"


def _solutions(tmp_path: Path) -> Path:
    d = tmp_path / "sol"
    d.mkdir()
    shutil.copy(HERE / "candidates/honest/vector_add_torch.py", d / "vector_add.py")
    shutil.copy(HERE / "candidates/adversarial/library_fallback.py", d / "matmul_fp32.py")
    return d


def test_bench_cpu_json_records_everything(tmp_path, capsys):
    db = tmp_path / "runs.db"
    rc = main(["bench", str(TASKS), "--solutions", str(_solutions(tmp_path)), "--device", "cpu", "--baselines",
               "eager", "--trials", "1", "--sizes", "shown", "--json", "--db", str(db)])
    assert rc == 0
    rep = json.loads(capsys.readouterr().out)
    rows = {r["task"].split("/")[-1]: r for r in rep["rows"]}
    assert rows["vector_add"]["correct"] is True and rows["vector_add"]["speedup"]["eager"] > 0
    assert rows["matmul_fp32"]["reason"] == "library_fallback" and rows["matmul_fp32"]["correct"] is False
    skips = [n for n in rep["notes"] if n.startswith("skipped ")]   # every task without a solution, in one note
    assert len(skips) == 1 and skips[0].endswith(": layernorm_chw, matmul_bf16, vector_add_big")
    s = rep["summary"]["eager"]
    assert s["compile_rate"] == 1.0 and s["correct_rate"] == 0.5
    store = Store(db)
    run = store.runs("bench")[-1]
    assert run["status"] == "done"
    cands = store.candidates(run["id"])
    assert len(cands) == 2 and all(store.latest("evaluations", c["id"]) for c in cands)
    assert {v["arch"] for c in cands for v in store.results("verifications", c["id"])} == {"sm_90a", "sm_100a"}


def test_bench_without_gpu_says_what_it_skipped_and_resume_skips_done(tmp_path, capsys):
    from kernelpro.toolchain import no_gpu_reason

    if no_gpu_reason() is None:
        import pytest

        pytest.skip("this machine has a GPU")
    db = tmp_path / "runs.db"
    sol = _solutions(tmp_path)
    assert main(["bench", str(TASKS), "--solutions", str(sol), "--task", "vector_add", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "skipped: no GPU" in out and "verified statically for sm_90a, sm_100a" in out
    store = Store(db)
    run_id = store.runs("bench")[-1]["id"]
    n = len(store.results("verifications", store.candidates(run_id)[0]["id"]))
    assert main(["bench", str(TASKS), "--resume", str(run_id), "--db", str(db)]) == 0
    assert len(store.results("verifications", store.candidates(run_id)[0]["id"])) == n  # nothing redone


def test_bench_bad_input_is_one_line(tmp_path, capsys):
    assert main(["bench", str(TASKS), "--solutions", str(tmp_path / "nope"), "--db", str(tmp_path / "r.db")]) == 1
    err = capsys.readouterr().err.strip()
    assert "not a folder" in err and len(err.splitlines()) == 1
    assert main(["bench", str(TASKS), "--baselines", "eager,magic", "--db", str(tmp_path / "r.db")]) == 1


def test_without_gpu_the_compile_column_is_the_static_compile(tmp_path, capsys):
    """No GPU, no worker run: the compile verdict is nvcc's for the primary target, not '-'."""
    from kernelpro.toolchain import find_tool, no_gpu_reason

    if no_gpu_reason() is None or find_tool("nvcc") is None:
        import pytest

        pytest.skip("needs a machine without a GPU but with nvcc")
    src = ("import torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
           "ext = load_inline(name='kp_t_BODYHASH', cpp_sources='', cuda_sources='__global__ void k(float* x) "
           "{ x[threadIdx.x] += BODY; }', functions=[], no_implicit_headers=True)\n"
           "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a + b\n")
    sol = tmp_path / "sol"
    sol.mkdir()
    (sol / "vector_add.py").write_text(src.replace("BODY", "1.f").replace("HASH", "a"))
    (sol / "vector_add_big.py").write_text(src.replace("BODY", "undefined_q").replace("HASH", "b"))
    main(["bench", str(TASKS), "--solutions", str(sol), "--task", "vector_add", "--task", "vector_add_big",
          "--arch", "sm_90a", "--db", str(tmp_path / "r.db"), "--json"])
    rows = {r["task"].split("/")[-1]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["vector_add"]["compiled"] is True
    assert rows["vector_add_big"]["compiled"] is False


def test_tolerance_lines_name_their_tasks_and_fit_80_columns():
    """A mixed suite printed six bare `tolerance:` lines; each must say which tasks it covers."""
    from kernelpro.bench.pipeline import tolerance_lines
    from kernelpro.bench.table import summary_lines
    from kernelpro.suites.suite import get_suite

    tasks = get_suite("ptxbench").tasks()
    entries = tolerance_lines(tasks, None)
    assert len(entries) > 1
    named = [n.strip(", ") for e in entries for n in e.split(" for ", 1)[1].split(", ")]
    assert sorted(named) == sorted(t.name for t in tasks)      # every task under exactly one rule
    lines = "\n".join(summary_lines({"tolerance": entries})).splitlines()
    assert all(len(ln) <= 80 for ln in lines)
    single = tolerance_lines(tasks[:1], None)
    assert len(single) == 1 and " for " not in single[0]       # one rule for all: nothing to name


def test_a_target_left_out_by_archs_is_not_a_compile_error():
    """Hopper-only references (ARCHS = {"sm_90a": ...}) on an sm_100a bench read `compile_error` and counted
    as failed builds; a target the candidate declares it does not build for is neither."""
    from kernelpro.results.facts import Facts, arch_counts, arch_counts_text, arch_facts, verdict

    cause = {"short": "Hopper-only (wgmma)", "line": "Hopper-only: uses wgmma (ARCHS: sm_90a); not compiled for sm_100a"}
    out = arch_facts({"arch": "sm_100a", "ok": False,
                      "payload": {"compiled": False, "not_declared": cause, "cause": cause["line"],
                                  "cause_short": cause["short"], "features_ok": False}})
    built = arch_facts({"arch": "sm_100a", "ok": True, "payload": {"compiled": True, "features_ok": True,
                                                                   "requested": ["tma"]}})
    broken = arch_facts({"arch": "sm_100a", "ok": False, "payload": {"compiled": False, "features_ok": False}})
    assert out.declared_out and out.cell == "not built: Hopper-only (wgmma)"
    assert not broken.declared_out and broken.cell.startswith("fails: ")
    facts = []
    for i, a in enumerate((out, built, broken)):
        f = Facts(id=i, run_id=1, task=f"t{i}", origin="reference", parent_id=None, info={}, source="", hash=str(i),
                  compiled=a.compiled, arch="sm_100a")
        f.per_arch["sm_100a"] = a
        facts.append(f)
    assert [verdict(f) for f in facts] == ["not_for_target", "pending", "compile_error"]
    counts = arch_counts(facts)
    assert arch_counts_text(counts, "compiled") == "sm_100a 1/2 (+1 not for it)"
