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
