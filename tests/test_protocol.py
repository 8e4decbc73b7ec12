"""PTXBench's multi-turn protocol: conversation flow over real HTTP (loopback server), feedback between
turns, early stop at the target, aggregation after turns 1/4/8 in PTXBench's layout, resume, and the
CLI end to end with the real static evaluator."""

import re

import pytest

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelpro[llm]')")

from loopback_llm import LoopbackLLM  # noqa: E402
from rich.console import Console  # noqa: E402

from kernelpro.agent.evaluator import EvalOutcome  # noqa: E402
from kernelpro.agent.llm import LLMClient, LLMConfig  # noqa: E402
from kernelpro.agent.protocol import Protocol, ProtocolConfig, Turn, aggregate, render_table  # noqa: E402
from kernelpro.cli import main  # noqa: E402
from kernelpro.results.store import Store  # noqa: E402
from kernelpro.suites.task import load_task  # noqa: E402

TASK = '''
import torch
import torch.nn as nn
N = 64
META = {"name": "double", "description": "y = 2 * x", "features": {"sm_90a": ["wgmma", "tma"]}}
class Model(nn.Module):
    def forward(self, x):
        return 2 * x
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
'''


def cand(tag: str) -> str:
    return f"# {tag}\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return 2 * x\n"


class TagEvaluator:
    """Reads the verdict from the candidate's first-line tag: the protocol logic is under test here."""
    def evaluate(self, task, path):
        tag = path.read_text().splitlines()[0]
        kv = dict(re.findall(r"(\w+)=(\S+)", tag))
        if kv.get("compile") == "fail":
            return EvalOutcome(False, stage="compile", reason="nvcc error", compile_errors="k.cu(3): error: expected ;")
        missing = [m for m in kv.get("missing", "").split(",") if m]
        return EvalOutcome(True, speedup=float(kv["speed"]), stage="ok", correct=True,
                           correct_with_arch=kv.get("arch") == "1", missing_features=missing,
                           diagnoses="latency bound")


@pytest.fixture
def task(tmp_path):
    p = tmp_path / "double.py"
    p.write_text(TASK)
    return load_task(p, suite="t")


def reply(tag):
    return ("reply", f"Change: x\n```python\n{cand(tag)}```")


def test_turns_feedback_and_early_stop(task, tmp_path):
    script = [reply("compile=fail"), ("reply", "I think we should use TMA."),
              reply("speed=0.8 arch=0 missing=tma"), reply("speed=1.1 arch=1"), reply("speed=1.3 arch=1"),
              reply("speed=9 never-reached")]
    store = Store(tmp_path / "r.db")
    rid = store.new_run("optimize", "t", {})
    with LoopbackLLM(script) as srv:
        client = LLMClient(LLMConfig(base_url=srv.base_url, model="m", backoff_s=0.01))
        cfg = ProtocolConfig(model="m", turns=8, target_speedup=1.2, variants=["base"], repeats=1,
                             workdir=tmp_path / "w")
        turns, stop = Protocol(task, client, TagEvaluator(), store, rid, cfg).run()
        reqs = srv.requests
    assert stop == ""
    assert [t.turn for t in turns] == [1, 2, 3, 4, 5]          # stopped at the target, not at 8
    assert turns[-1].target_met and turns[-1].speedup == 1.3
    assert [t.correct for t in turns] == [False, False, True, True, True]
    # each request carries the whole conversation so far, and the tool results of the last turn
    assert [len(r["messages"]) for r in reqs] == [2, 4, 6, 8, 10]
    last_user = [r["messages"][-1]["content"] for r in reqs]
    assert "Compilation failed" in last_user[1] and "expected ;" in last_user[1]
    assert "could not be used" in last_user[2] and "no code" in last_user[2]
    assert "Speedup 0.800x" in last_user[3] and "WARNING" in last_user[3] and "tma" in last_user[3]
    assert "latency bound" in last_user[3]
    assert "Keep optimizing" in last_user[4]
    # every turn is in the store, with its candidate and verdict
    nodes = store.nodes(rid)
    assert [n["node_key"] for n in nodes] == [f"t/double/base/r0/t{i}" for i in range(1, 6)]
    assert nodes[1]["candidate_id"] is None and nodes[2]["candidate_id"] is not None
    assert store.candidate(nodes[4]["candidate_id"])["info"]["turn"] == 5


def test_aggregate_follows_ptxbench_rule():
    def t(var, rep, turn, correct=False, arch=None, sp=None):
        return Turn("t/g", var, rep, turn, ok=correct, correct=correct, correct_with_arch=arch, speedup=sp)

    turns = [
        t("base", 0, 1), t("base", 0, 2, True, False, 0.9), t("base", 0, 5, True, True, 1.4),
        t("hwdocs", 0, 1, True, True, 1.1),
        t("hwdocs", 1, 1), t("hwdocs", 1, 2), t("hwdocs", 1, 3), t("hwdocs", 1, 4),
    ]
    rows = {r["turn_limit"]: r for r in aggregate(turns, "m", "sm_90a")}
    assert [rows[k]["n_trajectories"] for k in (1, 4, 8)] == [3, 3, 3]
    assert [rows[k]["correct"] for k in (1, 4, 8)] == [1, 2, 2]
    assert [rows[k]["correct_with_arch"] for k in (1, 4, 8)] == [1, 1, 2]
    assert [rows[k]["best_speedup"] for k in (1, 4, 8)] == [1.1, 1.1, 1.4]
    # no executed-instruction evidence at all (static-only runs): correct_with_arch is unknown, not 0
    rows = aggregate([t("base", 0, 1, True, None, 1.0)], "m", "sm_90a")
    assert rows[0]["correct_with_arch"] is None
    console = Console(record=True, width=120)
    console.print(render_table(rows))
    assert "n/a" in console.export_text()


def test_protocol_resumes_a_trajectory(task, tmp_path):
    store = Store(tmp_path / "r.db")
    rid = store.new_run("optimize", "t", {})
    cfg = ProtocolConfig(model="m", turns=4, variants=["base"], workdir=tmp_path / "w", max_endpoint_errors=1)
    with LoopbackLLM([reply("speed=0.5"), ("die",)]) as srv:
        client = LLMClient(LLMConfig(base_url=srv.base_url, model="m", backoff_s=0.01, max_retries=0))
        turns, stop = Protocol(task, client, TagEvaluator(), store, rid, cfg).run()
    assert "endpoint failed" in stop and len(turns) == 2
    with LoopbackLLM([reply("speed=0.7"), reply("speed=0.9")]) as srv:
        client = LLMClient(LLMConfig(base_url=srv.base_url, model="m", backoff_s=0.01))
        turns, stop = Protocol(task, client, TagEvaluator(), store, rid, cfg).run()
        first = srv.requests[0]["messages"]
    assert stop == "" and [t.turn for t in turns] == [1, 2, 3, 4]
    # the stored conversation was replayed (turn 1), the outage turn was redone, not counted
    assert len(first) == 2 + 2 and "speed=0.5" in first[2]["content"]
    assert [t.speedup for t in turns] == [0.5, 0.7, 0.9, 0.9]
    assert [n["node_key"][-2:] for n in store.nodes(rid)] == ["t1", "t2", "t3", "t4"]


def test_cli_protocol_end_to_end(task, tmp_path, capsys):
    no_cuda = cand("plain torch")
    with LoopbackLLM([("reply", f"```python\n{no_cuda}```")]) as srv:
        csv_path = tmp_path / "table.csv"
        rc = main(["optimize", str(task.path), "--db", str(tmp_path / "r.db"), "--protocol", "ptxbench",
                   "--base-url", srv.base_url, "--model", "loop-model", "--evaluator", "static", "--arch", "sm_90a",
                   "--turns", "2", "--variants", "base,hwdocs", "--repeats", "1", "--quiet",
                   "--table-csv", str(csv_path)])
        n_requests = len(srv.requests)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert n_requests == 4                     # 2 variants x 2 turns
    assert "loop-model" in out and "PTXBench protocol" in out
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("model,arch,definition,turn_limit,n_trajectories,correct,")
    assert len(lines) == 1 + 2                 # turn limits 1 and 2 (8 capped at --turns)
    assert lines[1].split(",")[5] == "0"       # a kernel without CUDA is never correct


def test_bench_protocol_mode_is_the_same_protocol(task, tmp_path, capsys):
    """The protocol is a mode of `kernelpro bench`: same run, same table."""
    no_cuda = cand("plain torch")
    with LoopbackLLM([("reply", f"```python\n{no_cuda}```")]) as srv:
        rc = main(["bench", str(task.path), "--protocol", "ptxbench", "--db", str(tmp_path / "r.db"),
                   "--base-url", srv.base_url, "--model", "loop-model", "--evaluator", "static", "--arch", "sm_90a",
                   "--turns", "1", "--variants", "base", "--repeats", "1", "--quiet"])
        n_requests = len(srv.requests)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert n_requests == 1 and "PTXBench protocol" in out
    (run,) = Store(tmp_path / "r.db").runs()
    assert run["kind"] == "optimize" and run["config"]["protocol"] == "ptxbench"


def test_bench_protocol_expands_a_suite_to_its_headline_tasks():
    from kernelpro.cli import _protocol_alias

    argv = _protocol_alias(["bench", "ptxbench", "--protocol", "ptxbench", "--turns", "8", "--quiet"])
    assert argv[0] == "optimize"
    tasks = [a for a in argv[1:] if a.startswith("ptxbench/")]
    assert len(tasks) == 5 and "ptxbench/gemm_bf16_headline" in tasks
    assert argv[argv.index("--protocol") + 1] == "ptxbench" and "--quiet" in argv
