"""Energy per call from NVML's total-energy counter (nvidia-ml-py).

Method: synchronize, read `nvmlDeviceGetTotalEnergyConsumption` (millijoules since driver load), run a
fixed number of calls chosen so the work lasts at least `min_seconds` (default 1 s), synchronize, read
again; joules per call = delta / calls.

Caveats (also copied into every result, because they bound what the number means):
- The counter is for the whole board (HBM, fans/VRM losses, idle power), not for one kernel or process;
  another tenant's work on the same GPU is counted too.
- The driver refreshes the counter every few tens of milliseconds, so short windows are quantised; the
  >= 1 s window keeps that error to a few percent.
- Power depends on clocks and temperature, which drift over a run; candidate and baselines are measured
  back to back, once each, not interleaved.
- L2 is not flushed between calls here (a flush would add its own energy), so data-reuse across calls
  makes memory-bound kernels look cheaper than in a cold-cache call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

CAVEATS = ("whole-board NVML counter (includes idle/static power and other tenants), ~tens-of-ms update "
           "granularity, >=1 s windows, no L2 flush between calls, measured back to back")


def nvml_handle(index: int = 0) -> Any:
    """An NVML device handle, or raise RuntimeError(one line) when NVML or the counter is unavailable."""
    try:
        import pynvml
    except ImportError:
        raise RuntimeError("nvidia-ml-py is not installed (`pip install nvidia-ml-py`)") from None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    except pynvml.NVMLError as e:
        raise RuntimeError(f"NVML energy counter unavailable: {e}") from None
    return h


def measure_energy(fns: dict[str, Callable[[], Any]], est_ms: dict[str, float], device_index: int = 0,
                   min_seconds: float = 1.0) -> dict[str, Any]:
    """Joules per call for each function; `est_ms` (median time per call) sizes each window."""
    import pynvml
    import torch

    h = nvml_handle(device_index)
    out: dict[str, Any] = {"caveats": CAVEATS, "min_seconds": min_seconds}
    for name, fn in fns.items():
        calls = max(10, math.ceil(min_seconds * 1e3 / max(est_ms.get(name, 1.0), 1e-4)))
        torch.cuda.synchronize()
        e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        ev0.record()
        for _ in range(calls):
            fn()
        ev1.record()
        torch.cuda.synchronize()
        e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        seconds = ev0.elapsed_time(ev1) / 1e3
        joules = (e1 - e0) / 1e3
        out[name] = {"j_per_call": joules / calls, "calls": calls, "seconds": seconds,
                     "avg_watts": joules / seconds if seconds > 0 else None}
    return out
