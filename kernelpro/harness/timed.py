"""The timing stage: candidate, baselines and rivals timed under the protocols the job names
(`timing`: interleaved and/or isolated, each after a steady-state warm-up and with NVML telemetry), the
last timed output and a fresh-seed recheck judged, the speed-of-light floor, and energy per call."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch

from kernelpro import hardware as _hw
from kernelpro.harness import timing as _timing
from kernelpro.harness.checks import _BORING_OPS, CANDIDATE_RANGE
from kernelpro.harness.guards import (
    CandidateFailure,
    _Audit,
    _children_pids,
    classify_exception,
    foreign_threads,
)
from kernelpro.harness.tensors import clone_tree, flatten, outputs_match, poison_allocator, tensor_bytes
from kernelpro.results.record import KERNEL_NAMES_KEPT
from kernelpro.suites.task import import_module_from

_sysrandom = random.SystemRandom()
OTHER_RANGE = "kernelpro::other"

# The speed-of-light floor uses the datasheet (kernelpro.hardware says why); cfg.ceilings overrides it.
DEFAULT_CEILINGS = {**_hw.DATASHEET.tensor_flops, "bandwidth": _hw.DATASHEET.bandwidth}


class TimingStage:
    """The Evaluator's timing stage (a mixin: the verdict bookkeeping and setup live in evaluate)."""

    def _time(self, cand_mod: Any, before: dict, policy: dict[str, Any]) -> None:
        cfg, task = self.cfg, self.task
        t_phase = time.perf_counter()
        size = task.sizes("default")[0]
        mod = self._task_module(size)
        seed, model_seed = _sysrandom.randrange(2**31), _sysrandom.randrange(2**31)
        ref_model, cand_model = self._models(mod, cand_mod, model_seed)
        # A fresh instance, like the first one checked, whose first call was a warm-up outside the
        # timed-vs-checked comparison (lazy set-up, shape caches, autotuning): this one gets the same, on
        # inputs of another seed, so the timed calls are compared with checked calls made in the same state.
        # Its processes, threads, frame access and writes are judged; its ops are not compared.
        warm = self._run_candidate(cand_model, self._inputs(mod, _sysrandom.randrange(2**31)))[1]
        self._judge_observations({**warm, "ops": set(), "swallowed": []}, "timing warm-up@default")
        self._sync()
        inputs = self._inputs(mod, seed)
        cin, rin = clone_tree(inputs), clone_tree(inputs)
        last: dict[str, Any] = {}
        tobs: dict[str, Any] = {"swallowed": [], "audit": [], "ops": set(), "kernels": [], "other_stream": []}
        sink = self._swallow_sink

        def cand() -> None:
            # the same state as every checked call: tracer on, recorder/profiler on, the same range
            sink[0] = tobs["swallowed"]
            try:
                with self._recording(tobs["ops"]), torch.no_grad(), torch.profiler.record_function(CANDIDATE_RANGE):
                    last["out"] = cand_model(*cin)
                    last["n"] = last.get("n", 0) + 1
            finally:
                sink[0] = []

        def ranged(fn: Any) -> Any:
            def call() -> None:   # baselines and rivals pay the same range overhead as the candidate
                with torch.profiler.record_function(OTHER_RANGE):
                    fn()
            return call


        fns: dict[str, Any] = {"candidate": cand}
        notes: dict[str, str] = {}
        for b in cfg.baselines:
            try:
                fn = self._baseline(b, ref_model, rin)
                fn()  # a baseline that fails must fail here, not be blamed on the candidate mid-timing
                self._sync()
                fns[b] = ranged(fn)
            except Exception as e:  # noqa: BLE001 - a baseline that cannot be built is reported, not fatal
                notes[b] = f"unavailable: {type(e).__name__}: {str(e)[:120]}"
        rivals = {k: ranged(f) for k, f in self._rivals(mod, model_seed, inputs, ref_model, notes).items()}
        fns.update(rivals)
        steady = _timing.DEFAULT_STEADY if cfg.steady else None
        runs: dict[str, Any] = {}
        probes = _TimedProbes(self, mod, inputs, cin, last, ref_model)
        self.phase("timing setup (baselines, rivals)", time.perf_counter() - t_phase)
        t_phase = time.perf_counter()
        threads_before = set(threading.enumerate())
        children_before = _children_pids()
        try:
            with self._profiler() as prof, _Audit.watch() as events:
                if prof is not None:
                    marker = torch.empty(1, device=self.device)
                    marker.fill_(1.0)  # the caller's stream, as in the checked calls
                for proto in cfg.protocols:
                    runs[proto] = _timing.time_protocol(fns, self.device, proto, warmup_ms=cfg.warmup_ms,
                                                        rep_ms=cfg.rep_ms, graphs=cfg.graphs, windows=cfg.windows,
                                                        steady=steady, before={"candidate": probes.before},
                                                        after={"candidate": probes.after})
                tobs["audit"] = list(events)
                self._sync()
        except BaseException as e:  # noqa: BLE001
            name, detail = classify_exception(e)
            raise CandidateFailure(name, f"during timing: {detail}") from None
        self.phase("timing (" + ", ".join(cfg.protocols) + ")", time.perf_counter() - t_phase)
        t_phase = time.perf_counter()
        # The first protocol asked for is the headline (speedup, rivals); every protocol is stored.
        head = runs[cfg.protocols[0]]
        stats = head.stats
        notes.update(head.notes)
        tobs["new_threads"] = [t.name for t in foreign_threads([t for t in set(threading.enumerate()) - threads_before
                                                                if t.is_alive()])]
        tobs["new_children"] = sorted(_children_pids() - children_before)
        tobs["candidate_threads"] = self._threads_running_candidate_code()
        self._check_tracer("timing")
        timed = self._judge_timed(prof, tobs, min(r.stats["candidate"].median_ms for r in runs.values()), cfg.graphs)
        self._judge_observations(tobs, "default@timed calls")
        probes.judge()
        by_proto: dict[str, Any] = {}
        for proto, run in runs.items():
            c = run.stats["candidate"].median_ms
            by_proto[proto] = {**run.to_dict(), "speedup": {k: v.median_ms / c for k, v in run.stats.items()
                                                            if k != "candidate" and k not in rivals and c > 0}}
        self.result["timing"] = {"size": size, "protocol": head.protocol, "stats": {k: v.to_dict() for k, v in stats.items()},
                                 "notes": notes, "l2_flush": self.on_gpu, "graphs": cfg.graphs,
                                 "telemetry": by_proto[head.protocol]["telemetry"],
                                 "steady": by_proto[head.protocol]["steady"], "observed": timed,
                                 "output_probes": probes.summary()}
        self.result["protocols"] = by_proto
        cm = stats["candidate"].median_ms
        self.result["speedup"] = by_proto[head.protocol]["speedup"]
        if rivals:
            # ratio > 1: the candidate is faster than that rival in this same run
            self.result["rivals"] = {k: {"path": next(r["path"] for r in cfg.rivals if r["label"] == k),
                                         "ratio": stats[k].median_ms / cm if cm > 0 else None,
                                         "protocol": head.protocol}
                                     for k in rivals}
        self._check_identity(before, "timing")
        self._check_precision(policy, "timing")
        # the output of the last timed call must still be right (timed inputs unchanged, result correct)
        with torch.no_grad():
            ref_out = ref_model(*clone_tree(inputs))
        self._sync()
        # A probed call ran on fresh values and was judged against their reference by the probe; when it was
        # the very last call, its output is not the original inputs' output and must not be compared to it.
        if last.get("n") != probes.last_probed_call:
            self._check_outputs(last["out"], ref_out, cin, inputs, "last timed call")
        # What the recheck does not need goes before it (the energy windows still call through cin and
        # rin): at KernelBench sizes each of these is a multi-GiB copy.
        del ref_out, probes
        last.pop("out", None)
        self._speed_of_light(size, cm)
        # re-check on inputs the candidate cannot have seen: the seed is drawn only now
        recheck_seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        rin2 = self._inputs(mod, recheck_seed)
        pristine = rin2      # never handed to a model: the copy the candidate's arguments are compared with
        args = clone_tree(rin2)
        with torch.no_grad():
            ref2 = ref_model(*clone_tree(rin2))
        self._sync()
        poison_allocator([t.nbytes for t in flatten(ref2) if isinstance(t, torch.Tensor)], self.device)
        out2, obs = self._run_candidate(cand_model, args, profile=True)
        self._judge_observations(obs, f"default@recheck seed={recheck_seed}")
        rec = self._check_outputs(out2, ref2, args, pristine, f"recheck after timing seed={recheck_seed}")
        rec.update({"which": "recheck", "size": size, "seed": recheck_seed, "order": "ref_first"})
        self.trials.append(rec)
        if not rec["ok"]:
            self.result["correct"] = False
        del rin2, pristine, args, ref2, out2
        self.phase("checks after timing", time.perf_counter() - t_phase)
        t_phase = time.perf_counter()
        if cfg.energy and self.on_gpu:
            from kernelpro.harness.energy import energy_sides, measure_energy

            est = (runs.get("isolated") or head).stats
            sides = {k: fns[k] for k in energy_sides(list(fns), cfg.baselines)}
            try:
                self.result["energy"] = measure_energy(sides, {k: v.median_ms for k, v in est.items()}, self.device,
                                                       flops=self.task.work(size)[0] or None)
            except Exception as e:  # noqa: BLE001 - NVML missing or refused: say so, keep the run
                self.result["energy"] = {"error": f"{type(e).__name__}: {e}"[:200], "protocol": "isolated"}
        elif cfg.energy:
            self.result["energy"] = {"error": f"device {self.device}: no NVML energy counter", "protocol": "isolated"}
        if cfg.energy:
            self.phase("energy", time.perf_counter() - t_phase)

    def _rivals(self, mod: Any, model_seed: int, inputs: list[Any], ref_model: Any,
                notes: dict[str, str]) -> dict[str, Any]:
        """Load the rivals and return their timed calls. They were judged in their own runs; here each must
        load, build from its own compile cache, and match the reference at the timing size, or it is left
        out with a note (never silently timed wrong)."""
        out: dict[str, Any] = {}
        if not self.cfg.rivals:
            return out
        with torch.no_grad():
            ref_out = ref_model(*clone_tree(inputs))
        for i, r in enumerate(self.cfg.rivals):
            label = r["label"]
            prev = os.environ.get("TORCH_EXTENSIONS_DIR")
            try:
                if r.get("ext_dir"):   # lazy builds happen on the first call: keep the rival's cache for it
                    os.environ["TORCH_EXTENSIONS_DIR"] = r["ext_dir"]
                rmod = import_module_from(Path(r["path"]), f"kp_rival_{i}_{os.getpid()}")
                _, model = self._models(mod, rmod, model_seed, judge=False)
                rin = clone_tree(inputs)
                with torch.no_grad():
                    got = model(*rin)
                self._sync()
            except Exception as e:  # noqa: BLE001 - a broken rival is reported, the candidate's run goes on
                notes[label] = f"rival left out: {type(e).__name__}: {str(e)[:160]}"
                continue
            finally:
                if prev is None:
                    os.environ.pop("TORCH_EXTENSIONS_DIR", None)
                else:
                    os.environ["TORCH_EXTENSIONS_DIR"] = prev
            if not outputs_match(flatten(got), flatten(ref_out), self.task.tolerance):
                notes[label] = "rival left out: wrong output at the timing size"
                continue

            def call(model: Any = model, rin: list[Any] = rin) -> None:
                with torch.no_grad():
                    model(*rin)
            out[label] = call
        return out

    def _baseline(self, name: str, ref_model: Any, args: list[Any]) -> Any:
        if name == "eager":
            def eager() -> None:
                with torch.no_grad():
                    ref_model(*args)
            return eager
        if name == "compile":
            compiled = torch.compile(ref_model)
            with torch.no_grad():
                compiled(*args)

            def comp() -> None:
                with torch.no_grad():
                    compiled(*args)
            return comp
        if name == "vendor":
            ctx = self._vendor_context()

            def vendor() -> None:
                with torch.no_grad(), ctx():
                    ref_model(*args)
            return vendor
        if name in ("cudnn_frontend", "torch_sdpa"):
            from kernelpro.harness.sdpa import BASELINES as SDPA

            sdpa = self.task.sdpa
            if not sdpa:
                raise ValueError(f"{name} applies to attention tasks that declare META sdpa; this one does not")
            if not self.on_gpu:
                raise ValueError(f"{name} runs on a GPU only")
            return SDPA[name](sdpa["direction"], bool(sdpa["causal"]), list(args))
        if name == "triton":
            from kernelpro.harness.triton_grouped import triton_baseline

            if not self.task.triton:
                raise ValueError("triton applies to tasks that declare META triton; this one does not")
            if not self.on_gpu:
                raise ValueError("triton runs on a GPU only")
            return triton_baseline(self.task.triton, list(args))
        raise ValueError(f"unknown baseline {name!r} (eager, compile, vendor, cudnn_frontend, torch_sdpa, triton)")

    def _vendor_context(self) -> Any:
        b = self.task.baseline.lower()
        if not self.on_gpu:
            return contextlib.nullcontext
        if b in ("cublas", "cublaslt"):
            @contextlib.contextmanager
            def blas():
                prev = torch.backends.cuda.preferred_blas_library()
                torch.backends.cuda.preferred_blas_library(b)
                try:
                    yield
                finally:
                    torch.backends.cuda.preferred_blas_library(prev)
            return blas
        if b in ("cudnn", "flash", "efficient"):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                       "efficient": SDPBackend.EFFICIENT_ATTENTION}[b]
            return lambda: sdpa_kernel(backend)
        return contextlib.nullcontext

    def _speed_of_light(self, size: dict[str, Any], cand_ms: float) -> None:
        flops, nbytes = self.task.work(size)
        ceil = {**DEFAULT_CEILINGS, **self.cfg.ceilings}
        peak = ceil.get(self.task.dtype, ceil["bf16"])
        t_flops = flops / peak if flops else 0.0
        t_bytes = nbytes / ceil["bandwidth"] if nbytes else 0.0
        floor_ms = max(t_flops, t_bytes) * 1e3
        secs = cand_ms / 1e3
        self.result["work"] = {
            "flops": flops, "bytes": nbytes, "floor_ms": floor_ms, "peak_flops": peak, "bandwidth": ceil["bandwidth"],
            "tflops": flops / secs / 1e12 if flops and secs > 0 else None,
            "gbps": nbytes / secs / 1e9 if nbytes and secs > 0 else None,
            "frac_of_floor": floor_ms / cand_ms if cand_ms > 0 and floor_ms > 0 else None,
        }
        if floor_ms > 0 and cand_ms < floor_ms:
            self.fail("impossible_speed", f"median {cand_ms * 1e3:.2f} us is below the speed-of-light floor "
                                          f"{floor_ms * 1e3:.2f} us (max(FLOPs/peak, bytes/bandwidth))")
        elif floor_ms > 0:
            self.passed("impossible_speed")

    def _judge_timed(self, prof: Any, tobs: dict[str, Any], cand_ms: float, graphs: bool) -> dict[str, Any]:
        """The timed calls against the checked ones: the same ops (both devices); on the GPU the same kernel
        names, a kernel count per call the checked calls had, the caller's stream, and event samples that
        are not shorter than the kernels' own busy time in the activity record (read below Python)."""
        key = "default"
        seen: dict[str, Any] = {"ops": len(tobs["ops"])}
        checked_ops = self._checked_ops.get(key, set())
        extra_ops = sorted(o for o in tobs["ops"] if not _BORING_OPS.match(o) and o not in checked_ops)
        if prof is not None:
            calls = _timed_calls(prof, tobs)
            tobs["kernels"] = sorted({n for c in calls for n in c["names"]})
            seen.update(calls=len(calls))
            extra_ops = sorted(o for o in tobs["ops"] if not _BORING_OPS.match(o) and o not in checked_ops)
            sigs = self._checked_kernels.get(key, [])
            if calls and sigs:
                allowed = {n for s in sigs for n in s}
                counts = {len(s) for s in sigs}
                names = {n for c in calls for n in c["names"]}
                new = sorted(names - allowed)
                odd = [i for i, c in enumerate(calls) if len(c["names"]) not in counts]
                seen.update(kernel_names=sorted(names)[:KERNEL_NAMES_KEPT], checked_counts=sorted(counts),
                            odd_count_calls=len(odd))
                if new:
                    self.fail("timed_differs", f"timed calls launched {len(new)} kernel(s) no checked call "
                                               f"launched, e.g. {new[0][:80]}")
                elif odd and not graphs:
                    c = calls[odd[0]]
                    self.fail("timed_differs", f"{len(odd)} of {len(calls)} timed calls launched a kernel count "
                                               f"the checked calls never did ({len(c['names'])} vs {sorted(counts)})")
                busy = [c["busy_ms"] for c in calls if c["busy_ms"] > 0]
                if busy:
                    seen["kernel_busy_median_ms"] = sorted(busy)[len(busy) // 2]
                    seen["kernel_busy_low_ms"] = busy_low(busy)
                    why = timer_below_busy(cand_ms, busy)
                    if why:
                        self.fail("patched_timer", why)
        if extra_ops:
            self.fail("timed_differs", f"timed calls ran op(s) no checked call ran: {extra_ops[:3]}")
        return seen


BUSY_QUANTILE = 0.1    # the fastest tenth of the timed calls' own kernel time
BUSY_SLACK = 0.9       # event samples may read up to 10% under it (timestamp granularity, clock domains)


def busy_low(busy_ms: list[float]) -> float:
    """The `BUSY_QUANTILE` quantile of the timed calls' kernel busy times (a non-empty list)."""
    busy = sorted(busy_ms)
    return busy[min(len(busy) - 1, int(len(busy) * BUSY_QUANTILE))]


def timer_below_busy(cand_ms: float, busy_ms: list[float]) -> str | None:
    """Why the event-timed median cannot be true, or None: it is under the kernels' own busy time, per call,
    of the fastest `BUSY_QUANTILE` of the timed calls, less `BUSY_SLACK`.

    A low quantile, not the median: on a GPU shared with other processes, time slicing stretches the
    kernels of some calls (their activity spans include the time the context was switched out), and the
    calls the timing protocol sampled may be the quieter ones. Seen on an H100 with eleven processes on
    one GPU: honest cuBLAS calls timed at 2.66 ms against a busy-time median of 3.29 ms. An event sample
    can never be shorter than the kernels that ran inside it, so a timer read down below the fastest
    calls' busy time is still caught."""
    if not busy_ms:
        return None
    low = busy_low(busy_ms)
    if cand_ms < BUSY_SLACK * low:
        return (f"timed median {cand_ms * 1e3:.2f} us is below the candidate's own kernel busy time "
                f"{low * 1e3:.2f} us (fastest {BUSY_QUANTILE:.0%} of timed calls, activity record)")
    return None


def _timed_calls(prof: Any, tobs: dict[str, Any]) -> list[dict[str, Any]]:
    """Per timed candidate call (one CANDIDATE_RANGE each): kernel names, busy time; kernels on another
    stream than the caller's go to tobs['other_stream'] and aten ops to tobs['ops']."""
    import bisect
    import json
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    ranges = sorted((ev["ts"], ev["ts"] + ev.get("dur", 0)) for ev in events
                    if ev.get("name") == CANDIDATE_RANGE and ev.get("cat") == "user_annotation")
    starts = [r[0] for r in ranges]

    def which(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= ranges[i][1] else None

    for ev in events:
        if ev.get("cat") == "cpu_op" and ev.get("name", "").startswith("aten::") and which(ev.get("ts", 0)) is not None:
            tobs["ops"].add(ev["name"])
    launched = {ev.get("args", {}).get("correlation"): ev.get("ts", 0) for ev in events
                if ev.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in ev.get("args", {})}
    kernels = sorted((ev for ev in events if ev.get("cat") == "kernel"), key=lambda ev: ev.get("ts", 0))
    ours = next((ev.get("args", {}).get("stream") for ev in kernels if "fill" in ev.get("name", "").lower()), None)
    calls: list[dict[str, Any]] = [{"names": [], "spans": []} for _ in ranges]
    for ev in kernels:
        ts = launched.get(ev.get("args", {}).get("correlation"))
        i = which(ts) if ts is not None else None
        if i is None:
            continue
        calls[i]["names"].append(ev.get("name", ""))
        calls[i]["spans"].append((ev.get("ts", 0), ev.get("ts", 0) + ev.get("dur", 0)))
        stream = ev.get("args", {}).get("stream")
        if ours is not None and stream != ours and len(tobs["other_stream"]) < 3:
            tobs["other_stream"].append(f"timed call: kernel {ev.get('name', '')[:60]} on stream {stream} "
                                        f"(caller's: {ours})")
    for c in calls:
        busy, end = 0.0, float("-inf")
        for s, e in sorted(c.pop("spans")):
            if e > end:
                busy += e - max(s, end)
                end = e
        c["busy_ms"] = busy / 1e3   # trace times are microseconds
    return calls


class _TimedProbes:
    """A random subset of the candidate's timed calls (positions from os.urandom, drawn as the loop runs)
    gets fresh input values swapped into the same tensors before the call and its output copied after,
    both outside the timed window; after the loop each is compared with the reference. A candidate that
    is honest only for the first N calls, or returns a cached result while it is timed, fails here.

    Large problems (one input set and its outputs over BIG bytes, e.g. KernelBench's 6 GiB level-1
    tensors) keep one fresh set instead of three, its reference made before the loop, and compare each
    probed output as it is taken instead of keeping up to MAX copies of it: those copies alone were
    more than an 80 GB card holds. The comparison runs where the copy ran, outside the timed window."""

    FIRST = 30      # time_interleaved's minimum repetitions: three probes are drawn among them
    MAX = 12
    BIG = 1 << 28

    def __init__(self, ev: Any, mod: Any, inputs: list[Any], cin: list[Any], last: dict[str, Any], ref_model: Any):
        self.ev, self.inputs, self.cin, self.last, self.ref_model = ev, inputs, cin, last, ref_model
        self.fresh: list[list[Any]] = []
        self.refs: list[list[torch.Tensor]] = []     # the fresh sets' reference outputs, made before the loop
        self._add_fresh(mod)
        self.big = tensor_bytes(self.fresh[0]) + tensor_bytes(self.refs[0]) > self.BIG
        if not self.big:
            self._add_fresh(mod)
            self._add_fresh(mod)
        self.early = {int.from_bytes(os.urandom(2), "little") % self.FIRST for _ in range(3)}
        self.pending: int | None = None
        # (call, fresh set, the output's copy) or, for a large problem, (call, fresh set, whether it was right)
        self.taken: list[tuple[int, int, list[torch.Tensor] | bool]] = []
        self.last_probed_call: int | None = None   # the candidate's call count at the latest probed call

    def _add_fresh(self, mod: Any) -> None:
        self.fresh.append(self.ev._inputs(mod, int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF))
        with torch.no_grad():
            self.refs.append([t for t in flatten(self.ref_model(*clone_tree(self.fresh[-1])))
                              if isinstance(t, torch.Tensor)])

    def _pick(self, i: int) -> bool:
        if len(self.taken) >= self.MAX:
            return False
        return i in self.early or (i >= self.FIRST and os.urandom(1)[0] < 8)

    def _fill(self, src: list[Any]) -> None:
        for x, y in zip(self.cin, src, strict=True):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.copy_(y)

    def before(self, i: int) -> None:
        self.pending = None
        if self._pick(i):
            self.pending = len(self.taken) % len(self.fresh)
            self._fill(self.fresh[self.pending])

    def after(self, i: int) -> None:
        k = self.pending
        if k is None:
            return
        self.pending = None
        outs = [t for t in flatten(self.last.get("out")) if type(t) is torch.Tensor]
        if self.big:
            self.taken.append((i, k, self._right(outs, self.refs[k])))
        else:
            self.taken.append((i, k, [t.clone() for t in outs]))
        self.last_probed_call = self.last.get("n")
        self._fill(self.inputs)

    def _right(self, outs: list[torch.Tensor], refs: list[torch.Tensor]) -> bool:
        return outputs_match(outs, refs, self.ev.task.tolerance)

    def judge(self) -> None:
        for i, k, outs in self.taken:
            ok = outs if isinstance(outs, bool) else self._right(outs, self.refs[k])
            if not ok:
                when = "as it was taken" if isinstance(outs, bool) else "only after the loop"
                self.ev.fail("wrong_output", f"timed call {i}: wrong output for fresh input values swapped in outside "
                                             f"the timed window (checked {when})")
                return

    def summary(self) -> dict[str, Any]:
        return {"probed_calls": [i for i, _, _ in self.taken]}
