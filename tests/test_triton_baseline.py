"""The Triton grouped-GEMM baseline (kernelpro/harness/triton_grouped.py) and its plumbing.

The kernel runs under Triton's CPU interpreter (TRITON_INTERPRET=1, in a child process so the setting is in
place before Triton builds the kernel) on small uneven groups, empty ones included, against a per-expert
torch loop; skipped with the reason when Triton is not importable. The plumbing (META triton -> the task's
named baselines -> bench's default set; a missing Triton as one line) needs no Triton.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpro.bench.pipeline import BASELINES, DEFAULT_BASELINES, run_baselines, task_baselines
from kernelpro.errors import KernelProError, TaskError
from kernelpro.suites.task import find_task, load_task

ROOT = Path(__file__).resolve().parents[1]
HAS_TRITON = importlib.util.find_spec("triton") is not None

CHILD = r"""
import json, sys
import torch
from kernelpro.harness.triton_grouped import grouped_mm

out = []
for sizes, n, k in json.loads(sys.argv[1]):
    g = torch.Generator().manual_seed(len(sizes) * 131 + n + k)
    t = sum(sizes)
    x = torch.randn(t, k, generator=g).to(torch.bfloat16)
    w = (torch.randn(len(sizes), n, k, generator=g) * k ** -0.5).to(torch.bfloat16)
    ends, acc = [], 0
    for s in sizes:
        acc += s
        ends.append(acc)
    offs = torch.tensor(ends, dtype=torch.int32)
    y = grouped_mm(x, w, offs)
    ref = torch.zeros(t, n)
    start = 0
    for e, end in enumerate(ends):
        ref[start:end] = x[start:end].float() @ w[e].float().t()
        start = end
    err = (y.float() - ref).abs()
    out.append({"sizes": sizes, "max_abs": err.max().item() if t else 0.0,
                "tol_ok": bool(torch.allclose(y.float(), ref, atol=2e-2, rtol=2e-2)), "shape": list(y.shape)})
print(json.dumps(out))
"""

# (group sizes, N, K): uneven multiples of 8 not of the 32-row interpreter tile, empty groups (first, middle,
# last), a single expert, N and K not multiples of the tile.
CASES = [
    ([40, 0, 8, 96, 16], 72, 48),
    ([0, 24, 56], 40, 64),
    ([8, 8, 0], 64, 40),
    ([104], 48, 80),
]


@pytest.mark.skipif(not HAS_TRITON, reason="needs triton (pip install 'kernelpro[triton]') for TRITON_INTERPRET")
def test_grouped_mm_matches_torch_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], capture_output=True, text=True,
                         timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(got) == len(CASES)
    for (sizes, n, _), r in zip(CASES, got, strict=True):
        assert r["shape"] == [sum(sizes), n]
        assert r["tol_ok"], r


def test_missing_triton_is_one_line(monkeypatch):
    from kernelpro.harness import triton_grouped

    monkeypatch.setitem(sys.modules, "triton", None)        # import triton -> ImportError
    monkeypatch.setitem(sys.modules, "triton.language", None)
    monkeypatch.setattr(triton_grouped, "_KERNELS", {})
    with pytest.raises(KernelProError) as e:
        triton_grouped.triton_baseline("grouped_mm", [])
    msg = str(e.value)
    assert "\n" not in msg and "pip install 'kernelpro[triton]'" in msg


def test_unknown_triton_kernel_is_refused():
    from kernelpro.harness.triton_grouped import triton_baseline

    with pytest.raises(KernelProError, match="known Triton kernels: grouped_mm"):
        triton_baseline("no_such_kernel", [])


def test_meta_triton_names_the_tasks_baseline():
    task = find_task("ptxbench/grouped_gemm_moe_bf16")
    assert task.triton == "grouped_mm" and task.named_baselines == ("triton",)
    plain = find_task("ptxbench/gemm_bf16")
    assert plain.triton == "" and plain.named_baselines == ()


def test_bad_meta_triton_is_a_task_error(tmp_path):
    src = (ROOT / "kernelpro/suites/ptxbench/tasks/grouped_gemm_moe_bf16.py").read_text()
    bad = tmp_path / "bad_triton.py"
    bad.write_text(src.replace("'triton': 'grouped_mm'", "'triton': 'not_a_kernel'"))
    with pytest.raises(TaskError, match="META triton must name"):
        load_task(bad, suite="x")


def test_default_baselines_add_the_tasks_own_and_explicit_lists_stay_as_given():
    moe = find_task("ptxbench/grouped_gemm_moe_bf16")
    plain = find_task("ptxbench/gemm_bf16")
    assert "triton" in BASELINES
    default = list(DEFAULT_BASELINES)
    cols = run_baselines([plain, moe], default, explicit=False)
    assert cols == [*DEFAULT_BASELINES, "triton"]
    assert task_baselines(moe, cols, explicit=False) == [*DEFAULT_BASELINES, "triton"]
    assert task_baselines(plain, cols, explicit=False) == list(DEFAULT_BASELINES)
    # an explicit --baselines list is what every task gets, nothing added
    assert run_baselines([plain, moe], ["eager"], explicit=True) == ["eager"]
    assert task_baselines(moe, ["eager"], explicit=True) == ["eager"]
    assert task_baselines(plain, ["eager", "triton"], explicit=True) == ["eager", "triton"]
    assert run_baselines([plain], default, explicit=False) == default


def test_bench_accepts_triton_in_baselines_and_refuses_unknown_names(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([sys.executable, "-m", "kernelpro", "bench", "ptxbench", "--baselines", "eager,tritonx",
                          "--db", str(tmp_path / "r.db")], capture_output=True, text=True, timeout=300, env=env,
                         cwd=ROOT)
    assert bad.returncode == 1 and "--baselines: unknown ['tritonx']" in bad.stderr
    assert "triton" in bad.stderr.split("choose from")[1]
