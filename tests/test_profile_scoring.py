"""The stage-two tools' precision and recall on the labelled corpus of recorded profiles
(tests/data/ncu/labels.toml), the thresholds they reach, and the label file's checks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelpro.errors import KernelProError
from kernelpro.profile.scoring import ToolScore, load_labels, score

DATA = Path(__file__).parent / "data" / "ncu"
needs_recording = pytest.mark.skipif(not (DATA / "labels.toml").is_file(), reason="no labelled recordings")


@pytest.fixture(scope="module")
def scored():
    labels = load_labels(DATA / "labels.toml")
    scores, seen = score(DATA, labels)
    return labels, {s.tool: s for s in scores}, seen


@needs_recording
def test_every_tool_is_specific_and_finds_its_plant(scored):
    labels, s, _ = scored
    assert len(labels) == 12 and sum(len(k.labels) for k in labels) == 13
    for tool, sc in s.items():
        assert sc.fires >= 1, f"{tool} fires on nothing: untested"
        assert sc.precision == 1.0, (tool, sc.fired_on)
        assert sc.recall == 1.0, (tool, sc.missed)


@needs_recording
def test_warp_stalls_fires_on_its_plant_only(scored):
    _, s, seen = scored
    assert s["warp_stalls"].fired_on == ["barrier_stall"]
    # symptoms of other limiters stay with their own tools
    assert "warp_stalls" not in seen["low_occupancy"] and "occupancy" in seen["low_occupancy"]
    assert "warp_stalls" not in seen["bank_conflict"] and "bank_conflicts" in seen["bank_conflict"]
    assert "dram_bandwidth" not in seen["uncoalesced"] and "coalescing" in seen["uncoalesced"]


@needs_recording
def test_clean_and_control_kernels_draw_nothing(scored):
    _, _, seen = scored
    assert seen["clean_copy"] == set() and seen["wgmma_bulk"] == set()


def test_score_arithmetic():
    s = ToolScore("t", tp=2, fp=1, fn=1)
    assert s.fires == 3 and s.precision == pytest.approx(2 / 3) and s.recall == pytest.approx(2 / 3)
    assert ToolScore("u").precision is None and ToolScore("u").recall is None


@pytest.mark.parametrize("body, msg", [
    ('[kernels.a]\nrole = "plant"\n[kernels.a.labels]\nnosuch = "x"\n', "not tools"),
    ('[kernels.a]\nrole = "plant"\n[kernels.a.labels]\nspills = ""\n', "needs its reason"),
    ('[kernels.a]\nrole = "clean"\n', "give reason"),
    ('[kernels.a]\nrole = "weird"\nreason = "x"\n', "needs role"),
    ('[kernels.a]\nrole = "clean"\nreason = "x"\ncolour = 1\n', "unknown keys"),
    ("[kernels.a\n", "not valid TOML"),
])
def test_bad_labels_are_one_line_errors(tmp_path, body, msg):
    f = tmp_path / "labels.toml"
    f.write_text(body)
    with pytest.raises(KernelProError, match=msg):
        load_labels(f)


def test_label_for_an_unrecorded_kernel(tmp_path):
    f = tmp_path / "labels.toml"
    f.write_text('[kernels.ghost]\nrole = "clean"\nreason = "x"\n')
    with pytest.raises(KernelProError, match="ghost"):
        score(tmp_path, load_labels(f))


@needs_recording
def test_the_table_fits_80_columns(capsys):
    path = Path(__file__).parents[1] / "benchmarks" / "profiling_tools_precision.py"
    spec = importlib.util.spec_from_file_location("kp_precision_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "warp_stalls          1   1   0   0  100%   100%  barrier_stall" in out
