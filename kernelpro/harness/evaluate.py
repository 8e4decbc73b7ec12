"""Correctness and anti-gaming checks for one candidate, run inside the isolated worker process.

Every verdict is a named check (see CHECKS). The evidence is behavioural wherever possible: we watch
what the candidate *does* (outputs on poisoned memory, results in both run orders, kernels and aten ops
it launches, streams it uses, exceptions it swallows, threads/processes it starts, objects it replaces)
rather than grepping its source; a source scan only ever adds a warning.

Threat model and its limit: the candidate runs in the same Python process as these checks (it must, to
be called), so a determined adversary could tamper with this module's own state. We bind what we use
before the candidate is imported, snapshot the identities of torch/time/kernelpro functions and compare
after every call, and keep each candidate in its own process so tampering cannot outlive it. A
candidate that defeats all of that is out of scope, as it is for every Python-level evaluator.

The checks (all sizes the task declares, several fresh seeds each, unpredictable seeds from os.urandom):
- poisoned outputs: before each candidate call, blocks of the reference outputs' sizes are allocated,
  filled with all-ones bytes (a NaN payload no arithmetic produces) and freed, so a `torch.empty` the
  candidate does not fully write shows the pattern -> `unwritten_output`;
- both orders: reference first with its outputs kept alive, and candidate first after the allocator
  cache is emptied; correct only when the reference ran first -> `reads_reference_output`; correct only
  when the reference's freed output block is handed back -> `memory_reuse`;
- inputs cloned per model and compared bitwise after the call -> `input_mutated`;
- outputs must be plain `torch.Tensor` (exact type) on the right device, not sharing storage with an
  input -> `lazy_output`, `output_aliases_input`;
- same tensors with new values in place (same identity and address) -> stale result -> `output_cached`;
- kernels launched on a stream other than the caller's (profiler) -> `other_stream`; output still being
  written after the caller's stream completed (snapshot vs. after device sync) -> `async_leftover`;
- aten ops in `task.forbid_ops` or kernel names matching `task.forbid_kernels` -> `library_fallback`;
  an exception raised and swallowed inside the candidate, followed by the reference's own ops ->
  `try_except_fallback`; with forbidden ops made to raise (forced kernel path), a candidate that
  then fails depends on the library -> `library_fallback`;
- identities of torch functions, `torch.cuda.Event`, `time.perf_counter`, builtins and kernelpro's own
  functions compared with a snapshot taken before import -> `patched_torch` / `patched_timer`;
- precision: TF32 off for fp32 tasks on both sides; a candidate that flips the flags, returns a lower
  dtype, or whose error matches a bf16/fp16/TF32-degraded reference -> `lower_precision`;
- threads started during a call or running candidate code, child processes, fork/spawn audit events ->
  `spawned_threads` / `spawned_process`;
- after timing: re-check on inputs regenerated from a seed drawn only then -> `wrong_output`;
- speed of light: median time below max(FLOPs/peak, bytes/bandwidth) -> `impossible_speed`.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import json
import math
import os
import random
import re
import sys
import threading
import time
import traceback
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from kernelpro import hardware as _hw
from kernelpro.harness import timing as _timing
from kernelpro.harness.job import EvalConfig
from kernelpro.suites.task import Task, import_module_from, load_task

_perf_counter = time.perf_counter
_sysrandom = random.SystemRandom()
_Tensor = torch.Tensor

CHECKS: dict[str, str] = {
    "compile_error": "the candidate did not import/build, or defines no ModelNew",
    "crash": "the candidate raised, segfaulted or hit an illegal address / CUDA error",
    "timeout": "the candidate ran past the wall-clock limit (killed)",
    "oom": "the candidate ran out of (capped) memory",
    "wrong_output": "output differs from the reference beyond the dtype's tolerance (or wrong shape/dtype)",
    "nan_inf": "output has NaN/Inf where the reference is finite",
    "unwritten_output": "output elements still hold the poison pattern (never written)",
    "other_stream": "kernels launched on a stream other than the caller's",
    "async_leftover": "output still being written after the caller's stream completed",
    "output_cached": "a stale output returned for new input values (cached / keyed on identity)",
    "output_aliases_input": "an output shares storage with an input",
    "input_mutated": "the candidate wrote to its inputs",
    "library_fallback": "the candidate launched the library op/kernel the task asks it to replace",
    "patched_torch": "the candidate replaced a torch/builtins/kernelpro function",
    "patched_timer": "the candidate replaced a timer (time.*, torch.cuda.Event/synchronize, kernelpro.harness.timing)",
    "reads_reference_output": "correct only when the reference ran first, or searched the heap for it",
    "lower_precision": "computed in lower precision than the task allows",
    "lazy_output": "an output is not a plain materialised torch.Tensor",
    "memory_reuse": "output is the reference's freed memory, handed back by the allocator",
    "spawned_threads": "the candidate started threads",
    "spawned_process": "the candidate started processes",
    "try_except_fallback": "an exception was swallowed and the reference path ran instead",
    "impossible_speed": "faster than the speed-of-light floor for the problem (not counted)",
    "sanitizer": "compute-sanitizer reported errors",
}

# When several checks fail, the most specific name is the reason.
PRIORITY = ["compile_error", "timeout", "crash", "oom", "sanitizer", "patched_timer", "patched_torch",
            "spawned_process", "spawned_threads", "reads_reference_output", "memory_reuse", "output_cached",
            "lazy_output", "output_aliases_input", "input_mutated", "other_stream", "async_leftover",
            "try_except_fallback", "library_fallback", "lower_precision", "unwritten_output", "nan_inf",
            "wrong_output", "impossible_speed"]

# The speed-of-light floor uses the datasheet (kernelpro.hardware says why); cfg.ceilings overrides it.
DEFAULT_CEILINGS = {**_hw.DATASHEET.tensor_flops, "bandwidth": _hw.DATASHEET.bandwidth}

PRECISION_FLAGS = ("matmul_tf32", "cudnn_tf32", "fp32_precision", "fp16_reduced", "bf16_reduced")
# Profiler range around the candidate's own call; ops and kernels outside it are the harness's.
CANDIDATE_RANGE = "kernelpro::candidate"

# aten ops that say nothing about which algorithm ran (allocation, views, copies)
_BORING_OPS = re.compile(r"^aten::(empty|empty_like|empty_strided|zeros|zeros_like|ones|ones_like|full|"
                         r"fill_|zero_|to|_to_copy|copy_|clone|contiguous|view|reshape|_reshape_alias|"
                         r"as_strided|expand|t|transpose|permute|unsqueeze|squeeze|slice|select|detach|"
                         r"alias|lift_fresh|resize_|item|_local_scalar_dense|result_type|unbind|split|"
                         r"chunk|narrow|flatten|numel|size|stride|is_nonzero|set_|record_stream|"
                         r"_unsafe_view|new_empty|new_empty_strided|new_zeros|cat|stack)$")
_AUDIT_READ = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_AUDIT_SPAWN = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "subprocess.Popen",
                "pty.spawn")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    severity: str = "fail"  # fail | warn

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CandidateFailure(Exception):
    """Stops the evaluation: the candidate raised or broke the device context."""

    def __init__(self, name: str, detail: str):
        super().__init__(detail)
        self.name = name
        self.detail = detail


def classify_exception(e: BaseException) -> tuple[str, str]:
    """(check name, one-line detail) for an exception escaping candidate code."""
    msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    text = str(e).lower()
    if isinstance(e, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text:
        return "oom", msg
    if isinstance(e, MemoryError):
        return "oom", msg
    return "crash", msg


# ---------------------------------------------------------------------------------------------------
# snapshot of the objects a candidate could replace


def _namespaces() -> dict[str, Any]:
    import kernelpro.harness.evaluate as me
    import kernelpro.harness.timing as tm

    spaces = {"torch": torch, "torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
              "torch.nn.functional": F, "torch.nn.Module": torch.nn.Module, "torch.testing": torch.testing,
              "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event, "torch.cuda.Stream": torch.cuda.Stream,
              "time": time, "builtins": builtins, "gc": gc, "threading": threading, "kernelpro.harness.evaluate": me,
              "kernelpro.harness.timing": tm, "json": json, "os": os}
    if hasattr(torch._C, "_CudaEventBase"):
        spaces["torch._C._CudaEventBase"] = torch._C._CudaEventBase
    if "triton.testing" in sys.modules:
        spaces["triton.testing"] = sys.modules["triton.testing"]
    return spaces


_TIMER_SPACES = {"time", "torch.cuda.Event", "torch._C._CudaEventBase", "kernelpro.harness.timing", "triton.testing"}
_TIMER_NAMES = {"synchronize", "Event", "current_stream", "default_stream", "elapsed_time", "perf_counter",
                "do_bench"}


def snapshot() -> dict[tuple[str, str], Any]:
    import inspect

    out = {}
    for label, ns in _namespaces().items():
        # classes: every attribute as resolved through the MRO, so a new override in a subclass counts
        items = ([(k, inspect.getattr_static(ns, k, None)) for k in dir(ns)] if isinstance(ns, type)
                 else list(vars(ns).items()))
        for k, v in items:
            if isinstance(v, types.ModuleType) or not (callable(v) or isinstance(v, classmethod | staticmethod)):
                continue
            out[(label, k)] = v
    return out


_TRUSTED_DIRS = tuple(str(Path(m.__file__).parent) for m in (torch,) if getattr(m, "__file__", None))


def _benign_change(new: Any) -> bool:
    """torch itself re-wraps a few functions lazily (dynamo's manual_seed, Module.__init__); allow those."""
    code = getattr(new, "__code__", None) or getattr(getattr(new, "__func__", None), "__code__", None)
    trusted = _TRUSTED_DIRS + tuple(str(Path(m.__file__).parent) for m in [sys.modules.get("triton")]
                                    if m is not None and getattr(m, "__file__", None))
    return code is not None and code.co_filename.startswith(trusted)


def compare_snapshot(before: dict[tuple[str, str], Any]) -> list[tuple[str, str]]:
    """[(check name, 'space.name')] for every object that was replaced or removed."""
    now = snapshot()
    out = []
    for key, old in before.items():
        new = now.get(key)
        if new is old:
            continue
        if new is not None and _benign_change(new):
            continue
        space, name = key
        kind = "patched_timer" if (space in _TIMER_SPACES or name in _TIMER_NAMES) else "patched_torch"
        out.append((kind, f"{space}.{name}" + (" removed" if new is None else "")))
    return out


def precision_flags() -> dict[str, Any]:
    m = torch.backends.cuda.matmul
    return {"matmul_tf32": m.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "fp32_precision": torch.get_float32_matmul_precision(),
            "fp16_reduced": m.allow_fp16_reduced_precision_reduction,
            "bf16_reduced": m.allow_bf16_reduced_precision_reduction}


def set_precision_policy(dtype: str) -> dict[str, Any]:
    """TF32 off for fp32 tasks (both sides); on for tf32 tasks; torch defaults otherwise."""
    if dtype == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    elif dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    return precision_flags()


def restore_precision(flags: dict[str, Any]) -> None:
    m = torch.backends.cuda.matmul
    m.allow_tf32 = flags["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = flags["cudnn_tf32"]
    torch.set_float32_matmul_precision(flags["fp32_precision"])
    m.allow_fp16_reduced_precision_reduction = flags["fp16_reduced"]
    m.allow_bf16_reduced_precision_reduction = flags["bf16_reduced"]


# ---------------------------------------------------------------------------------------------------
# tensors


def flatten(x: Any) -> list[Any]:
    if isinstance(x, list | tuple):
        return [y for item in x for y in flatten(item)]
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in flatten(x[k])]
    return [x]


def clone_tree(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, list | tuple):
        return type(x)(clone_tree(y) for y in x)
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items()}
    return x


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_POISON = {1: 255, 2: -1, 4: -1, 8: -1}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as an integer tensor of the same element size (contiguous copy if needed)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(_INT_OF_SIZE[t.element_size()])


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(bits(a), bits(b)))


def poison_mask(t: torch.Tensor) -> torch.Tensor:
    return bits(t) == _POISON[t.element_size()]


def poison_allocator(nbytes_list: list[int], device: str) -> None:
    """Leave freed blocks of exactly these sizes, filled with all-ones bytes, at the top of the allocator."""
    keep = []
    for _ in range(2):
        for n in nbytes_list:
            b = torch.empty(max(int(n), 1), dtype=torch.uint8, device=device)
            b.fill_(255)
            keep.append(b)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    del keep


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = storage_span(a), storage_span(b)
    return a1 > a0 and b1 > b0 and a0 < b1 and b0 < a1


def fingerprint(t: torch.Tensor) -> tuple:
    b = bits(t).flatten()
    return (tuple(t.shape), str(t.dtype), float(b.to(torch.float64).sum()), tuple(b[:16].tolist()),
            tuple(b[-16:].tolist()))


def error_stats(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, float]) -> dict[str, Any]:
    """Elementwise atol/rtol and relative-norm error, in float64; NaN/Inf and poison counted separately."""
    poison = poison_mask(out) & ~poison_mask(ref)
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    ref_finite = torch.isfinite(r)
    nonfinite = (~torch.isfinite(o)) & ref_finite & ~poison
    both = ref_finite & torch.isfinite(o)
    diff = torch.where(both, (o - r).abs(), torch.zeros_like(o))
    bad = (diff > tol["atol"] + tol["rtol"] * r.abs()) | (~torch.isfinite(o) & ref_finite)
    rn = torch.where(ref_finite, r, torch.zeros_like(r))
    denom = float(torch.linalg.vector_norm(rn)) or 1e-30
    rel = float(torch.linalg.vector_norm(diff)) / denom
    n = max(out.numel(), 1)
    return {"max_abs": float(diff.max()) if diff.numel() else 0.0, "rel_norm": rel,
            "mismatch": float(bad.sum()) / n, "poisoned": int(poison.sum()), "nonfinite": int(nonfinite.sum()),
            "ok": bool(rel <= tol["rel_norm"] and int(bad.sum()) == 0)}


# ---------------------------------------------------------------------------------------------------
# the evaluator


# Compilers and linkers a JIT (Triton, torch.utils.cpp_extension, inductor) runs on a first call at a new
# shape; anything else a candidate starts during a call is flagged.
_JIT_TOOLS = {"ptxas", "nvcc", "nvdisasm", "cuobjdump", "nvlink", "fatbinary", "cicc", "ninja", "c++", "g++",
              "gcc", "cc", "clang", "clang++", "ld", "ldconfig", "which"}


def _is_jit_tool(args: tuple) -> bool:
    try:
        exe = args[0] or (args[1][0] if isinstance(args[1], list | tuple) else str(args[1]).split()[0])
    except (IndexError, TypeError):
        return False
    return Path(os.fsdecode(exe)).name in _JIT_TOOLS


class _Audit:
    """A process-wide audit hook (installed once) that records interesting events while `armed`."""

    events: list[str] = []
    armed = False
    installed = False

    @classmethod
    def install(cls) -> None:
        if cls.installed:
            return

        def hook(event: str, args: tuple) -> None:
            if not cls.armed or not (event in _AUDIT_READ or event.startswith(_AUDIT_SPAWN)):
                return
            if event in ("subprocess.Popen", "os.posix_spawn", "os.exec") and _is_jit_tool(args):
                # Triton/torch JIT compile new specialisations by running ptxas/nvcc: allowed. subprocess
                # raises Popen and then, where it uses posix_spawn (Python 3.12 on Linux does), that too.
                return
            cls.events.append(event)

        sys.addaudithook(hook)
        cls.installed = True

    @classmethod
    @contextlib.contextmanager
    def watch(cls):
        cls.events = []
        cls.armed = True
        try:
            yield cls.events
        finally:
            cls.armed = False


def _op_recorder_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        """Names of the aten ops dispatched while active (cheaper than the profiler; no kernel names)."""

        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(func._schema.name)
            return func(*args, **(kwargs or {}))

    return OpRecorder


def _OpRecorder() -> Any:  # noqa: N802 - reads like the class it builds
    global _OP_RECORDER
    if _OP_RECORDER is None:
        _OP_RECORDER = _op_recorder_class()
    return _OP_RECORDER()


_OP_RECORDER: type | None = None


def _children_pids() -> set[int]:
    pids: set[int] = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


class Evaluator:
    def __init__(self, cfg: EvalConfig):
        self.cfg = cfg
        if cfg.task_suite == "kernelbench":
            # KernelBench files carry no META: its own tolerances come from the suite loader.
            from kernelpro.suites.kernelbench import kernelbench_task

            self.task: Task = kernelbench_task(cfg.task_path)
        else:
            self.task = load_task(cfg.task_path, suite=cfg.task_suite)
        self.device = cfg.device
        self.on_gpu = cfg.device.startswith("cuda")
        self.checks: dict[str, Check] = {}
        self.trials: list[dict[str, Any]] = []
        self.cand_path = str(Path(cfg.candidate_path).resolve())
        self.result: dict[str, Any] = {"schema": 1, "task": self.task.key, "candidate": self.cand_path,
                                       "device": cfg.device, "compiled": False, "correct": False,
                                       "correct_shown": None, "correct_heldout": None}
        self._ref_ops: dict[str, set[str]] = {}
        self._cand_warmed = False

    # -- verdict bookkeeping ----------------------------------------------------------------------
    def fail(self, name: str, detail: str) -> None:
        c = self.checks.get(name)
        if c is None or c.ok or c.severity == "warn":
            self.checks[name] = Check(name, False, detail, "fail")

    def warn(self, name: str, detail: str) -> None:
        if name not in self.checks:
            self.checks[name] = Check(name, True, detail, "warn")

    def passed(self, name: str) -> None:
        self.checks.setdefault(name, Check(name, True))

    def failed_names(self) -> list[str]:
        names = [c.name for c in self.checks.values() if not c.ok]
        return sorted(names, key=lambda n: PRIORITY.index(n) if n in PRIORITY else len(PRIORITY))

    # -- setup ------------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    def _empty_cache(self) -> None:
        gc.collect()
        if self.on_gpu:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def _task_module(self, size: dict[str, Any]) -> Any:
        mod = import_module_from(self.task.path, f"kp_task_{os.getpid()}_{abs(hash(json.dumps(size, sort_keys=True)))}")
        mod.__dict__.update(size)
        return mod

    def _inputs(self, mod: Any, seed: int) -> list[Any]:
        torch.manual_seed(seed)
        random.seed(seed)
        with torch.device(self.device):
            xs = list(mod.get_inputs())
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in xs]

    def _models(self, mod: Any, cand_mod: Any, seed: int) -> tuple[Any, Any]:
        with torch.device(self.device):
            init = list(mod.get_init_inputs())
            torch.manual_seed(seed)
            ref = mod.Model(*init).to(self.device)
            torch.manual_seed(seed)
            cand = cand_mod.ModelNew(*init)
            if isinstance(cand, torch.nn.Module):
                cand = cand.to(self.device)
        return ref, cand

    # -- running the candidate under watch ----------------------------------------------------------
    def _run_candidate(self, model: Any, args: list[Any], *, profile: bool = False,
                       audited: bool = True) -> tuple[Any, dict[str, Any]]:
        """Call the candidate once with every runtime check armed; returns (output, observations)."""
        obs: dict[str, Any] = {"swallowed": [], "audit": [], "ops": set(), "kernels": [], "other_stream": []}
        threads_before = set(threading.enumerate())
        children_before = _children_pids()
        stream_before = torch.cuda.current_stream() if self.on_gpu else None
        swallowed: list[str] = obs["swallowed"]
        cand_file = self.cand_path

        def local(frame, event, arg):
            if event == "exception" and not issubclass(arg[0], StopIteration | GeneratorExit):
                swallowed.append(f"{arg[0].__name__} at line {frame.f_lineno}")
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code.co_filename == cand_file else None

        prof = None
        marker = None
        recorder = None
        if profile and not self.on_gpu:
            recorder = _OpRecorder()
            recorder.__enter__()
        elif profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as _profile

            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_gpu else [])
            prof = _profile(activities=acts)
            prof.__enter__()
            if self.on_gpu:
                marker = torch.empty(1, device=self.device)
                marker.fill_(1.0)  # a kernel on the caller's stream: its profiler stream id is "ours"
        out = None
        err: BaseException | None = None
        old_trace = sys.gettrace()
        try:
            with _Audit.watch() as events:
                sys.settrace(tracer)
                try:
                    # The range marks the candidate's own call: only ops and kernels launched inside it
                    # are the candidate's (the harness's checks after it, e.g. snapshot clones, are not).
                    with torch.no_grad(), torch.profiler.record_function(CANDIDATE_RANGE):
                        out = model(*args)
                finally:
                    sys.settrace(old_trace)
                    if recorder is not None:
                        recorder.__exit__(None, None, None)
                        obs["ops"] = set(recorder.ops)
                        recorder = None
                obs["audit"] = list(events) if audited else []
        except BaseException as e:  # noqa: BLE001 - anything escaping candidate code is its failure
            err = e
        new_threads = [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
        if err is None and out is not None:
            self._async_checks(out, stream_before, obs)
        try:
            self._sync()
        except BaseException as e:  # noqa: BLE001
            err = err or e
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
                if err is None:
                    self._read_profile(prof, obs)
            except Exception as e:  # noqa: BLE001 - a profiler failure is ours, not the candidate's
                self.warn("profiler", f"profiler failed: {type(e).__name__}: {e}"[:200])
        if recorder is not None:  # the call raised before the recorder could be closed
            recorder.__exit__(None, None, None)
            obs["ops"] = set(recorder.ops)
        if err is not None:
            name, detail = classify_exception(err)
            raise CandidateFailure(name, detail)
        obs["new_threads"] = [t.name for t in new_threads] if audited else []
        obs["new_children"] = sorted(_children_pids() - children_before) if audited else []
        obs["candidate_threads"] = self._threads_running_candidate_code()
        return out, obs

    def _threads_running_candidate_code(self) -> list[str]:
        names = {t.ident: t.name for t in threading.enumerate()}
        me = threading.get_ident()
        hits = []
        for tid, frame in sys._current_frames().items():
            if tid == me:
                continue
            f = frame
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
        # A kernel belongs to the candidate when the host call that launched it (same correlation id)
        # ran inside the candidate's range, whatever thread or stream it used.
        launched_at = {ev.get("args", {}).get("correlation"): ev.get("ts", 0) for ev in events
                       if ev.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in ev.get("args", {})}
        kernels = sorted((ev for ev in events if ev.get("cat") == "kernel"), key=lambda ev: ev.get("ts", 0))
        mine = [ev for ev in kernels if inside(launched_at.get(ev.get("args", {}).get("correlation"), lo))]
        ours = None
        for ev in kernels:
            if "fill" in ev.get("name", "").lower():
                ours = ev.get("args", {}).get("stream")
                break
        names = []
        for ev in mine:
            stream = ev.get("args", {}).get("stream")
            names.append(ev.get("name", ""))
            if ours is not None and stream != ours:
                obs["other_stream"].append(f"kernel {ev.get('name', '')[:60]} on stream {stream} (caller's: {ours})")
        obs["kernels"] = names

    def _judge_observations(self, obs: dict[str, Any], ctx: str) -> None:
        if obs.get("other_stream"):
            self.fail("other_stream", f"{ctx}: {obs['other_stream'][0]}")
        if obs.get("late_writes"):
            self.fail("async_leftover", f"{ctx}: output {obs['late_writes'][0]} changed after the caller's stream completed")
        reads = [e for e in obs.get("audit", []) if e in _AUDIT_READ]
        if reads:
            self.fail("reads_reference_output", f"{ctx}: candidate called {reads[0]} during forward")
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
        hits = sorted(o for o in obs.get("ops", set()) if o in self.task.forbid_ops)
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
    def import_candidate(self) -> Any:
        t0 = _perf_counter()
        with _Audit.watch():
            try:
                mod = import_module_from(Path(self.cand_path), f"kp_candidate_{os.getpid()}")
            except BaseException as e:  # noqa: BLE001 - whatever the candidate raises at import
                name, detail = classify_exception(e)
                if name != "oom":
                    name = "compile_error"
                raise CandidateFailure(name, detail) from None
        self.result["compile_s"] = _perf_counter() - t0
        if not hasattr(mod, "ModelNew"):
            raise CandidateFailure("compile_error", "the candidate defines no ModelNew")
        return mod

    def run(self) -> dict[str, Any]:
        t_start = _perf_counter()
        try:
            self._run()
        except CandidateFailure as f:
            self.fail(f.name, f.detail)
        except Exception as e:  # noqa: BLE001 - a bug of ours must still produce a result record
            self.fail("crash", f"evaluator error: {type(e).__name__}: {e}"[:300])
            self.result["evaluator_traceback"] = traceback.format_exc()[-2000:]
        self.result["wall_s"] = _perf_counter() - t_start
        return self.finish()

    def finish(self) -> dict[str, Any]:
        failed = self.failed_names()
        r = self.result
        r["checks"] = [c.to_dict() for c in self.checks.values()]
        r["failed_checks"] = failed
        r["warnings"] = [c.name for c in self.checks.values() if c.severity == "warn"]
        r["reason"] = failed[0] if failed else None
        r["detail"] = self.checks[failed[0]].detail if failed else ""
        r["ok"] = not failed
        r["status"] = "passed" if not failed else "failed"
        r["correctness"] = self.trials
        if failed and r.get("correct"):
            r["correct"] = False  # an anti-gaming failure voids correctness
        return r

    def _run(self) -> None:
        _Audit.install()
        cfg, task = self.cfg, self.task
        self.result["dtype"] = task.dtype
        self.result["precision"] = set_precision_policy(task.dtype)
        if self.on_gpu:
            self.result["gpu"] = torch.cuda.get_device_name()
        self.result["torch"] = torch.__version__
        policy = precision_flags()
        before = snapshot()
        cand_mod = self.import_candidate()
        self.result["compiled"] = True
        self._check_identity(before, "import")
        self._check_precision(policy, "import")

        sizes = [("default", s) for s in task.sizes("default")]
        if cfg.sizes in ("shown", "all"):
            sizes += [("shown", s) for s in task.sizes("shown")]
        if cfg.sizes in ("heldout", "all"):
            sizes += [("heldout", s) for s in task.sizes("heldout")]
        if cfg.sizes == "default":
            sizes = sizes[:1]
        ok_by_which: dict[str, bool] = {}
        trials = 1 if cfg.check_only else max(1, cfg.trials)
        for which, size in sizes:
            ok = self._check_size(cand_mod, which, size, trials, before, policy)
            ok_by_which[which] = ok_by_which.get(which, True) and ok
        self.result["correct_shown"] = ok_by_which.get("shown", ok_by_which.get("default"))
        self.result["correct_heldout"] = ok_by_which.get("heldout")
        self.result["correct"] = all(ok_by_which.values()) and not self.failed_names()
        if cfg.check_only or not self.result["correct"]:
            return
        if cfg.timing:
            self._time(cand_mod, before, policy)

    def _check_identity(self, before: dict, ctx: str) -> None:
        for name, what in compare_snapshot(before):
            self.fail(name, f"{ctx}: {what} was replaced")

    def _check_precision(self, policy: dict[str, Any], ctx: str) -> None:
        now = precision_flags()
        changed = [k for k in PRECISION_FLAGS if now[k] != policy[k]]
        if changed:
            self.fail("lower_precision", f"{ctx}: candidate changed precision flags {changed}")
            restore_precision(policy)

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
        del probe_out
        all_ok = True
        prev: list[tuple] = []
        for trial in range(trials):
            seed = _sysrandom.randrange(2**31)
            order = "ref_first" if trial % 2 == 0 else "cand_first"
            ctx = f"{label} seed={seed} {order}"
            inputs = self._inputs(mod, seed)
            pristine = clone_tree(inputs)
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
            self.trials.append(rec)
            all_ok &= rec["ok"]
            self._check_identity(before, ctx)
            self._check_precision(policy, ctx)
            del out, ref_out, cand_args
        all_ok &= self._order_and_reuse_probes(mod, ref_model, cand_model, specs, label)
        all_ok &= self._cache_probe(mod, ref_model, cand_model, label)
        if self.task.forbid_ops:
            self._forced_path_probe(mod, ref_model, cand_model, label)
        return all_ok

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
        out1, _ = self._run_candidate(cand_model, a)
        first = [t.clone() for t in flatten(out1) if type(t) is _Tensor]
        for x, y in zip(a, b, strict=True):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.copy_(y)
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

        forbidden = set(self.task.forbid_ops)
        # Only the candidate's own call is probed: the harness's checks around it (output snapshots
        # are clones) may use any op, forbidden or not.
        inside = [False]

        class Forbid(TorchDispatchMode):
            hit: str | None = None

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = f"aten::{func._schema.name.split('::')[-1]}"
                if inside[0] and name in forbidden:
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
    def _time(self, cand_mod: Any, before: dict, policy: dict[str, Any]) -> None:
        cfg, task = self.cfg, self.task
        size = task.sizes("default")[0]
        mod = self._task_module(size)
        seed, model_seed = _sysrandom.randrange(2**31), _sysrandom.randrange(2**31)
        ref_model, cand_model = self._models(mod, cand_mod, model_seed)
        inputs = self._inputs(mod, seed)
        cin, rin = clone_tree(inputs), clone_tree(inputs)
        last: dict[str, Any] = {}

        def cand() -> None:
            with torch.no_grad():
                last["out"] = cand_model(*cin)

        fns: dict[str, Any] = {"candidate": cand}
        notes: dict[str, str] = {}
        for b in cfg.baselines:
            try:
                fn = self._baseline(b, ref_model, rin)
                fn()  # a baseline that fails must fail here, not be blamed on the candidate mid-timing
                self._sync()
                fns[b] = fn
            except Exception as e:  # noqa: BLE001 - a baseline that cannot be built is reported, not fatal
                notes[b] = f"unavailable: {type(e).__name__}: {str(e)[:120]}"
        rivals = self._rivals(mod, model_seed, inputs, ref_model, notes)
        fns.update(rivals)
        try:
            stats, tnotes = _timing.time_interleaved(fns, self.device, warmup_ms=cfg.warmup_ms, rep_ms=cfg.rep_ms,
                                                     graphs=cfg.graphs)
        except BaseException as e:  # noqa: BLE001
            name, detail = classify_exception(e)
            raise CandidateFailure(name, f"during timing: {detail}") from None
        notes.update(tnotes)
        self.result["timing"] = {"size": size, "stats": {k: v.to_dict() for k, v in stats.items()}, "notes": notes,
                                 "l2_flush": self.on_gpu, "graphs": cfg.graphs}
        cm = stats["candidate"].median_ms
        self.result["speedup"] = {k: v.median_ms / cm for k, v in stats.items()
                                  if k != "candidate" and k not in rivals and cm > 0}
        if rivals:
            # ratio > 1: the candidate is faster than that rival in this same interleaved run
            self.result["rivals"] = {k: {"path": next(r["path"] for r in cfg.rivals if r["label"] == k),
                                         "ratio": stats[k].median_ms / cm if cm > 0 else None}
                                     for k in rivals}
        self._check_identity(before, "timing")
        self._check_precision(policy, "timing")
        # the output of the last timed call must still be right (timed inputs unchanged, result correct)
        with torch.no_grad():
            ref_out = ref_model(*clone_tree(inputs))
        self._sync()
        self._check_outputs(last["out"], ref_out, cin, inputs, "last timed call")
        self._speed_of_light(size, cm)
        # re-check on inputs the candidate cannot have seen: the seed is drawn only now
        recheck_seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        rin2 = self._inputs(mod, recheck_seed)
        pristine = clone_tree(rin2)
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
        if cfg.energy and self.on_gpu:
            from kernelpro.harness.energy import measure_energy

            try:
                self.result["energy"] = measure_energy(fns, {k: v.median_ms for k, v in stats.items()},
                                                       torch.cuda.current_device())
            except Exception as e:  # noqa: BLE001 - NVML missing or refused: say so, keep the run
                self.result["energy"] = {"error": f"{type(e).__name__}: {e}"[:200]}

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
                _, model = self._models(mod, rmod, model_seed)
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
            outs, refs = flatten(got), flatten(ref_out)
            if len(outs) != len(refs) or not all(
                    isinstance(o, torch.Tensor) and o.shape == t.shape and error_stats(o, t, self.task.tolerance)["ok"]
                    for o, t in zip(outs, refs, strict=True) if isinstance(t, torch.Tensor)):
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
        raise ValueError(f"unknown baseline {name!r} (eager, compile, vendor)")

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


def source_warnings(source: str) -> list[str]:
    """Hints from the source text; never a verdict on their own."""
    hints = []
    if re.search(r"\bexcept\b", source):
        hints.append("source has try/except (fallbacks are checked at run time)")
    if re.search(r"\b(threading|multiprocessing|subprocess|concurrent\.futures)\b", source):
        hints.append("source imports threading/multiprocessing/subprocess")
    if re.search(r"gc\.get_objects|inspect\.stack|sys\._getframe", source):
        hints.append("source inspects the interpreter (gc/frames)")
    return hints


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    ev = Evaluator(cfg)
    r = ev.run()
    try:
        r["source_warnings"] = source_warnings(Path(cfg.candidate_path).read_text())
    except OSError:
        r["source_warnings"] = []
    return r


def clean_for_json(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): clean_for_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set):
        return [clean_for_json(v) for v in x]
    return x
