"""Build and load a TVM-FFI solution (a `kernel.cu` that exports `run` with `TVM_FFI_DLL_EXPORT_TYPED_FUNC`).

PTXBench and FlashInfer-Bench build such a file with nvcc into a shared library against the headers and
`libtvm_ffi.so` of the `apache-tvm-ffi` package (import name `tvm_ffi`), for one target
(`-gencode arch=compute_90a,code=sm_90a` on Hopper, `compute_100a`/`sm_100a` on Blackwell), with
`-O3 -lineinfo -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -lcuda -ltvm_ffi`, and load it with
`tvm_ffi.load_module`. `build_module` does the same, from the source text itself (so the candidate's
content hash covers it), into a folder keyed by that text, the flags and the target.

Where it writes: `$TORCH_EXTENSIONS_DIR` when set (the harness's content-addressed build folder of the
candidate: the sandboxed build stage fills it, every worker loads from its private copy), else the
`tvm_ffi` folder of KernelPro's cache. A hit (the .so already there) runs no compiler.

The static verifier replaces `build_module` with a recorder while it imports a candidate, so it sees the
same sources, flags and include folders and compiles them to a cubin of its own for each target.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

# The flags PTXBench's compile step passes besides the target and the include/library folders.
BASE_FLAGS = ("-O3", "-lineinfo", "-std=c++17")
ARCHS = {"sm_90a": "arch=compute_90a,code=sm_90a", "sm_100a": "arch=compute_100a,code=sm_100a"}
SOURCE_EXTS = (".cu", ".cpp", ".cc", ".cxx")
EXTRA = "tvmffi"   # the pyproject extra that installs apache-tvm-ffi


class BuildError(KernelProError):
    """nvcc rejected a TVM-FFI solution (the message ends with nvcc's last error lines)."""


@dataclass(frozen=True)
class FfiPaths:
    include: tuple[str, ...]   # tvm_ffi's headers and the dlpack headers it ships
    libdir: str                # where libtvm_ffi.so is


def _no_addon_build() -> None:
    """Keep `import tvm_ffi` from JIT-building its optional torch DLPack addon (a compiler subprocess writing
    to ~/.cache/tvm-ffi) inside a sandboxed candidate process: a torch that has the DLPack exchange API
    natively needs no addon; one that lacks it takes tvm_ffi's plain DLPack path instead."""
    try:
        import torch

        native = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    except ImportError:
        native = True   # no torch: tvm_ffi builds no torch addon
    if not native:
        os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")


def ffi_paths() -> FfiPaths:
    """The headers and library of the installed apache-tvm-ffi; a one-line error naming the extra if absent."""
    _no_addon_build()
    try:
        from tvm_ffi import libinfo
    except ImportError:
        raise KernelProError("TVM-FFI solutions need the apache-tvm-ffi package: pip install "
                             f"'kernelpro[{EXTRA}]' (or apache-tvm-ffi)") from None
    inc = [libinfo.find_include_path(), libinfo.find_dlpack_include_path()]
    lib = Path(libinfo.find_libtvm_ffi()).parent
    return FfiPaths(tuple(dict.fromkeys(str(p) for p in inc)), str(lib))


def target_arch(env: dict[str, str] | None = None) -> str:
    """The target of the shared library: PTXBench's NVCC_GENCODE when set, else the harness's pinned
    TORCH_CUDA_ARCH_LIST (the first GPU's, set for builds and workers alike), else sm_90a (PTXBench's
    default)."""
    env = dict(os.environ if env is None else env)
    gencode = env.get("NVCC_GENCODE", "").strip()
    if gencode:
        for arch, g in ARCHS.items():
            if gencode == g:
                return arch
        raise KernelProError(f"NVCC_GENCODE={gencode!r}: choose {' or '.join(ARCHS.values())}")
    first = env.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ").split()
    if first:
        digits = "".join(ch for ch in first[0].split("+")[0] if ch.isdigit())
        if digits == "100":
            return "sm_100a"
    return "sm_90a"


def _libcuda_flags(nvcc: str) -> list[str]:
    """How to link libcuda as PTXBench does (-lcuda): the toolkit's stub where it has one, else the
    driver's library; on a machine with neither (no GPU) the library is left unlinked, so any driver
    symbol stays undefined in the .so and resolves where it is loaded (a GPU machine has the driver)."""
    home = Path(nvcc).resolve().parent.parent
    for d in (home / "lib64" / "stubs", home / "targets" / "x86_64-linux" / "lib" / "stubs"):
        if (d / "libcuda.so").is_file():
            return [f"-L{d}", "-lcuda"]
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""   # no ldconfig: look in the usual driver folders only
    found = [ln.split("=>")[-1].strip() for ln in out.splitlines() if "libcuda.so" in ln and "=>" in ln]
    found += [str(p) for d in ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64")
              for p in sorted(Path(d).glob("libcuda.so*"))]
    for f in found:
        p = Path(f)
        if p.name == "libcuda.so":
            return [f"-L{p.parent}", "-lcuda"]
    for f in found:
        p = Path(f)
        if p.name.startswith("libcuda.so."):
            return [f"-L{p.parent}", f"-l:{p.name}"]
    return []


def build_dir() -> Path:
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    from kernelpro import paths

    return paths.cache_dir("tvm_ffi")


def shared_library(name: str, sources: dict[str, str], *, arch: str | None = None,
                   include_dirs: tuple[str, ...] | list[str] = (), timeout_s: float = 900.0) -> Path:
    """The built .so for `sources` ({relative path: text}; every .cu/.cpp is compiled, the rest are headers
    beside them); builds it when absent. Raises BuildError with nvcc's error lines."""
    from kernelpro.toolchain import require_tool

    arch = arch or target_arch()
    if arch not in ARCHS:
        raise KernelProError(f"TVM-FFI build target {arch!r}: choose {', '.join(ARCHS)}")
    nvcc = str(require_tool("nvcc"))
    ffi = ffi_paths()
    for rel in sources:
        p = Path(rel)
        if p.is_absolute() or ".." in p.parts:
            raise KernelProError(f"TVM-FFI solution source path {rel!r} must be relative, without '..'")
    units = [rel for rel in sources if rel.endswith(SOURCE_EXTS)]
    if not units:
        raise KernelProError(f"TVM-FFI solution {name}: no .cu/.cpp source among {sorted(sources)}")
    key = hashlib.sha256(repr((sorted(sources.items()), arch, BASE_FLAGS, tuple(include_dirs), ffi.include))
                         .encode()).hexdigest()[:16]
    out = build_dir() / f"tvmffi_{name}_{key}"
    so = out / f"{name}.so"
    if so.is_file():
        return so
    src = out / "src"
    for rel, text in sources.items():
        f = src / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    tmp = out / f".{name}.{os.getpid()}.so"
    cmd = [nvcc, "-shared", *BASE_FLAGS, "-gencode", ARCHS[arch], *(str(src / u) for u in units),
           "-Xcompiler", "-fPIC,-fvisibility=hidden", f"-I{src}", *(f"-I{d}" for d in include_dirs),
           *(f"-I{d}" for d in ffi.include), *_libcuda_flags(nvcc),
           f"-L{ffi.libdir}", "-ltvm_ffi", f"-Xlinker=-rpath={ffi.libdir}", "-o", str(tmp)]
    try:
        proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise BuildError(f"TVM-FFI solution {name}: nvcc ran past {timeout_s:g} s") from None
    if proc.returncode != 0 or not tmp.is_file():
        errs = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "error" in ln.lower()] or \
            (proc.stderr + proc.stdout).strip().splitlines()[-3:]
        raise BuildError(f"TVM-FFI solution {name}: nvcc failed for {arch}: " + " | ".join(errs[:3])[:600])
    os.replace(tmp, so)   # atomic: a concurrent reader sees the whole library or none
    return so


def build_module(name: str, sources: dict[str, str], entry: str = "run",
                 include_dirs: tuple[str, ...] | list[str] = ()) -> Any:
    """Build (or find) and load the solution; returns its exported function `entry`."""
    so = shared_library(name, sources, include_dirs=include_dirs)
    import tvm_ffi

    mod = tvm_ffi.load_module(str(so))
    try:
        return mod[entry]
    except (AttributeError, KeyError) as e:
        raise KernelProError(f"TVM-FFI solution {name}: {so.name} exports no function {entry!r} "
                             f"(TVM_FFI_DLL_EXPORT_TYPED_FUNC({entry}, ...)): {e}") from None
