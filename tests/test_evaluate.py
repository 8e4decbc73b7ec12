"""In-process unit tests of the evaluator's building blocks (the worker-level behaviour is in
test_adversarial.py and test_worker.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernelpro.harness.evaluate import PRIORITY
from kernelpro.harness.guards import (
    classify_exception,
    compare_snapshot,
    precision_flags,
    set_precision_policy,
    snapshot,
)
from kernelpro.harness.tensors import bitwise_equal, error_stats, overlaps, poison_allocator, poison_mask
from kernelpro.harness.timed import DEFAULT_CEILINGS
from kernelpro.suites.task import DEFAULT_TOLERANCE


def test_poison_pattern_is_not_an_arithmetic_nan():
    t = torch.full((8,), float("nan"))
    assert not poison_mask(t).any()
    p = torch.empty(8)
    p.view(torch.int32).fill_(-1)
    assert poison_mask(p).all() and torch.isnan(p).all()
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        q = torch.empty(4, dtype=dt)
        q.view(torch.uint8).fill_(255)
        assert poison_mask(q).all()


@pytest.mark.gpu
def test_poisoned_freed_memory_reaches_a_fresh_empty():
    # GPU only: PyTorch's CUDA caching allocator hands the freed block back deterministically; glibc's
    # malloc on the CPU may not (this failed on the CPU once in CI-like runs, passing in others).
    n = 1 << 16
    torch.cuda.empty_cache()
    poison_allocator([4 * n], "cuda")
    e = torch.empty(n, device="cuda")
    assert poison_mask(e).float().mean() > 0.9


def test_error_stats_separates_poison_nan_and_error():
    ref = torch.randn(1000)
    tol = DEFAULT_TOLERANCE["fp32"]
    assert error_stats(ref.clone(), ref, tol)["ok"]
    out = ref.clone()
    out.view(torch.int32)[:10] = -1
    st = error_stats(out, ref, tol)
    assert (st["poisoned"], st["nonfinite"], st["ok"]) == (10, 0, False)
    out = ref.clone()
    out[3] = float("inf")
    st = error_stats(out, ref, tol)
    assert (st["poisoned"], st["nonfinite"], st["ok"]) == (0, 1, False)


def test_fp32_tolerance_rejects_bf16_arithmetic():
    a, b = torch.randn(128, 256), torch.randn(256, 128)
    ref = a @ b
    low = (a.bfloat16().float() @ b.bfloat16().float())
    assert not error_stats(low, ref, DEFAULT_TOLERANCE["fp32"])["ok"]
    assert error_stats(low.bfloat16(), ref.bfloat16(), DEFAULT_TOLERANCE["bf16"])["rel_norm"] < DEFAULT_TOLERANCE["bf16"]["rel_norm"]


def test_aliasing_and_bitwise_equality():
    x = torch.randn(100)
    assert overlaps(x[10:20], x) and not overlaps(x.clone(), x)
    y = x.clone()
    y[5] = float("nan")
    assert bitwise_equal(y, y.clone()) and not bitwise_equal(x, y)


def test_snapshot_catches_patches_and_names_timers():
    before = snapshot()
    real_pc, real_allclose, real_sub = time.perf_counter, torch.allclose, torch.Tensor.sub
    try:
        time.perf_counter = lambda: 0.0
        torch.allclose = lambda *a, **k: True
        torch.Tensor.sub = lambda self, other: self
        hits = dict((w, n) for n, w in compare_snapshot(before))
    finally:
        time.perf_counter, torch.allclose = real_pc, real_allclose
        del torch.Tensor.sub
    assert torch.Tensor.sub is real_sub or torch.Tensor.sub == real_sub
    assert hits["time.perf_counter"] == "patched_timer"
    assert hits["torch.allclose"] == "patched_torch"
    assert hits["torch.Tensor.sub"] == "patched_torch"
    assert compare_snapshot(snapshot()) == []


def test_precision_policy_turns_tf32_off_for_fp32():
    old = precision_flags()
    try:
        f = set_precision_policy("fp32")
        assert f["matmul_tf32"] is False and f["cudnn_tf32"] is False and f["fp32_precision"] == "highest"
        assert set_precision_policy("tf32")["matmul_tf32"] is True
    finally:
        from kernelpro.harness.guards import restore_precision

        restore_precision(old)


def test_exception_classification():
    assert classify_exception(torch.OutOfMemoryError("CUDA out of memory"))[0] == "oom"
    assert classify_exception(RuntimeError("DefaultCPUAllocator: can't allocate memory"))[0] == "oom"
    assert classify_exception(RuntimeError("CUDA error: an illegal memory access was encountered"))[0] == "crash"


def test_priority_and_ceilings_are_complete():
    from kernelpro.harness.evaluate import CHECKS

    assert set(PRIORITY) <= set(CHECKS) and len(PRIORITY) == len(set(PRIORITY))
    assert DEFAULT_CEILINGS["bf16"] == 990e12 and DEFAULT_CEILINGS["bandwidth"] == 4.8e12


def test_impossible_speed_with_a_low_ceiling(tmp_path):
    """The speed-of-light check itself, on the CPU: with a 1 GB/s ceiling, any vector add of 12 MB 'beats'
    physics; with the default H200 ceilings a CPU never does."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from harness_corpus import TASKS

    from kernelpro.harness.job import Job
    from kernelpro.harness.worker import run_job

    cand = tmp_path / "c.py"
    cand.write_text("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a + b\n")
    job = {"task_path": str(TASKS / "vector_add.py"), "candidate_path": str(cand), "device": "cpu", "trials": 1,
           "sizes": "default", "rep_ms": 10, "warmup_ms": 1, "baselines": ["eager"]}
    r = run_job(Job.from_dict({**job, "ceilings": {"bandwidth": 1e8}}), timeout_s=120)
    assert r.reason == "impossible_speed", r.detail
    r = run_job(Job.from_dict(job), timeout_s=120)
    assert r.ok and r.work["floor_ms"] > 0


def test_jit_compiler_subprocesses_are_not_spawned_process():
    from kernelpro.harness.guards import _is_jit_tool

    assert _is_jit_tool(("/usr/local/cuda/bin/ptxas", ["ptxas", "-v"], None, None))
    assert _is_jit_tool((None, ["ninja", "-v"], None, None))
    assert not _is_jit_tool(("/usr/bin/python3", ["python3", "-c", "pass"], None, None))
    assert not _is_jit_tool((None, "sleep 10", None, None))


def test_forbidden_ops_bind_only_the_candidates_own_call(tmp_path):
    """Regression (H200 run 2026-12-03): the transpose task forbids aten::clone, and the harness's own
    output snapshot (a clone) ran inside the forced-kernel-path probe, so an honest candidate was
    reported as an evaluator crash. A candidate that does use the forbidden op must still be caught."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from harness_corpus import TASKS

    from kernelpro.harness.job import Job
    from kernelpro.harness.worker import run_job

    task = tmp_path / "vadd_noclone.py"
    task.write_text((TASKS / "vector_add.py").read_text().replace(
        "META = {", "META = {'forbid_ops': ['aten::clone', 'aten::copy_'], ", 1))
    honest = tmp_path / "honest.py"
    honest.write_text("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
                      "        return a + b\n")
    cheat = tmp_path / "cheat.py"
    cheat.write_text("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
                     "        return (a + b).clone()\n")
    job = {"task_path": str(task), "device": "cpu", "trials": 1, "sizes": "default", "timing": False,
           "baselines": ["eager"]}
    r = run_job(Job.from_dict({**job, "candidate_path": str(honest)}), timeout_s=120)
    assert r.ok, (r.reason, r.detail)
    r = run_job(Job.from_dict({**job, "candidate_path": str(cheat)}), timeout_s=120)
    assert r.reason == "library_fallback", (r.reason, r.detail)


@pytest.mark.parametrize("tool,flagged", [("which", False), ("miner", True)])
def test_jit_compiler_spawn_is_allowed_through_posix_spawn(tmp_path, tool, flagged):
    """Triton runs ptxas through subprocess, which on Linux may use os.posix_spawn: the audit saw
    `os.posix_spawn` after the allowed `subprocess.Popen` and flagged honest Triton kernels on the H200."""
    import os
    import shutil
    import subprocess

    from kernelpro.harness.guards import _Audit

    if tool == "which":
        exe = shutil.which("which")
        assert exe, "the system's `which` is a JIT tool Triton runs"
    else:
        exe = str(tmp_path / tool)
        Path(exe).write_text("#!/bin/sh\nexit 0\n")
        Path(exe).chmod(0o755)
    _Audit.install()
    with _Audit.watch() as events:
        subprocess.run([exe, "which"], close_fds=False, check=True, capture_output=True)  # the posix_spawn path
        pid = os.posix_spawn(exe, [exe, "which"], dict(os.environ))
        os.waitpid(pid, 0)
    assert bool(events) is flagged, events
    if flagged:
        assert "os.posix_spawn" in events


def test_a_jit_tool_is_judged_by_what_it_really_is(tmp_path):
    """A Python interpreter symlinked as `cc`, or a Python script named `ptxas`, passed the basename
    allow-list; the real executable decides."""
    import sys

    from kernelpro.harness.guards import _is_jit_tool

    cc = tmp_path / "cc"
    cc.symlink_to(sys.executable)
    assert not _is_jit_tool((str(cc), [str(cc), "-c", "pass"], None, None))
    script = tmp_path / "ptxas"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    script.chmod(0o755)
    assert not _is_jit_tool((str(script), [str(script)], None, None))
    gcc = __import__("shutil").which("gcc") or __import__("shutil").which("cc")
    if gcc:
        assert _is_jit_tool((gcc, [gcc, "--version"], None, None))


def test_op_families_catch_every_spelling():
    from kernelpro.harness.guards import forbidden_families, op_family

    fam = forbidden_families(["aten::addmm", "aten::mm"])
    for spelt in ("aten::addmm_", "aten::addmm.out", "aten::addmm.default", "addmm", "aten::mm.out"):
        assert op_family(spelt) in fam, spelt
    assert op_family("aten::_addmm_activation") not in fam
    assert op_family("aten::bmm") not in fam


def test_pip_installed_launcher_scripts_are_jit_tools(tmp_path, monkeypatch):
    """On the H100 image ninja is pip's launcher script in the venv's bin; torch's JIT runs it while a
    reference is imported, and every honest memory-bound reference was flagged `spawned_process`. A script
    in the interpreter's own (read-only) environment counts; the same script elsewhere does not."""
    from kernelpro.harness import guards

    env_bin = tmp_path / "venv" / "bin"
    env_bin.mkdir(parents=True)
    ninja = env_bin / "ninja"
    ninja.write_text("#!/opt/venv/bin/python\nfrom ninja import ninja\nninja()\n")
    ninja.chmod(0o755)
    assert not guards._is_jit_tool((str(ninja), [str(ninja), "-v"], None, None))
    monkeypatch.setattr(guards, "_env_bins", lambda: (str(env_bin) + "/",))
    # (tmp_path lies under /tmp, a folder the candidate can write; here it stands for the read-only venv)
    monkeypatch.setattr(guards, "_candidate_writable_roots", lambda: ["/var/empty/kp-none/"])
    assert guards._is_jit_tool((str(ninja), [str(ninja), "-v"], None, None))
    # where the candidate can write, the same script is not a compiler
    monkeypatch.setattr(guards, "_candidate_writable_roots", lambda: [str(tmp_path) + "/"])
    assert not guards._is_jit_tool((str(ninja), [str(ninja), "-v"], None, None))


def test_torch_own_threads_are_not_the_candidates(tmp_path):
    """The `compile` baseline's inductor pool starts a `subproc_worker_timer` thread during the timed
    calls; honest references were flagged `spawned_threads`. A thread whose entry point is torch's counts
    for nobody; a thread of the candidate's own code under the same name still counts."""
    import threading

    from kernelpro.harness.guards import foreign_threads

    pytest.importorskip("torch._inductor.compile_worker.timer")
    from torch._inductor.compile_worker.timer import Timer

    stop = threading.Event()
    timer = Timer(0.2, lambda: None)
    timer.record_call()          # starts its "subproc_worker_timer" thread
    fake = threading.Thread(target=stop.wait, name="subproc_worker_timer")
    mod = tmp_path / "cand.py"
    mod.write_text("def work(ev):\n    ev.wait()\n")
    ns: dict = {}
    exec(compile(mod.read_text(), str(mod), "exec"), ns)
    mine = threading.Thread(target=ns["work"], args=(stop,), name="subproc_worker_timer")
    mine.start()
    try:
        ts = [timer.background_thread, mine]
        assert all(t.is_alive() and t.name == "subproc_worker_timer" for t in ts)
        assert foreign_threads(ts) == [mine]
        assert foreign_threads([fake]) == [fake]       # a stdlib target is not torch's either
    finally:
        stop.set()
        timer.quit()
        mine.join(5)


def test_out_of_memory_in_the_harness_own_work_is_oom_not_a_crash(monkeypatch):
    # Seen on a GPU shared by eleven processes: the reference's own allocation ran out of memory and the
    # candidate was recorded as a crash.
    from kernelpro.harness.evaluate import Evaluator
    from kernelpro.harness.job import EvalConfig

    root = Path(__file__).parent
    cfg = EvalConfig(task_path=str(root / "tasks" / "vector_add.py"),
                     candidate_path=str(root / "candidates" / "honest" / "vector_add_torch.py"), device="cpu")
    ev = Evaluator(cfg)

    def no_memory() -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB.")

    monkeypatch.setattr(ev, "_run", no_memory)
    r = ev.run()
    assert r["reason"] == "oom" and r["detail"].startswith("evaluator error: OutOfMemoryError")


FIXED_TASK = """
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)
def get_inputs():
    return [torch.randn(64, 256, generator=torch.Generator().manual_seed(0)){fixed}]
def get_init_inputs():
    return []
"""
CACHING = """
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kept = None
    def forward(self, x):
        if self.kept is None:
            self.kept = torch.tanh(x)
        return self.kept.clone()
"""


@pytest.mark.parametrize("fixed", [True, False])
def test_inputs_fixed_by_the_task_are_reported_as_blind_to_output_caching(tmp_path, fixed):
    # a FlashInfer-Trace workload whose inputs are a safetensors blob gives the same tensors to every draw:
    # a cached output is right on every call, so the verdict must say its caching probes saw nothing
    from tests.inprocess import evaluate_in_process, write_problem

    # not fixed: the task's own draw plus one from the harness's seeded generator
    task, cand = write_problem(tmp_path, FIXED_TASK.replace("{fixed}", "" if fixed else " + torch.randn(64, 256)"),
                               CACHING, "1_tanh")
    r = evaluate_in_process(task, cand)
    checks = {c["name"]: c for c in r["checks"]}
    if fixed:
        assert r["status"] == "passed" and checks["fixed_inputs"]["severity"] == "warn", r.get("detail")
    else:
        assert r["status"] == "failed" and "fixed_inputs" not in checks
