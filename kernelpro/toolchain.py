"""Find the CUDA tools and the GPU; `kernelpro doctor` prints what was found and what each gap disables."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kernelpro.errors import KernelProError

# What each tool enables, for `doctor` and for the one-line error when it is missing.
TOOLS = {
    "nvcc": "compiling CUDA candidates (verify, bench)",
    "ptxas": "assembling raw .ptx candidates and resource reports",
    "cuobjdump": "SASS analysis (feature 'emitted' evidence)",
    "nvdisasm": "SASS control flow (optional; cuobjdump suffices)",
    "ncu": "hardware-counter profiling and executed-instruction evidence",
    "compute-sanitizer": "memcheck/racecheck mode",
}


def _wheel_bin_dirs() -> list[Path]:
    """bin/ folders of NVIDIA's PyPI CUDA wheels (nvidia-cuda-cuobjdump etc.)."""
    try:
        import nvidia  # namespace package from the nvidia-* wheels
    except ImportError:
        return []
    dirs = []
    for root in getattr(nvidia, "__path__", []):
        for sub in sorted(Path(root).glob("*/bin")):
            dirs.append(sub)
    return dirs


def _cuda_homes() -> list[Path]:
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    return [Path(h) for h in homes if h] + [Path("/usr/local/cuda")]


@functools.cache
def find_tool(name: str) -> Path | None:
    """PATH first, then $CUDA_HOME/bin, then NVIDIA's wheels, then Nsight Compute's usual folders."""
    hit = shutil.which(name)
    if hit:
        return Path(hit)
    candidates = [h / "bin" / name for h in _cuda_homes()] + [d / name for d in _wheel_bin_dirs()]
    if name == "ncu":
        candidates += sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu"), reverse=True)
    if name == "compute-sanitizer":
        candidates += [h / "compute-sanitizer" / name for h in _cuda_homes()]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


def require_tool(name: str) -> Path:
    path = find_tool(name)
    if path is None:
        hint = {
            "nvcc": "install the CUDA toolkit (12.4+; 13.x tested) and put its bin/ on PATH or set CUDA_HOME",
            "ptxas": "install the CUDA toolkit and put its bin/ on PATH or set CUDA_HOME",
            "cuobjdump": "`pip install nvidia-cuda-cuobjdump` (a dependency of kernelpro) or install the CUDA toolkit",
            "nvdisasm": "`pip install nvidia-cuda-nvdisasm` or install the CUDA toolkit",
            "ncu": "install Nsight Compute and put `ncu` on PATH",
            "compute-sanitizer": "install the CUDA toolkit's compute-sanitizer",
        }.get(name, "install it and put it on PATH")
        raise KernelProError(f"`{name}` not found, needed for {TOOLS.get(name, name)}: {hint}")
    return path


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    capability: tuple[int, int]
    memory_gib: float
    sms: int

    @property
    def arch(self) -> str:
        """The arch-specific target for this card, e.g. sm_90a on Hopper."""
        major, minor = self.capability
        return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


@functools.cache
def gpus() -> tuple[GPU, ...]:
    """Visible CUDA GPUs through PyTorch; empty without a GPU or without a CUDA build of torch."""
    try:
        import torch
    except ImportError:
        return ()
    if not torch.cuda.is_available():
        return ()
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(GPU(i, p.name, (p.major, p.minor), p.total_memory / 2**30, p.multi_processor_count))
    return tuple(out)


def no_gpu_reason() -> str | None:
    """None when a GPU is usable, else why not (one line)."""
    if gpus():
        return None
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if torch.version.cuda is None:
        return f"PyTorch {torch.__version__} is a CPU-only build"
    return "no CUDA GPU is visible (torch.cuda.is_available() is False)"


def tool_version(path: Path) -> str:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "?"


def isolation_row() -> tuple[str, str, str]:
    """Which sandbox candidate processes get here (kernelpro.isolation), and what it leaves open."""
    from kernelpro import isolation
    from kernelpro.errors import KernelProError

    try:
        mode, why = isolation.selected()
    except KernelProError as e:
        return ("isolation", "missing", str(e))
    d = isolation.describe(mode)
    status = "ok" if mode == "bwrap" else "weak"
    return ("isolation", status, f"{mode} ({why}): network {d['network']}, filesystem {d['filesystem']}")


def doctor_rows() -> list[tuple[str, str, str]]:
    """(component, status, detail) rows for `kernelpro doctor`."""
    rows = []
    for name, what in TOOLS.items():
        p = find_tool(name)
        rows.append((name, "ok" if p else "missing", f"{p} ({tool_version(p)})" if p else f"disables {what}"))
    reason = no_gpu_reason()
    if reason:
        rows.append(("gpu", "missing", f"{reason}: disables correctness, timing, energy, profiling"))
    for g in gpus():
        rows.append((f"gpu{g.index}", "ok", f"{g.name}, {g.arch}, {g.sms} SMs, {g.memory_gib:.0f} GiB"))
    rows.append(isolation_row())
    try:
        import pynvml

        pynvml.nvmlInit()
        rows.append(("nvml", "ok", f"driver {pynvml.nvmlSystemGetDriverVersion()}"))
    except Exception as e:  # noqa: BLE001 - any NVML failure means the same thing here
        rows.append(("nvml", "missing", f"disables energy measurement ({type(e).__name__})"))
    return rows


def demangle(names: list[str]) -> dict[str, str]:
    """C++ kernel names as written (`void gemm<128>(float*)`), by c++filt or the CUDA toolkit's cu++filt;
    a name no tool can demangle (or any name, with neither tool found) maps to itself."""
    mangled = [n for n in names if n.startswith("_Z")]
    out = {n: n for n in names}
    tool = find_tool("cu++filt") or find_tool("c++filt")
    if not mangled or tool is None:
        return out
    try:
        p = subprocess.run([str(tool)], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return out
    lines = p.stdout.splitlines()
    if p.returncode == 0 and len(lines) == len(mangled):
        out.update({m: d.strip() or m for m, d in zip(mangled, lines, strict=True)})
    return out


def short_kernel_name(demangled: str) -> str:
    """`void ns::gemm<128, 64>(float const*, int)` -> `ns::gemm<128, 64>`: the name without its return type
    and parameter list (those stay in --json)."""
    s = demangled.strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    if s.startswith("void "):
        s = s[5:]
    return s
