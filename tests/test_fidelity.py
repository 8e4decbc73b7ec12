"""Telemetry and energy as the result record carries them: folded into compare rounds and shown as text."""

from __future__ import annotations

from kernelpro.harness.compare import render
from kernelpro.harness.telemetry import Stat, Telemetry
from kernelpro.results.comparison import Comparison, add_round
from kernelpro.results.fidelity import fidelity_lines, protocols
from kernelpro.results.record import Result


def _tel(mhz: float, watts: float) -> dict:
    return Telemetry(available=True, seconds=1.0, samples=50, period_ms=20, sm_mhz=Stat(mhz, mhz - 30, mhz + 20),
                     mem_mhz=Stat(2619, 2619, 2619), power_w=Stat(watts, watts - 8, watts + 5),
                     temp_c=Stat(63, 61, 64), throttle={"sw_power_cap": 0.9}, power_limit_w=700).to_dict()


def _rec(cand_ms: float, rival_ms: float, cand_j: float, rival_j: float, rival: str = "b") -> dict:
    stats = {"candidate": {"median_ms": cand_ms}, "vendor": {"median_ms": 1.0}, f"rival:{rival}": {"median_ms": rival_ms}}
    return {"candidate": "a.py", "device": "cuda", "ok": True, "correct": True,
            "timing": {"protocol": "interleaved", "stats": stats, "telemetry": {"*": _tel(1455, 693)},
                       "steady": {"outcome": "settled after 2.10 s"}},
            "speedup": {"vendor": 1.0 / cand_ms},
            "protocols": {"isolated": {"stats": stats, "speedup": {"vendor": 0.94},
                                       "telemetry": {"candidate": _tel(1410, 695), "vendor": _tel(1485, 684)},
                                       "steady": {"outcome": "settled after 1.00 s"}},
                          "interleaved": {"stats": stats, "speedup": {"vendor": 0.97},
                                          "telemetry": {"*": _tel(1455, 693)}}},
            "energy": {"protocol": "isolated", "method": {"window_s": 1.0, "bound": 0.02},
                       "candidate": {"j_per_call": cand_j, "j_per_tflop": 1.2}, f"rival:{rival}": {"j_per_call": rival_j}}}


def test_compare_rounds_carry_energy_and_its_ratio():
    c = Comparison(task="t", labels=["a", "b"], paths=["a.py", "b.py"])
    add_round(c, 0, "a", Result.from_dict(_rec(1.00, 1.01, 1.00, 0.88)), "vendor")
    add_round(c, 1, "b", Result.from_dict(_rec(1.00, 1.02, 0.90, 1.00, rival="a")), "vendor")   # b judged: b is the candidate
    assert c.energy == [{"a": 1.00, "b": 0.88}, {"a": 1.00, "b": 0.90}]
    s = {x["label"]: x for x in c.summary()}
    assert s["b"]["energy_ratio_min"] == 1.0 / 0.90 and s["b"]["energy_ratio_max"] == 1.0 / 0.88
    assert c.telemetry[0]["protocol"] == "interleaved" and c.telemetry[0]["steady"].startswith("settled")
    from rich.console import Console

    con = Console(width=250, record=True)
    con.print(render(c, "vendor"))
    text = con.export_text()
    assert "J ratio b" in text and "1455 MHz 693 W 63C pwrcap" in text
    # a failed round contributes no energy
    add_round(c, 2, "a", Result(candidate="a.py", device="cuda", ok=False, reason="crash"), "vendor")
    assert c.energy[-1] == {"a": None, "b": None}


def test_fidelity_lines_name_each_protocol_its_ratio_and_clocks():
    lines = fidelity_lines(_rec(1.0, 1.0, 1.0, 1.0), "gemm", baselines=["vendor"])
    assert lines[0].startswith("gemm: isolated: x vendor 0.940 | candidate 1410 MHz 695 W")
    assert "vendor 1485 MHz 684 W" in lines[0] and "settled after 1.00 s" in lines[0]
    assert lines[1].startswith("gemm: interleaved: x vendor 0.970 | 1455 MHz 693 W")
    assert "1000 mJ/call 1.2 J/TFLOP" in lines[2] and "bound 2.0%" in lines[2]
    old = {"timing": {"stats": {"candidate": {"median_ms": 1.0}}}, "speedup": {"eager": 2.0}}
    assert list(protocols(old)) == ["interleaved"]
    assert fidelity_lines(old)[0].startswith("interleaved: x eager 2.000 | -")
    assert fidelity_lines({"energy": {"error": "no NVML"}}) == ["energy: no NVML"]


def test_report_shows_protocols_energy_and_traces(tmp_path):
    import re
    import xml.etree.ElementTree as ET

    from kernelpro.report.html import render
    from kernelpro.results.facts import load_run
    from kernelpro.results.store import Store

    s = Store(tmp_path / "r.db")
    run = s.new_run("bench", "ptxbench", {})
    cid = s.add_candidate(run, "ptxbench/gemm_bf16", "src", origin="reference")
    rec = _rec(1.06, 1.0, 1.00, 1.0)
    for side in ("candidate", "vendor"):
        rec["protocols"]["isolated"]["telemetry"][side]["trace"] = [[0.0, 1980, 400, 50], [0.5, 1485, 690, 62],
                                                                    [1.0, 1455, 695, 63]]
    s.record("evaluations", cid, True, rec)
    html = render([load_run(s, run)], str(s.path))
    section = html[html.index("Measurement conditions"):]
    assert "x vendor 0.940" in section and "candidate: 1410 MHz 695 W 63C pwrcap" in section
    assert "1000 mJ/call (1.2 J/TFLOP" in section and "bound 2.0%" in section
    traces = re.findall(r'<svg class="plot (power|clock)".*?</svg>', section, re.S)
    assert traces == ["power", "clock"]
    for m in re.findall(r"<svg\b.*?</svg>", section, re.S):
        ET.fromstring(m)
