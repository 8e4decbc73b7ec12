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
