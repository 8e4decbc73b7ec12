"""The one way KernelPro starts a process that imports or runs candidate code.

Every such launch (the evaluation worker, the static capture of a candidate's extensions, the agent's
precompile, the ncu pass, the PyTorch-profiler system view) goes through `run`, so what holds for one
holds for all:

- a private temp dir (TMPDIR), removed afterwards;
- a new process session, so a timeout or a Ctrl-C in the parent kills the whole process group, the
  candidate's own children included (`subprocess.run`'s timeout kills only the direct child);
- a wall-clock limit, after which the group is killed and `Finished.timed_out` is set;
- an optional address-space cap (RLIMIT_AS through util-linux `prlimit`, inside the isolation wrapper
  so it binds the candidate's process and not the wrapper; a preexec hook is not safe in the threaded
  pool);
- GPU pinning through `CUDA_VISIBLE_DEVICES`;
- the isolation layer (`isolation.py`): namespaces that take away the network and make everything but
  the launch's own writable folders read-only, where the machine allows it. What was applied is returned
  in `Finished.isolation` and recorded with every result.

A test (tests/test_sandbox.py) fails when a process is started anywhere else in the package, unless the
call site is on its list of launches of trusted tools only (compilers, disassemblers, `--version`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

# GPU pinning: None inherits the parent's devices; NO_GPU hides every device.
NO_GPU = -1


@dataclass(frozen=True)
class Finished:
    """How a sandboxed process ended. `rc` is the exit status (negative: killed by that signal)."""

    rc: int
    timed_out: bool
    wall_s: float
    stdout: str = ""
    stderr: str = ""
    isolation: dict[str, Any] = field(default_factory=dict)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def run(cmd: Sequence[str], *, timeout_s: float, cwd: str | Path | None = None,
        env: dict[str, str] | None = None, gpu: int | None = None, mem_bytes: int | None = None,
        writable: Sequence[str | Path] = (), stdout: IO[bytes] | None = None,
        stdin_text: str | None = None, counters: bool = False,
        binds: Sequence[tuple[str | Path, str | Path]] = ()) -> Finished:
    """Run untrusted `cmd` to completion or to `timeout_s`, whichever comes first.

    Output is captured as text unless `stdout` (a binary file) is given, in which case stdout and
    stderr both go there. `writable` lists the folders the process may write besides its own private
    temp dir (the isolation layer enforces it where it can). `counters` keeps the capabilities a
    profiler needs to read GPU performance counters (ncu). `binds` shows each (private source) folder at
    its (shared target) path, writes landing in the source (needs `isolation.can_bind()`). Never raises for what the process does;
    raises OSError only when the command itself cannot be started."""
    from kernelpro import isolation

    full_env = dict(os.environ if env is None else env)
    private_tmp = Path(tempfile.mkdtemp(prefix="kp-sandbox-"))
    full_env["TMPDIR"] = str(private_tmp)
    writable = [*writable, private_tmp]
    if gpu is not None:
        full_env["CUDA_VISIBLE_DEVICES"] = "" if gpu == NO_GPU else str(gpu)
    inner = list(cmd)
    if mem_bytes:
        inner = [shutil.which("prlimit") or "prlimit", f"--as={int(mem_bytes)}", "--", *inner]
    wrapped, applied = isolation.wrap(inner, cwd=Path(cwd) if cwd else None,
                                      writable=[Path(w) for w in writable], env=full_env, counters=counters,
                                      binds=[(Path(a), Path(b)) for a, b in binds])
    t0 = time.monotonic()
    capture = stdout is None
    proc = subprocess.Popen(wrapped, cwd=str(cwd) if cwd else None, env=full_env, start_new_session=True,
                            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE if capture else stdout,
                            stderr=subprocess.PIPE if capture else subprocess.STDOUT)
    timed_out = False
    out: bytes | None = b""
    err: bytes | None = b""
    try:
        out, err = proc.communicate(input=stdin_text.encode() if stdin_text is not None else None,
                                    timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    except BaseException:
        _kill_group(proc)  # Ctrl-C in the parent must not leave a candidate holding the GPU
        proc.wait()
        shutil.rmtree(private_tmp, ignore_errors=True)
        raise
    # The leader exited; anything it left behind in its group (daemonized children) goes too.
    _kill_group(proc)
    shutil.rmtree(private_tmp, ignore_errors=True)
    rc = proc.returncode
    if applied.get("mode") == "bwrap" and 128 < rc < 128 + 65:
        rc = -(rc - 128)  # bwrap forwards a signal death as exit 128+N; report it as the signal, like Popen
    return Finished(rc=rc, timed_out=timed_out, wall_s=time.monotonic() - t0,
                    stdout=(out or b"").decode(errors="replace"), stderr=(err or b"").decode(errors="replace"),
                    isolation=applied)
