"""Degenerate-problem detection, parameter perturbation, and degenerate tasks left out of fast_p/geomean."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from kernelpro.errors import KernelProError
from kernelpro.results.metrics import Outcome, summarize
from kernelpro.suites import perturb
from kernelpro.suites.degenerate import Degeneracy, change, check_files
from kernelpro.suites.kernelbench import tolerance_profile

HEAD = "import torch\nimport torch.nn as nn\n\n"
PROBLEMS = {
    # softmax over a dimension of size 1: all ones whatever the input
    "1_SoftmaxDim1.py": HEAD + textwrap.dedent("""
        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x, dim=1)
        batch_size = 64
        dim = 1
        def get_inputs():
            return [torch.rand(batch_size, dim)]
        def get_init_inputs():
            return []
    """),
    # x - mean(x) over a size-1 dim, then GELU: zeros
    "2_Gemm_SubMean_GELU.py": HEAD + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self, i, o):
                super().__init__()
                self.gemm = nn.Linear(i, o)
            def forward(self, x):
                x = self.gemm(x).sum(dim=1, keepdim=True)
                return torch.nn.functional.gelu(x - x.mean(dim=1, keepdim=True))
        def get_inputs():
            return [torch.rand(32, 16)]
        def get_init_inputs():
            return [16, 8]
    """),
    # LayerNorm with a (C, H, W) affine: depends on inputs and parameters
    "3_LayerNorm.py": HEAD + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self, shape):
                super().__init__()
                self.ln = nn.LayerNorm(shape)
            def forward(self, x):
                return self.ln(x)
        features = 4
        dim1 = 8
        def get_inputs():
            return [torch.rand(2, features, dim1, dim1)]
        def get_init_inputs():
            return [(features, dim1, dim1)]
    """),
    # too large for the CPU budget given below, at any size the method reaches
    "4_Huge.py": HEAD + textwrap.dedent("""
        class Model(nn.Module):
            def forward(self, x):
                return x * 2
        def get_inputs():
            return [torch.rand(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)]
        def get_init_inputs():
            return []
    """),
}


@pytest.fixture()
def problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("KERNELPRO_CACHE", str(tmp_path / "cache"))
    out = {}
    for name, src in PROBLEMS.items():
        p = tmp_path / "level1" / name
        p.parent.mkdir(exist_ok=True)
        p.write_text(src)
        out[name] = p
    return out


def test_constant_references_are_degenerate_and_real_ones_are_not(problems: dict[str, Path]) -> None:
    found = check_files(list(problems.values()), workers=1, max_elements=1000, time_limit_s=30)
    by = {Path(k).name: v for k, v in found.items()}
    assert by["1_SoftmaxDim1.py"].status == "degenerate" and by["1_SoftmaxDim1.py"].change == 0.0
    assert by["2_Gemm_SubMean_GELU.py"].status == "degenerate"
    ln = by["3_LayerNorm.py"]
    assert ln.status == "ok" and ln.input_change > 0.1 and ln.param_change > 0.1
    huge = by["4_Huge.py"]
    assert huge.status == "not_checked" and "smallest size" in huge.detail
    # the cache answers the second time, and judges at another tolerance without a rerun
    again = check_files([problems["3_LayerNorm.py"]], tol=1e3, workers=1, max_elements=1000, time_limit_s=30)
    assert next(iter(again.values())).status == "degenerate"


def test_change_is_allclose_quantity() -> None:
    b = torch.tensor([0.0, 10.0])
    a = b + torch.tensor([1e-3, 1e-2])
    c = change(a, b)
    assert c == pytest.approx(1e-3)
    assert torch.allclose(a, b, atol=c * 1.01, rtol=c * 1.01) and not torch.allclose(a, b, atol=c * 0.9, rtol=c * 0.9)
    assert change(torch.ones(2), torch.ones(3)) == float("inf")
    assert change(torch.tensor([float("nan")]), torch.tensor([1.0])) == float("inf")


def test_degeneracy_record_rejects_unknown_keys_and_statuses() -> None:
    with pytest.raises(KernelProError, match="unknown key"):
        Degeneracy.from_dict({"file": "x.py", "status": "ok", "tol": 1e-4, "bogus": 1})
    with pytest.raises(KernelProError, match="status"):
        Degeneracy("x.py", "maybe", 1e-4)


class PerChannelLN(torch.nn.Module):
    """The LayerNorm cheat: a per-channel affine in place of the (C, H, W) one."""

    def __init__(self, shape: tuple[int, int, int]):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(shape[0]))
        self.bias = torch.nn.Parameter(torch.zeros(shape[0]))


def test_perturbation_maps_by_name_then_unique_shape_and_names_what_is_missing() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    honest = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    m = perturb.perturb_pair(ref, honest, seed=5)
    assert m.ok and not m.extra
    for (_, a), (_, b) in zip(ref.state_dict().items(), honest.state_dict().items(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ref[1].weight, torch.ones(3))   # no longer the initial ones

    class Renamed(torch.nn.Module):  # other names, unique shapes: still maps
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3, 4))
            self.scratch = torch.nn.Parameter(torch.zeros(7))
    ref2 = torch.nn.Linear(4, 3, bias=False)
    r = Renamed()
    m2 = perturb.perturb_pair(ref2, r, seed=1)
    assert m2.ok and m2.extra == ("scratch",) and torch.equal(r.w, ref2.weight)

    ln = torch.nn.LayerNorm((4, 8, 8))
    m3 = perturb.perturb_pair(ln, PerChannelLN((4, 8, 8)), seed=2)
    assert not m3.ok and set(m3.missing) == {"weight", "bias"}


def test_perturbed_values_are_seeded_by_name_and_keep_variance_positive() -> None:
    bn = torch.nn.BatchNorm2d(6)
    a, b = perturb.perturbed_values(bn, 3), perturb.perturbed_values(torch.nn.BatchNorm2d(6), 3)
    assert set(a) == {"weight", "bias", "running_mean", "running_var"}
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert bool((a["running_var"] > 0).all())
    assert not torch.equal(perturb.perturbed_values(bn, 4)["weight"], a["weight"])


def test_degenerate_tasks_are_left_out_of_fast_p_and_geomean_but_reported_with() -> None:
    outs = [Outcome("a", True, True, candidate_ms=1.0, baseline_ms={"eager": 2.0}),
            Outcome("b", True, True, candidate_ms=1.0, baseline_ms={"eager": 400.0}, degenerate=True),
            Outcome("c", True, False, candidate_ms=None, baseline_ms={"eager": 1.0})]
    s = summarize(outs, "eager")
    assert s["fast_p"]["1"] == pytest.approx(1 / 2) and s["geomean_speedup"] == pytest.approx(2.0)
    assert s["geomean_n"] == 1 and s["degenerate_n"] == 1
    w = s["with_degenerate"]
    assert w["fast_p"]["1"] == pytest.approx(2 / 3) and w["geomean_speedup"] == pytest.approx(800 ** 0.5)
    assert s["correct_rate"] == pytest.approx(2 / 3)   # still counted as correct


def test_tolerance_profile_names() -> None:
    assert tolerance_profile("v0") is True and tolerance_profile("current") is False
    with pytest.raises(KernelProError, match="choose current or v0"):
        tolerance_profile("1e-3")


def test_tasks_command_lists_degenerate_problems_of_a_checkout(problems: dict[str, Path], capsys) -> None:
    from kernelpro.cli import main

    root = problems["1_SoftmaxDim1.py"].parent.parent   # a checkout-shaped folder: level1/ inside
    for name in ("3_LayerNorm.py", "4_Huge.py"):
        problems[name].unlink()
    assert main(["tasks", "kernelbench", "--path", str(root)]) == 0
    out = capsys.readouterr().out
    assert "degenerate (2): 1_SoftmaxDim1, 2_Gemm_SubMean_GELU" in out
    assert "atol=rtol=0.0001 (KernelBench current, fp32)" in out
    assert main(["tasks", "kernelbench", "--path", str(root), "--degenerate", "skip"]) == 0
    assert "degenerate (" not in capsys.readouterr().out


def test_shrinking_reexecutes_the_file_so_computed_globals_follow(tmp_path: Path) -> None:
    from kernelpro.suites.degenerate import probe_file

    p = tmp_path / "5_BiasAdd.py"
    p.write_text(HEAD + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self, bias_shape):
                super().__init__()
                self.bias = nn.Parameter(torch.randn(bias_shape))
            def forward(self, x):
                return x + self.bias
        batch_size = 64
        channels = 512
        bias_shape = (channels, 1)
        def get_inputs():
            return [torch.rand(batch_size, channels, 8)]
        def get_init_inputs():
            return [bias_shape]
    """))
    d = probe_file(p, max_elements=5000, time_limit_s=30)
    assert d.status == "ok", d.detail
    assert d.size["channels"] < 512   # with the old bias_shape the add would have raised: not_checked
    assert d.param_change > 0.01


def test_evaluation_measures_how_far_the_reference_moves_at_the_checked_size(tmp_path: Path) -> None:
    """A constant answer to a degenerate task passes every check; the record says the reference never moved."""
    from kernelpro.harness.job import Job
    from kernelpro.harness.worker import run_job
    from kernelpro.results.facts import Facts

    task = tmp_path / "softmax_dim1.py"
    task.write_text(PROBLEMS["1_SoftmaxDim1.py"])
    cand = tmp_path / "ones.py"
    cand.write_text(HEAD + "class ModelNew(nn.Module):\n    def forward(self, x):\n"
                           "        return torch.ones_like(x)\n")
    r = run_job(Job(task_path=str(task), candidate_path=str(cand), task_suite="tmp", device="cpu", trials=2,
                    baselines=("eager",), rep_ms=5, warmup_ms=1), timeout_s=120)
    assert r.ok, (r.reason, r.detail)
    assert r.reference_change and all(v == 0.0 for v in r.reference_change.values())
    f = Facts(1, 1, "tmp/softmax_dim1", "user", None, {}, "", "",
              correctness={"reference_change": r.reference_change, "tolerance": r.tolerance})
    assert f.degenerate and f.reference_static
    f.correctness = {"reference_change": {"default": 0.3}, "tolerance": r.tolerance}
    assert not f.degenerate
