"""One timing method for every kernel the project reports, candidate and baselines alike.

On a GPU: CUDA events around each call, the L2 flushed before every repetition by zeroing a buffer much
larger than L2 (as `triton.testing.do_bench` does), persisting-L2 limits reset first so the flush really
flushes, warm-up until `warmup_ms` has passed, then enough repetitions to fill `rep_ms` (bounded). The
functions being compared are *interleaved*: every round times each of them once, in a rotating order,
so clock drift, thermal state and other tenants hit all of them alike. We report the median and the
spread (quartiles, min, max), never a mean alone. Optionally each function is captured once in a CUDA
graph and the replays are timed, which removes Python launch overhead for launch-bound problems.

On the CPU (tests, machines without a GPU) the same loop runs with `time.perf_counter`; there is no cache
flush there, and the result says so.

The clock and the event class are bound when this module is imported, which the worker does before it
imports any candidate, so a candidate that patches `time.perf_counter` or `torch.cuda.Event` does not
change what we measure (the evaluator also flags the patch).
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

_perf_counter = time.perf_counter

try:  # bound before any candidate import; torch is optional for the pure-stats helpers
    import torch as _torch

    _Event = _torch.cuda.Event
    _synchronize = _torch.cuda.synchronize
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples_ms: list[float], method: str) -> TimingStats:
    if not samples_ms:
        raise ValueError("no timing samples")
    s = sorted(samples_ms)
    if len(s) >= 4:
        q1, _, q3 = statistics.quantiles(s, n=4, method="inclusive")
    else:
        q1, q3 = s[0], s[-1]
    return TimingStats(median_ms=statistics.median(s), q1_ms=q1, q3_ms=q3, iqr_ms=q3 - q1, min_ms=s[0],
                       max_ms=s[-1], mean_ms=statistics.fmean(s), n=len(s), method=method)


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


def time_interleaved(fns: dict[str, Callable[[], Any]], device: str = "cuda", *, warmup_ms: float = 25.0,
                     rep_ms: float = 200.0, min_reps: int = 30, max_reps: int = 2000, flush_l2: bool = True,
                     graphs: bool = False) -> tuple[dict[str, TimingStats], dict[str, str]]:
    """Time several zero-argument callables in one interleaved run; returns (stats by name, notes by name)."""
    notes: dict[str, str] = {}
    on_gpu = device.startswith("cuda")
    if not on_gpu:
        return _time_cpu(fns, warmup_ms, rep_ms, min_reps, max_reps), {"*": "perf_counter on CPU; no cache flush"}
    notes["l2_persisting_reset"] = reset_persisting_l2()
    run = dict(fns)
    method = {k: "cuda_events" for k in fns}
    if graphs:
        for name, fn in fns.items():
            try:
                run[name] = _capture_graph(fn)
                method[name] = "cuda_graph"
            except Exception as e:  # noqa: BLE001 - a function that cannot be captured is timed eagerly
                notes[name] = f"CUDA graph capture failed ({type(e).__name__}: {str(e)[:120]}); timed eagerly"
                _synchronize()
    flush = L2Flusher(device) if flush_l2 else (lambda: None)
    # warm-up and a per-function estimate, so the slowest function fixes the repetition count
    est: dict[str, float] = {}
    for name, fn in run.items():
        fn()
        _synchronize()
        t0 = _perf_counter()
        n = 0
        while n < 3 or (_perf_counter() - t0) * 1e3 < warmup_ms:
            fn()
            n += 1
            if n >= 10000:
                break
        _synchronize()
        est[name] = (_perf_counter() - t0) * 1e3 / n
    reps = int(max(min_reps, min(max_reps, rep_ms / max(max(est.values()), 1e-4))))
    names = list(run)
    starts = {k: [_Event(enable_timing=True) for _ in range(reps)] for k in names}
    ends = {k: [_Event(enable_timing=True) for _ in range(reps)] for k in names}
    for i in range(reps):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]  # rotate the order each round
            flush()
            starts[name][i].record()
            run[name]()
            ends[name][i].record()
        if i % 64 == 63:
            _synchronize()  # bound the queue so the CPU never runs far ahead of the events
    _synchronize()
    out = {k: summarize([s.elapsed_time(e) for s, e in zip(starts[k], ends[k], strict=True)], method[k])
           for k in names}
    return out, notes


def _time_cpu(fns: dict[str, Callable[[], Any]], warmup_ms: float, rep_ms: float, min_reps: int,
              max_reps: int) -> dict[str, TimingStats]:
    est = {}
    for name, fn in fns.items():
        t0 = _perf_counter()
        n = 0
        while n < 2 or (_perf_counter() - t0) * 1e3 < warmup_ms:
            fn()
            n += 1
        est[name] = (_perf_counter() - t0) * 1e3 / n
    reps = int(max(min_reps, min(max_reps, rep_ms / max(max(est.values()), 1e-4))))
    names = list(fns)
    samples: dict[str, list[float]] = {k: [] for k in names}
    for i in range(reps):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            t0 = _perf_counter()
            fns[name]()
            samples[name].append((_perf_counter() - t0) * 1e3)
    return {k: summarize(v, "perf_counter") for k, v in samples.items()}


def time_one(fn: Callable[[], Any], device: str = "cuda", **kw: Any) -> TimingStats:
    stats, _ = time_interleaved({"fn": fn}, device, **kw)
    return stats["fn"]
