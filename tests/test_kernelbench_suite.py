"""KernelBench as a suite: a small checkout in the real folder layout, written by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.errors import TaskError
from kernelpro.suites.kernelbench import find_solution, load_kernelbench, problem_id
from kernelpro.suites.task import import_module_from, instantiate

MATMUL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a single square matrix multiplication (C = A * B)
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)

N = 2048 * 2

def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]

def get_init_inputs():
    return []  # No special initialization inputs needed
'''

RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 16
dim = 64

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return []
'''

CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x

batch_size = 2
in_channels = 3
out_channels = 4
height, width = 8, 8
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "KernelBench-main"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# KernelBench\n")
    l1 = root / "KernelBench" / "level1"
    l2 = root / "KernelBench" / "level2"
    l1.mkdir(parents=True)
    l2.mkdir(parents=True)
    (l1 / "1_Square_matrix_multiplication_.py").write_text(MATMUL)
    (l1 / "19_ReLU.py").write_text(RELU)
    (l1 / "2_Standard_matrix_multiplication_.py").write_text(MATMUL.replace("N = 2048 * 2", "N = 64"))
    (l2 / "1_Conv2D_ReLU_BiasAdd.py").write_text(CONV)
    return root


def test_loads_levels_as_they_are(checkout: Path):
    tasks = load_kernelbench(checkout)
    assert [(t.level, t.name) for t in tasks] == [
        (1, "1_Square_matrix_multiplication_"), (1, "2_Standard_matrix_multiplication_"), (1, "19_ReLU"),
        (2, "1_Conv2D_ReLU_BiasAdd")]  # numeric problem order, not string order
    assert all(t.suite == "kernelbench" and t.key == f"kernelbench/{t.name}" for t in tasks)
    assert [problem_id(t) for t in tasks] == [1, 2, 19, 1]
    relu = tasks[2]
    assert relu.default_size == {"batch_size": 16, "dim": 64}
    assert relu.dtype == "fp32" and relu.tolerance["atol"] == relu.tolerance["rtol"] == 1e-4
    assert "level 1 problem 19" in relu.description
    # The inner KernelBench/ folder is accepted too, and a level filter keeps only that level.
    assert [t.name for t in load_kernelbench(checkout / "KernelBench", level=2)] == ["1_Conv2D_ReLU_BiasAdd"]


def test_precision_and_legacy_tolerance(checkout: Path):
    bf16 = load_kernelbench(checkout, level=1, precision="bf16")
    assert {t.tolerance["atol"] for t in bf16} == {1e-2} and {t.dtype for t in bf16} == {"bf16"}
    legacy = load_kernelbench(checkout, level=1, legacy_tolerance=True)
    assert {t.tolerance["rtol"] for t in legacy} == {1e-2}
    with pytest.raises(TaskError, match="precision"):
        load_kernelbench(checkout, precision="fp8")


@pytest.mark.parametrize("bad", ["missing", "empty"])
def test_not_a_checkout_is_one_clear_line(tmp_path: Path, bad: str):
    path = tmp_path / "x"
    if bad == "empty":
        path.mkdir()
    with pytest.raises(TaskError) as e:
        load_kernelbench(path)
    msg = str(e.value)
    assert "not a KernelBench checkout" in msg and "\n" not in msg
    with pytest.raises(TaskError, match="needs --path"):
        load_kernelbench(None)


def test_missing_level_is_reported(checkout: Path):
    with pytest.raises(TaskError, match="no level3 folder.*level1, level2"):
        load_kernelbench(checkout, level=3)


def test_cli_tasks_lists_the_checkout(checkout: Path, tmp_path: Path, capsys):
    from kernelpro.cli import main

    assert main(["tasks", "kernelbench", "--path", str(checkout), "--level", "1"]) == 0
    out = capsys.readouterr().out
    assert "19_ReLU" in out and "1_Conv2D" not in out
    assert main(["tasks", "kernelbench", "--path", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert "not a KernelBench checkout" in err and "Traceback" not in err


def test_reference_solution_runs_like_the_model(checkout: Path, tmp_path: Path):
    """A `ModelNew = Model` solution, found in each layout KernelBench writes, matches the reference."""
    import torch

    tasks = {t.name: t for t in load_kernelbench(checkout)}
    conv = tasks["1_Conv2D_ReLU_BiasAdd"]
    sol_dir = tmp_path / "solutions"
    (sol_dir / "level2").mkdir(parents=True)
    assert find_solution(conv, sol_dir) is None
    generated = sol_dir / "level_2_problem_1_sample_3_kernel.py"
    generated.write_text(conv.path.read_text() + "\nModelNew = Model\n")
    (sol_dir / "level_2_problem_1_sample_7_kernel.py").write_text("raise SystemExit('wrong sample')\n")
    (sol_dir / "level_1_problem_1_sample_0_kernel.py").write_text("raise SystemExit('wrong level')\n")
    assert find_solution(conv, sol_dir) == generated
    by_name = sol_dir / "level2" / "1_Conv2D_ReLU_BiasAdd.py"
    by_name.write_text(generated.read_text())
    assert find_solution(conv, sol_dir) == by_name

    mod, model, inputs = instantiate(conv, conv.sizes("default")[0], device="cpu", seed=42)
    sol = import_module_from(by_name, "kb_test_solution")
    # KernelBench builds both models right after seeding with the same seed, so weights match.
    torch.manual_seed(42)
    ref = mod.Model(*mod.get_init_inputs())
    torch.manual_seed(42)
    new = sol.ModelNew(*mod.get_init_inputs())
    out_ref, out_new = ref(*inputs), new(*inputs)
    assert out_ref.shape == (2, 4, 6, 6)
    assert torch.allclose(out_ref, out_new, atol=conv.tolerance["atol"], rtol=conv.tolerance["rtol"])
    assert model(*inputs).shape == out_ref.shape


def test_single_file_keeps_kernelbench_settings(checkout: Path):
    """What the harness's worker must use to re-read a kernelbench task: same tolerance, level, name."""
    from kernelpro.suites.kernelbench import kernelbench_task

    listed = {t.name: t for t in load_kernelbench(checkout)}
    one = kernelbench_task(checkout / "KernelBench" / "level2" / "1_Conv2D_ReLU_BiasAdd.py")
    assert one == listed["1_Conv2D_ReLU_BiasAdd"]
    assert one.level == 2 and one.tolerance == {"atol": 1e-4, "rtol": 1e-4, "rel_norm": float("inf")}


def test_bench_runs_kernelbench_solutions_unchanged(checkout: Path, tmp_path: Path, capsys):
    """`kernelpro bench kernelbench --path --solutions DIR` end to end on the CPU, through real workers,
    with KernelBench's own tolerance (the worker must not fall back to META defaults)."""
    import json

    from kernelpro.cli import main
    from kernelpro.results.store import Store

    sol_dir = tmp_path / "sols"
    (sol_dir / "level1").mkdir(parents=True)
    relu = checkout / "KernelBench" / "level1" / "19_ReLU.py"
    (sol_dir / "level1" / "19_ReLU.py").write_text(relu.read_text() + "\nModelNew = Model\n")
    (sol_dir / "level1" / "2_Standard_matrix_multiplication_.py").write_text(
        (checkout / "KernelBench" / "level1" / "2_Standard_matrix_multiplication_.py").read_text()
        .replace("torch.matmul(A, B)", "torch.matmul(A, B) + 1e-2") + "\nModelNew = Model\n")
    db = tmp_path / "kb.db"
    rc = main(["bench", "kernelbench", "--path", str(checkout), "--level", "1", "--solutions", str(sol_dir),
               "--device", "cpu", "--baselines", "eager", "--trials", "1", "--db", str(db), "--json"])
    assert rc in (0, 1)
    s = Store(db)
    (run,) = s.runs("bench")
    evals = {c["task"]: s.latest("evaluations", c["id"])["payload"] for c in s.candidates(run["id"])}
    assert evals["kernelbench/19_ReLU"]["correct"] is True
    # Outputs are ~16 (rand 64x64 products): +1e-2 passes the old atol=rtol=1e-2 but not fp32 1e-4.
    assert evals["kernelbench/2_Standard_matrix_multiplication_"]["correct"] is False
    assert "kernelbench/1_Square_matrix_multiplication_" not in evals, "no solution: skipped, not failed"
    json.dumps(evals)
