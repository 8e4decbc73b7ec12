"""The LLM-free policy over the real Hopper GEMM template: valid moves only, diagnosis guidance,
standalone candidates that the real static verifier accepts, and a search over the real parameter space."""

import random
from pathlib import Path

import pytest

from kernelpro.agent.evaluator import EvalOutcome, StaticEvaluator
from kernelpro.agent.mcts import ExpandContext, Node, Search, SearchConfig
from kernelpro.agent.memory import SearchMemory
from kernelpro.agent.policy_param import ParamPolicy, Template, moves, params_of
from kernelpro.results.store import Store
from kernelpro.suites.task import load_task
from kernelpro.toolchain import find_tool

gemm = pytest.importorskip("kernelpro.suites.ptxbench.reference.gemm_bf16")
gemm_rules = gemm.validate

TASK = '''
import torch
import torch.nn as nn
M = 256
N = 256
K = 256
META = {"name": "gemm_bf16", "dtype": "bf16", "features": {"sm_90a": ["wgmma", "tma", "mbarrier", "setmaxnreg"]}}
class Model(nn.Module):
    def forward(self, A, B):
        return A @ B
def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]
def get_init_inputs():
    return []
'''


@pytest.fixture
def template():
    # Pin the start point these tests reason about (a 128x256 tile, no cluster): the shipped PARAMS
    # follow the fastest measured configuration and may change.
    t = Template(gemm, "gemm_bf16")
    t.params = {**t.params, "BM": 128, "BN": 256, "CLUSTER_M": 1}
    return t


def test_moves_are_valid_and_repair_coupled_knobs(template):
    p = template.params
    assert gemm_rules(p) is None
    ms = moves(template, p)
    assert ms and all(gemm_rules(q) is None for _, _, q in ms)
    assert len({tuple(sorted(q.items())) for _, _, q in ms}) == len(ms)
    # BK 64->128 would overflow shared memory at 4 stages: the move lowers STAGES to what fits
    bk = [q for k, d, q in ms if k == "BK" and d > 0]
    assert bk and bk[0]["STAGES"] == 2
    # BM cannot grow on its own with a 256-wide tile (accumulator limit); the transposed tile is offered
    assert any(q["BM"] == 256 and q["BN"] == 128 for _, _, q in ms)
    # CONSUMERS 2->1 would need 256 accumulators per thread: never proposed from here
    assert not any(q["CONSUMERS"] == 1 for _, _, q in ms)
    small = {**p, "BN": 128, "STAGES": 3}
    c1 = [q for k, _, q in moves(template, small) if k == "CONSUMERS"]
    assert c1 and c1[0]["CONSUMER_REGS"] == 232 + 24  # register split follows the consumer count


def test_operand_layout_is_never_a_move():
    # Regression: B_KMAJOR (the headline task's B layout) was stepped 1->2 like a tuning knob.
    head = pytest.importorskip("kernelpro.suites.ptxbench.reference.gemm_bf16_headline")
    t = Template(head, "gemm_bf16_headline")
    assert t.params["B_KMAJOR"] == 1
    ms = moves(t, t.params)
    assert ms and all(q["B_KMAJOR"] == 1 for _, _, q in ms) and not any(k == "B_KMAJOR" for k, _, _ in ms)
    assert gemm_rules({**t.params, "B_KMAJOR": 2}) is not None


def test_start_params_apply_repair_and_reject_in_one_line():
    from kernelpro.agent.policy_param import start_params
    from kernelpro.errors import KernelProError

    head = pytest.importorskip("kernelpro.suites.ptxbench.reference.gemm_bf16_headline")
    t = Template(head, "gemm_bf16_headline")
    p = start_params(t, {"BM": 128, "STAGES": 3, "CLUSTER_M": 1, "GROUP_M": 1})
    assert (p["BM"], p["BN"], p["STAGES"], p["CLUSTER_M"], p["GROUP_M"], p["B_KMAJOR"]) == (128, 128, 3, 1, 1, 1)
    assert start_params(t, {"BK": 128})["STAGES"] < t.params["STAGES"]   # coupled: what fits in shared memory
    assert start_params(t, {"CONSUMERS": 1, "BM": 64})["CONSUMER_REGS"] == 256
    for bad, msg in [({"TILE": 3}, "TILE not a parameter"), ({"CONSUMER_REGS": 200}, "set CONSUMERS instead"),
                     ({"B_KMAJOR": 0}, "fixed by the task's operand layout"),
                     ({"BK": 128, "STAGES": 8}, "shared memory over 227 KB"),
                     ({"BN": 96}, "BN and BK must be in")]:
        with pytest.raises(KernelProError, match=msg):
            start_params(t, bad)


def ctx_for(params, diagnoses, seen=frozenset(), seed=0):
    parent = Node("n0", None, 0, gemm.make_source(params), info={"params": params},
                  outcome=EvalOutcome(True, speedup=1.0, diagnoses=diagnoses))
    return ExpandContext(parent=parent, best=parent, memory=SearchMemory(), seen=set(seen), rng=random.Random(seed))


def test_diagnoses_guide_the_move(template):
    pol = ParamPolicy(template)
    base = {**template.params, "BN": 128, "STAGES": 3}
    for seed in range(5):
        prop = pol.propose(ctx_for(base, "Latency bound: warps stall on the mbarrier wait (long scoreboard)",
                                   seed=seed))
        assert prop.info["params"]["STAGES"] > 3 and prop.info["guided"], prop.what
        prop = pol.propose(ctx_for(base, "Shared memory limits occupancy to 1 block per SM", seed=seed))
        assert prop.info["params"]["STAGES"] < 3 or prop.info["params"]["BK"] < base["BK"], prop.what
    unguided = {pol.propose(ctx_for(base, "", seed=s)).what for s in range(12)}
    assert len(unguided) > 2   # without a diagnosis the choice spreads over the knobs


def test_exhausts_when_every_neighbour_was_seen(template):
    pol = ParamPolicy(template)
    from kernelpro.results.store import source_hash

    seen = {source_hash(gemm.make_source(q)) for _, _, q in moves(template, template.params)}
    prop = pol.propose(ctx_for(template.params, "", seen=seen))
    assert prop.source is None and prop.exhausted


def test_generated_candidate_round_trips_params(template):
    q = {**template.params, "BN": 128, "STAGES": 5}
    src = gemm.make_source(q)
    assert params_of(src) == q
    compile(src, "cand.py", "exec")


@pytest.mark.skipif(find_tool("nvcc") is None, reason="needs nvcc")
def test_mutated_candidate_passes_static_verification(template, tmp_path):
    task_file = tmp_path / "gemm_bf16.py"
    task_file.write_text(TASK)
    task = load_task(task_file, suite="t")
    q = {**template.params, "BN": 128, "STAGES": 6, "CLUSTER_M": 2}
    assert gemm_rules(q) is None
    path = tmp_path / "cand.py"
    path.write_text(gemm.make_source(q))
    out = StaticEvaluator("sm_90a").evaluate(task, path)
    assert out.ok, out.reason
    assert out.record["features"] == {f: "emitted" for f in ("wgmma", "tma", "mbarrier", "setmaxnreg")}


def model_speed(p):
    """A smooth stand-in for the GPU with several improving directions from the template defaults."""
    return (1.0 + 0.1 * (p["CLUSTER_M"] == 2) + 0.05 * (p["GROUP_M"] == 16) + 0.08 * (p["BN"] == 192)
            + 0.02 * p["STAGES"] - 0.05 * (p["BK"] == 128))


def test_search_over_the_real_parameter_space(template, tmp_path):
    class ModelEval:
        def evaluate(self, task, path):
            p = params_of(Path(path).read_text())
            assert gemm_rules(p) is None
            return EvalOutcome(True, speedup=model_speed(p), stage="ok")

    task_file = tmp_path / "gemm_bf16.py"
    task_file.write_text(TASK)
    task = load_task(task_file, suite="t")
    store = Store(tmp_path / "r.db")
    for strategy in ("mcts", "greedy"):
        rid = store.new_run("optimize", "t", {})
        s = Search(task, ParamPolicy(template), ModelEval(), store, rid,
                   SearchConfig(strategy=strategy, budget_nodes=10, workdir=tmp_path / strategy))
        res = s.run()
        assert res.nodes == 10 and res.root.what.startswith("template defaults")
        assert res.best.score > res.root.score
        assert all(n["payload"]["info"]["params"] for n in store.nodes(rid))


def test_the_policy_knows_no_template_rules(tmp_path):
    """Template knowledge lives in the template's file: a toy template with its own ladder, rule and
    repair is searched by the same policy, and nothing of the GEMM's rules leaks into it."""
    mod = tmp_path / "toy.py"
    mod.write_text(
        "PARAMS = {'TILE': 32, 'UNROLL': 2, 'HALF': 16}\n"
        "LADDERS = {'TILE': [16, 32, 48]}\n"
        "DERIVED = ('HALF',)\n"
        "def validate(p):\n    return 'UNROLL must divide TILE' if p['TILE'] % p['UNROLL'] else None\n"
        "def repair(p):\n    return {**p, 'HALF': p['TILE'] // 2}\n"
        "def make_source(p):\n    return f'# {p}\\n'\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("kp_toy_template", mod)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    t = Template(m, "toy")
    got = {(k, d): q for k, d, q in moves(t, t.params)}
    assert got[("TILE", -1)] == {"TILE": 16, "UNROLL": 2, "HALF": 8}          # repaired
    assert got[("TILE", +1)] == {"TILE": 48, "UNROLL": 2, "HALF": 24}
    assert got[("UNROLL", +1)]["UNROLL"] == 4 and ("UNROLL", -1) in got       # default x2 / /2 steps
    assert not any(k == "HALF" for k, _ in got)                               # derived never moves
    assert all(t.validate(q) is None for q in got.values())
