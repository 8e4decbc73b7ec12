"""Namespaces around candidate processes, from existing tools: bubblewrap where installed, else
util-linux `unshare`.

Modes (`KERNELPRO_ISOLATION`, default `auto`: the strongest that works on this machine):
- `bwrap`: no network (`--unshare-net`), the whole filesystem read-only, except the launch's private
  temp dir (its TMPDIR) and the folders it names as writable (its working folder is not writable
  unless named); /dev is bound through so the GPU stays usable;
- `unshare`: no network (a new user + network namespace); the filesystem is not restricted;
- `none`: a process session only. `kernelpro doctor` and every result record say which mode ran.

A mode is used only after a probe run of `true` under it succeeds, so a machine that forbids
unprivileged namespaces degrades to the next mode instead of failing every candidate.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

MODES = ("bwrap", "unshare", "none")


def _works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd + ["true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False  # the tool is missing or hangs: that mode is unavailable


def _bwrap_prefix(writable: list[Path], counters: bool = False,
                  binds: list[tuple[Path, Path]] | None = None) -> list[str]:
    exe = shutil.which("bwrap") or "bwrap"
    args = [exe, "--die-with-parent", "--unshare-net", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev",
            "--proc", "/proc"]
    if counters and os.geteuid() == 0:
        # GPU performance counters need CAP_SYS_ADMIN where the driver restricts profiling to admins.
        args += ["--cap-add", "CAP_SYS_ADMIN"]
    for w in writable:
        args += ["--bind", str(w), str(w)]
    for src, dst in binds or []:   # a private folder seen at a shared path (last bind wins)
        args += ["--bind", str(src), str(dst)]
    return args + ["--"]


def _unshare_prefix() -> list[str]:
    # As real root a network namespace needs no user namespace, and keeping the real credentials keeps
    # the GPU's device files and counters usable; otherwise map the caller to root in a new user namespace.
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [shutil.which("unshare") or "unshare", *user, "--net", "--"]


@functools.cache
def available() -> dict[str, bool]:
    """Which modes work here (each probed once per process)."""
    return {"bwrap": bool(shutil.which("bwrap")) and _works(_bwrap_prefix([])),
            "unshare": bool(shutil.which("unshare")) and _works(_unshare_prefix()),
            "none": True}


def selected() -> tuple[str, str]:
    """(mode, why) for this process, from KERNELPRO_ISOLATION."""
    want = os.environ.get("KERNELPRO_ISOLATION", "auto").strip().lower() or "auto"
    if want not in (*MODES, "auto"):
        raise KernelProError(f"KERNELPRO_ISOLATION={want!r} is not one of auto, {', '.join(MODES)}")
    have = available()
    if want == "auto":
        mode = next(m for m in MODES if have[m])
        why = "strongest available" + ("" if mode == "bwrap" else "; install bubblewrap for a read-only filesystem")
        return mode, why
    if not have[want]:
        raise KernelProError(f"KERNELPRO_ISOLATION={want} but it does not work on this machine; "
                             f"available: {', '.join(m for m in MODES if have[m])}")
    return want, "requested"


def describe(mode: str) -> dict[str, Any]:
    return {"mode": mode, "network": "on" if mode == "none" else "off",
            "filesystem": "read-only except own folders" if mode == "bwrap" else "unrestricted"}


def can_bind() -> bool:
    """Whether the selected mode can show a private folder at another path (`wrap(binds=...)`)."""
    return selected()[0] == "bwrap"


def wrap(cmd: list[str], *, cwd: Path | None, writable: list[Path], env: dict[str, str],
         counters: bool = False, binds: list[tuple[Path, Path]] | None = None) -> tuple[list[str], dict]:
    """`cmd` prefixed for the selected mode, and what that mode applies. `binds` (source, target) pairs
    need `can_bind()`; other modes refuse them."""
    mode, why = selected()
    info = {**describe(mode), "why": why}
    if binds and mode != "bwrap":
        raise ValueError(f"isolation mode {mode} cannot bind folders; check can_bind() first")
    if binds:
        info["binds"] = [f"{s} -> {d}" for s, d in binds]
    if mode == "bwrap":
        dirs = [p for p in set(writable) if p.exists()]
        return _bwrap_prefix(sorted(dirs), counters, binds) + cmd, info
    if mode == "unshare":
        return _unshare_prefix() + cmd, info
    return cmd, info
