"""Static verification: compile a candidate and prove, from PTX and SASS, which architecture features
each kernel really uses.

A feature is "emitted" for a kernel when its PTX form appears in code the kernel entry can reach AND
its SASS form survived into the kernel's machine code; "declared, not emitted" when only the PTX has
it (ptxas removed it, or compilation failed); "absent" when the PTX never has it. Comments, string
literals and functions that no entry can call never count (see kernelpro.static.ptx).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpro import paths, sandbox
from kernelpro.errors import KernelProError
from kernelpro.static.compile import (
    Cause,
    CompileResult,
    Diagnostic,
    arch_family_name,
    assemble_ptx,
    compile_cause,
    compile_cuda,
    filter_arch_flags,
    grouped_diagnostics,
    parse_arch,
)
from kernelpro.static.features import catalog_arch, load_catalog, match
from kernelpro.static.ptx import PtxModule, parse_ptx
from kernelpro.static.sass import callgraph, disassemble, kernel_report, reachable, resource_usage

# Set in the reader process to the target being verified, so a candidate that builds a different kernel
# per architecture (the PTXBench references) hands over the one for that target; the references spell
# the same name.
TARGET_ARCH_ENV = "KERNELPRO_TARGET_ARCH"

EMITTED = "emitted"
DECLARED = "declared, not emitted"
ABSENT = "absent"
_RANK = {EMITTED: 2, DECLARED: 1, ABSENT: 0}


@dataclass
class CudaSource:
    kind: str                      # "cu" or "ptx"
    text: str
    label: str                     # where it came from, e.g. "model.py:load_inline(gemm)#0"
    extra_flags: list[str] = field(default_factory=list)
    include_dirs: list[str] = field(default_factory=list)


# Runs inside a child interpreter with the candidate's folder as cwd. It swaps torch's extension
# builders for recorders that raise a sentinel, so importing the candidate compiles nothing and
# touches no GPU; whatever the candidate does before that call still runs, hence the subprocess.
_CAPTURE = r'''
import json, os, runpy, sys, sysconfig, traceback
path, out_path = sys.argv[1], sys.argv[2]
captured, note = [], {}
class _KernelProCaptured(BaseException):
    pass
import torch.utils.cpp_extension as ce
def _flags(v):
    return [str(x) for x in (v or [])]
def _as_list(v):
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)
def load_inline(name, cpp_sources=None, cuda_sources=None, *args, **kw):
    cuda = _as_list(cuda_sources)
    if cuda and not kw.get("no_implicit_headers", False):
        cuda.insert(0, "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n")
    captured.append({"call": "load_inline", "name": str(name), "cuda": "\n".join(cuda),
                     "has_cpp": bool(_as_list(cpp_sources)), "flags": _flags(kw.get("extra_cuda_cflags")),
                     "include_dirs": _flags(kw.get("extra_include_paths"))})
    return _Extension(str(name))
def load(name, sources, *args, **kw):
    files = []
    for s in _as_list(sources):
        p = os.path.abspath(str(s))
        if p.endswith((".cu", ".cuh")):
            with open(p, errors="replace") as f:
                files.append({"file": os.path.relpath(p), "text": f.read()})
    captured.append({"call": "load", "name": str(name), "files": files, "flags": _flags(kw.get("extra_cuda_cflags")),
                     "include_dirs": _flags(kw.get("extra_include_paths"))})
    return _Extension(str(name))
class _Extension:
    """Stands in for a built extension so the import goes on to the next build (every extension is
    captured, not only the first); calling into it stops the run, since nothing was compiled."""
    def __init__(self, name):
        self._name = name
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        def call(*a, **k):
            raise _KernelProCaptured()
        return call
def _raw_kernel(code, name, *args, **kw):
    captured.append({"call": "cupy", "name": str(name), "cuda": str(code),
                     "flags": [str(o) for o in (kw.get("options") or (args[0] if args else ()) or ())],
                     "include_dirs": []})
    return _Extension(str(name))
def _raw_module(code=None, *args, **kw):
    if code:
        captured.append({"call": "cupy", "name": "RawModule", "cuda": str(code),
                         "flags": [str(o) for o in (kw.get("options") or ())], "include_dirs": []})
    return _Extension("RawModule")
try:  # CuPy's NVRTC kernels are captured the same way, where CuPy is installed
    import cupy as _cupy
    _cupy.RawKernel = _raw_kernel
    _cupy.RawModule = _raw_module
except Exception:  # noqa: BLE001 - no CuPy (or no driver for it): nothing of CuPy to capture
    pass
def _tvm_ffi(name, sources, entry="run", include_dirs=()):
    # kernelpro.suites.tvmffi.build_module: a TVM-FFI solution's sources, compiled here for each target
    from kernelpro.suites import tvmffi as _tf
    ffi = _tf.ffi_paths()
    captured.append({"call": "tvm_ffi", "name": str(name), "sources": {str(k): str(v) for k, v in sources.items()},
                     "flags": list(_tf.BASE_FLAGS), "include_dirs": [*ffi.include, *map(str, include_dirs)]})
    return _Extension(str(name))
try:  # TVM-FFI solutions (FlashInfer-Trace suites) build through KernelPro's own builder
    import kernelpro.suites.tvmffi as _kp_tvmffi
    _kp_tvmffi.build_module = _tvm_ffi
except ImportError:  # kernelpro not importable in this interpreter: no TVM-FFI candidates to capture
    pass
ce.load_inline = load_inline
ce.load = load
try:
    try:
        inc = ce.include_paths(device_type="cuda")
    except TypeError:
        inc = ce.include_paths(cuda=True)
except Exception:
    inc = ce.include_paths()
inc = [str(p) for p in inc] + [sysconfig.get_paths()["include"]]
note["include_dirs"] = inc
note["common_flags"] = [str(f) for f in getattr(ce, "COMMON_NVCC_FLAGS", [])]
error = None
sys.argv = [path]
try:
    ns = runpy.run_path(path, run_name=f"kp_candidate_{os.getpid()}")   # the worker's module name for it
    # Candidates that build when the model is constructed (not at import) are captured by
    # constructing it; a constructor that needs the task's init arguments is left alone.
    # Constructed even when something was captured at import: a second extension may be built there.
    if isinstance(ns.get("ModelNew"), type):
        try:
            ns["ModelNew"]()
        except TypeError:
            pass
except _KernelProCaptured:
    pass
except SystemExit as e:
    error = f"the candidate called sys.exit({e.code}) at import time"
except SyntaxError as e:
    error = f"{os.path.basename(path)}:{e.lineno}: SyntaxError: {e.msg}"
except BaseException as e:
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"{os.path.basename(fr.filename)}:{fr.lineno}" for fr in reversed(tb)
                  if os.path.abspath(fr.filename) == os.path.abspath(path)), os.path.basename(path))
    error = f"{where}: {type(e).__name__}: {e}"
with open(out_path, "w") as f:
    json.dump({"captured": captured, "note": note, "error": error}, f)
'''


def extract_sources(candidate_path: str | Path, timeout: float = 120, arch: str | None = None) -> list[CudaSource]:
    """The CUDA/PTX a candidate would compile (for `arch`, when it picks its source by target: the reader
    process sees it as $KERNELPRO_TARGET_ARCH). `.py` candidates run in a child process (untrusted code)."""
    path = Path(candidate_path)
    if not path.is_file():
        raise KernelProError(f"candidate {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".cu", ".ptx"):
        try:
            text = path.read_text(errors="replace")
        except OSError as e:
            raise KernelProError(f"cannot read candidate {path}: {e.strerror}") from None
        inc: list[str] = []
        if suffix == ".cu" and "tvm/ffi/" in text:
            # a TVM-FFI kernel.cu (PTXBench's solution form): apache-tvm-ffi's headers, as its build uses
            from kernelpro.suites.tvmffi import ffi_paths

            inc = list(ffi_paths().include)
        return [CudaSource(suffix[1:], text, path.name, ["-std=c++17"] if inc else [], inc)]
    if suffix != ".py":
        raise KernelProError(f"candidate {path}: expected a .py (ModelNew), .cu or .ptx file")
    with tempfile.TemporaryDirectory(prefix="kp_capture_") as tmp:
        out = Path(tmp) / "captured.json"
        try:
            # kernelpro importable in the child as in the worker: generated candidates import it
            env = {**os.environ, **({TARGET_ARCH_ENV: arch} if arch else {})}
            env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])] +
                                                ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
            fin = sandbox.run([sys.executable, "-c", _CAPTURE, str(path.resolve()), str(out)], env=env,
                              cwd=path.resolve().parent, timeout_s=timeout, gpu=sandbox.NO_GPU, writable=[Path(tmp)])
        except OSError as e:
            raise KernelProError(f"cannot run {sys.executable} to read candidate {path.name}: {e}") from None
        if fin.timed_out:
            raise KernelProError(
                f"candidate {path.name} did not reach load_inline within {timeout:.0f} s at import "
                "time; remove slow or blocking module-level code")
        if not out.is_file():
            last = fin.stderr.strip().splitlines()
            raise KernelProError(f"candidate {path.name} crashed the reader process "
                                 f"(exit {fin.rc}): {last[-1] if last else 'no output'}")
        data = json.loads(out.read_text())
    sources: list[CudaSource] = []
    note = data.get("note", {})
    base_flags = ["-std=c++17", *note.get("common_flags", [])]
    for n, cap in enumerate(data["captured"]):
        # -gencode/-arch are dropped: verification picks the target itself.
        flags = [*base_flags, f"-DTORCH_EXTENSION_NAME={cap['name']}", *filter_arch_flags(cap["flags"])]
        inc = [*note.get("include_dirs", []), *(str((path.parent / d).resolve()) for d in cap["include_dirs"])]
        if cap["call"] == "tvm_ffi":
            # every compiled unit of the solution, with its own folder's headers written beside it
            units = {k: v for k, v in cap["sources"].items() if k.endswith((".cu", ".cpp", ".cc", ".cxx"))}
            hdr = _header_dir(cap["sources"]) if len(cap["sources"]) > len(units) else None
            for rel, text in units.items():
                sources.append(CudaSource("cu", text, f"{path.name}:tvm_ffi({cap['name']}):{rel}",
                                          list(cap["flags"]),
                                          [*([hdr] if hdr else []), *cap["include_dirs"]]))
            continue
        if cap["call"] in ("load_inline", "cupy"):
            if cap["cuda"].strip():
                what = "load_inline" if cap["call"] == "load_inline" else "cupy.RawKernel"
                if cap["call"] == "cupy":   # NVRTC source: no torch extension around it, no -D name
                    flags = [*base_flags, *filter_arch_flags(cap["flags"])]
                sources.append(CudaSource("cu", cap["cuda"], f"{path.name}:{what}({cap['name']})#{n}", flags, inc))
        else:
            for f in cap["files"]:
                sources.append(CudaSource("cu", f["text"], f"{path.name}:load({cap['name']}):{f['file']}", flags,
                                          [str(path.parent.resolve()), *inc]))
    if not sources and data.get("error"):
        # A candidate that does not import has a Python problem, not a missing load_inline call.
        raise KernelProError(f"candidate {path.name} fails at import: {data['error']}; fix the Python first")
    if not sources:
        raise KernelProError(
            f"candidate {path.name} loads no CUDA code at import time; it must call "
            "torch.utils.cpp_extension.load_inline(..., cuda_sources=...) or load(..., sources=['x.cu']) "
            "at module level, or be a .cu/.ptx file")
    return sources


def declared_archs(candidate_path: str | Path) -> dict[str, str] | None:
    """The targets a `.py` candidate declares it builds for, from a module-level literal
    ``ARCHS = {"sm_90a": "wgmma", ...}`` (target -> the instruction family its kernel is built on) or
    ``ARCHS = ("sm_90a", ...)``; read with the parser, never by importing the candidate. None when the
    candidate declares nothing (it is then compiled for every target)."""
    path = Path(candidate_path)
    if path.suffix.lower() != ".py":
        return None
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None   # unreadable or not Python: extract_sources reports it with the real reason
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, node_value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):      # ARCHS: dict[str, str] = {...}
            targets, node_value = [node.target], node.value
        else:
            continue
        if node_value is not None and any(isinstance(t, ast.Name) and t.id == "ARCHS" for t in targets):
            try:
                value = ast.literal_eval(node_value)
            except ValueError:
                raise KernelProError(f"{path.name}: ARCHS must be a literal dict (target -> instruction family) "
                                     "or tuple of targets, e.g. {'sm_90a': 'wgmma'}") from None
            if isinstance(value, (tuple, list)):
                value = {a: "" for a in value}
            if (not isinstance(value, dict) or not value
                    or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
                raise KernelProError(f"{path.name}: ARCHS must map target names to instruction families, "
                                     "e.g. {'sm_90a': 'wgmma'}, or list target names")
            for a in value:
                parse_arch(a)
            return dict(value)
    return None


def not_declared_cause(archs: dict[str, str], arch: str) -> Cause:
    """The one line for a target outside a candidate's ARCHS, e.g. 'Hopper-only: uses wgmma (ARCHS:
    sm_90a); not compiled for sm_100a'."""
    names = sorted({arch_family_name(a) for a in archs})
    only = f"{names[0]}-only" if len(names) == 1 else "/".join(names) + " only"
    uses = sorted({f for f in archs.values() if f})
    short = f"{only} ({', '.join(uses)})" if uses else only
    line = f"{only}: {'uses ' + ', '.join(uses) + ' ' if uses else ''}(ARCHS: {', '.join(archs)}); not compiled for {arch}"
    return Cause(short, line)


def _header_dir(files: dict[str, str]) -> str:
    """A folder holding a solution's files (headers its units include), content-addressed in the cache."""
    import hashlib

    key = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    d = paths.cache_dir("compile") / "tvm_ffi_sources" / key
    if not d.is_dir():
        tmp = d.with_name(d.name + ".tmp")
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        try:
            tmp.rename(d)
        except OSError:   # another verifier wrote the same folder first
            pass
    return str(d)


@dataclass
class KernelVerification:
    name: str
    source: str
    ptx_features: dict[str, list[str]]     # feature -> PTX opcodes found in reachable code
    sass_features: dict[str, list[str]]    # feature -> SASS opcodes found in the kernel's code
    status: dict[str, str]                 # feature -> emitted | declared, not emitted | absent
    registers: int | None = None
    smem_bytes: int | None = None
    stack_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    ldl: int = 0
    stl: int = 0
    sass_instructions: int = 0
    instruction_mix: dict[str, int] = field(default_factory=dict)
    ptx_functions: list[str] = field(default_factory=list)   # entry + reachable .func bodies
    compiled: bool = True
    demangled: str = ""                    # the C++ name (c++filt), without return type and parameters


@dataclass
class VerifyReport:
    candidate: str
    arch: str
    requested: list[str]
    compiled: bool
    kernels: list[KernelVerification] = field(default_factory=list)
    features: dict[str, str] = field(default_factory=dict)  # requested (or found) -> best status over kernels
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    unreachable_functions: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Set when the candidate's ARCHS leaves this target out: nothing was compiled, and this says why.
    not_declared: Cause | None = None

    @property
    def passed(self) -> bool:
        """Compiled, and every requested feature is emitted by some kernel."""
        return self.compiled and all(self.features.get(f) == EMITTED for f in self.requested)

    @property
    def missing_features(self) -> list[str]:
        """Requested features no kernel emits."""
        return [f for f in self.requested if self.features.get(f) != EMITTED]

    @property
    def compile_errors(self) -> str:
        """Error diagnostics, one per line with the offending line under it (for a model's context)."""
        return "\n".join(str(d) + (f"\n    {d.context}" if d.context else "")
                         for d in self.diagnostics if d.severity in ("error", "fatal"))

    @property
    def cause(self) -> str | None:
        """Why it did not compile, in one line (None when it compiled)."""
        if self.compiled:
            return None
        c = self.not_declared or compile_cause(self.diagnostics, self.arch)
        return c.line if c else "no diagnostics"

    @property
    def cause_short(self) -> str | None:
        """The cause for a table cell, e.g. 'Hopper-only (wgmma)'."""
        if self.compiled:
            return None
        c = self.not_declared or compile_cause(self.diagnostics, self.arch)
        return c.short if c else "compile error"

    @property
    def summary(self) -> str:
        if not self.compiled:
            return f"compile failed: {self.cause}"
        if self.passed:
            return "every requested feature emitted" if self.requested else "compiled"
        return "; ".join(f"{f}: {self.features.get(f, ABSENT)}" for f in self.missing_features)

    def kernel(self, name: str) -> KernelVerification:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["missing_features"] = self.missing_features
        d["summary"] = self.summary
        d["cause"], d["cause_short"] = self.cause, self.cause_short
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)


def _status(feature: str, ptx: dict[str, list[str]], sass: dict[str, list[str]], compiled: bool) -> str:
    if feature not in ptx:
        return ABSENT
    return EMITTED if compiled and feature in sass else DECLARED


def verify_source(src: CudaSource, arch: str, workdir: Path, requested: list[str] | None,
                  cache_dir: Path | None = None) -> tuple[CompileResult, list[KernelVerification], list[str], PtxModule | None]:
    feats = load_catalog().features(catalog_arch(arch))
    if src.kind == "ptx":
        res = assemble_ptx(src.text, arch, workdir, src.extra_flags, cache_dir=cache_dir)
    else:
        res = compile_cuda(src.text, arch, workdir, src.extra_flags, cache_dir=cache_dir,
                           include_dirs=src.include_dirs)
    module = None
    if res.ptx_path is not None and res.ptx_path.is_file():
        try:
            module = parse_ptx(res.ptx_path.read_text(errors="replace"))
        except KernelProError as e:
            res.diagnostics.append(Diagnostic(res.ptx_path.name, None, "error", f"PTX parser: {e}", "kernelpro"))
    sass_funcs = disassemble(res.cubin_path) if res.ok and res.cubin_path else {}
    res_usage = resource_usage(res.cubin_path) if res.ok and res.cubin_path else {}
    entry_names = set(module.entries) if module else {n for n, r in res.resources.items() if r.is_entry}
    # Separate non-entry functions exist only in relocatable (-rdc) code, whose CALLs need the ELF call graph.
    graph = callgraph(res.cubin_path) if sass_funcs and set(sass_funcs) - entry_names else {}
    kernels: list[KernelVerification] = []
    entries = module.entries if module else [n for n, r in res.resources.items() if r.is_entry]
    for entry in entries:
        ptx_found = match(feats, ((i.opcode, i.operands) for _, i in module.reachable_instructions(entry)),
                          sass=False) if module else {}
        compiled = res.ok and entry in sass_funcs
        sass_instrs = [i for f in reachable(sass_funcs, entry, graph) for i in sass_funcs[f]] if compiled else []
        sass_found = match(feats, ((i.opcode, [i.operands]) for i in sass_instrs), sass=True)
        wanted = requested if requested is not None else sorted(ptx_found)
        kv = KernelVerification(
            name=entry, source=src.label, ptx_features=ptx_found, sass_features=sass_found,
            status={f: _status(f, ptx_found, sass_found, compiled) for f in wanted},
            ptx_functions=module.reachable_functions(entry) if module else [], compiled=compiled)
        px = res.resources.get(entry)
        if compiled:
            rep = kernel_report(entry, sass_funcs, res_usage, res.resources, graph)
            kv.registers, kv.smem_bytes, kv.stack_bytes = rep.registers, rep.smem_bytes, rep.stack_bytes
            kv.spill_stores, kv.spill_loads = rep.spill_stores, rep.spill_loads
            kv.ldl, kv.stl, kv.sass_instructions, kv.instruction_mix = rep.ldl, rep.stl, rep.instructions, rep.mix
        elif px is not None:
            kv.registers, kv.smem_bytes, kv.stack_bytes = px.registers, px.smem_bytes, px.stack_bytes
            kv.spill_stores, kv.spill_loads = px.spill_stores, px.spill_loads
        kernels.append(kv)
    unreachable = module.unreachable_functions() if module else []
    return res, kernels, unreachable, module


def verify(candidate_path: str | Path, arch: str = "sm_90a", requested: list[str] | None = None,
           workdir: str | Path | None = None, cache_dir: str | Path | None = None,
           sources: list[CudaSource] | None = None) -> VerifyReport:
    """Compile every CUDA/PTX source of a candidate for `arch` and report feature evidence per kernel."""
    t0 = time.perf_counter()
    cat_arch = catalog_arch(arch)
    req = load_catalog().check_names(cat_arch, requested) if requested is not None else None
    report = VerifyReport(str(candidate_path), arch, list(req or []), compiled=True)
    archs = declared_archs(candidate_path) if sources is None else None
    if archs is not None and arch not in archs and cat_arch not in archs:
        # A declared property, not a page of ptxas errors: the candidate says it is not for this target.
        report.compiled = False
        report.not_declared = not_declared_cause(archs, arch)
        report.seconds = time.perf_counter() - t0
        return report
    srcs = sources if sources is not None else extract_sources(candidate_path, arch=arch)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="kp_verify_")
        workdir = tmp.name
    try:
        for n, src in enumerate(srcs):
            wd = Path(workdir) / f"src{n}"
            res, kernels, unreachable, _ = verify_source(src, arch, wd, req, Path(cache_dir) if cache_dir else None)
            report.compiled &= res.ok
            report.kernels += kernels
            report.diagnostics += res.diagnostics
            report.unreachable_functions += unreachable
            report.sources.append({
                "label": src.label, "kind": src.kind, "ok": res.ok, "seconds": round(res.seconds, 3),
                "cached": res.cached, "flags": src.extra_flags,
                "ptx": str(res.ptx_path) if res.ptx_path and tmp is None else None,
                "cubin": str(res.cubin_path) if res.cubin_path and tmp is None else None})
    finally:
        if tmp is not None:
            tmp.cleanup()
    names = req if req is not None else sorted({f for k in report.kernels for f in k.ptx_features})
    for f in names:
        best = ABSENT
        for k in report.kernels:
            s = _status(f, k.ptx_features, k.sass_features, k.compiled)
            if _RANK[s] > _RANK[best]:
                best = s
        report.features[f] = best
    from kernelpro.toolchain import demangle, short_kernel_name

    names = demangle([k.name for k in report.kernels])
    for k in report.kernels:
        k.demangled = short_kernel_name(names[k.name])
    report.seconds = time.perf_counter() - t0
    return report


def verify_task_candidate(task: Any, candidate_path: str | Path, arch: str = "sm_90a", **kw: Any) -> VerifyReport:
    """Verify a candidate against the features its task requests on `arch`."""
    return verify(candidate_path, arch, list(task.requested_features(arch)), **kw)


# -- output ---------------------------------------------------------------------------------------
_STYLE = {EMITTED: "green", DECLARED: "yellow", ABSENT: "red"}


def print_report(console: Any, report: VerifyReport, verbose: bool = False) -> None:
    """The verdict in one line first; then features and kernels; diagnostics each once. Without
    `verbose`, a failed compile shows its cause and its errors (short), nothing else."""
    from rich.text import Text

    from kernelpro.tables import Col, print_table

    head = Text(f"{report.candidate} for {report.arch}: ")
    if report.not_declared is not None:
        # The candidate's own ARCHS leaves this target out: one line, kept whole, and nothing else.
        head.append("not built", style="bold yellow")
        head.append(f": {report.not_declared.line}")
        console.print(head, soft_wrap=True)
        return
    if not report.compiled:
        head.append("compile FAILED", style="bold red")
        head.append(f": {report.cause}")
    elif report.requested:
        head.append("PASS" if report.passed else "FAIL", style="bold green" if report.passed else "bold red")
        head.append(" (every requested feature emitted)" if report.passed else
                    " (not emitted: " + ", ".join(report.missing_features) + ")")
    else:
        head.append("compiled")
    console.print(head)
    groups = grouped_diagnostics(report.diagnostics)
    errors = [(d, lines) for d, lines in groups if d.severity in ("error", "fatal")]
    warnings = [(d, lines) for d, lines in groups if d.severity not in ("error", "fatal")]
    if report.compiled or verbose:
        _print_features(console, report)
        rows = []
        for k in report.kernels:
            mix = ", ".join(f"{fam} {n}" for fam, n in list(k.instruction_mix.items())[:3])
            rows.append([k.demangled or k.name, _n(k.registers), _n(k.smem_bytes), _n(k.stack_bytes),
                         Text(f"{_n(k.spill_stores)}/{_n(k.spill_loads)}", style="red" if (k.spill_stores or k.spill_loads) else ""),
                         Text(f"{k.ldl}/{k.stl}", style="red" if (k.ldl or k.stl) else ""),
                         _n(k.sass_instructions) if k.compiled else "not compiled",
                         ", ".join(k.ptx_features) or "-", ", ".join(k.sass_features) or "-", mix or "-"])
        print_table(console, "kernels", [Col("kernel", ident=True), Col("regs"), Col("smem B"), Col("stack B"),
                                         Col("spill st/ld B"), Col("LDL/STL"), Col("SASS instrs"),
                                         Col("features (PTX)"), Col("features (SASS)"), Col("top of mix")], rows)
        if report.unreachable_functions:
            console.print(Text("not counted (no kernel entry calls them): "
                               + ", ".join(report.unreachable_functions), style="dim"))
    shown = errors + (warnings if verbose else [])
    limit = len(shown) if verbose else 8
    for d, lines in shown[:limit]:
        where = f"{d.file}:{','.join(map(str, lines[:6]))}{',…' if len(lines) > 6 else ''}" if lines else d.file
        ctx = d.context if verbose or len(d.context) <= 72 else d.context[:71] + "…"
        console.print(Text(f"{where}: {d.severity}: {d.message}" + (f"\n    {ctx}" if ctx else ""),
                           style="red" if d.severity in ("error", "fatal") else "yellow"))
    hidden = []
    if len(shown) > limit:
        hidden.append(f"{len(shown) - limit} more errors")
    if warnings and not verbose:
        hidden.append(f"{len(warnings)} warning{'s' if len(warnings) > 1 else ''}")
    if not report.compiled and not verbose and report.not_declared is None:
        hidden.append("the feature and kernel tables")
    if hidden:
        console.print(Text(f"--verbose shows {', '.join(hidden)}; --json everything", style="dim"))


def _n(x: int | None) -> str:
    return "-" if x is None else str(x)


def _print_features(console: Any, report: VerifyReport) -> None:
    from rich.text import Text

    from kernelpro.tables import Col, print_table

    if not report.features:
        return
    rows = []
    for f, status in report.features.items():
        ks = [k for k in report.kernels if f in k.ptx_features]
        ptx_ev = sorted({op for k in ks for op in k.ptx_features[f]})
        sass_ev = sorted({op for k in ks for op in k.sass_features.get(f, [])})
        rows.append([f, Text(status, style=_STYLE[status]), ", ".join(k.demangled or k.name for k in ks) or "-",
                     ", ".join(ptx_ev[:4] + ([f"+{len(ptx_ev) - 4} more"] if len(ptx_ev) > 4 else [])) or "-",
                     ", ".join(sass_ev[:6]) or "-"])
    print_table(console, "features" + (" requested" if report.requested else " found in PTX"),
                [Col("feature", ident=True), Col("status"), Col("kernels", ident=True), Col("PTX evidence"),
                 Col("SASS evidence")], rows)


# -- CLI ------------------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("candidate", help="ModelNew .py file, or a raw .cu / .ptx file")
    p.add_argument("--arch", default="sm_90a", help="target: sm_90a (default), sm_100a, or sm_90")
    p.add_argument("--features", help="comma-separated features that must be emitted (see the catalog)")
    p.add_argument("--task", help="take the requested features from this task (path, suite/name or name)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--keep", metavar="DIR", help="keep the .ptx/.cubin under DIR")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="every diagnostic (warnings too) with its full source line, and the tables after a failed compile")


def _default_cache() -> Path:
    return paths.cache_dir("compile")


def cmd_verify(args: argparse.Namespace) -> int:
    """`kernelpro verify`: exit 0 when it compiled and every requested feature is emitted, else 1."""
    from kernelpro.static.compile import check_target

    check_target(args.arch)
    requested: list[str] | None = None
    task = None
    if getattr(args, "task", None):
        from kernelpro.suites.task import find_task

        task = find_task(args.task)
        requested = list(task.requested_features(args.arch))
    if getattr(args, "features", None):
        requested = (requested or []) + [f.strip() for f in args.features.split(",") if f.strip()]
    cand = Path(args.candidate)
    report = verify(cand, args.arch, requested, workdir=getattr(args, "keep", None), cache_dir=_default_cache())
    _record(args, report, cand, task)
    if getattr(args, "json", False):
        print(report.to_json())
    else:
        from rich.console import Console

        print_report(Console(), report, verbose=getattr(args, "verbose", False))
    return 0 if (report.passed if report.requested else report.compiled) else 1


def _record(args: argparse.Namespace, report: VerifyReport, cand: Path, task: Any) -> None:
    """Store the candidate and the verdict in the run store (--db, $KERNELPRO_DB or the default)."""
    from kernelpro.results.store import Store

    store = Store(getattr(args, "db", None))
    try:
        run_id = store.new_run("verify", task.suite if task else None,
                               {"candidate": str(cand.resolve()), "arch": report.arch, "requested": report.requested})
        try:
            source = cand.read_text(errors="replace")
        except OSError:
            source = ""
        kind = cand.suffix.lstrip(".") if cand.suffix in (".cu", ".ptx") else "py"
        cid = store.add_candidate(run_id, task.key if task else f"-/{cand.stem}", source, kind=kind, origin="user",
                                  info={"path": str(cand.resolve())})
        store.record("compiles", cid, report.compiled,
                     {"sources": report.sources, "diagnostics": [asdict(d) for d in report.diagnostics]}, report.arch)
        store.record("verifications", cid, report.passed, report.to_dict(), report.arch)
        store.set_run_status(run_id, "done")
    finally:
        store.close()


main = cmd_verify
