"""The parameter policy's feedback modes: advice (stage-two findings, through the template's ADVICE
rules), raw (core metrics through a fixed heuristic), none (blind). Findings come from the recorded
Nsight Compute profiles in tests/data/ncu where a real one exists."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpro.agent.evaluator import EvalOutcome, finding_record
from kernelpro.agent.mcts import ExpandContext, Node
from kernelpro.agent.memory import SearchMemory
from kernelpro.agent.policy_param import ParamPolicy, Template, load_template
from kernelpro.errors import KernelProError

gemm = pytest.importorskip("kernelpro.suites.ptxbench.reference.gemm_bf16")
DATA = Path(__file__).parent / "data" / "ncu"


@pytest.fixture
def template():
    t = Template(gemm, "gemm_bf16")
    t.params = {**t.params, "BM": 128, "BN": 128, "STAGES": 4, "CLUSTER_M": 1, "GROUP_M": 8}
    return t


def recorded_findings(name: str) -> list[dict]:
    from kernelpro.profile import analyze
    from kernelpro.profile.collect import load_profiles

    extra = json.loads((DATA / f"{name}.json").read_text())
    a = analyze(load_profiles(DATA / f"{name}.json"), requested=tuple(extra.get("requested", ())),
                dtype=extra.get("dtype"), resources=extra.get("ptxas", {}))
    return [finding_record(f) for f in a.findings]


def ctx(params, outcome, seed):
    parent = Node("n0", None, 0, gemm.make_source(params), info={"params": params}, outcome=outcome)
    return ExpandContext(parent=parent, best=parent, memory=SearchMemory(), seen=set(), rng=random.Random(seed))


def test_recorded_shared_memory_occupancy_limit_lowers_the_ring(template):
    findings = [f for f in recorded_findings("low_occupancy") if f["tool"] == "occupancy"]
    assert any("shared memory" in f["title"] for f in findings)
    pol = ParamPolicy(template, feedback="advice")
    for seed in range(6):
        prop = pol.propose(ctx(template.params, EvalOutcome(True, speedup=1.0, findings=findings), seed))
        q = prop.info["params"]
        assert q["STAGES"] < 4, prop.what
        assert prop.info["steer"].startswith("advice: occupancy"), prop.info


def test_recorded_barrier_stall_deepens_the_ring(template):
    findings = recorded_findings("barrier_stall")
    pol = ParamPolicy(template, feedback="advice")
    for seed in range(6):
        prop = pol.propose(ctx(template.params, EvalOutcome(True, speedup=1.0, findings=findings), seed))
        assert prop.info["params"]["STAGES"] > 4 or prop.info["params"]["BK"] > 64, prop.what
        assert "warp_stalls" in prop.info["steer"]


def test_every_recorded_finding_of_the_occupancy_plant_argues_the_same_way(template):
    # Before the tools were made specific, the same profile also drew a long-scoreboard warp-stall
    # finding whose rule (deeper ring) cancelled the occupancy rule (shallower ring).
    findings = recorded_findings("low_occupancy")
    assert {f["tool"] for f in findings} == {"occupancy", "dram_bandwidth"}
    pol = ParamPolicy(template, feedback="advice")
    for seed in range(6):
        prop = pol.propose(ctx(template.params, EvalOutcome(True, speedup=1.0, findings=findings), seed))
        assert prop.info["params"]["STAGES"] < 4, prop.what


def test_a_clean_profile_does_not_fall_back_to_text_rules(template):
    # profiled, nothing found: the advice text must not be read by the legacy regexes
    o = EvalOutcome(True, speedup=1.0, findings=[], raw_metrics={"k": {"gpu__time_duration.sum": 1e6}},
                    diagnoses="Profiler advice: no bottleneck found; warps stall on nothing, occupancy fine")
    props = [ParamPolicy(template).propose(ctx(template.params, o, s)) for s in range(8)]
    assert not any(p.info["guided"] for p in props)


def test_a_finding_with_no_rule_does_not_steer(template):
    # launch overhead names no GEMM knob: the choice stays spread over the moves
    f = [{"tool": "launch_overhead", "kernel": "k", "title": "latency/launch-bound", "severity": "high"}]
    pol = ParamPolicy(template, feedback="advice")
    props = [pol.propose(ctx(template.params, EvalOutcome(True, speedup=1.0, findings=f), s)) for s in range(12)]
    assert not any(p.info["guided"] for p in props)
    assert len({p.what for p in props}) > 2


def test_raw_mode_uses_metrics_not_findings(template):
    low_warps = {"k": {"gpu__time_duration.sum": 5e5, "sm__warps_active.avg.pct_of_peak_sustained_active": 9.0,
                       "sm__throughput.avg.pct_of_peak_sustained_elapsed": 20.0,
                       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 25.0,
                       "launch__waves_per_multiprocessor": 3.0}}
    barrier = [{"tool": "warp_stalls", "kernel": "k", "title": "warps mostly stall on barrier", "severity": "high"}]
    pol = ParamPolicy(template, feedback="raw")
    occ = {(r.knob, r.direction) for r in template.advice if r.tool in ("occupancy", "dram_bandwidth")}
    for seed in range(6):
        o = EvalOutcome(True, speedup=1.0, findings=barrier, raw_metrics=low_warps)
        prop = pol.propose(ctx(template.params, o, seed))
        assert prop.info["steer"].startswith("raw: "), prop.info
        moved = {(k, 1 if prop.info["params"][k] > v else -1) for k, v in template.params.items()
                 if prop.info["params"][k] != v}
        assert moved & occ, prop.what           # the findings' barrier rule (STAGES up) is not what drove it


def test_recorded_backward_reductions_move_the_backward_template_to_vector_dq():
    # tests/data/ncu/attn_bwd_hopper.json is the backward reference with one scalar red.global.add per dQ
    # element: its atomics finding must move the template from its generic start to BWD_DQ_RED_V2=1 (the
    # change measured 1.23x / 1.28x faster at the headline shape), not to a deeper ring.
    bwd = pytest.importorskip("kernelpro.suites.ptxbench.reference.attn_bwd_headline_bf16")
    t = Template(bwd, "attn_bwd_headline_bf16")
    assert t.generic_start == {"BWD_STAGES": 2, "BWD_DQ_RED_V2": 0}
    findings = recorded_findings("attn_bwd_hopper")
    assert "atomics" in {f["tool"] for f in findings}
    pol = ParamPolicy(t, feedback="advice")
    for seed in range(6):
        parent = Node("n0", None, 0, bwd.make_source(t.generic_start), info={"params": t.generic_start},
                      outcome=EvalOutcome(True, speedup=0.45, findings=findings))
        c = ExpandContext(parent=parent, best=parent, memory=SearchMemory(), seen=set(), rng=random.Random(seed))
        prop = pol.propose(c)
        assert prop.info["params"] == {"BWD_STAGES": 2, "BWD_DQ_RED_V2": 1}, prop.what
        assert prop.info["steer"].startswith("advice: atomics"), prop.info


def test_none_mode_ignores_the_profile(template):
    findings = recorded_findings("low_occupancy")
    pol = ParamPolicy(template, feedback="none")
    props = [pol.propose(ctx(template.params, EvalOutcome(True, speedup=1.0, findings=findings), s))
             for s in range(12)]
    assert not any(p.info["guided"] or "steer" in p.info for p in props)
    assert len({p.what for p in props}) > 2


def test_bad_advice_rules_are_one_line_errors(tmp_path):
    import importlib.util

    for row, msg in [("('nosuch', '', 'T', 1, 1.0, 'x')", "names tool 'nosuch'"),
                     ("('occupancy', '', 'NOPE', 1, 1.0, 'x')", "not a free knob"),
                     ("('occupancy', '', 'T', 2, 1.0, 'x')", "direction"),
                     ("('occupancy', '', 'T')", r"must be \(tool")]:
        mod = tmp_path / "bad.py"
        mod.write_text(f"PARAMS = {{'T': 2}}\nADVICE = [{row}]\ndef make_source(p):\n    return ''\n")
        spec = importlib.util.spec_from_file_location("kp_bad_template", mod)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        with pytest.raises(KernelProError, match=msg):
            Template(m, "bad")
    with pytest.raises(KernelProError, match="--feedback"):
        ParamPolicy(Template(gemm, "gemm_bf16"), feedback="verbose")


def test_every_shipped_template_rule_names_a_real_tool_and_knob():
    from kernelpro.suites.task import find_task

    for name in ("gemm_bf16", "gemm_bf16_headline", "rmsnorm_bf16"):
        t = load_template(find_task(f"ptxbench/{name}"))
        assert t.advice, name
        assert {r.tool for r in t.advice} >= {"occupancy", "warp_stalls", "dram_bandwidth", "tail_effect"}, name


def _reference_spec(monkeypatch, tmp_path, text):
    import importlib.util

    f = tmp_path / "ref.py"
    f.write_text(text)
    spec = importlib.util.spec_from_file_location("kp_fake_reference", f)
    monkeypatch.setattr("kernelpro.agent.policy_param.importlib.util.find_spec", lambda name: spec)

    def load(name):
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m

    monkeypatch.setattr("kernelpro.agent.policy_param.importlib.import_module", load)


def test_reference_that_builds_at_import_is_never_imported(monkeypatch, tmp_path):
    from kernelpro.suites.task import find_task

    task = find_task("ptxbench/rmsnorm_bf16")
    _reference_spec(monkeypatch, tmp_path, "raise OSError('CUDA_HOME environment variable is not set')\n")
    with pytest.raises(KernelProError, match=r"defines no PARAMS and make_source\); pass --template PATH"):
        load_template(task)


def test_template_that_fails_to_import_is_a_one_line_error(monkeypatch, tmp_path):
    from kernelpro.suites.task import find_task

    task = find_task("ptxbench/rmsnorm_bf16")
    _reference_spec(monkeypatch, tmp_path, "PARAMS = {}\ndef make_source(p):\n    return ''\nraise OSError('no nvcc')\n")
    with pytest.raises(KernelProError, match=r"failed to import \(OSError: no nvcc\)"):
        load_template(task)


def test_cli_param_policy_on_a_task_without_template(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kernelpro", "optimize", "ptxbench/gemm_bf16_batched", "--policy",
                        "param", "--db", str(tmp_path / "r.db"), "--evaluator", "static", "--arch", "sm_90a",
                        "--quiet"], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 1
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "no parameterized template for ptxbench/gemm_bf16_batched" in lines[0]
    assert "pass --template PATH" in lines[0] and "--policy llm" in lines[0]
    assert "run 1" not in p.stdout            # refused before a run was recorded


def test_raw_heuristic_on_recorded_metrics():
    from kernelpro.agent.policy_param import _raw_tools
    from kernelpro.profile import analyze
    from kernelpro.profile.collect import load_profiles

    def raw(name):
        (m,) = analyze(load_profiles(DATA / f"{name}.json")).raw_metrics.values()
        return set(_raw_tools(m))

    # the coarse reading: few warps and memory-side for the occupancy plant, the same for the
    # bandwidth plant (raw metrics cannot tell the two causes apart), a short launch for the tiny one
    assert raw("low_occupancy") == {"occupancy", "dram_bandwidth"}
    assert raw("far_from_bw") == {"occupancy", "dram_bandwidth"}
    assert "launch_overhead" in raw("tiny_launches")
    assert raw("clean_copy") == {"dram_bandwidth"}        # raw cannot see that the copy is at its ceiling


def test_optimize_feedback_flag_reaches_the_param_policy(tmp_path):
    from kernelpro.cli import main
    from kernelpro.results.store import Store

    here = Path(__file__).parent
    db = tmp_path / "r.db"
    rc = main(["optimize", str(here / "tasks" / "vector_add.py"), "--policy", "param", "--template",
               str(here / "data" / "templates" / "repeat_add.py"), "--start", "SLOW=4", "--feedback", "raw",
               "--budget-nodes", "2", "--evaluator", "harness", "--device", "cpu", "--sizes", "default",
               "--quiet", "--db", str(db), "--workdir", str(tmp_path / "w")])
    assert rc == 0
    st = Store(db)
    run = st.runs("optimize")[-1]
    assert run["config"]["feedback"] == "raw"
    child = [n for n in st.nodes(run["id"]) if n["node_key"] == "n1"][0]
    assert child["payload"]["info"]["feedback"] == "raw"
