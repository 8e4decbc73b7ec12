"""The corpus (tests/candidates): every adversarial candidate is rejected with its named reason and every
honest one passes, through the real isolated worker on the CPU (GPU-only entries run in docs/measurements/recipes/gpu_harness.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from harness_corpus import entries, job_for, verdict_ok  # noqa: E402

from kernelpro.harness.worker import run_job  # noqa: E402

CPU = [e for e in entries() if e.device in ("any", "cpu")]


@pytest.mark.parametrize("entry", CPU, ids=[e.name for e in CPU])
def test_corpus_verdict(entry):
    hang = entry.expect == "timeout"
    job = job_for(entry, "cpu", trials=2, rep_ms=10, warmup_ms=2, baselines=["eager"], cpu_mem_limit_gb=8)
    r = run_job(job, timeout_s=6 if hang else 120)
    assert verdict_ok(entry, r), (entry.expect, r.reason, r.failed_checks, r.detail)


def test_every_adversarial_candidate_names_a_known_check():
    from kernelpro.harness.evaluate import CHECKS

    for e in entries("adversarial"):
        for want in (e.expect, e.expect_cuda or e.expect):
            # "passed" only for an adaptive candidate whose switch never flips under one observation state
            assert want in CHECKS or (want == "passed" and e.switch), e.name


def test_corpus_covers_every_named_exploit():
    names = {e.expect for e in entries("adversarial")}
    required = {"wrong_output", "nan_inf", "unwritten_output", "other_stream", "async_leftover", "output_cached",
                "output_aliases_input", "input_mutated", "library_fallback", "patched_torch", "patched_timer",
                "reads_reference_output", "lower_precision", "lazy_output", "memory_reuse", "spawned_threads",
                "spawned_process", "try_except_fallback", "impossible_speed", "timeout", "crash", "oom",
                "compile_error", "frame_access", "writes_outside", "param_mismatch"}
    assert required <= names, required - names


def test_adaptive_candidates_cover_every_switch_class():
    """Call counting, stack/frame inspection, tracer/profiler/dispatch sniffing, symlinked helpers,
    import-time spawns, other spellings of a forbidden op and writes outside the sandbox."""
    names = {e.path.stem for e in entries("adversarial")}
    assert {"adaptive_call_count", "adaptive_call_count_cached", "adaptive_gettrace", "adaptive_profiler_flag",
            "adaptive_dispatch_mode", "adaptive_stack_inspect", "frame_walk_timer", "frame_via_traceback",
            "symlinked_helper", "spawned_at_import", "library_fallback_addmm_", "writes_store"} <= names
