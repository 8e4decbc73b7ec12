"""Telemetry sampler, steady state, protocols and energy windows against a fake board: pynvml's own
functions replaced by ones that read a simulated GPU (clocks, power, a quantised energy counter)."""

from __future__ import annotations

import statistics
import threading
import time

import pynvml
import pytest

from kernelpro.errors import KernelProError
from kernelpro.harness import energy, telemetry
from kernelpro.harness.telemetry import (
    Sampler,
    SteadyCriterion,
    Telemetry,
    decode_throttle,
    open_nvml,
    settle,
)
from kernelpro.harness.timing import interleaved_schedule, isolated_schedule, time_protocol
from kernelpro.results.fidelity import format_line


class Board:
    """A simulated GPU. Power follows `power_of(t)` (t: seconds since creation) unless a kernel sets it;
    the energy counter integrates power and is refreshed every `refresh_s`; every value returned is
    recorded, so tests compare statistics with what NVML 'said'."""

    def __init__(self, refresh_s: float = 0.005, power_of=None, sm_seq=None, throttle_seq=None):
        self.t0 = self.t_last = self.t_refresh = time.perf_counter()
        self.refresh_s = refresh_s
        self.power_of = power_of or (lambda t: 200.0)
        self.forced: float | None = None
        self.true_mj = 0.0
        self.reported_mj = 0
        self.sm_seq = list(sm_seq or [1980])
        self.throttle_seq = list(throttle_seq or [0])
        self.reads = {"sm": [], "power": [], "throttle": []}
        self.lock = threading.Lock()
        self.fail_after: int | None = None

    def power(self) -> float:
        return self.forced if self.forced is not None else self.power_of(time.perf_counter() - self.t0)

    def advance(self) -> None:
        with self.lock:
            t = time.perf_counter()
            self.true_mj += self.power() * (t - self.t_last) * 1e3
            self.t_last = t
            if t - self.t_refresh >= self.refresh_s:
                self.reported_mj = int(self.true_mj)
                self.t_refresh = t

    def kernel(self, watts: float, seconds: float) -> None:
        self.advance()
        self.forced = watts
        time.sleep(seconds)
        self.advance()

    def _next(self, seq: list, key: str):
        n = len(self.reads[key])
        if self.fail_after is not None and n >= self.fail_after:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        v = seq[min(n, len(seq) - 1)]
        self.reads[key].append(v)
        return v

    def install(self, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(pynvml, "nvmlInit", lambda: None)
        mp.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: ("gpu", i))
        mp.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda u: ("gpu", u))
        mp.setattr(pynvml, "nvmlDeviceGetEnforcedPowerLimit", lambda h: 700000)
        mp.setattr(pynvml, "nvmlDeviceGetClockInfo",
                   lambda h, which: self._next(self.sm_seq, "sm") if which == pynvml.NVML_CLOCK_SM else 2619)
        mp.setattr(pynvml, "nvmlDeviceGetTemperature", lambda h, which: 60)

        def power(h):
            self.advance()
            w = self.power()
            self.reads["power"].append(w)
            return int(w * 1e3)

        def energy_mj(h):
            self.advance()
            return self.reported_mj

        mp.setattr(pynvml, "nvmlDeviceGetPowerUsage", power)
        mp.setattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", lambda h: self._next(self.throttle_seq, "throttle"))
        mp.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", energy_mj)


def _open(board: Board, mp: pytest.MonkeyPatch) -> telemetry.Nvml:
    board.install(mp)
    dev, why = open_nvml(0)
    assert why is None
    return dev


def test_throttle_bitmask_decodes_to_names():
    assert decode_throttle(0) == []
    assert decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert decode_throttle(0x1 | 0x800) == ["gpu_idle", "bit11"]


def test_missing_nvml_is_a_reason_not_a_crash(monkeypatch):
    def refuse():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", refuse)
    dev, why = open_nvml(0)
    assert dev is None and why.startswith("NVML unavailable")
    s = Sampler(None, reason=why)
    with s:
        pass
    t = s.telemetry()
    assert not t.available and t.reason == why
    assert format_line(t.to_dict()).startswith("telemetry: unavailable (NVML unavailable")


def test_sampler_thread_statistics_and_energy(monkeypatch):
    sm = [1980, 1755, 1410, 1485, 1455, 1500, 1470]
    board = Board(sm_seq=sm, throttle_seq=[0, 0x4, 0x4, 0x4 | 0x20], power_of=lambda t: 650.0)
    dev = _open(board, monkeypatch)
    board.reads = {"sm": [], "power": [], "throttle": []}
    s = Sampler(dev, period_s=0.004)
    t0 = time.perf_counter()
    with s:
        while time.perf_counter() - t0 < 0.12:   # the main thread is busy; the sampler must still run
            sum(range(1000))
        assert any(t.name == "kernelpro-telemetry" for t in threading.enumerate())
    assert not any(t.name == "kernelpro-telemetry" for t in threading.enumerate())
    tel = s.telemetry()
    got_sm = board.reads["sm"]
    assert tel.samples == len(got_sm) >= 6
    assert (tel.sm_mhz.median, tel.sm_mhz.min, tel.sm_mhz.max) == (statistics.median(got_sm), min(got_sm), max(got_sm))
    thr = board.reads["throttle"]
    assert tel.throttle["sw_power_cap"] == pytest.approx(sum(1 for x in thr if x & 0x4) / len(thr), abs=1e-4)
    assert tel.throttle["sw_thermal"] == pytest.approx(sum(1 for x in thr if x & 0x20) / len(thr), abs=1e-4)
    # 650 W for ~0.12 s, counter refreshed every 5 ms
    assert tel.energy_j == pytest.approx(650 * tel.seconds, rel=0.15)
    assert tel.power_limit_w == 700 and len(tel.trace) <= telemetry.TRACE_POINTS + 1
    line = format_line(tel.to_dict())
    assert line.startswith(f"SM {statistics.median(got_sm):.0f} MHz [1410-1980]") and "of 700 W cap" in line
    assert "sw_power_cap" in line and "sw_thermal" in line
    rt = Telemetry.from_dict(tel.to_dict())
    assert rt == tel
    with pytest.raises(KernelProError):
        Telemetry.from_dict({**tel.to_dict(), "bogus": 1})


def test_sampler_windows_exclude_the_gaps_and_survive_errors(monkeypatch):
    board = Board(power_of=lambda t: 400.0)
    dev = _open(board, monkeypatch)
    s = Sampler(dev, period_s=0.005)
    for _ in range(2):
        with s:
            time.sleep(0.05)
        time.sleep(0.1)          # energy spent here belongs to no window
    tel = s.telemetry()
    assert tel.seconds == pytest.approx(0.1, abs=0.03)
    assert tel.energy_j == pytest.approx(400 * tel.seconds, rel=0.25)   # not 400 W x 0.3 s
    board.fail_after = len(board.reads["sm"]) + 3
    s2 = Sampler(dev, period_s=0.005)
    with s2:
        time.sleep(0.06)
    t2 = s2.telemetry()
    assert t2.available and t2.samples >= 3 and "GPU is lost" in (t2.reason or "")


def test_settle_waits_for_the_ramp_and_records_the_criterion(monkeypatch):
    # power rises for 0.25 s, then holds
    board = Board(power_of=lambda t: 300.0 + 1600.0 * min(t, 0.25))
    dev = _open(board, monkeypatch)
    board.t0 = time.perf_counter()
    crit = SteadyCriterion(tol=0.02, window_s=0.1, min_s=0.05, max_s=2.0, period_s=0.005)
    st = settle(lambda: time.sleep(0.001), dev, crit)
    assert st.settled is True
    assert 0.3 <= st.seconds < 1.0          # the ramp, then two flat windows
    assert st.power_w == pytest.approx(700, rel=0.02) and st.power_drift <= 0.02
    assert "within 2%" in st.criterion["rule"]


def test_settle_ignores_jitter_around_a_level(monkeypatch):
    # at the cap the clock and power jitter by 8% around a level that does not move: that is steady
    board = Board(power_of=lambda t: 690.0 + (30.0 if int(t / 0.01) % 2 else -30.0))
    dev = _open(board, monkeypatch)
    crit = SteadyCriterion(tol=0.02, window_s=0.1, min_s=0.05, max_s=1.0, period_s=0.004)
    st = settle(lambda: time.sleep(0.001), dev, crit)
    assert st.settled is True and st.seconds < 0.5 and st.power_spread > 0.05


def test_settle_is_bounded_when_power_never_settles(monkeypatch):
    board = Board(power_of=lambda t: 300.0 + 1000.0 * t)   # still heating: the level keeps moving
    dev = _open(board, monkeypatch)
    crit = SteadyCriterion(tol=0.02, window_s=0.1, min_s=0.05, max_s=0.4, period_s=0.005)
    st = settle(lambda: time.sleep(0.001), dev, crit)
    assert st.settled is False and 0.4 <= st.seconds < 0.6
    assert "power drift" in st.outcome and st.power_drift > 0.1
    fixed = settle(lambda: time.sleep(0.001), None, crit, fallback_s=0.01, reason="no GPU")
    assert fixed.settled is None and "fixed warm-up of 10 ms" in fixed.outcome


def test_schedules():
    assert isolated_schedule(["a", "b"], 3) == ["a", "b", "a", "b", "a", "b"]
    assert interleaved_schedule(["a", "b", "c"], 2) == ["a", "b", "c", "b", "c", "a"]


def test_isolated_protocol_runs_windows_alone_and_attributes_telemetry(monkeypatch):
    board = Board()
    dev = _open(board, monkeypatch)
    calls: list[str] = []

    def fn(name: str, watts: float, secs: float):
        def f():
            calls.append(name)
            board.kernel(watts, secs)
        return f

    fns = {"A": fn("A", 300.0, 0.002), "B": fn("B", 600.0, 0.001)}
    crit = SteadyCriterion(tol=0.5, window_s=0.03, min_s=0.01, max_s=0.5, period_s=0.002)
    run = time_protocol(fns, "cpu", "isolated", warmup_ms=2, rep_ms=40, min_reps=8, max_reps=100, windows=3,
                        steady=crit, nvml=dev, sample_period_s=0.002)
    assert run.protocol == "isolated" and run.order == ["A", "B"] * 3
    assert all(s.protocol == "isolated" for s in run.stats.values())
    assert run.stats["A"].median_ms > run.stats["B"].median_ms
    # the timed calls come in blocks, one function per window, A B A B A B (one untimed call leads each)
    timed = calls[-(run.reps["A"] + run.reps["B"] + 6):]
    blocks = [timed[0]]
    for c in timed[1:]:
        if c != blocks[-1]:
            blocks.append(c)
    assert blocks == ["A", "B"] * 3
    # each function's windows saw its own power, not the other's
    assert run.telemetry["A"].power_w.median == pytest.approx(300, rel=0.05)
    assert run.telemetry["B"].power_w.median == pytest.approx(600, rel=0.05)
    assert run.steady.settled is True

    inter = time_protocol(fns, "cpu", "interleaved", warmup_ms=2, rep_ms=40, min_reps=8, max_reps=100,
                          steady=crit, nvml=dev, sample_period_s=0.002)
    assert set(inter.telemetry) == {"*"} and inter.stats["A"].protocol == "interleaved"
    p = inter.telemetry["*"].power_w
    assert p.min < 400 and p.max > 500     # one window over both: the mixture
    with pytest.raises(KernelProError):
        time_protocol(fns, "cpu", "alone")


def test_energy_window_sizing():
    w = energy.energy_window(0.02, 700)
    assert w.window_s == pytest.approx(1.0) and w.bound == pytest.approx(0.02, rel=0.01)
    assert energy.energy_window(0.001, 700).window_s == 0.5                 # never shorter than min_s
    long = energy.energy_window(0.1, 700)
    assert long.window_s == 3.0 and long.bound == pytest.approx(0.1 / 3, rel=0.01)   # capped, bound stated
    assert energy.energy_window(None).window_s == 3.0 and energy.energy_window(None).bound is None
    # a counter of coarse resolution at low power needs the longer window
    assert energy.energy_window(0.001, 0.05, resolution_j=1e-3).window_s == pytest.approx(1.0)
    assert "resolution 1 mJ" in w.rule


def test_energy_per_call_from_the_counter(monkeypatch):
    board = Board(refresh_s=0.004)
    dev = _open(board, monkeypatch)
    assert telemetry.counter_refresh_s(dev, probe_s=0.1) == pytest.approx(0.004, abs=0.002)
    fns = {"A": lambda: board.kernel(300.0, 0.002), "B": lambda: board.kernel(600.0, 0.001)}
    win = energy.energy_window(0.004, 700, rel_err=0.02, min_s=0.3, max_s=0.3)
    run = energy.measure(fns, {"A": 2.1, "B": 1.1}, dev, flops=2e9, windows=2, window=win)
    d = run.to_dict()
    assert d["order"] == ["A", "B", "A", "B"] and d["method"]["window_s"] == 0.3
    assert d["A"]["avg_watts"] == pytest.approx(300, rel=0.05)
    assert d["B"]["avg_watts"] == pytest.approx(600, rel=0.05)
    a = run.per["A"]
    assert a.j_per_call == pytest.approx(300 * a.seconds / a.calls, rel=0.05)
    assert a.j_per_tflop == pytest.approx(a.j_per_call / 2e-3)
    assert energy.measure(fns, {}, None, reason="no GPU").to_dict() == {"error": "no GPU", "protocol": "isolated"}


def test_energy_windows_skip_the_pytorch_baselines_only_beside_a_library_one():
    # bench times eager, compile and vendor: the energy windows go to the candidate and the library
    # (plus compare's rivals), not to two more runs of the same reference through PyTorch.
    timed = ["candidate", "eager", "compile", "vendor", "rival_b"]
    assert energy.energy_sides(timed, ("eager", "compile", "vendor")) == ["candidate", "vendor", "rival_b"]
    assert energy.energy_sides(["candidate", "eager", "cudnn_frontend"], ("eager", "cudnn_frontend")) == [
        "candidate", "cudnn_frontend"]
    # the search's default: one baseline, eager; its energy ratio needs that side
    assert energy.energy_sides(["candidate", "eager"], ("eager",)) == ["candidate", "eager"]
    assert energy.energy_sides(["candidate", "eager", "compile"], ("eager", "compile")) == [
        "candidate", "eager", "compile"]
