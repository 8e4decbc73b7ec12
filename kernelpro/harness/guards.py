"""Guards around the candidate's calls: identity snapshot of the objects it could replace, the precision
policy, the audit hook (heap reads, process spawns), the aten op recorder and the rules for which
helper processes a JIT may start."""

from __future__ import annotations

import builtins
import contextlib
import gc
import json
import os
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

PRECISION_FLAGS = ("matmul_tf32", "cudnn_tf32", "fp32_precision", "fp16_reduced", "bf16_reduced")

_AUDIT_READ = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_AUDIT_SPAWN = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "subprocess.Popen",
                "pty.spawn")


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
    import kernelpro.harness.checks as ck
    import kernelpro.harness.energy as en
    import kernelpro.harness.evaluate as me
    import kernelpro.harness.guards as gd
    import kernelpro.harness.telemetry as tl
    import kernelpro.harness.tensors as tn
    import kernelpro.harness.timed as td
    import kernelpro.harness.timing as tm

    spaces = {"torch": torch, "torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
              "torch.nn.functional": F, "torch.nn.Module": torch.nn.Module, "torch.testing": torch.testing,
              "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event, "torch.cuda.Stream": torch.cuda.Stream,
              "time": time, "builtins": builtins, "gc": gc, "threading": threading, "kernelpro.harness.evaluate": me,
              "kernelpro.harness.timing": tm, "kernelpro.harness.guards": gd, "kernelpro.harness.tensors": tn,
              "kernelpro.harness.checks": ck, "kernelpro.harness.timed": td,
              "kernelpro.harness.telemetry": tl, "kernelpro.harness.energy": en, "json": json, "os": os}
    if hasattr(torch._C, "_CudaEventBase"):
        spaces["torch._C._CudaEventBase"] = torch._C._CudaEventBase
    if "triton.testing" in sys.modules:
        spaces["triton.testing"] = sys.modules["triton.testing"]
    return spaces


_TIMER_SPACES = {"time", "torch.cuda.Event", "torch._C._CudaEventBase", "kernelpro.harness.timing", "kernelpro.harness.timed",
                 "kernelpro.harness.telemetry", "kernelpro.harness.energy",
                 "triton.testing"}
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
