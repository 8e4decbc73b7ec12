"""The timed-output probes: a probed call runs on fresh values, so when it is the last timed call its output
must not be compared with the original inputs' reference (an honest slow CPU candidate was failed so)."""

from __future__ import annotations

import torch

from kernelpro.harness.timed import _TimedProbes


class _Ev:
    def _inputs(self, mod, seed):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(64, generator=g)]


def test_a_probed_last_call_is_known_to_the_last_call_check():
    inputs = [torch.ones(64)]
    cin = [inputs[0].clone()]
    last: dict = {}
    p = _TimedProbes(_Ev(), None, inputs, cin, last, lambda x: x * 2)
    p.early = {2}                       # only the last of three calls is probed
    for i in range(3):
        p.before(i)
        last["out"] = cin[0] * 2        # the honest candidate
        last["n"] = last.get("n", 0) + 1
        p.after(i)
    assert p.last_probed_call == last["n"] == 3
    assert not torch.equal(last["out"], inputs[0] * 2)   # the fresh values' output, not the original's
    assert torch.equal(cin[0], inputs[0])                # inputs restored after the probe
    assert p.summary() == {"probed_calls": [2]}


def test_an_unprobed_last_call_is_still_checked():
    inputs = [torch.ones(64)]
    cin = [inputs[0].clone()]
    last: dict = {}
    p = _TimedProbes(_Ev(), None, inputs, cin, last, lambda x: x * 2)
    p.early = {0}
    for i in range(3):
        p.before(i)
        last["out"] = cin[0] * 2
        last["n"] = last.get("n", 0) + 1
        p.after(i)
    assert p.last_probed_call == 1 and last["n"] == 3


def test_busy_time_check_is_not_fooled_by_a_shared_gpu_but_catches_a_shortened_timer():
    from kernelpro.harness.timed import timer_below_busy

    # An honest candidate on a GPU shared with other processes (seen: 2.66 ms event median, busy-time
    # median 3.29 ms): the calls time slicing stretched must not make its own timer look forged.
    contended = [2.45, 2.5, 2.55, 2.6, 2.62] + [3.2, 3.29, 3.3, 3.6, 4.1, 4.5, 5.0]
    assert timer_below_busy(2.66, contended) is None
    # The median rule flagged that run; the low quantile does not.
    assert 2.66 < 0.9 * sorted(contended)[len(contended) // 2]
    # A timer read down to a third of what the kernels took is still caught, on a quiet GPU or a busy one.
    quiet = [1.0, 1.01, 1.02, 0.99, 1.0, 1.03, 1.0, 1.01, 0.98, 1.0]
    assert "below the candidate's own kernel busy time" in timer_below_busy(0.33, quiet)
    assert timer_below_busy(0.8, contended) is not None
    assert timer_below_busy(0.97, quiet) is None and timer_below_busy(1.0, []) is None


def test_one_output_rule_for_probes_and_rivals_rejects_a_dtype_change():
    # the rivals' check once compared shape and values only: a rival returning fp32 for a bf16 reference
    # was timed, though the checks fail that candidate
    from kernelpro.harness.tensors import outputs_match
    from kernelpro.suites.task import DEFAULT_TOLERANCE

    tol = DEFAULT_TOLERANCE["bf16"]
    ref = torch.randn(8, 16).to(torch.bfloat16)
    assert outputs_match([ref.clone()], [ref], tol)
    assert outputs_match([ref.clone(), 3], [ref, 3], tol)              # non-tensor outputs are not compared
    assert not outputs_match([ref.float()], [ref], tol)                 # same values, other dtype
    assert not outputs_match([ref.reshape(16, 8)], [ref], tol)
    assert not outputs_match([ref.tolist()], [ref], tol)
    assert not outputs_match([ref], [ref, ref], tol)
    assert not outputs_match([ref + 1], [ref], tol)
