"""Timing statistics and the CPU fallback of the interleaved timer."""

from __future__ import annotations

import time

import pytest

from kernelpro.harness.timing import reset_persisting_l2, summarize, time_interleaved


def test_summarize_median_and_quartiles():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0], "perf_counter")
    assert (s.median_ms, s.min_ms, s.max_ms, s.n) == (3.0, 1.0, 5.0, 5)
    assert (s.q1_ms, s.q3_ms, s.iqr_ms) == (2.0, 4.0, 2.0)


def test_summarize_rejects_empty():
    with pytest.raises(ValueError):
        summarize([], "x")


def test_interleaved_cpu_orders_and_measures():
    calls = []
    fns = {"slow": lambda: (calls.append("slow"), time.sleep(0.002)),
           "fast": lambda: calls.append("fast")}
    stats, notes = time_interleaved(fns, "cpu", warmup_ms=1, rep_ms=20, min_reps=10, max_reps=50)
    assert stats["slow"].median_ms > 1.5 and stats["fast"].median_ms < 0.5
    assert stats["slow"].method == "perf_counter" and "no cache flush" in notes["*"]
    # rounds rotate the order, so neither function always goes first
    timed = calls[-2 * stats["slow"].n:]
    firsts = {timed[i] for i in range(0, len(timed), 2)}
    assert firsts == {"slow", "fast"}


def test_l2_reset_is_skipped_without_gpu():
    from kernelpro.toolchain import no_gpu_reason

    if no_gpu_reason() is None:
        pytest.skip("has a GPU")
    assert reset_persisting_l2().startswith("skipped")


def test_timer_bound_before_candidate_patches():
    import kernelpro.harness.timing as t

    real = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0  # a candidate's patch
        stats, _ = t.time_interleaved({"f": lambda: time.sleep(0.001)}, "cpu", warmup_ms=1, rep_ms=5, min_reps=5)
    finally:
        time.perf_counter = real
    assert stats["f"].median_ms > 0.5


def test_repetitions_are_sized_from_warm_calls_not_the_first_slow_ones():
    # a function whose first calls are slow (lazy init, a cold thread pool) must still fill rep_ms
    from kernelpro.harness.timing import time_protocol

    n = [0]

    def f():
        n[0] += 1
        if n[0] <= 3:
            time.sleep(0.02)

    run = time_protocol({"f": f}, "cpu", "isolated", warmup_ms=1, rep_ms=20, min_reps=8, max_reps=400, windows=2)
    assert run.reps["f"] == 400


def test_rep_count_keeps_min_reps_for_fast_calls_and_bounds_slow_ones_by_the_budget():
    from kernelpro.harness.timing import _rep_count

    assert _rep_count(1.6, 200, 30, 2000) == 125          # fills rep_ms
    assert _rep_count(50, 200, 30, 2000) == 30            # min_reps: 1.5 s, within the budget
    assert _rep_count(150, 200, 30, 2000) == 20           # 3 s of 150 ms calls
    assert _rep_count(1450, 200, 30, 2000) == 5           # a 1.45 s call: the floor, not 30
    assert _rep_count(1450, 200, 3, 2000) == 3            # never more than a min_reps the caller lowered


def test_a_slow_function_is_timed_within_the_slow_budget():
    # 30 repetitions of a 1.45 s call took 223 s of one CPU evaluation's timing
    from kernelpro.harness.timing import time_protocol

    fns = {"f": lambda: time.sleep(0.02)}
    inter = time_protocol(fns, "cpu", "interleaved", warmup_ms=1, rep_ms=5, min_reps=30, slow_budget_ms=100)
    assert inter.reps["f"] == 5
    iso = time_protocol(fns, "cpu", "isolated", warmup_ms=1, rep_ms=5, min_reps=30, slow_budget_ms=100, windows=2)
    assert iso.reps["f"] == 6        # ceil(5 / 2) per window, two windows


def test_the_estimate_of_a_slow_function_stops_at_its_budget():
    from kernelpro.harness import timing

    calls = [0]

    def f():
        calls[0] += 1
        time.sleep(0.3)

    r = timing._Runner({"f": f}, "cpu", False, False, None, None)
    est = r.estimate(1.0)
    assert calls[0] == 2 and est["f"] == pytest.approx(300, rel=0.3)   # the first call, then one: not ten
