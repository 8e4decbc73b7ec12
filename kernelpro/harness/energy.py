"""Energy per call from NVML's total-energy counter (nvidia-ml-py), beside every GPU timing by default.

Method: each function alone, back to back, in windows alternated A B A B ... (`windows` per function,
like the `isolated` timing protocol, so slow thermal drift falls on all of them alike). Per window:
synchronize, read `nvmlDeviceGetTotalEnergyConsumption` (millijoules since driver load), run a number
of calls chosen so the work lasts `window_s`, synchronize, read again. Joules per call = the summed
deltas over the summed calls; J per TFLOP = joules per call over the call's TFLOPs (the task's count).

Window length (`energy_window`): the counter counts in mJ (resolution 1 mJ, stated in every record),
but the driver refreshes it only every so often, so a reading can lag the truth by up to one refresh
period at each end of a window; the delta is then off by at most (refresh period x power), a relative
error of at most refresh / window. The refresh period is measured on the device (`counter_refresh_s`)
and the window is made long enough for the asked bound (default 2%), never shorter than `min_s`, at
most `max_s` (the bound that was reached is recorded). A short kernel gets more calls per window, not
a shorter window.

Caveats (copied into every result, because they bound what the number means):
- The counter is for the whole board (HBM, VRM losses, idle/static power), not for one kernel or
  process; another tenant's work on the same GPU is counted too.
- L2 is not flushed between calls here (a flush would add its own energy), so data reuse across calls
  makes memory-bound kernels look cheaper than in a cold-cache call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelpro.harness.telemetry import Nvml, Sampler, Telemetry, counter_refresh_s, open_for_cuda

_perf_counter = time.perf_counter

CAVEATS = ("whole-board NVML counter (includes idle/static power and other tenants), no L2 flush between "
           "calls, windows alternated A B A B")
RESOLUTION_J = 1e-3   # the counter's unit (mJ)
# Baselines that run the task's own reference through PyTorch. Each energy window costs seconds of worker
# time per side, and joules matter for the candidate, the library it is judged against and compare's
# rivals: when a library baseline is timed too, these get no energy windows of their own.
PYTORCH_BASELINES = ("eager", "compile")


def energy_sides(timed: list[str], baselines: tuple[str, ...] | list[str]) -> list[str]:
    """Which of the timed functions get energy windows: all of them, except the PyTorch baselines when a
    library baseline (vendor, cudnn_frontend, torch_sdpa, triton) is among `baselines`. A run whose only
    baseline is eager or compile (the search's default) keeps it, so its energy ratio has a side."""
    library = [b for b in baselines if b not in PYTORCH_BASELINES]
    skip = {b for b in baselines if b in PYTORCH_BASELINES} if library else set()
    return [n for n in timed if n not in skip]


@dataclass(frozen=True)
class EnergyWindow:
    """How long each energy window is, and why."""
    refresh_s: float | None      # the counter's measured update period (None: not measured)
    resolution_j: float
    window_s: float
    bound: float | None          # worst-case relative error from the refresh period (refresh / window)
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def energy_window(refresh_s: float | None, power_w: float | None = None, *, rel_err: float = 0.02,
                  min_s: float = 0.5, max_s: float = 3.0, resolution_j: float = RESOLUTION_J) -> EnergyWindow:
    """The window that keeps the counter's quantisation under `rel_err`, clamped to [min_s, max_s].

    Two terms: the refresh period (error <= refresh / window) and the counter's resolution (error <=
    resolution / (power x window)); an unmeasured refresh period takes `max_s`."""
    if refresh_s is None:
        need = max_s
    else:
        need = refresh_s / rel_err
        if power_w:
            need = max(need, resolution_j / (rel_err * power_w))
    w = min(max_s, max(min_s, need))
    bound = None
    if refresh_s is not None:
        bound = refresh_s / w + (resolution_j / (power_w * w) if power_w else 0.0)
    rule = (f"window = max({min_s:g} s, refresh / {rel_err:g}), at most {max_s:g} s; "
            + (f"refresh {refresh_s * 1e3:.1f} ms" if refresh_s is not None else "refresh not measured")
            + f"; counter resolution {resolution_j * 1e3:g} mJ")
    return EnergyWindow(refresh_s, resolution_j, w, bound, rule)


@dataclass
class EnergyOf:
    j_per_call: float | None
    calls: int
    seconds: float
    avg_watts: float | None
    j_per_tflop: float | None
    windows: int
    telemetry: Telemetry

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "telemetry": self.telemetry.to_dict()}


@dataclass
class EnergyRun:
    """Energy of several functions; `to_dict` keeps each function's figures at the top level by name
    (`rec["energy"]["candidate"]["j_per_call"]`), beside `method` and `order`."""
    available: bool
    reason: str | None = None
    window: EnergyWindow | None = None
    per: dict[str, EnergyOf] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        if not self.available:
            return {"error": self.reason, "protocol": "isolated"}
        out: dict[str, Any] = {"protocol": "isolated", "caveats": CAVEATS, "order": list(self.order),
                               "method": self.window.to_dict() if self.window else None}
        out.update({k: v.to_dict() for k, v in self.per.items()})
        return out


def measure(fns: dict[str, Callable[[], Any]], est_ms: dict[str, float], nvml: Nvml | None, *,
            flops: float | None = None, windows: int = 2, sync: Callable[[], None] = lambda: None,
            window: EnergyWindow | None = None, rel_err: float = 0.02, min_s: float = 0.5, max_s: float = 3.0,
            reason: str | None = None, sample_period_s: float = 0.05) -> EnergyRun:
    """Joules per call for each function (module doc); `est_ms` (time per call) sizes the windows."""
    if nvml is None:
        return EnergyRun(False, reason or "no NVML device")
    if not nvml.has_energy:
        return EnergyRun(False, "this GPU's NVML has no total-energy counter")
    if window is None:
        window = energy_window(counter_refresh_s(nvml), nvml.power_limit_w, rel_err=rel_err, min_s=min_s,
                               max_s=max_s)
    names = list(fns)
    per_window = window.window_s / windows
    calls = {k: max(10, math.ceil(per_window * 1e3 / max(est_ms.get(k, 1.0), 1e-4))) for k in names}
    joules = {k: 0.0 for k in names}
    seconds = {k: 0.0 for k in names}
    samplers = {k: Sampler(nvml, sample_period_s) for k in names}
    order = [k for _ in range(windows) for k in names]
    for name in order:
        fn = fns[name]
        fn()
        sync()
        with samplers[name]:
            t0 = _perf_counter()
            e0 = nvml.energy_mj()
            for _ in range(calls[name]):
                fn()
            sync()
            e1 = nvml.energy_mj()
            seconds[name] += _perf_counter() - t0
        joules[name] += (e1 - e0) / 1e3  # type: ignore[operator]
    per = {}
    for k in names:
        n = calls[k] * windows
        jpc = joules[k] / n if n else None
        per[k] = EnergyOf(j_per_call=jpc, calls=n, seconds=seconds[k],
                          avg_watts=joules[k] / seconds[k] if seconds[k] > 0 else None,
                          j_per_tflop=jpc / (flops / 1e12) if jpc is not None and flops else None,
                          windows=windows, telemetry=samplers[k].telemetry())
    return EnergyRun(True, None, window, per, order)


def measure_energy(fns: dict[str, Callable[[], Any]], est_ms: dict[str, float], device: str = "cuda",
                   flops: float | None = None, **kw: Any) -> dict[str, Any]:
    """`measure` on a CUDA device (its NVML handle found by UUID), as the record stored with a result."""
    import torch

    nvml, why = open_for_cuda(device)
    return measure(fns, est_ms, nvml, flops=flops, sync=torch.cuda.synchronize, reason=why, **kw).to_dict()
