"""The task format: META parsing without executing the file, sizes, work expressions, instantiation."""

import pytest

from kernelpro.errors import TaskError
from kernelpro.suites.task import DEFAULT_TOLERANCE, instantiate, load_task

GOOD = '''
import torch
M = 64
N = 32
META = {
    "dtype": "bf16", "sizes": {"shown": [{"M": 16}], "heldout": [{"M": 40, "N": 24}]},
    "features": {"sm_90a": ["wgmma", "tma"]}, "flops": "2*M*N", "bytes": "2*(M*N)",
    "tolerance": {"atol": 0.5},
}
class Model(torch.nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
    def forward(self, x):
        return x * self.scale
def get_inputs():
    return [torch.randn(M, N, dtype=torch.bfloat16)]
def get_init_inputs():
    return [3.0]
'''


def write(tmp_path, text, name="t.py"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_meta_is_read_without_running_the_file(tmp_path):
    # A file that would raise if executed still loads: META is parsed, not run.
    t = load_task(write(tmp_path, GOOD + "\nraise SystemExit('executed!')\n"))
    assert t.name == "t" and t.dtype == "bf16"
    assert t.tolerance == {**DEFAULT_TOLERANCE["bf16"], "atol": 0.5}
    assert t.requested_features("sm_90a") == ("wgmma", "tma") and t.requested_features("sm_100a") == ()
    assert t.sizes("default") == [{"M": 64, "N": 32}]
    assert t.sizes("shown") == [{"M": 16, "N": 32}]
    assert t.sizes("heldout") == [{"M": 40, "N": 24}]
    assert t.work({"M": 40, "N": 24}) == (2 * 40 * 24, 2 * 40 * 24)


def test_instantiate_applies_size_globals(tmp_path):
    t = load_task(write(tmp_path, GOOD))
    _, model, (x,) = instantiate(t, t.sizes("heldout")[0], device="cpu", seed=1)
    assert x.shape == (40, 24) and x.dtype.is_floating_point
    assert (model(x) == x * 3.0).all()
    _, _, (x2,) = instantiate(t, t.sizes("heldout")[0], device="cpu", seed=1)
    assert (x2 == x).all(), "same seed, same inputs"


@pytest.mark.parametrize("mutation, message", [
    ("META = {'flops': '2*M*Q'}", "unknown size global"),
    ("META = {'flops': '__import__(\"os\")'}", "may call only"),
    ("META = {'sizes': {'shown': [{'Z': 1}]}}", "does not define"),
    ("META = {'features': {'sm_80': ['wgmma']}}", "unknown arch"),
    ("META = {'tolerance': {'atol': 'x'}}", "numeric"),
    ("META = {'colour': 'red'}", "unknown key"),
    ("META = dict(dtype='bf16')", "literal dict"),
])
def test_bad_meta_is_a_one_line_task_error(tmp_path, mutation, message):
    src = GOOD.replace(GOOD[GOOD.index("META"):GOOD.index("class Model")], mutation + "\n")
    with pytest.raises(TaskError, match=message) as e:
        load_task(write(tmp_path, src))
    assert "\n" not in str(e.value) and "t.py" in str(e.value)


def test_suites_are_told_apart_in_one_place(tmp_path):
    """Stages ask the task's suite, never compare suite names: a KernelBench task reloads with
    KernelBench's tolerances and refuses 'reference'; a folder suite finds <task>.py/.cu/.ptx."""
    import pytest

    from kernelpro.errors import KernelProError
    from kernelpro.suites.suite import FolderSuite, KernelBenchSuite, get_suite

    assert isinstance(get_suite("kernelbench"), KernelBenchSuite)
    assert isinstance(get_suite("ptxbench"), FolderSuite) and isinstance(get_suite(None), FolderSuite)
    lvl = tmp_path / "KernelBench" / "level1"
    lvl.mkdir(parents=True)
    (lvl / "1_Add.py").write_text(
        "import torch\nimport torch.nn as nn\nN = 8\nclass Model(nn.Module):\n"
        "    def forward(self, a, b):\n        return a + b\n"
        "def get_inputs():\n    return [torch.randn(N), torch.randn(N)]\ndef get_init_inputs():\n    return []\n")
    kb = get_suite("kernelbench")
    (task,) = kb.tasks(path=str(tmp_path))
    again = get_suite(task.suite).task_from_file(task.path)
    assert again.tolerance == task.tolerance and again.tolerance["atol"] == 1e-4
    with pytest.raises(KernelProError, match="ships no reference"):
        kb.solution_for(task, "reference")
    sol = tmp_path / "sol"
    sol.mkdir()
    (sol / "1_Add.py").write_text("x = 1\n")
    assert kb.solution_for(task, str(sol)) == sol / "1_Add.py"
    folder = FolderSuite("mine")
    (sol / "vector_add.cu").write_text("")
    t2 = type("T", (), {"name": "vector_add", "path": tmp_path / "tasks" / "vector_add.py"})()
    assert folder.solution_for(t2, str(sol)) == sol / "vector_add.cu"
    with pytest.raises(KernelProError, match="not a folder"):
        folder.solution_for(t2, str(tmp_path / "nope"))
