"""Micro-profiling tools on RECORDED Nsight Compute profiles of the planted-bottleneck corpus
(tests/kernels/profile/*.cu, recorded on an H200 by docs/measurements/recipes/gpu_profile_record.sh into tests/data/ncu/).

Each tool must flag its own plant with the right diagnosis and must leave the clean copy kernel alone.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kernelpro.profile import analyze
from kernelpro.profile.advice import Finding, format_for_prompt
from kernelpro.profile.collect import load_profiles
from kernelpro.profile.roofline import H200, classify
from kernelpro.profile.tools.registry import load_all

DATA = Path(__file__).parent / "data" / "ncu"
RECORDED = (DATA / "clean_copy.json").is_file()
needs_recording = pytest.mark.skipif(
    not RECORDED, reason="no recorded ncu data in tests/data/ncu: run docs/measurements/recipes/gpu_profile_record.sh on a GPU and unpack it")


def recorded(name: str):
    path = DATA / f"{name}.json"
    extra = json.loads(path.read_text())
    profiles = load_profiles(path)
    return profiles, extra


def run(name: str):
    profiles, extra = recorded(name)
    return analyze(profiles, requested=tuple(extra.get("requested", ())), dtype=extra.get("dtype"),
                   resources=extra.get("ptxas", {}))


def tools_of(a) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in a.findings:
        out.setdefault(f.tool, []).append(f)
    return out


def test_every_tool_is_registered():
    assert set(load_all()) == {"coalescing", "dram_bandwidth", "bank_conflicts", "spills", "occupancy",
                               "tensor_core", "warp_stalls", "tail_effect", "launch_overhead", "tma",
                               "atomics"}


@needs_recording
def test_clean_copy_is_near_bandwidth_and_unflagged():
    a = run("clean_copy")
    assert a.findings == [], format_for_prompt(a.findings)
    r = a.rooflines[0]
    assert r.klass == "memory-bound" and r.near_ceiling
    assert r.tbps > 0.75 * H200.copy_tbps


@needs_recording
@pytest.mark.parametrize("plant, tool, words", [
    ("uncoalesced", "coalescing", "uncoalesced global loads"),
    ("bank_conflict", "bank_conflicts", "bank-conflicted"),
    ("spills", "spills", "register spills"),
    ("low_occupancy", "occupancy", "limited by shared memory"),
    ("ffma_matmul", "tensor_core", "not using tensor cores"),
    ("ffma_matmul", "tma", "requests tma"),
    ("tiny_launches", "launch_overhead", "too little work per launch"),
    ("far_from_bw", "dram_bandwidth", "copy bandwidth"),
    ("tail_effect", "tail_effect", "tail effect"),
    ("barrier_stall", "warp_stalls", "barrier"),
])
@needs_recording
def test_tool_flags_its_plant(plant, tool, words):
    found = tools_of(run(plant)).get(tool, [])
    assert found, f"{tool} did not flag {plant}"
    f = found[0]
    assert words in f.title, f.title
    assert f.evidence and 1 <= len(f.actions) <= 2 and f.text and f.severity in ("high", "medium", "low")


@needs_recording
def test_bank_conflicts_measured_as_32_way():
    f = tools_of(run("bank_conflict"))["bank_conflicts"][0]
    assert f.evidence["wavefronts_per_instruction"] > 16


@needs_recording
def test_spill_finding_cites_ptxas_report():
    f = tools_of(run("spills"))["spills"][0]
    assert f.evidence["ptxas_spill_stores"] > 0


@needs_recording
def test_wgmma_kernel_does_not_draw_tensor_or_tma_findings():
    # It executes HGMMA and the bulk copy it was asked for: neither compliance tool may complain.
    t = tools_of(run("wgmma_bulk"))
    assert "tensor_core" not in t and "tma" not in t


@needs_recording
def test_clean_copy_would_be_flagged_by_tma_tool_if_task_asked_for_tma():
    profiles, _ = recorded("clean_copy")
    a = analyze(profiles, requested=("tma",))
    assert [f.tool for f in a.findings] == ["tma"]


@needs_recording
def test_roofline_classes_on_recordings():
    def klass(name):
        return classify(recorded(name)[0][0], H200).klass
    assert klass("clean_copy") == "memory-bound"
    assert klass("tiny_launches") == "latency-launch-bound"
    assert klass("far_from_bw") == "under-occupied"
    assert klass("tail_effect") == "compute-bound"


@needs_recording
def test_roofline_gates_tools():
    r = classify(recorded("clean_copy")[0][0], H200)
    assert r.tools == ["tensor_core", "tma"]  # near its ceiling: only the checks that point elsewhere
    r = classify(recorded("tiny_launches")[0][0], H200)
    assert "launch_overhead" in r.tools and "coalescing" not in r.tools


@needs_recording
def test_modes():
    a = run("uncoalesced")
    adv = a.text("advice")
    raw = a.text("raw")
    assert "uncoalesced" in adv and "->" in adv
    assert "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in raw
    assert "uncoalesced" not in raw.replace("uncoalesced_gather", "")  # raw mode carries no diagnosis
    assert a.text("none") == ""
    with pytest.raises(ValueError):
        format_for_prompt(a.findings, "verbose")


@needs_recording
def test_end_to_end_recording_flags_launch_overhead_with_system_view():
    d = json.loads((DATA / "e2e_cand_chunked.json").read_text())
    assert d["system"]["launches_per_call"] >= 100
    assert any(f["tool"] == "launch_overhead" and "launches_per_call" in f["evidence"] for f in d["findings"])


# ---- a real kernel: the expert attention backward (recorded on an H100, tests/data/ncu/attn_bwd_hopper.json)


def _attn_bwd(profiles=None):
    all_profiles, extra = recorded("attn_bwd_hopper")
    return analyze(profiles or all_profiles, requested=tuple(extra["requested"]), dtype=extra["dtype"],
                   task_flops=extra["task_flops"]), all_profiles, extra


@needs_recording
def test_attn_bwd_reductions_into_l2_are_its_one_finding():
    a, _, _ = _attn_bwd()
    assert [(f.tool, f.kernel) for f in a.findings] == [("atomics", "attn_bwd_kernel")]
    f = a.findings[0]
    assert f.severity == "high" and "crossbar into L2" in f.title and f.evidence["executed_global_reductions"] > 1e8
    # the roofline names the on-chip wall instead of leaving "memory-bound" to read as DRAM
    main = a.rooflines[0]
    assert main.klass == "memory-bound" and main.side == "compute"
    assert any("crossbar into L2" in r and "DRAM at 3%" in r for r in main.reasons), main.reasons


@needs_recording
def test_task_flops_go_to_the_launches_that_ran_mmas():
    a, profiles, extra = _attn_bwd()
    main, helper = a.rooflines
    assert main.flops == pytest.approx(extra["task_flops"], rel=1e-9)  # all of it: the helper ran no MMA
    assert helper.flops < 1e12 and helper.pct_of_compute_ceiling < 5  # its own FP counters only
    assert helper.klass == "memory-bound"


@needs_recording
def test_tma_judges_a_helper_launch_with_the_candidate_and_a_lone_kernel_alone():
    _, profiles, _ = _attn_bwd()
    helper = [p for p in profiles if p.name == "dq_convert_kernel"]
    alone, _, _ = _attn_bwd(helper)  # the same launch as the whole candidate: it is the work, and has no TMA
    assert [f.tool for f in alone.findings] == ["tma"]


@needs_recording
def test_register_limited_occupancy_of_a_warp_specialised_mma_kernel_is_by_design():
    _, profiles, _ = _attn_bwd()
    main = profiles[0]
    assert main.value("launch__occupancy_limit_registers") == 1 and main.value("sm__maximum_warps_per_active_cycle_pct") < 20
    assert not load_all()["occupancy"](_ctx(main))
    stripped = copy.deepcopy(main)  # the same launch without setmaxnreg: the finding comes back
    ops = stripped.instances["sass__inst_executed_per_opcode"]
    del ops["USETMAXREG"]
    assert [f.title for f in load_all()["occupancy"](_ctx(stripped))] == ["theoretical occupancy 19%, limited by registers"]


def _ctx(p):
    from kernelpro.profile.tools.registry import Context

    return Context(p, classify(p), H200, requested=("wgmma", "tma", "mbarrier"))


@needs_recording
def test_dram_advice_stays_away_from_a_kernel_walled_on_chip():
    profiles, extra = recorded("attn_bwd_hopper")
    # no task FLOPs: the FP counters alone put the kernel left of the ridge, yet DRAM is not its wall
    a = analyze(profiles, requested=tuple(extra["requested"]), dtype=extra["dtype"])
    assert a.rooflines[0].side == "memory"
    assert "dram_bandwidth" not in {f.tool for f in a.findings}
