"""One timing method for every kernel the project reports, candidate and baselines alike, under two
named protocols.

On a GPU: CUDA events around each call, the L2 flushed before every repetition by zeroing a buffer much
larger than L2 (as `triton.testing.do_bench` does), persisting-L2 limits reset first so the flush really
flushes. Before any timed call the GPU is brought to a steady state: the functions run, in rotation,
until the SM clock and board power settle (`telemetry.settle`: a bounded criterion, recorded with its
outcome). Then enough repetitions to fill `rep_ms` (bounded below by `min_reps`, except for calls so slow
that `min_reps` of them would pass `SLOW_BUDGET_MS`; bounded above by `max_reps`). We report the median and the spread
(quartiles, min, max), never a mean alone. Optionally each function is captured once in a CUDA graph
and the replays are timed, which removes Python launch overhead for launch-bound problems.

Protocols (named in every stored timing):

- `interleaved`: every round times each function once, in a rotating order, so clock, power, thermal
  state and other tenants hit all of them alike. This is the A/B protocol (compare, the search): it
  puts both sides at one clock, which also hides that one of them draws more power per clock.
- `isolated`: each function alone, back to back, in windows alternated A B A B ... (`windows` per
  function), so each runs at the clock its own power draw allows at the cap, and slow thermal drift
  falls on every function alike. This is how PTXBench and KernelBench (and `do_bench`) time kernels:
  throughput at the power cap. `bench` reports vendor ratios under both and headlines this one.
- `ptxbench`: PTXBench's (FlashInfer-Bench's) own schedule, for `--profile ptxbench`: each function alone,
  `PTXBENCH_TRIALS` trials of `PTXBENCH_WARMUP` untimed calls then `PTXBENCH_ITERS` timed calls, each
  after an L2 flush (their cold L2); a trial's figure is the median of its calls and the function's is the
  mean over trials (`median_ms` holds it, `trials_ms` the trial medians). No steady-state settle (they
  warm up by count only). They read each call's time from CUPTI's kernel activity; here it is CUDA events
  around the call, as for every protocol (the timed-call check compares them with the activity record).

NVML telemetry (clocks, power, temperature, throttle reasons, energy) is sampled over every timing
window by a background thread (`telemetry.Sampler`); where NVML is missing the record says why.

On the CPU (tests, machines without a GPU) the same loop runs with `time.perf_counter`; there is no cache
flush there, and the result says so.

The clock and the event class are bound when this module is imported, which the worker does before it
imports any candidate, so a candidate that patches `time.perf_counter` or `torch.cuda.Event` does not
change what we measure (the evaluator also flags the patch).
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import statistics
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelpro.errors import KernelProError
from kernelpro.harness.telemetry import (
    DEFAULT_STEADY,
    Nvml,
    Sampler,
    SteadyCriterion,
    SteadyState,
    Telemetry,
    open_for_cuda,
    settle,
)

_perf_counter = time.perf_counter
PROTOCOLS = ("interleaved", "isolated", "ptxbench")
# PTXBench's defaults (FlashInfer-Bench's BenchmarkConfig: warmup_runs, iterations, num_trials).
PTXBENCH_WARMUP, PTXBENCH_ITERS, PTXBENCH_TRIALS = 10, 50, 3

try:  # bound before any candidate import; torch is optional for the pure-stats helpers
    import torch as _torch

    _Event = _torch.cuda.Event
    _synchronize = _torch.cuda.synchronize
    # the events' C methods: a Python-level Event.record/elapsed_time patched during the loop (and
    # restored before the identity check) changes nothing we measure
    _EventBase = getattr(_torch._C, "_CudaEventBase", None)
    _record = getattr(_EventBase, "record", None) or _Event.record
    _elapsed = getattr(_EventBase, "elapsed_time", None) or _Event.elapsed_time
except ImportError:  # pragma: no cover - torch is a hard dependency of the evaluator
    _torch = None


@dataclass
class TimingStats:
    median_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    n: int
    method: str  # cuda_events | cuda_graph | perf_counter
    protocol: str = "interleaved"
    trials_ms: list[float] = field(default_factory=list)   # ptxbench: each trial's median

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples_ms: list[float], method: str, protocol: str = "interleaved") -> TimingStats:
    if not samples_ms:
        raise ValueError("no timing samples")
    s = sorted(samples_ms)
    if len(s) >= 4:
        q1, _, q3 = statistics.quantiles(s, n=4, method="inclusive")
    else:
        q1, q3 = s[0], s[-1]
    return TimingStats(median_ms=statistics.median(s), q1_ms=q1, q3_ms=q3, iqr_ms=q3 - q1, min_ms=s[0],
                       max_ms=s[-1], mean_ms=statistics.fmean(s), n=len(s), method=method, protocol=protocol)


class L2Flusher:
    """Evicts L2 by writing a buffer several times its size; a no-op on the CPU."""

    def __init__(self, device: str):
        self.buf = None
        if device.startswith("cuda"):
            l2 = getattr(_torch.cuda.get_device_properties(_torch.cuda.current_device()), "L2_cache_size", 0)
            nbytes = max(256 * 2**20, 4 * int(l2 or 0))
            self.buf = _torch.empty(nbytes, dtype=_torch.int8, device=device)

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.zero_()


_cudaLimitPersistingL2CacheSize = 0x06


def _libcudart() -> ctypes.CDLL | None:
    """The CUDA runtime that torch already loaded (found in our own memory map, so versions match)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if "libcudart.so" in ln}
    except OSError:
        return None
    for p in sorted(paths):
        try:
            return ctypes.CDLL(p)
        except OSError:
            continue
    return None


def reset_persisting_l2() -> str:
    """Set the persisting-L2 carve-out to 0 and evict persisting lines; returns what was done (one line)."""
    if _torch is None or not _torch.cuda.is_available():
        return "skipped: no GPU"
    _torch.cuda.init()
    lib = _libcudart()
    if lib is None:
        return "skipped: libcudart not found in this process"
    rc1 = lib.cudaDeviceSetLimit(ctypes.c_int(_cudaLimitPersistingL2CacheSize), ctypes.c_size_t(0))
    rc2 = lib.cudaCtxResetPersistingL2Cache()
    return "ok" if rc1 == 0 and rc2 == 0 else f"cudaDeviceSetLimit rc={rc1}, cudaCtxResetPersistingL2Cache rc={rc2}"



def _capture_graph(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Capture `fn` into a CUDA graph (after a warm-up on a side stream) and return its replay."""
    s = _torch.cuda.Stream()
    s.wait_stream(_torch.cuda.current_stream())
    with _torch.cuda.stream(s):
        for _ in range(3):
            fn()
    _torch.cuda.current_stream().wait_stream(s)
    g = _torch.cuda.CUDAGraph()
    with _torch.cuda.graph(g):
        fn()
    _synchronize()
    return g.replay


@dataclass
class TimingRun:
    """One protocol's timing of several functions, with the telemetry of its windows."""
    protocol: str
    stats: dict[str, TimingStats]
    telemetry: dict[str, Telemetry]      # interleaved: {"*": the one shared window}; isolated: by name
    steady: SteadyState
    order: list[str]                     # the window order (isolated) or the first round's order
    notes: dict[str, str] = field(default_factory=dict)
    reps: dict[str, int] = field(default_factory=dict)   # timed calls per function

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "stats": {k: v.to_dict() for k, v in self.stats.items()},
                "telemetry": {k: v.to_dict() for k, v in self.telemetry.items()}, "steady": self.steady.to_dict(),
                "order": list(self.order), "notes": dict(self.notes), "reps": dict(self.reps)}


def interleaved_schedule(names: list[str], reps: int) -> list[str]:
    """Round i times every function once, starting at function i mod n (so none always goes first)."""
    n = len(names)
    return [names[(i + j) % n] for i in range(reps) for j in range(n)]


def isolated_schedule(names: list[str], windows: int) -> list[str]:
    """Window order: A B A B ... (each function `windows` times, alternating)."""
    return [name for _ in range(windows) for name in names]


# A slow call gets fewer than `min_reps` timed calls: as many as fit SLOW_BUDGET_MS, and at least
# MIN_SLOW_REPS. At the defaults this starts above 100 ms per call, where the call's run-to-run noise is far
# below its length; without it a 1.5 s call (seen on the CPU) spent minutes per protocol on 30 repetitions.
SLOW_BUDGET_MS = 3000.0
MIN_SLOW_REPS = 5
ESTIMATE_BUDGET_MS = 500.0   # the per-call estimate's loop, before and after the settle


def _rep_count(est_ms: float, rep_ms: float, min_reps: int, max_reps: int,
               slow_budget_ms: float = SLOW_BUDGET_MS) -> int:
    per_call = max(est_ms, 1e-4)
    floor = max(min(MIN_SLOW_REPS, min_reps), min(min_reps, math.ceil(slow_budget_ms / per_call)))
    return int(max(floor, min(max_reps, rep_ms / per_call)))


Hook = Callable[[int], Any]


class _Runner:
    """The callables as timed (eager or graph replays), the L2 flush and the clock of one device."""

    def __init__(self, fns: dict[str, Callable[[], Any]], device: str, flush_l2: bool, graphs: bool,
                 before: dict[str, Hook] | None = None, after: dict[str, Hook] | None = None):
        self.on_gpu = device.startswith("cuda")
        self.before, self.after = dict(before or {}), dict(after or {})
        self.notes: dict[str, str] = {}
        self.run = dict(fns)
        self.method = {k: "cuda_events" if self.on_gpu else "perf_counter" for k in fns}
        if not self.on_gpu:
            self.notes["*"] = "perf_counter on CPU; no cache flush"
            self.flush: Callable[[], Any] = lambda: None
            return
        self.notes["l2_persisting_reset"] = reset_persisting_l2()
        if graphs:
            for name, fn in fns.items():
                try:
                    self.run[name] = _capture_graph(fn)
                    self.method[name] = "cuda_graph"
                except Exception as e:  # noqa: BLE001 - a function that cannot be captured is timed eagerly
                    self.notes[name] = f"CUDA graph capture failed ({type(e).__name__}: {str(e)[:120]}); timed eagerly"
                    _synchronize()
        self.flush = L2Flusher(device) if flush_l2 else (lambda: None)

    def sync(self) -> None:
        if self.on_gpu:
            _synchronize()

    def estimate(self, warmup_ms: float) -> dict[str, float]:
        """First calls (module load, JIT, handles) and a per-call time estimate in ms."""
        est: dict[str, float] = {}
        for name, fn in self.run.items():
            t_first = _perf_counter()
            fn()
            self.sync()
            # Ten calls, or fewer where ten of the first (synchronised, so also on a GPU) would pass
            # ESTIMATE_BUDGET_MS: a 1.5 s call once spent 30 s here. Then as many as `warmup_ms` asks for.
            first_ms = (_perf_counter() - t_first) * 1e3
            least = 10 if first_ms * 10 <= ESTIMATE_BUDGET_MS else max(1, int(ESTIMATE_BUDGET_MS // first_ms))
            t0 = _perf_counter()
            n = 0
            each: list[float] = []
            while n < least or (_perf_counter() - t0) * 1e3 < warmup_ms:
                t1 = _perf_counter()
                fn()
                each.append(_perf_counter() - t1)
                n += 1
                if n >= 10000:
                    break
            self.sync()
            # GPU: calls are asynchronous, so the mean over the synchronised loop; CPU: the median call,
            # which a descheduled moment on a shared machine does not inflate
            est[name] = ((_perf_counter() - t0) / n if self.on_gpu else statistics.median(each)) * 1e3
        return est

    def burst(self, est: dict[str, float], burst_ms: float = 25.0) -> Callable[[], None]:
        """A warm-up burst for `settle`: every function in turn for about `burst_ms`, then a sync."""
        counts = {k: max(1, math.ceil(burst_ms / len(est) / max(v, 1e-4))) for k, v in est.items()}

        def work() -> None:
            for name, c in counts.items():
                fn = self.run[name]
                for _ in range(c):
                    fn()
            self.sync()
        return work

    def timed(self, seq: list[str]) -> dict[str, list[float]]:
        """Time each call of `seq` (names in order), each after an L2 flush; samples in ms by name.
        `before[name](k)` / `after[name](k)` run around the k-th timed call of `name`, outside its
        timed window. Samples are kept in C arrays; the events live only in this frame."""
        out = {k: array("d") for k in dict.fromkeys(seq)}
        count = dict.fromkeys(out, 0)
        before, after = self.before, self.after
        if not self.on_gpu:
            for name in seq:
                k = count[name]
                count[name] = k + 1
                if name in before:
                    before[name](k)
                fn = self.run[name]
                t0 = _perf_counter()
                fn()
                t1 = _perf_counter()
                out[name].append((t1 - t0) * 1e3)
                if name in after:
                    after[name](k)
            return {k: list(v) for k, v in out.items()}
        stream = _torch.cuda.current_stream()
        pairs = [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in seq]
        for i, (name, (s, e)) in enumerate(zip(seq, pairs, strict=True)):
            k = count[name]
            count[name] = k + 1
            if name in before:
                before[name](k)
            self.flush()
            _record(s, stream)
            self.run[name]()
            _record(e, stream)
            if name in after:
                after[name](k)
            if i % 64 == 63:
                _synchronize()  # bound the queue so the CPU never runs far ahead of the events
        _synchronize()
        for name, (s, e) in zip(seq, pairs, strict=True):
            out[name].append(_elapsed(s, e))
        return {k: list(v) for k, v in out.items()}


def time_protocol(fns: dict[str, Callable[[], Any]], device: str = "cuda", protocol: str = "interleaved", *,
                  warmup_ms: float = 25.0, rep_ms: float = 200.0, min_reps: int = 30, max_reps: int = 2000,
                  slow_budget_ms: float = SLOW_BUDGET_MS, flush_l2: bool = True, graphs: bool = False, windows: int = 4,
                  steady: SteadyCriterion | None = DEFAULT_STEADY, nvml: Nvml | None | str = "auto",
                  sample_period_s: float = 0.02, before: dict[str, Hook] | None = None,
                  after: dict[str, Hook] | None = None) -> TimingRun:
    """Time zero-argument callables under `protocol` (module doc), with steady state and telemetry.

    `steady=None` skips the settle step (a fixed `warmup_ms` only); `nvml="auto"` opens the device's
    NVML handle on a GPU (none on the CPU); tests pass a device object."""
    if protocol not in PROTOCOLS:
        raise KernelProError(f"timing protocol {protocol!r}: choose {' or '.join(PROTOCOLS)}")
    if windows < 1:
        raise KernelProError(f"isolated timing needs at least one window per function, not {windows}")
    why = None
    if nvml == "auto":
        nvml, why = open_for_cuda(device)
    elif isinstance(nvml, str):
        raise KernelProError(f"timing: nvml={nvml!r}; pass 'auto', None or an NVML device")
    dev: Nvml | None = None if isinstance(nvml, str) else nvml
    r = _Runner(fns, device, flush_l2, graphs, before, after)
    if protocol == "ptxbench":
        return _ptxbench(r, dev, why, sample_period_s)
    est = r.estimate(warmup_ms)
    if steady is None:
        st = settle(r.burst(est), None, fallback_s=warmup_ms / 1e3, reason="steady state not asked for")
    else:   # bursts no longer than the sampling period, so the rolling window fills with samples
        st = settle(r.burst(est, min(25.0, steady.period_s * 1e3)), dev, steady, fallback_s=warmup_ms / 1e3,
                    reason=why)
    # The first estimate can carry first-call costs (lazy init, a cold clock): size the run from one
    # taken at steady state.
    est = r.estimate(min(warmup_ms, 10.0))
    names = list(r.run)
    if protocol == "interleaved":
        reps = _rep_count(max(est.values()), rep_ms, min_reps, max_reps, slow_budget_ms)
        sampler = Sampler(dev, sample_period_s, why)
        with sampler:
            samples = r.timed(interleaved_schedule(names, reps))
        return TimingRun("interleaved", {k: summarize(v, r.method[k], "interleaved") for k, v in samples.items()},
                         {"*": sampler.telemetry()}, st, names, r.notes, {k: reps for k in names})
    reps_of = {k: max(1, math.ceil(_rep_count(est[k], rep_ms, min_reps, max_reps, slow_budget_ms) / windows))
               for k in names}
    samplers = {k: Sampler(dev, sample_period_s, why) for k in names}
    got: dict[str, list[float]] = {k: [] for k in names}
    order = isolated_schedule(names, windows)
    for name in order:
        fn = r.run[name]
        fn()   # one untimed call: the window starts with this function's own state, not the previous one's
        r.sync()
        with samplers[name]:
            got[name] += r.timed([name] * reps_of[name])[name]
    return TimingRun("isolated", {k: summarize(v, r.method[k], "isolated") for k, v in got.items()},
                     {k: s.telemetry() for k, s in samplers.items()}, st, order, r.notes,
                     {k: reps_of[k] * windows for k in names})


def _ptxbench(r: _Runner, dev: Nvml | None, why: str | None, sample_period_s: float,
              warmup: int = PTXBENCH_WARMUP, iters: int = PTXBENCH_ITERS, trials: int = PTXBENCH_TRIALS) -> TimingRun:
    """PTXBench's schedule (module doc): per function, trials of warm-up calls then flushed, timed calls."""
    names = list(r.run)
    stats: dict[str, TimingStats] = {}
    samplers = {k: Sampler(dev, sample_period_s, why) for k in names}
    t0 = _perf_counter()
    for name in names:
        fn = r.run[name]
        medians: list[float] = []
        every: list[float] = []
        with samplers[name]:
            for _ in range(trials):
                for _ in range(warmup):
                    fn()
                r.sync()
                got = r.timed([name] * iters)[name]
                medians.append(statistics.median(got))
                every += got
        st = summarize(every, r.method[name], "ptxbench")
        stats[name] = dataclasses.replace(st, median_ms=statistics.fmean(medians), trials_ms=medians)
    steady = SteadyState(criterion={"rule": "ptxbench", "warmup_calls": warmup}, settled=None,
                         seconds=_perf_counter() - t0,
                         outcome=f"no settle: {warmup} untimed calls before each of {trials} trials (PTXBench)")
    notes = {**r.notes, "ptxbench": f"{trials} trials x {iters} calls after {warmup} warm-ups, L2 flushed before "
                                    "each call; median per trial, mean over trials; CUDA events (PTXBench: CUPTI)"}
    return TimingRun("ptxbench", stats, {k: s.telemetry() for k, s in samplers.items()}, steady, names, notes,
                     {k: trials * iters for k in names})


def time_interleaved(fns: dict[str, Callable[[], Any]], device: str = "cuda", *, warmup_ms: float = 25.0,
                     rep_ms: float = 200.0, min_reps: int = 30, max_reps: int = 2000, flush_l2: bool = True,
                     graphs: bool = False, before: dict[str, Hook] | None = None,
                     after: dict[str, Hook] | None = None) -> tuple[dict[str, TimingStats], dict[str, str]]:
    """The interleaved protocol without steady state or telemetry; returns (stats by name, notes)."""
    run = time_protocol(fns, device, "interleaved", warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps,
                        max_reps=max_reps, flush_l2=flush_l2, graphs=graphs, steady=None, nvml=None,
                        before=before, after=after)
    return run.stats, run.notes


def time_one(fn: Callable[[], Any], device: str = "cuda", **kw: Any) -> TimingStats:
    stats, _ = time_interleaved({"fn": fn}, device, **kw)
    return stats["fn"]
