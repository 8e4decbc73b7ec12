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


_INTERPRETER = ("python", "pypy", "sh", "bash", "dash", "zsh", "ksh", "fish", "perl", "ruby", "node", "busybox",
                "env", "lua", "tclsh", "php")


def _exe_of(args: tuple) -> str | None:
    try:
        exe = args[0] or (args[1][0] if isinstance(args[1], list | tuple) else str(args[1]).split()[0])
    except (IndexError, TypeError):
        return None
    return os.fsdecode(exe)


def _resolve(exe: str) -> str:
    """The real file a command names: PATH lookup for a bare name, then every symlink followed."""
    import shutil

    found = exe if os.sep in exe else (shutil.which(exe) or exe)
    return os.path.realpath(found)


_SYSTEM_BIN = ("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/local/bin/")


def _env_bins() -> tuple[str, ...]:
    """The bin folders of the running interpreter's own environment (a venv's, and its base's): pip puts
    tools such as ninja there as small Python launcher scripts. They are installed before the run and are
    not writable by the candidate (the sandbox leaves only its private folders writable), so a script
    there is as trustworthy as one in /usr/bin."""
    import sysconfig

    dirs = {os.path.join(p, "bin") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    scripts = sysconfig.get_path("scripts")
    if scripts:
        dirs.add(scripts)
    return tuple(os.path.realpath(d) + os.sep for d in sorted(dirs))
# Where a candidate can create files (its temp dir, working folder, caches): nothing run from there is a
# compiler, whatever its name.
_WRITABLE_ENV = ("TMPDIR", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH")


def _candidate_writable_roots() -> list[str]:
    roots = ["/tmp/", "/var/tmp/", "/dev/shm/", os.path.realpath(os.getcwd()) + os.sep]
    roots += [os.path.realpath(os.environ[k]) + os.sep for k in _WRITABLE_ENV if os.environ.get(k)]
    roots += [os.path.dirname(f) + os.sep for f in _Audit.candidate_files]
    return roots


def _is_jit_tool(args: tuple) -> bool:
    """A JIT compiler/linker by name AND by what it really is: the real executable (symlinks followed) is
    not an interpreter, does not live where the candidate can write, and is not a script outside the
    system's bin folders (a Python symlinked or copied as `cc`, or a `#!/usr/bin/python3` file named
    `ptxas`, is not a compiler)."""
    exe = _exe_of(args)
    if exe is None or Path(exe).name not in _JIT_TOOLS:
        return False
    real = _resolve(exe)
    base = os.path.basename(real).lower()
    if any(base == i or base.startswith((i + ".", i + "2", i + "3")) for i in _INTERPRETER):
        return False
    if any(real.startswith(r) for r in _candidate_writable_roots()):
        return False
    try:
        with open(real, "rb") as f:
            head = f.read(4)
    except OSError:
        return False  # cannot be read: cannot be vouched for
    if head.startswith(b"#!") and not real.startswith(_SYSTEM_BIN + _env_bins()):
        return False
    return True


def foreign_threads(threads: list[threading.Thread]) -> list[threading.Thread]:
    """The new threads that count against the candidate: all of them except those whose entry point is
    code of the installed torch package (inductor's compile-worker timer, started when the harness's own
    `compile` baseline runs). A thread that runs candidate code is caught by the frame scan whatever
    started it, so a torch entry point cannot be used to hide one."""
    try:
        import torch

        torch_dir = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
    except ImportError:   # no torch: nothing can be torch's
        return list(threads)
    out = []
    for t in threads:
        fn = getattr(t, "_target", None) or getattr(t, "function", None)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        origin = os.path.realpath(code.co_filename) if code is not None else ""
        if fn is not None and origin.startswith(torch_dir) \
                and not any(origin.startswith(r) for r in _candidate_writable_roots()):
            continue
        out.append(t)
    return out


# Frames reached through these are the harness's: a candidate walking to the timing loop's locals (or to
# the checks' state) reaches them through sys._getframe, a traceback's or generator's frame.
_AUDIT_FRAMES = {"sys._getframe", "sys._current_frames"}
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
_STDLIB = tuple({os.path.dirname(os.__file__)})


# Standard-library helpers that fetch a frame on behalf of their caller (inspect.currentframe/stack,
# traceback.extract_stack/print_exc); collections, enum, typing and logging also call sys._getframe, for
# their own bookkeeping, and are not counted.
_FRAME_HELPERS = {"inspect.py", "traceback.py"}


def _frame_requester(depth: int = 2) -> str | None:
    """File of the code that asked for a frame: the direct caller of the audited call, or the caller of
    inspect/traceback when they made it."""
    f = sys._getframe(depth)
    while f is not None and f.f_code.co_filename.startswith(_STDLIB) and \
            os.path.basename(f.f_code.co_filename) in _FRAME_HELPERS:
        f = f.f_back
    return f.f_code.co_filename if f is not None else None


# Writes by the candidate's own code outside its private folders (temp dir, working folder, JIT caches):
# the run store, other candidates' builds, task files. The sandbox makes them fail where bubblewrap runs;
# this names the attempt in every isolation mode.
_AUDIT_WRITE = {"open", "os.remove", "os.rename", "os.symlink", "os.link", "os.truncate", "shutil.rmtree",
                "os.rmdir", "os.mkdir", "os.chmod"}


def _write_target(event: str, args: tuple) -> str | None:
    if not args:
        return None
    if event == "open":
        path, mode = args[0], args[1] if len(args) > 1 else "r"
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(flags & (os.O_WRONLY | os.O_RDWR))
        if not writing or not isinstance(path, str | bytes):
            return None
    else:
        path = args[1] if event in ("os.rename", "os.symlink", "os.link") and len(args) > 1 else args[0]
        if not isinstance(path, str | bytes | os.PathLike):
            return None
    return os.path.realpath(os.fsdecode(path))


def _private_roots() -> list[str]:
    roots = [os.path.realpath(os.environ[k]) + os.sep for k in _WRITABLE_ENV if os.environ.get(k)]
    return roots + [os.path.realpath(os.getcwd()) + os.sep, "/dev/"]


def _code_outside_stdlib(depth: int = 2) -> str | None:
    """File of the innermost frame that is not the standard library (pathlib, shutil and io write on
    behalf of their caller)."""
    f = sys._getframe(depth)
    while f is not None and (f.f_code.co_filename.startswith(_STDLIB) and "site-packages" not in f.f_code.co_filename
                             or f.f_code.co_filename.startswith("<frozen")):
        f = f.f_back
    return f.f_code.co_filename if f is not None else None


def _is_compile_worker(args: tuple) -> bool:
    """torch.compile's own compile-worker pool (the interpreter running torch._inductor's module)."""
    argv = args[1] if len(args) > 1 and isinstance(args[1], list | tuple) else []
    return any(str(a).startswith("torch._inductor.compile_worker") for a in argv)


class _Audit:
    """A process-wide audit hook (installed once) that records interesting events while `armed`."""

    events: list[str] = []
    armed = False
    candidate_files: set[str] = set()   # frame access is judged only when the candidate's code asks
    installed = False

    @classmethod
    def install(cls) -> None:
        if cls.installed:
            return

        busy = [False]

        def hook(event: str, args: tuple) -> None:
            if not cls.armed:
                return
            if event in _AUDIT_FRAMES or (event == "object.__getattr__" and len(args) > 1
                                          and args[1] in _FRAME_ATTRS):
                if busy[0] or not cls.candidate_files:
                    return
                busy[0] = True   # the hook's own sys._getframe raises this event again
                try:
                    caller = _frame_requester(2)
                finally:
                    busy[0] = False
                if caller in cls.candidate_files:
                    cls.events.append(f"{event}" + (f" .{args[1]}" if event == "object.__getattr__" else ""))
                return
            if event in _AUDIT_WRITE:
                if busy[0] or not cls.candidate_files:
                    return
                target = _write_target(event, args)
                if target is None:
                    return
                busy[0] = True
                try:
                    caller = _code_outside_stdlib(2)
                finally:
                    busy[0] = False
                if caller in cls.candidate_files and not any(target.startswith(r) for r in _private_roots()):
                    cls.events.append(f"write {event} {target[:120]}")
                return
            if not (event in _AUDIT_READ or event.startswith(_AUDIT_SPAWN)):
                return
            if event in ("subprocess.Popen", "os.posix_spawn", "os.exec") and (_is_jit_tool(args)
                                                                                or _is_compile_worker(args)):
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
            self.recording = True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.recording:
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


def op_family(name: str) -> str:
    """The family an aten op belongs to, whatever its spelling: `aten::addmm_`, `aten::addmm.out`,
    `addmm.default` and `aten::_addmm_activation`... each normalise by overload and in-place/out
    variant (`aten::addmm_` -> `aten::addmm`), so a forbid list names families, not spellings."""
    n = name.strip()
    if "::" not in n:
        n = "aten::" + n
    ns, base = n.split("::", 1)
    base = base.split(".", 1)[0]          # overloads: .out, .default, .Tensor, .Scalar
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]                  # in-place variant
    if base.endswith("_out"):
        base = base[: -len("_out")]
    return f"{ns}::{base}"


def forbidden_families(forbid: tuple[str, ...] | list[str] | set[str]) -> set[str]:
    return {op_family(o) for o in forbid}
