"""The timed-window rule for streams, on synthetic profiler traces: joined side streams and graph replays
pass; work that ends after the caller's stream completed, or is never joined back, is named."""

from __future__ import annotations

from kernelpro.harness.checks import window_kernels

OURS, SIDE = 7, 13


def _trace(kernels: list[tuple[str, int, float, float, float]], joins: list[float],
           calibrated: bool = True) -> list[dict]:
    """kernels: (name, stream, host launch ts, gpu start ts, duration); the call's host range is [10, 20]."""
    ev: list[dict] = [{"cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "ts": 9.0, "args": {}}] if calibrated else []
    ev += [{"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1.0, "args": {"correlation": 1}},
           {"cat": "kernel", "name": "vectorized_elementwise_kernel<fill>", "ts": 2.0, "dur": 1.0,
            "args": {"stream": OURS, "correlation": 1}}]
    for i, (name, stream, host, start, dur) in enumerate(kernels, start=10):
        ev.append({"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": host, "args": {"correlation": i}})
        ev.append({"cat": "kernel", "name": name, "ts": start, "dur": dur, "args": {"stream": stream, "correlation": i}})
    ev += [{"cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "ts": t, "args": {}} for t in joins]
    ev += [{"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 21.0, "args": {"correlation": 99}},
           {"cat": "kernel", "name": "vectorized_elementwise_kernel<fill>", "ts": 100.0, "dur": 1.0,
            "args": {"stream": OURS, "correlation": 99}}]
    return ev


def test_side_stream_joined_before_return_passes():
    names, left = window_kernels(_trace([("add", SIDE, 11.0, 30.0, 50.0)], joins=[12.0]), 10.0, 20.0)
    assert names == ["add"] and left == []


def test_graph_replay_on_the_callers_stream_passes():
    ks = [("graph_node_a", OURS, 11.0, 30.0, 20.0), ("graph_node_b", OURS, 11.0, 50.0, 40.0)]
    assert window_kernels(_trace(ks, joins=[]), 10.0, 20.0)[1] == []


def test_work_ending_after_the_callers_stream_completed_is_a_leftover():
    _, left = window_kernels(_trace([("slow", SIDE, 11.0, 30.0, 200.0)], joins=[12.0]), 10.0, 20.0)
    assert len(left) == 1 and "slow" in left[0] and "after the caller's stream" in left[0]


def test_a_side_stream_never_joined_is_invisible_even_when_it_happens_to_finish_early():
    # launched after the only join: nothing orders the caller's stream after it
    _, left = window_kernels(_trace([("add", SIDE, 15.0, 30.0, 5.0)], joins=[12.0]), 10.0, 20.0)
    assert len(left) == 1 and "never joined" in left[0]


def test_without_the_harness_join_in_the_trace_only_the_end_marker_judges():
    # a profiler that does not record stream waits cannot show a candidate's join: no false alarm
    ok = _trace([("add", SIDE, 15.0, 30.0, 5.0)], joins=[], calibrated=False)
    assert window_kernels(ok, 10.0, 20.0)[1] == []
    late = _trace([("add", SIDE, 15.0, 30.0, 500.0)], joins=[], calibrated=False)
    assert len(window_kernels(late, 10.0, 20.0)[1]) == 1
