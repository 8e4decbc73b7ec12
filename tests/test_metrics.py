"""Suite metrics: rates, fast_p, and the roofline-floored geometric mean."""

from __future__ import annotations

import math

from kernelpro.results.metrics import Outcome, fast_p, floored_speedup, geomean_speedup, summarize


def _o(task, correct=True, cand=1.0, base=2.0, floor=None, compiled=True, feat=None):
    return Outcome(task, compiled, correct, feat, cand, {"eager": base}, floor)


def test_fast_p_counts_only_correct_and_faster():
    outs = [_o("a", cand=1.0, base=2.0), _o("b", cand=1.0, base=1.1), _o("c", correct=False, cand=1.0, base=9.0),
            _o("d", cand=None)]
    assert fast_p(outs, 1.0, "eager") == 2 / 4
    assert fast_p(outs, 1.2, "eager") == 1 / 4
    assert fast_p(outs, 0.0, "eager") == 2 / 4


def test_floor_keeps_one_absurd_time_from_dominating():
    honest = [_o(t, cand=1.0, base=1.0, floor=0.5) for t in "abc"]
    absurd = _o("d", cand=1e-9, base=1.0, floor=0.5)
    gm, n = geomean_speedup(honest + [absurd], "eager")
    assert n == 4 and math.isclose(gm, 2 ** 0.25)
    assert math.isclose(floored_speedup(1.0, 1e-9, None), 1e9)


def test_summary_rates():
    outs = [_o("a", feat=True), _o("b", correct=False, feat=False), _o("c", compiled=False, correct=False, cand=None)]
    s = summarize(outs)
    assert math.isclose(s["compile_rate"], 2 / 3) and math.isclose(s["correct_rate"], 1 / 3)
    assert s["feature_rate"] == 0.5 and s["fast_p"]["1"] == 1 / 3 and s["geomean_n"] == 1
