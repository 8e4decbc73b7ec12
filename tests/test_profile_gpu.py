"""End to end on a GPU with Nsight Compute: build, profile, diagnose (skipped without a GPU or ncu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.toolchain import find_tool

CORPUS = Path(__file__).parent / "kernels" / "profile"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(find_tool("ncu") is None, reason="needs Nsight Compute (ncu)")]


def test_binary_plant_is_diagnosed():
    from kernelpro.profile import profile_binary

    res = profile_binary(CORPUS / "uncoalesced.cu")
    assert any(f.tool == "coalescing" for f in res.findings), res.text


def test_python_candidate_profile_and_system_view():
    from kernelpro.profile import profile_candidate
    from kernelpro.suites.task import load_task

    task = load_task(CORPUS / "task_chunked_scale.py")
    res = profile_candidate(CORPUS / "cand_chunked.py", task, calls=1, max_kernels=4)
    assert 1 <= len(res.profiles) <= 4
    assert res.system.launches_per_call >= 100
    assert any(f.tool == "launch_overhead" for f in res.findings), res.text
