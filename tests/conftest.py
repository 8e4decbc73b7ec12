"""Shared test setup: GPU tests skip cleanly, with the reason, on machines without one."""

import pytest

from kernelpro.toolchain import no_gpu_reason


def pytest_collection_modifyitems(config, items):
    reason = no_gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
