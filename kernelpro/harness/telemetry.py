"""What the GPU was doing while a kernel was timed: clocks, power, temperature, throttle reasons, energy.

At the board power cap the SM clock follows power and temperature, so two kernels timed minutes apart,
or one timed alone and one beside another, run at different clocks; a ratio without the clock and power
it was measured at says little. This module samples NVML (nvidia-ml-py) over each timing window and
turns the samples into a typed `Telemetry` record (median, min and max of each quantity, the fraction
of samples that carried each throttle reason, the energy counter's delta, a short trace for plots).

- `open_nvml` finds the NVML device of a CUDA device (by UUID, so GPU pinning through
  CUDA_VISIBLE_DEVICES cannot point it at another board), or says in one line why it cannot.
- `Sampler` is a context manager: one sample on entry, a background thread sampling every `period_s`,
  one sample on exit. NVML calls go through ctypes, which releases the GIL, so the timing loop on the
  main thread is not held up. The thread is joined before the window ends.
- `settle` runs work until the SM clock and board power stop moving (a bounded, recorded criterion), so
  no timed figure is a cold-GPU burst.
- Where NVML is absent or refuses (this is the case on machines without an NVIDIA driver), every
  record says so in `reason`; nothing here raises for a missing GPU.

The clock used for sample times is bound when this module is imported (the worker imports the harness
before any candidate), like the timer in `timing`.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kernelpro.errors import KernelProError

_now = time.perf_counter
_sleep = time.sleep

# NVML's clocks-event (throttle) reason bits, as nvml.h defines them.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
    (0x100, "display_clock"), (0x200, "board_limit"), (0x400, "reliability"),
)
TRACE_POINTS = 64   # samples kept (evenly spaced) for the report's traces


def decode_throttle(mask: int) -> list[str]:
    """Names of the reasons set in NVML's clocks-event bitmask; an unknown bit is named `bit<N>`."""
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = sum(bit for bit, _ in THROTTLE_BITS)
    rest = mask & ~known
    names += [f"bit{i}" for i in range(rest.bit_length()) if rest >> i & 1]
    return names


@dataclass(frozen=True)
class Sample:
    t_s: float               # seconds on this module's clock
    sm_mhz: float
    mem_mhz: float
    power_w: float
    temp_c: float
    throttle: int            # NVML clocks-event reason bitmask
    energy_mj: int | None    # total energy since driver load (None: counter not supported)


class Nvml:
    """One NVML device. `module` is pynvml (tests hand in the same module with its functions replaced)."""

    def __init__(self, module: Any, handle: Any, label: str):
        self.nv, self.handle, self.label = module, handle, label
        nv = module
        self._reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            self.power_limit_w: float | None = nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
        except nv.NVMLError:
            self.power_limit_w = None
        try:
            nv.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.has_energy = True
        except nv.NVMLError:
            self.has_energy = False

    def energy_mj(self) -> int | None:
        return int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)) if self.has_energy else None

    def read(self) -> Sample:
        nv, h = self.nv, self.handle
        return Sample(t_s=_now(), sm_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                      mem_mhz=float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                      power_w=nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                      temp_c=float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                      throttle=int(self._reasons(h)), energy_mj=self.energy_mj())


def open_nvml(index: int = 0, uuid: str | None = None) -> tuple[Nvml | None, str | None]:
    """(device, None), or (None, one-line reason) when NVML cannot be used."""
    try:
        import pynvml as nv
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        nv.nvmlInit()
        if uuid:
            u = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            h = nv.nvmlDeviceGetHandleByUUID(u)
            label = u
        else:
            h = nv.nvmlDeviceGetHandleByIndex(index)
            label = f"nvml index {index}"
        dev = Nvml(nv, h, label)
        dev.read()
    except nv.NVMLError as e:
        return None, f"NVML unavailable: {e}"
    except OSError as e:   # the library itself failed to load (no driver)
        return None, f"NVML unavailable: {e}"
    return dev, None


def open_for_cuda(device: str) -> tuple[Nvml | None, str | None]:
    """The NVML device behind a torch CUDA device string ('cuda', 'cuda:1'); (None, reason) on the CPU."""
    if not device.startswith("cuda"):
        return None, f"device {device}: no GPU telemetry"
    try:
        import torch

        idx = torch.cuda.current_device() if ":" not in device else int(device.split(":")[1])
        uuid = str(getattr(torch.cuda.get_device_properties(idx), "uuid", "") or "") or None
    except (ImportError, RuntimeError, AssertionError) as e:
        return None, f"no CUDA device ({type(e).__name__}: {str(e)[:80]})"
    return open_nvml(idx, uuid)


# ---------------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Stat:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, xs: Sequence[float]) -> Stat | None:
        return cls(statistics.median(xs), min(xs), max(xs)) if xs else None

    @property
    def spread(self) -> float:
        """(max - min) / median; 0 for a constant."""
        return (self.max - self.min) / self.median if self.median else 0.0


def _reject_unknown(cls: type, d: dict[str, Any]) -> None:
    unknown = sorted(set(d) - {f.name for f in fields(cls)})
    if unknown:
        raise KernelProError(f"{cls.__name__}: unknown key(s) {', '.join(unknown)}")


@dataclass(frozen=True)
class Telemetry:
    available: bool
    reason: str | None = None                 # why not available (or why incomplete)
    seconds: float = 0.0                      # covered by samples
    samples: int = 0
    period_ms: float = 0.0
    sm_mhz: Stat | None = None
    mem_mhz: Stat | None = None
    power_w: Stat | None = None
    temp_c: Stat | None = None
    throttle: dict[str, float] = field(default_factory=dict)  # reason -> fraction of samples
    energy_j: float | None = None             # the energy counter's delta over the window(s)
    power_limit_w: float | None = None
    trace: list[list[float]] = field(default_factory=list)    # [t_s from start, sm_mhz, power_w, temp_c]

    @classmethod
    def unavailable(cls, reason: str) -> Telemetry:
        return cls(available=False, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Telemetry:
        _reject_unknown(cls, d)
        stats = {k: Stat(**d[k]) for k in ("sm_mhz", "mem_mhz", "power_w", "temp_c") if d.get(k)}
        return cls(**{**d, **stats})


def summarize(windows: Sequence[Sequence[Sample]], period_s: float, power_limit_w: float | None = None,
              reason: str | None = None) -> Telemetry:
    """One record from the samples of one or more windows (each window's energy delta is summed)."""
    flat = [s for w in windows for s in w]
    if not flat:
        return Telemetry.unavailable(reason or "no samples")
    n = len(flat)
    counts: dict[str, int] = {}
    for s in flat:
        for name in decode_throttle(s.throttle):
            counts[name] = counts.get(name, 0) + 1
    energy = None
    deltas = [w[-1].energy_mj - w[0].energy_mj for w in windows
              if len(w) >= 2 and w[0].energy_mj is not None and w[-1].energy_mj is not None]
    if deltas:
        energy = sum(deltas) / 1e3
    seconds = sum(w[-1].t_s - w[0].t_s for w in windows if w)
    t0 = flat[0].t_s
    step = max(1, n // TRACE_POINTS)
    trace = [[round(s.t_s - t0, 4), s.sm_mhz, round(s.power_w, 1), s.temp_c] for s in flat[::step]]
    return Telemetry(available=True, reason=reason, seconds=seconds, samples=n, period_ms=period_s * 1e3,
                     sm_mhz=Stat.of([s.sm_mhz for s in flat]), mem_mhz=Stat.of([s.mem_mhz for s in flat]),
                     power_w=Stat.of([s.power_w for s in flat]), temp_c=Stat.of([s.temp_c for s in flat]),
                     throttle={k: round(v / n, 4) for k, v in sorted(counts.items())}, energy_j=energy,
                     power_limit_w=power_limit_w, trace=trace)


# ---------------------------------------------------------------------------------------------------
# sampling over a window


class Sampler:
    """Samples `nvml` every `period_s` in a background thread between __enter__ and __exit__.

    One sampler can record several windows (one `with sampler:` each); `telemetry()` summarises all of
    them. With `nvml=None` it records nothing and its telemetry carries `reason`.
    """

    def __init__(self, nvml: Nvml | None, period_s: float = 0.02, reason: str | None = None):
        self.nvml, self.period_s, self.reason = nvml, period_s, reason
        self.windows: list[list[Sample]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self, out: list[Sample]) -> None:
        while not self._stop.wait(self.period_s):
            try:
                out.append(self.nvml.read())  # type: ignore[union-attr]
            except Exception as e:  # noqa: BLE001 - an NVML error ends sampling; the timing goes on
                self.error = f"sampling stopped: {type(e).__name__}: {e}"[:200]
                return

    def __enter__(self) -> Sampler:
        if self.nvml is None:
            return self
        cur: list[Sample] = []
        self.windows.append(cur)
        try:
            cur.append(self.nvml.read())
        except Exception as e:  # noqa: BLE001 - NVML refused now: no telemetry for this window
            self.error = f"NVML read failed: {type(e).__name__}: {e}"[:200]
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(cur,), name="kernelpro-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            try:
                self.windows[-1].append(self.nvml.read())  # type: ignore[union-attr]
            except Exception as e:  # noqa: BLE001 - the last sample is optional
                self.error = self.error or f"NVML read failed: {type(e).__name__}: {e}"[:200]

    def telemetry(self) -> Telemetry:
        if self.nvml is None:
            return Telemetry.unavailable(self.reason or "no NVML device")
        return summarize([w for w in self.windows if w], self.period_s, self.nvml.power_limit_w, self.error)


# ---------------------------------------------------------------------------------------------------
# steady state


@dataclass(frozen=True)
class SteadyCriterion:
    """Settled when the medians of the SM clock and of the board power over the last `window_s` differ
    from those over the `window_s` before it by at most `tol` (relative), and at least `min_s` has
    passed; give up after `max_s`. Medians of consecutive windows, not the spread inside one: at the
    power cap the clock jitters by several percent around a level that no longer moves."""
    tol: float = 0.02
    window_s: float = 0.5
    min_s: float = 1.0
    max_s: float = 8.0
    period_s: float = 0.05

    def describe(self) -> str:
        return (f"median SM clock and board power of the last {self.window_s:g} s within {self.tol:.0%} of the "
                f"{self.window_s:g} s before, after at least {self.min_s:g} s, at most {self.max_s:g} s")


@dataclass(frozen=True)
class SteadyState:
    criterion: dict[str, Any]
    settled: bool | None        # None: no telemetry, a fixed warm-up was run instead
    seconds: float
    outcome: str                # one line
    sm_mhz: float | None = None     # medians over the last window
    power_w: float | None = None
    sm_drift: float | None = None   # |median(last) - median(before)| / median(before)
    power_drift: float | None = None
    sm_spread: float | None = None  # (max - min) / median within the last window
    power_spread: float | None = None
    temp_c: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SteadyState:
        _reject_unknown(cls, d)
        return cls(**d)


DEFAULT_STEADY = SteadyCriterion()


def _drift(a: Stat | None, b: Stat | None) -> float | None:
    return abs(a.median - b.median) / b.median if a and b and b.median else None


def settle(work: Callable[[], None], nvml: Nvml | None, crit: SteadyCriterion = DEFAULT_STEADY,
           fallback_s: float = 0.025, reason: str | None = None) -> SteadyState:
    """Call `work` (a short burst that returns when its GPU work is done) until the criterion holds.

    Without NVML: `fallback_s` of plain warm-up, and the record says so (settled None)."""
    t0 = _now()
    if nvml is None:
        while _now() - t0 < fallback_s:
            work()
        return SteadyState(criterion={"rule": "none"}, settled=None, seconds=_now() - t0,
                           outcome=f"no telemetry ({reason or 'no NVML'}): fixed warm-up of {fallback_s * 1e3:g} ms")
    samples: list[Sample] = []
    last = -1e9
    state: tuple[list[Sample], list[Sample]] = ([], [])
    while True:
        work()
        now = _now()
        if now - last >= crit.period_s:
            samples.append(nvml.read())
            last = now
        elapsed = now - t0
        w = crit.window_s
        recent = [s for s in samples if s.t_s >= now - w]
        before = [s for s in samples if now - 2 * w <= s.t_s < now - w]
        if len(recent) >= 2 and len(before) >= 2 and elapsed >= 2 * w:
            state = (recent, before)
            d_sm = _drift(Stat.of([s.sm_mhz for s in recent]), Stat.of([s.sm_mhz for s in before]))
            d_pw = _drift(Stat.of([s.power_w for s in recent]), Stat.of([s.power_w for s in before]))
            if d_sm is not None and d_pw is not None and d_sm <= crit.tol and d_pw <= crit.tol \
                    and elapsed >= crit.min_s:
                return _steady(crit, True, elapsed, f"settled after {elapsed:.2f} s", state)
        if elapsed >= crit.max_s:
            if not state[0]:
                return _steady(crit, False, elapsed, f"not settled after {elapsed:.2f} s (too few samples)",
                               (samples[-2:], []))
            r, b = state
            d_sm = _drift(Stat.of([s.sm_mhz for s in r]), Stat.of([s.sm_mhz for s in b]))
            d_pw = _drift(Stat.of([s.power_w for s in r]), Stat.of([s.power_w for s in b]))
            return _steady(crit, False, elapsed, f"not settled after {elapsed:.2f} s (SM clock drift {d_sm:.1%}, "
                           f"power drift {d_pw:.1%} between the last two windows)", state)


def _steady(crit: SteadyCriterion, settled: bool, seconds: float, outcome: str,
            state: tuple[list[Sample], list[Sample]]) -> SteadyState:
    recent, before = state
    sm, pw = Stat.of([s.sm_mhz for s in recent]), Stat.of([s.power_w for s in recent])
    return SteadyState(criterion={**asdict(crit), "rule": crit.describe()}, settled=settled, seconds=seconds,
                       outcome=outcome, sm_mhz=sm.median if sm else None, power_w=pw.median if pw else None,
                       sm_drift=_drift(sm, Stat.of([s.sm_mhz for s in before])),
                       power_drift=_drift(pw, Stat.of([s.power_w for s in before])),
                       sm_spread=sm.spread if sm else None, power_spread=pw.spread if pw else None,
                       temp_c=statistics.median([s.temp_c for s in recent]) if recent else None)


def counter_refresh_s(nvml: Nvml, probe_s: float = 0.3, poll_s: float = 0.001) -> float | None:
    """The energy counter's update period: the median time between changes while polling it for
    `probe_s` (None when it never changed twice, or there is no counter)."""
    if not nvml.has_energy:
        return None
    changes: list[float] = []
    prev = nvml.energy_mj()
    t0 = _now()
    while _now() - t0 < probe_s:
        _sleep(poll_s)
        e = nvml.energy_mj()
        if e != prev:
            changes.append(_now())
            prev = e
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    return statistics.median(gaps) if gaps else None
