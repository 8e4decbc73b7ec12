"""The harness's own memory at KernelBench sizes: whole-tensor reductions work a slice at a time, and the
timed-output probes of a large problem keep no copies of its outputs. On an 80 GB H100 most of
KernelBench's current level 1 (6 GiB fp32 tensors) ran out of memory in the harness's own work: its
float64 error statistics alone took about eight times an output's size, and the probes kept up to twelve
copies of it."""

from __future__ import annotations

import math

import pytest
import torch

from kernelpro.harness import tensors
from kernelpro.harness.tensors import error_stats, fingerprint
from kernelpro.harness.timed import _TimedProbes
from kernelpro.suites.degenerate import change
from kernelpro.suites.task import DEFAULT_TOLERANCE


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(37, 41, generator=g)
    ref[0, 0] = float("inf")          # a non-finite reference element: left out of the norms
    out = ref + 1e-3 * torch.randn(37, 41, generator=g)
    out.view(torch.int32)[5, :7] = -1  # poison: never written
    out[9, 3] = float("nan")
    return out, ref


@pytest.mark.parametrize("rule", ["fp32", "ptxbench"])
def test_error_stats_in_slices_equals_the_whole(rule):
    out, ref = _pair()
    tol = dict(DEFAULT_TOLERANCE["fp32"])
    if rule == "ptxbench":
        tol["elementwise"] = "abs_and_rel"
    whole = error_stats(out, ref, tol, chunk=out.numel())
    for chunk in (1, 7, 64, 1000):
        part = error_stats(out, ref, tol, chunk=chunk)
        assert part.keys() == whole.keys()
        for k, v in whole.items():
            assert part[k] == pytest.approx(v, rel=1e-12), (chunk, k)
    assert (whole["poisoned"], whole["nonfinite"], whole["ok"]) == (7, 1, False)
    close = error_stats(ref[1:] + 1e-7, ref[1:], tol, chunk=5)
    assert close["ok"] and math.isfinite(close["tol_needed"])


def test_error_stats_never_broadcasts_a_wrong_shape():
    # (4, 1) against (4,) broadcast to (4, 4) before, so a wrong-shaped constant output could pass
    ref = torch.ones(4)
    st = error_stats(torch.ones(4, 1), ref, DEFAULT_TOLERANCE["fp32"])
    assert not st["ok"] and st["mismatch"] == 1.0


def test_fingerprint_and_reference_change_in_slices(monkeypatch):
    a = torch.randn(3, 1000)
    b = a.clone()
    b[2, 999] += 0.5
    whole = (fingerprint(a), change(a, b))
    monkeypatch.setattr(tensors, "CHUNK", 13)
    assert fingerprint(a, chunk=13)[2] == pytest.approx(whole[0][2], rel=1e-12)
    assert fingerprint(a)[2] == pytest.approx(whole[0][2], rel=1e-12)
    assert change(a, b) == pytest.approx(whole[1], rel=1e-12)
    nan = a.clone()
    nan[1, 1] = float("nan")
    assert change(nan, a) == math.inf    # a NaN that moves, found in whichever slice holds it


class _Ev:
    class task:
        tolerance = DEFAULT_TOLERANCE["fp32"]

    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def _inputs(self, mod, seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(64, generator=g)]

    def fail(self, name: str, detail: str) -> None:
        self.failed.append((name, detail))


def _loop(p: _TimedProbes, cin: list[torch.Tensor], last: dict, honest_after: int) -> None:
    for i in range(40):
        p.before(i)
        last["out"] = cin[0] * 2 if i < honest_after else torch.zeros(64)
        last["n"] = last.get("n", 0) + 1
        p.after(i)


def test_probes_of_a_large_problem_keep_no_output_copies_and_still_catch_a_wrong_call(monkeypatch):
    monkeypatch.setattr(_TimedProbes, "BIG", 0)      # every problem counts as large
    inputs = [torch.ones(64)]
    cin = [inputs[0].clone()]
    ev, last = _Ev(), {}
    p = _TimedProbes(ev, None, inputs, cin, last, lambda x: x * 2)
    assert p.big and len(p.fresh) == len(p.refs) == 1
    p.early = {3, 20}
    _loop(p, cin, last, honest_after=10)               # right while probed at call 3, wrong at call 20
    assert [ok for _, _, ok in p.taken][:2] == [True, False]
    assert not any(isinstance(o, list) for _, _, o in p.taken)
    p.judge()
    assert ev.failed and ev.failed[0][0] == "wrong_output" and "as it was taken" in ev.failed[0][1]

    honest, last = _Ev(), {}
    q = _TimedProbes(honest, None, inputs, cin, last, lambda x: x * 2)
    q.early = {3, 20}
    _loop(q, cin, last, honest_after=40)
    q.judge()
    assert honest.failed == [] and torch.equal(cin[0], inputs[0])


def test_probes_of_a_small_problem_keep_three_fresh_sets_and_judge_after_the_loop():
    inputs = [torch.ones(64)]
    cin = [inputs[0].clone()]
    ev, last = _Ev(), {}
    p = _TimedProbes(ev, None, inputs, cin, last, lambda x: x * 2)
    assert not p.big and len(p.fresh) == len(p.refs) == 3
    p.early = {3, 20}
    _loop(p, cin, last, honest_after=10)
    assert all(isinstance(o, list) for _, _, o in p.taken)
    p.judge()
    assert ev.failed and "only after the loop" in ev.failed[0][1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: peak device memory of error_stats")
def test_error_stats_peak_memory_stays_near_a_slice_on_the_gpu():
    n = 1 << 28                                              # 1 GiB of fp32 per tensor
    ref = torch.randn(n, device="cuda")
    out = ref + 1e-6
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    assert error_stats(out, ref, DEFAULT_TOLERANCE["fp32"])["ok"]
    extra = torch.cuda.max_memory_allocated() - base
    # float64 copies of a 2**23 slice and their temporaries: under 1 GiB; whole, it was about 8 GiB
    assert extra < 1 << 30, extra


RELU = """
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(64, 256)]
def get_init_inputs():
    return []
"""


def test_input_sets_are_freed_when_their_stage_returns_without_the_garbage_collector(tmp_path, monkeypatch):
    # A frame that held itself (sys._current_frames() in a local) kept every caller's frame alive until the
    # collector ran: on a 6 GiB problem the cache probe's four tensors were still held through the timing.
    import gc
    import weakref

    from kernelpro.harness.checks import CorrectnessChecks
    from kernelpro.harness.evaluate import Evaluator
    from tests.inprocess import evaluate_in_process, write_problem

    task, cand = write_problem(tmp_path, RELU, RELU.replace("class Model(", "class ModelNew("), "1_relu")
    made: list[weakref.ref] = []
    left: list[int] = []
    orig_inputs, orig_probe = Evaluator._inputs, CorrectnessChecks._cache_probe

    def inputs(self, mod, seed, *a, **k):
        out = orig_inputs(self, mod, seed, *a, **k)
        made.extend(weakref.ref(t) for t in out if isinstance(t, torch.Tensor))
        return out

    def probe(self, *a, **k):
        n = len(made)
        ok = orig_probe(self, *a, **k)
        left.append(sum(r() is not None for r in made[n:]))
        return ok

    monkeypatch.setattr(Evaluator, "_inputs", inputs)
    monkeypatch.setattr(CorrectnessChecks, "_cache_probe", probe)
    gc.collect()
    gc.disable()
    try:
        r = evaluate_in_process(task, cand)
    finally:
        gc.enable()
    assert r["status"] == "passed", r.get("detail")
    assert left and left == [0] * len(left), left
