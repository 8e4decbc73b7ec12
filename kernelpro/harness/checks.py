"""The per-size correctness protocol: each candidate call made under watch (tracer, profiler or op
recorder, audit hook, stream and thread checks), its outputs judged against the reference, and the
probes that name why an order-dependent, cached or library-dependent candidate fails."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import sys
import threading
import time
from typing import Any

import torch

from kernelpro.harness.guards import (
    _AUDIT_READ,
    _AUDIT_SPAWN,
    CandidateFailure,
    _Audit,
    _children_pids,
    _OpRecorder,
    classify_exception,
    forbidden_families,
    foreign_threads,
    op_family,
    precision_flags,
    restore_precision,
)
from kernelpro.harness.tensors import (
    bitwise_equal,
    clone_tree,
    error_stats,
    fingerprint,
    flatten,
    overlaps,
    poison_allocator,
    tensor_bytes,
)

_AUDIT_FRAME_EVENTS = ("sys._getframe", "sys._current_frames", "object.__getattr__")
_sysrandom = random.SystemRandom()
_Tensor = torch.Tensor

# Profiler range around the candidate's own call; ops and kernels outside it are the harness's.
CANDIDATE_RANGE = "kernelpro::candidate"

# aten ops that say nothing about which algorithm ran (allocation, views, copies)
_BORING_OPS = re.compile(r"^aten::(empty|empty_like|empty_strided|zeros|zeros_like|ones|ones_like|full|"
                         r"fill_|zero_|to|_to_copy|copy_|clone|contiguous|view|reshape|_reshape_alias|"
                         r"as_strided|expand|t|transpose|permute|unsqueeze|squeeze|slice|select|detach|"
                         r"alias|lift_fresh|resize_|item|_local_scalar_dense|result_type|unbind|split|"
                         r"chunk|narrow|flatten|numel|size|stride|is_nonzero|set_|record_stream|"
                         r"_unsafe_view|new_empty|new_empty_strided|new_zeros|cat|stack)$")


_JOIN = re.compile(r"StreamWaitEvent|Synchronize")


def window_kernels(events: list[dict[str, Any]], lo: float, hi: float) -> tuple[list[str], list[str]]:
    """(names of the candidate's kernels, descriptions of those that escaped the caller's window).

    `events` is a Chrome trace of one candidate call; [lo, hi] is the host-side range of the call. A kernel
    is the candidate's when the host call that launched it (same correlation id) ran inside that range,
    whatever thread or stream it used. The window is bounded by two fills the harness puts on the caller's
    stream, one launched before the call and one right after it; the second starts only when all work
    ordered before it on that stream is done. So a side stream or a graph replay joined back into the
    caller's stream ends before it; a kernel that ends after it was still running when the caller's stream
    completed, and the caller's events (the timer's) never saw it.
    """
    launched_at = {ev.get("args", {}).get("correlation"): ev.get("ts", 0) for ev in events
                   if ev.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in ev.get("args", {})}
    kernels = sorted((ev for ev in events if ev.get("cat") == "kernel"), key=lambda ev: ev.get("ts", 0))

    def launch(ev: dict[str, Any]) -> float | None:
        return launched_at.get(ev.get("args", {}).get("correlation"))

    mine = [ev for ev in kernels if lo <= (launch(ev) if launch(ev) is not None else lo) <= hi]
    # Host calls that order the caller's stream after other work (or wait for it): a join.
    joins = sorted(ev.get("ts", 0) for ev in events if ev.get("cat") in ("cuda_runtime", "cuda_driver")
                   and _JOIN.search(ev.get("name", "")))
    # The harness made one join before the call; only a trace that shows it can show the candidate's.
    joins_seen = any(t < lo for t in joins)
    fills = [ev for ev in kernels if "fill" in ev.get("name", "").lower() and ev not in mine]
    start = next((ev for ev in fills if (launch(ev) or lo) < lo), fills[0] if fills else None)
    ours = start.get("args", {}).get("stream") if start else None
    after = sorted((ev for ev in fills if (launch(ev) or lo) > hi and ev.get("args", {}).get("stream") == ours),
                   key=lambda ev: launch(ev) or 0)
    leftovers = []
    if joins_seen and ours is not None:
        for ev in mine:
            t = launch(ev)
            if ev.get("args", {}).get("stream") != ours and t is not None and not any(t < j <= hi for j in joins):
                leftovers.append(f"kernel {ev.get('name', '')[:60]} on stream {ev.get('args', {}).get('stream')} "
                                 f"is never joined back into the caller's stream {ours} (no wait or synchronize "
                                 "after its launch): invisible to the caller's events")
                break
    if after:
        end = float(after[0].get("ts", 0))
        for ev in mine:
            finish = float(ev.get("ts", 0)) + float(ev.get("dur", 0))
            if finish > end:
                leftovers.append(f"kernel {ev.get('name', '')[:60]} on stream {ev.get('args', {}).get('stream')} "
                                 f"ended {finish - end:.1f} us after the caller's stream {ours} completed")
    return [ev.get("name", "") for ev in mine], leftovers


class CorrectnessChecks:
    """The Evaluator's correctness stage (a mixin: the verdict bookkeeping and setup live in evaluate)."""

    # -- running the candidate under watch ----------------------------------------------------------
    # -- one state for every candidate call -------------------------------------------------------
    # What a candidate could sense of being watched is the same in every call, checked or timed: the
    # exception tracer is installed before its import and stays on to the end; on the GPU every call
    # (checked, probe, timed) runs inside a torch-profiler session with CUDA activity (kineto/CUPTI
    # records the kernels below Python); on the CPU one op recorder (a dispatch mode) is on for the whole
    # evaluation and only records while the candidate's own call runs.
    def _start_watch(self) -> None:
        cand_file = self.cand_path
        sink: list[list[str]] = [[]]
        self._swallow_sink = sink

        def local(frame, event, arg):
            if event == "exception" and not issubclass(arg[0], StopIteration | GeneratorExit):
                sink[0].append(f"{arg[0].__name__} at line {frame.f_lineno}")
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code.co_filename == cand_file else None

        self._tracer = tracer
        self._old_trace = sys.gettrace()
        sys.settrace(tracer)
        threading.settrace(tracer)
        self._recorder = None
        if not self.on_gpu:
            self._recorder = _OpRecorder()
            self._recorder.recording = False
            self._recorder.__enter__()

    def _stop_watch(self) -> None:
        sys.settrace(getattr(self, "_old_trace", None))
        threading.settrace(None)  # type: ignore[arg-type]
        if getattr(self, "_recorder", None) is not None:
            self._recorder.__exit__(None, None, None)
            self._recorder = None

    def _check_tracer(self, ctx: str) -> None:
        if sys.gettrace() is not self._tracer:
            self.fail("patched_torch", f"{ctx}: the candidate replaced or removed the interpreter's tracer")
            sys.settrace(self._tracer)

    @contextlib.contextmanager
    def _profiler(self):
        """The GPU session every candidate call runs in (None on the CPU, where the recorder is on)."""
        if not self.on_gpu:
            yield None
            return
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as _profile

        prof = _profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
        try:
            yield prof
        finally:
            prof.__exit__(None, None, None)

    @contextlib.contextmanager
    def _recording(self, ops: set[str]):
        """The CPU recorder records into `ops` inside this block only."""
        rec = self._recorder
        if rec is None:
            yield
            return
        rec.ops = ops
        rec.recording = True
        try:
            yield
        finally:
            rec.recording = False

    def _run_candidate(self, model: Any, args: list[Any], *, profile: bool = False,
                       audited: bool = True) -> tuple[Any, dict[str, Any]]:
        """Call the candidate once with every runtime check armed; returns (output, observations).
        Every call is observed the same way; `profile` only says whether its record is read."""
        obs: dict[str, Any] = {"swallowed": [], "audit": [], "ops": set(), "kernels": [], "other_stream": []}
        threads_before = set(threading.enumerate())
        children_before = _children_pids()
        stream_before = torch.cuda.current_stream() if self.on_gpu else None
        self._swallow_sink[0] = obs["swallowed"]
        out = None
        err: BaseException | None = None
        ops: set[str] = set()
        with self._profiler() as prof:
            if prof is not None:
                marker = torch.empty(1, device=self.device)
                marker.fill_(1.0)  # a kernel on the caller's stream: its profiler stream id is "ours"
                # one join of our own, so `window_kernels` knows this trace records joins at all
                joined = torch.cuda.Event()
                joined.record(stream_before)
                stream_before.wait_event(joined)
            try:
                with _Audit.watch() as events:
                    # The range marks the candidate's own call: only ops and kernels launched inside it
                    # are the candidate's (the harness's checks after it, e.g. snapshot clones, are not).
                    with self._recording(ops), torch.no_grad(), torch.profiler.record_function(CANDIDATE_RANGE):
                        out = model(*args)
                    if prof is not None:
                        # The end of the timed window: this kernel starts on the caller's stream only once
                        # everything ordered before it there (side streams joined back included) is done.
                        with torch.cuda.stream(stream_before):
                            marker.fill_(2.0)
                    obs["audit"] = list(events) if audited else []
            except BaseException as e:  # noqa: BLE001 - anything escaping candidate code is its failure
                err = e
            finally:
                self._swallow_sink[0] = []
            new_threads = foreign_threads([t for t in set(threading.enumerate()) - threads_before if t.is_alive()])
            if err is None and out is not None:
                self._async_checks(out, stream_before, obs)
            try:
                self._sync()
            except BaseException as e:  # noqa: BLE001
                err = err or e
        obs["ops"] = ops
        if prof is not None and profile and err is None:
            try:
                self._read_profile(prof, obs)
            except Exception as e:  # noqa: BLE001 - a profiler failure is ours, not the candidate's
                self.warn("profiler", f"profiler failed: {type(e).__name__}: {e}"[:200])
        self._check_tracer("call")
        if err is not None:
            name, detail = classify_exception(err)
            raise CandidateFailure(name, detail)
        obs["new_threads"] = [t.name for t in new_threads] if audited else []
        obs["new_children"] = sorted(_children_pids() - children_before) if audited else []
        obs["candidate_threads"] = self._threads_running_candidate_code()
        return out, obs

    def _threads_running_candidate_code(self) -> list[str]:
        names = {t.ident: t.name for t in threading.enumerate()}
        others = sys._current_frames()
        # This thread's own frame must not sit in a local: a frame referring to itself is a cycle that
        # keeps every caller's frame, and so the candidate call's inputs and outputs, alive until the
        # garbage collector runs (seen: eleven input-sizes held at once on a 6 GiB problem).
        others.pop(threading.get_ident(), None)
        hits = []
        for tid, f in others.items():
            while f is not None:
                if f.f_code.co_filename == self.cand_path:
                    hits.append(names.get(tid, str(tid)))
                    break
                f = f.f_back
        return hits

    def _async_checks(self, out: Any, stream_before: Any, obs: dict[str, Any]) -> None:
        tensors = [t for t in flatten(out) if type(t) is _Tensor]
        if self.on_gpu:
            cur = torch.cuda.current_stream()
            if cur != stream_before:
                obs["other_stream"].append("candidate left a different current stream set")
                torch.cuda.set_stream(stream_before)
            # Everything ordered before this point on the caller's stream is done once `ev` completes.
            ev = torch.cuda.Event()
            ev.record(stream_before)
            ev.synchronize()
            snaps = [t.clone() for t in tensors]
            ev2 = torch.cuda.Event()
            ev2.record(stream_before)
            ev2.synchronize()
            torch.cuda.synchronize()
        else:
            snaps = [t.clone() for t in tensors]
            time.sleep(self.cfg.async_wait_s)
        late = [i for i, (s, t) in enumerate(zip(snaps, tensors, strict=True)) if not bitwise_equal(s, t)]
        obs["late_writes"] = late

    def _read_profile(self, prof: Any, obs: dict[str, Any]) -> None:
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
        events = trace.get("traceEvents", [])
        ranges = [(ev["ts"], ev["ts"] + ev.get("dur", 0)) for ev in events
                  if ev.get("name") == CANDIDATE_RANGE and ev.get("cat") == "user_annotation"]  # host side
        lo, hi = (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else (float("-inf"), float("inf"))

        def inside(ts: float) -> bool:
            return lo <= ts <= hi

        obs["ops"] = {ev["name"] for ev in events
                      if ev.get("cat") == "cpu_op" and ev.get("name", "").startswith("aten::") and inside(ev.get("ts", 0))}
        names, leftovers = window_kernels(events, lo, hi)
        obs["kernels"] = names
        obs["leftover"] = leftovers
        obs["profiled"] = True

    def _judge_observations(self, obs: dict[str, Any], ctx: str) -> None:
        key = ctx.split("@")[0]
        self._checked_ops.setdefault(key, set()).update(obs.get("ops", set()))
        if obs.get("profiled"):
            self._checked_kernels.setdefault(key, []).append(tuple(sorted(obs.get("kernels", []))))
        if obs.get("other_stream"):
            self.fail("other_stream", f"{ctx}: {obs['other_stream'][0]}")
        if obs.get("leftover"):
            self.fail("async_leftover", f"{ctx}: {obs['leftover'][0]}")
        if obs.get("late_writes"):
            self.fail("async_leftover", f"{ctx}: output {obs['late_writes'][0]} changed after the caller's stream completed")
        reads = [e for e in obs.get("audit", []) if e in _AUDIT_READ]
        if reads:
            self.fail("reads_reference_output", f"{ctx}: candidate called {reads[0]} during forward")
        writes = [e for e in obs.get("audit", []) if e.startswith("write ")]
        if writes:
            self.fail("writes_outside", f"{ctx}: {writes[0][6:]}")
        frames = [e for e in obs.get("audit", []) if e.startswith(_AUDIT_FRAME_EVENTS)]
        if frames:
            self.fail("frame_access", f"{ctx}: candidate code called {frames[0]}")
        spawns = [e for e in obs.get("audit", []) if e.startswith(_AUDIT_SPAWN)]
        if spawns or obs.get("new_children"):
            self.fail("spawned_process", f"{ctx}: {spawns[0] if spawns else 'child pids ' + str(obs['new_children'])}")
        if obs.get("new_threads") or obs.get("candidate_threads"):
            names = obs.get("new_threads") or obs.get("candidate_threads")
            self.fail("spawned_threads", f"{ctx}: thread(s) {names[:3]} started or running candidate code")
        forbidden = self._forbidden(obs)
        swallowed = obs.get("swallowed", [])
        ref_like = {o for o in obs.get("ops", set()) if not _BORING_OPS.match(o)} & self._ref_ops.get(ctx.split("@")[0], set())
        if swallowed and (forbidden or ref_like):
            what = forbidden[0] if forbidden else sorted(ref_like)[0]
            self.fail("try_except_fallback", f"{ctx}: swallowed {swallowed[0]}, then ran {what}")
        elif swallowed:
            self.warn("swallowed_exception", f"{ctx}: candidate swallowed {swallowed[0]}")
        if forbidden:
            self.fail("library_fallback", f"{ctx}: launched {forbidden[0]}")

    def _forbidden(self, obs: dict[str, Any]) -> list[str]:
        families = forbidden_families(self.task.forbid_ops)
        hits = sorted(o for o in obs.get("ops", set()) if op_family(o) in families)
        if self.task.forbid_kernels:
            rx = re.compile(self.task.forbid_kernels, re.IGNORECASE)
            hits += [f"kernel {k[:80]}" for k in obs.get("kernels", []) if rx.search(k)]
        return hits

    def _check_outputs(self, out: Any, ref_out: Any, cand_args: list[Any], pristine: list[Any],
                       ctx: str) -> dict[str, Any]:
        """Type, aliasing, input mutation and numerical checks of one candidate call."""
        tol = self.task.tolerance
        rec: dict[str, Any] = {"ctx": ctx, "ok": True}
        outs, refs = flatten(out), flatten(ref_out)
        for a, p in zip(cand_args, pristine, strict=True):
            if isinstance(a, torch.Tensor) and not bitwise_equal(a, p):
                self.fail("input_mutated", f"{ctx}: input of shape {tuple(a.shape)} was modified")
                rec["ok"] = False
        if len(outs) != len(refs):
            self.fail("wrong_output", f"{ctx}: {len(outs)} outputs, reference has {len(refs)}")
            rec["ok"] = False
            return rec
        errs = []
        for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
            if not isinstance(r, torch.Tensor):
                continue
            if not isinstance(o, torch.Tensor) or type(o) is not _Tensor:
                self.fail("lazy_output", f"{ctx}: output {i} is {type(o).__module__}.{type(o).__qualname__}, "
                                         "not a plain torch.Tensor")
                rec["ok"] = False
                continue
            if o.is_meta or o.device.type != r.device.type:
                self.fail("lazy_output", f"{ctx}: output {i} is on {o.device}, expected {r.device}")
                rec["ok"] = False
                continue
            for a in cand_args:
                if isinstance(a, torch.Tensor) and overlaps(o, a):
                    self.fail("output_aliases_input", f"{ctx}: output {i} shares storage with an input")
                    rec["ok"] = False
            if o.shape != r.shape:
                self.fail("wrong_output", f"{ctx}: output {i} shape {tuple(o.shape)}, expected {tuple(r.shape)}")
                rec["ok"] = False
                continue
            if o.dtype != r.dtype:
                if o.is_floating_point() and r.is_floating_point() and torch.finfo(o.dtype).bits < torch.finfo(r.dtype).bits:
                    self.fail("lower_precision", f"{ctx}: output {i} is {o.dtype}, reference {r.dtype}")
                else:
                    self.fail("wrong_output", f"{ctx}: output {i} dtype {o.dtype}, expected {r.dtype}")
                rec["ok"] = False
                continue
            st = error_stats(o, r, tol)
            errs.append(st)
            if st["poisoned"]:
                self.fail("unwritten_output", f"{ctx}: {st['poisoned']} of {o.numel()} elements never written")
            if st["nonfinite"]:
                self.fail("nan_inf", f"{ctx}: {st['nonfinite']} NaN/Inf elements where the reference is finite")
            if not st["ok"]:
                rec["ok"] = False
                if not st["poisoned"] and not st["nonfinite"]:
                    self.fail("wrong_output", f"{ctx}: rel_norm {st['rel_norm']:.3g} (tol {tol['rel_norm']:g}), "
                                              f"max_abs {st['max_abs']:.3g}, mismatch {100 * st['mismatch']:.2f}%")
        if errs:
            rec["rel_norm"] = max(e["rel_norm"] for e in errs)
            rec["max_abs"] = max(e["max_abs"] for e in errs)
            rec["tol_needed"] = max(e["tol_needed"] for e in errs)
        return rec

    def _degraded_match(self, ref_model: Any, args: list[Any], out: Any) -> str | None:
        """Which reduced precision the candidate's output matches better than full precision, if any."""
        if self.task.dtype not in ("fp32", "tf32"):
            return None
        o = [t for t in flatten(out) if isinstance(t, torch.Tensor)]
        if not o:
            return None
        full = [t for t in flatten(ref_model(*clone_tree(args))) if isinstance(t, torch.Tensor)]

        def rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
            return max(error_stats(x.float(), y.float(), self.task.tolerance)["rel_norm"] for x, y in zip(a, b, strict=True))

        base = rel(o, full)
        flags = precision_flags()
        variants: list[tuple[str, Any]] = [
            ("bf16", lambda: ref_model(*[a.to(torch.bfloat16).to(a.dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in clone_tree(args)])),
            ("fp16", lambda: ref_model(*[a.to(torch.float16).to(a.dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in clone_tree(args)])),
        ]
        if self.on_gpu and self.task.dtype == "fp32":
            def tf32():
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
                try:
                    return ref_model(*clone_tree(args))
                finally:
                    restore_precision(flags)
            variants.insert(0, ("tf32", tf32))
        for label, fn in variants:
            with torch.no_grad():
                d = [t for t in flatten(fn()) if isinstance(t, torch.Tensor)]
            r = rel(o, d)
            if r < 0.25 * base:
                return f"error {base:.2g} vs fp32 reference but {r:.2g} vs a {label} one"
        return None

    # -- the stages -------------------------------------------------------------------------------
    def _check_size(self, cand_mod: Any, which: str, size: dict[str, Any], trials: int, before: dict,
                    policy: dict[str, Any]) -> bool:
        label = which + "@" + ",".join(f"{k}={v}" for k, v in size.items() if k in self._size_keys())
        key = label.split("@")[0]
        mod = self._task_module(size)
        init_seed = _sysrandom.randrange(2**31)
        ref_model, cand_model = self._models(mod, cand_mod, init_seed)
        # shapes of the outputs (for poisoning) and the reference's op set (for fallback detection)
        probe_in = self._inputs(mod, _sysrandom.randrange(2**31))
        with torch.no_grad(), _OpRecorder() as rec:
            probe_out = ref_model(*clone_tree(probe_in))
        self._ref_ops[key] = self._ref_ops.get(key, set()) | {o for o in rec.ops if not _BORING_OPS.match(o)}
        specs = [t.nbytes for t in flatten(probe_out) if isinstance(t, torch.Tensor)]
        if not self._cand_warmed:
            # first call ever: JIT compilers (torch.compile, Triton) may start workers; not yet judged
            self._run_candidate(cand_model, clone_tree(probe_in), audited=False)
            self._cand_warmed = True
        del probe_out, probe_in
        all_ok = True
        prev: list[tuple] = []
        first_ref: list[Any] | None = None   # the reference's first output: does it move with its inputs?
        for trial in range(trials):
            seed = _sysrandom.randrange(2**31)
            order = "ref_first" if trial % 2 == 0 else "cand_first"
            ctx = f"{label} seed={seed} {order}"
            inputs = self._inputs(mod, seed, own=trial == 0)
            # `inputs` are never handed to a model (each gets a clone), so they are also the pristine copy
            # the candidate's arguments are compared with: one input-sized copy fewer at KernelBench sizes.
            pristine = inputs
            cand_args = clone_tree(inputs)
            ref_out = None
            if order == "ref_first":
                with torch.no_grad():
                    ref_out = ref_model(*clone_tree(inputs))
                self._sync()
            else:
                self._empty_cache()
            poison_allocator(specs, self.device)
            out, obs = self._run_candidate(cand_model, cand_args, profile=True)
            if ref_out is None:
                self._sync()
                with torch.no_grad():
                    ref_out = ref_model(*clone_tree(inputs))
                self._sync()
            self._judge_observations(obs, f"{key}@{ctx}")
            rec = self._check_outputs(out, ref_out, cand_args, pristine, ctx)
            rec.update({"which": which, "size": size, "seed": seed, "order": order})
            fps = [fingerprint(t) for t in flatten(out) if type(t) is _Tensor]
            ref_fps = [fingerprint(t) for t in flatten(ref_out) if isinstance(t, torch.Tensor)]
            if not rec["ok"] and fps and any(fps == p[0] and ref_fps != p[1] for p in prev):
                self.fail("output_cached", f"{ctx}: returned the same output as for earlier, different inputs")
            if not rec["ok"] and "wrong_output" in self.failed_names():
                why = self._degraded_match(ref_model, inputs, out)
                if why:
                    self.fail("lower_precision", f"{ctx}: {why}")
            prev.append((fps, ref_fps))
            self._reference_change(ref_out, first_ref, key)
            if first_ref is None and tensor_bytes(ref_out) <= 2 << 30:
                first_ref = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in flatten(ref_out)]
            self.trials.append(rec)
            all_ok &= rec["ok"]
            self._check_identity(before, ctx)
            self._check_precision(policy, ctx)
            del out, ref_out, cand_args
        inputs = pristine = first_ref = None   # the probes below make their own: free these first
        all_ok &= self._order_and_reuse_probes(mod, ref_model, cand_model, specs, label)
        all_ok &= self._cache_probe(mod, ref_model, cand_model, label)
        if self.task.forbid_ops:
            self._forced_path_probe(mod, ref_model, cand_model, label)
        return all_ok

    def _reference_change(self, ref_out: Any, first: list[Any] | None, key: str) -> None:
        """How far the reference's output moved between two input draws at the size checked, as
        max |a - b| / (1 + |b|): at or below the task's tolerance, any constant output would pass (a
        degenerate problem at this size, which a CPU probe at a reduced size can miss)."""
        if first is None:
            return
        from kernelpro.suites.degenerate import change

        c = change(flatten(ref_out), first)
        prev = self.result.setdefault("reference_change", {}).get(key)
        self.result["reference_change"][key] = c if prev is None else max(prev, c)

    def _size_keys(self) -> set[str]:
        keys = set()
        for s in self.task.shown_sizes + self.task.heldout_sizes:
            keys |= set(s)
        return keys or set(self.task.default_size)

    def _order_and_reuse_probes(self, mod: Any, ref_model: Any, cand_model: Any, specs: list[int], label: str) -> bool:
        """Name *why* order-dependent candidates fail: heap reads vs. allocator reuse."""
        by_order: dict[str, list[bool]] = {}
        for rec in self.trials:
            if rec.get("size") is not None and rec["ctx"].startswith(label):
                by_order.setdefault(rec["order"], []).append(rec["ok"])
        if "unwritten_output" in self.checks and not self.checks["unwritten_output"].ok:
            # reference first, its output freed (not poisoned): does the candidate hand it straight back?
            seed = _sysrandom.randrange(2**31)
            inputs = self._inputs(mod, seed)
            args = clone_tree(inputs)  # allocated first, so the freed reference block stays the best fit
            ref_in = clone_tree(inputs)
            self._empty_cache()
            with torch.no_grad():
                ref_out = ref_model(*ref_in)
            self._sync()
            ref_vals = [t.clone() for t in flatten(ref_out) if isinstance(t, torch.Tensor)]
            ptrs = [t.data_ptr() for t in flatten(ref_out) if isinstance(t, torch.Tensor)]
            del ref_out
            out, _ = self._run_candidate(cand_model, args)
            outs = [t for t in flatten(out) if isinstance(t, torch.Tensor)]
            same = len(outs) == len(ref_vals) and all(bitwise_equal(o, r) for o, r in zip(outs, ref_vals, strict=True))
            reused = any(o.data_ptr() in ptrs for o in outs)
            if same or reused:
                self.fail("memory_reuse", f"{label}: output {'is bit-identical to' if same else 'occupies'} the "
                                          "reference's freed output block")
            return False
        ref_ok = by_order.get("ref_first", [])
        cand_ok = by_order.get("cand_first", [])
        if ref_ok and cand_ok and all(ref_ok) and not any(cand_ok):
            self.fail("reads_reference_output", f"{label}: correct only when the reference ran first")
            return False
        return True

    def _cache_probe(self, mod: Any, ref_model: Any, cand_model: Any, label: str) -> bool:
        """New values written into the *same* input tensors must give a new output."""
        a = self._inputs(mod, _sysrandom.randrange(2**31))
        b = self._inputs(mod, _sysrandom.randrange(2**31))
        pairs = [(x, y) for x, y in zip(a, b, strict=True) if isinstance(x, torch.Tensor) and x.is_floating_point()]
        if pairs and all(bitwise_equal(x, y) for x, y in pairs):
            # Inputs fixed by the task (e.g. a workload's safetensors blob): every set is the same, so an
            # output cached from the first call is right on every later one and no probe can tell.
            self.warn("fixed_inputs", f"{label}: every input draw is bit-identical (inputs fixed by the task), "
                                      "so a candidate that returns a cached output cannot be caught")
            return True
        out1, _ = self._run_candidate(cand_model, a)
        first = [t.clone() for t in flatten(out1) if type(t) is _Tensor]
        del out1    # a candidate that caches it keeps it alive itself; the copy is what is compared
        for x, y in zip(a, b, strict=True):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.copy_(y)
        del b
        out2, obs = self._run_candidate(cand_model, a)
        self._judge_observations(obs, f"{label.split('@')[0]}@{label} cache-probe")
        with torch.no_grad():
            ref2 = ref_model(*clone_tree(a))
        self._sync()
        second = [t for t in flatten(out2) if type(t) is _Tensor]
        refs = [t for t in flatten(ref2) if isinstance(t, torch.Tensor)]
        if len(second) != len(refs) or len(first) != len(second):
            return False
        wrong = any(not error_stats(o, r, self.task.tolerance)["ok"] for o, r in zip(second, refs, strict=True))
        stale = all(bitwise_equal(o, f) for o, f in zip(second, first, strict=True))
        if wrong and stale:
            self.fail("output_cached", f"{label}: same input tensors with new values gave the previous output")
            return False
        if wrong:
            self.fail("wrong_output", f"{label}: wrong output when the input tensors were refilled in place")
            return False
        return True

    def _forced_path_probe(self, mod: Any, ref_model: Any, cand_model: Any, label: str) -> None:
        """Run with the forbidden aten ops made to raise: a candidate that then breaks needs them."""
        from torch.utils._python_dispatch import TorchDispatchMode

        forbidden = forbidden_families(self.task.forbid_ops)
        # Only the candidate's own call is probed: the harness's checks around it (output snapshots
        # are clones) may use any op, forbidden or not.
        inside = [False]

        class Forbid(TorchDispatchMode):
            hit: str | None = None

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = f"aten::{func._schema.name.split('::')[-1]}"
                if inside[0] and op_family(name) in forbidden:
                    Forbid.hit = name
                    raise RuntimeError(f"kernelpro: forbidden op {name} called on the forced kernel path")
                return func(*args, **(kwargs or {}))

        inputs = self._inputs(mod, _sysrandom.randrange(2**31))
        try:
            def probed(*args: Any) -> Any:
                inside[0] = True
                try:
                    return cand_model(*args)
                finally:
                    inside[0] = False

            with Forbid():
                out, obs = self._run_candidate(probed, clone_tree(inputs))
        except CandidateFailure as f:
            if Forbid.hit:
                self.fail("library_fallback", f"{label}: fails when {Forbid.hit} is unavailable ({f.detail[:80]})")
            return
        with torch.no_grad():
            ref = ref_model(*clone_tree(inputs))
        self._sync()
        if Forbid.hit:
            ok = all(error_stats(o, r, self.task.tolerance)["ok"] for o, r in
                     zip([t for t in flatten(out) if type(t) is _Tensor], [t for t in flatten(ref) if isinstance(t, torch.Tensor)], strict=False))
            if not ok:
                self.fail("library_fallback", f"{label}: wrong output when {Forbid.hit} is unavailable")

    # -- timing -----------------------------------------------------------------------------------
