"""Compile CUDA (nvcc) or assemble PTX (ptxas) for one target, keeping PTX, cubin and the ptxas report.

Compile errors come back as structured diagnostics (file, line, severity, message) that an agent can
hand to a model; per-kernel resources come from `ptxas -v`. Results can be cached by content hash.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelpro.errors import KernelProError
from kernelpro.toolchain import require_tool, tool_version

_ARCH = re.compile(r"sm_(\d+)([af]?)")


@dataclass
class Diagnostic:
    file: str
    line: int | None
    severity: str            # error | warning | fatal | remark
    message: str
    tool: str = "nvcc"       # nvcc (front end) | ptxas | host | nvlink
    context: str = ""        # the offending source/PTX line, when it can be read

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.severity}: {self.message}"


@dataclass
class KernelResources:
    name: str
    registers: int | None = None
    smem_bytes: int = 0           # static shared memory
    stack_bytes: int = 0
    spill_stores: int = 0         # bytes
    spill_loads: int = 0          # bytes
    barriers: int | None = None
    cmem_bytes: int | None = None
    is_entry: bool = True


@dataclass
class CompileResult:
    ok: bool
    arch: str
    source_path: Path | None
    ptx_path: Path | None
    cubin_path: Path | None
    ptxas_log: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    resources: dict[str, KernelResources] = field(default_factory=dict)
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)
    log: str = ""                 # everything the tools printed
    cached: bool = False

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity in ("error", "fatal")]

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("source_path", "ptx_path", "cubin_path"):
            d[k] = str(d[k]) if d[k] else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> CompileResult:
        d = dict(d)
        for k in ("source_path", "ptx_path", "cubin_path"):
            d[k] = Path(d[k]) if d[k] else None
        d["diagnostics"] = [Diagnostic(**x) for x in d["diagnostics"]]
        d["resources"] = {k: KernelResources(**v) for k, v in d["resources"].items()}
        return cls(**d)


def parse_arch(arch: str) -> tuple[str, str]:
    """(major+minor digits, suffix) of an sm_XY[a|f] target; a one-line error otherwise."""
    m = _ARCH.fullmatch(arch)
    if not m:
        raise KernelProError(f"arch {arch!r} is not a CUDA target like sm_90a, sm_100a or sm_90")
    return m.group(1), m.group(2)


def gencode_flags(arch: str) -> list[str]:
    num, suffix = parse_arch(arch)
    return ["-gencode", f"arch=compute_{num}{suffix},code=sm_{num}{suffix}"]


# -- diagnostics -----------------------------------------------------------------------------------
_NVCC_FE = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|remark|catastrophic error)"
                      r"(?: #\S+)?: (?P<msg>.*)$")
_PTXAS = re.compile(r"^ptxas (?P<file>\S+), line (?P<line>\d+); (?P<sev>error|warning|fatal)\s*: (?P<msg>.*)$")
_PTXAS_NOLOC = re.compile(r"^ptxas (?P<sev>error|warning|fatal)\s*: (?P<msg>.*)$")
_HOST = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+):(?:\d+:)? (?P<sev>error|warning|fatal error): (?P<msg>.*)$")
_TOOL_FATAL = re.compile(r"^(?P<tool>nvcc|nvlink|fatbinary) (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")


def _read_line(path: Path, line: int | None) -> str:
    if not line:
        return ""
    try:
        with open(path, errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return text.strip()
    except OSError:
        pass
    return ""


def parse_diagnostics(log: str, workdir: Path | None = None) -> list[Diagnostic]:
    """Structured diagnostics from nvcc/ptxas/host-compiler output (ptxas -v info lines are skipped)."""
    out: list[Diagnostic] = []
    lines = log.splitlines()
    for i, raw in enumerate(lines):
        text = raw.rstrip()
        m = _NVCC_FE.match(text)
        if m:
            msg = m.group("msg").strip()
            # The front end prints the message's detail on following indented lines.
            j = i + 1
            while j < len(lines) and lines[j].startswith("          ") and not lines[j].strip().startswith("^"):
                msg += " " + lines[j].strip()
                j += 1
            sev = "error" if "error" in m.group("sev") else m.group("sev")
            out.append(Diagnostic(_short(m.group("file")), int(m.group("line")), sev, msg, "nvcc",
                                  _ctx(workdir, m.group("file"), int(m.group("line")))))
            continue
        m = _PTXAS.match(text)
        if m:
            out.append(Diagnostic(_short(m.group("file")), int(m.group("line")), m.group("sev"),
                                  m.group("msg").strip(), "ptxas",
                                  _ctx(workdir, m.group("file"), int(m.group("line")))))
            continue
        m = _PTXAS_NOLOC.match(text)
        if m:
            if m.group("msg").startswith("Ptx assembly aborted due to errors"):
                continue  # a summary of the errors already recorded
            out.append(Diagnostic("ptxas", None, m.group("sev"), m.group("msg").strip(), "ptxas"))
            continue
        m = _TOOL_FATAL.match(text)
        if m:
            out.append(Diagnostic(m.group("tool"), None, m.group("sev"), m.group("msg").strip(), m.group("tool")))
            continue
        m = _HOST.match(text)
        if m:
            sev = "error" if "error" in m.group("sev") else m.group("sev")
            out.append(Diagnostic(_short(m.group("file")), int(m.group("line")), sev, m.group("msg").strip(), "host"))
    return out


def _short(path: str) -> str:
    # Temporary names (/tmp/tmpxft_..._kernel.ptx) become the stable part the user recognises.
    name = Path(path).name
    m = re.match(r"tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_(.*)", name)
    return m.group(1) if m else name


def _ctx(workdir: Path | None, file: str, line: int) -> str:
    if workdir is None:
        return ""
    for cand in (Path(file), workdir / Path(file).name, workdir / _short(file)):
        if cand.is_file():
            return _read_line(cand, line)
    return ""


# -- ptxas -v --------------------------------------------------------------------------------------
_PROPS = re.compile(r"ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)'")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")


def parse_ptxas_resources(log: str) -> dict[str, KernelResources]:
    """Per-function resources from `ptxas -v` text: entries get registers/smem, every function stack/spills."""
    res: dict[str, KernelResources] = {}
    entries: set[str] = set()
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            entries.add(m.group(1))
            current = m.group(1)
            res.setdefault(current, KernelResources(current))
            continue
        m = _PROPS.search(line)
        if m:
            current = m.group(1)
            res.setdefault(current, KernelResources(current, is_entry=current in entries))
            continue
        m = _FRAME.search(line)
        if m and current:
            r = res[current]
            r.stack_bytes, r.spill_stores, r.spill_loads = (int(x) for x in m.groups())
            continue
        m = _USED.search(line)
        if m and current:
            r = res[current]
            r.registers = int(m.group(1))
            rest = m.group(2)
            if (b := re.search(r"used (\d+) barriers", rest)):
                r.barriers = int(b.group(1))
            if (s := re.search(r"(\d+) bytes smem", rest)):
                r.smem_bytes = int(s.group(1))
            if (c := re.search(r"(\d+) bytes cmem\[0\]", rest)):
                r.cmem_bytes = int(c.group(1))
    for name, r in res.items():
        r.is_entry = name in entries
    return res


# -- running the tools -----------------------------------------------------------------------------
def filter_arch_flags(flags: Sequence[str]) -> list[str]:
    """Drop target-selection flags; the caller's arch decides the target."""
    out: list[str] = []
    skip = False
    for f in flags:
        if skip:
            skip = False
            continue
        if f in ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code"):
            skip = True
            continue
        if re.match(r"^(-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code)[=\s]", f):
            continue
        if f.startswith("-arch=") or f.startswith("-code="):
            continue
        out.append(f)
    return out


def _cache_key(kind: str, text: str, arch: str, flags: Sequence[str], tool: Path) -> str:
    h = hashlib.sha256()
    for part in (kind, arch, "\0".join(flags), tool_version(tool), text):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()[:32]


def _run(cmd: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"{Path(cmd[0]).name} fatal   : timed out after {timeout:.0f} s"
    return p.returncode, (p.stdout or "") + (p.stderr or "")


def _from_cache(cache_dir: Path | None, key: str, workdir: Path) -> CompileResult | None:
    if cache_dir is None:
        return None
    entry = cache_dir / key
    meta = entry / "result.json"
    if not meta.is_file():
        return None
    try:
        res = CompileResult.from_dict(json.loads(meta.read_text()))
    except (ValueError, TypeError, KeyError):
        return None
    workdir.mkdir(parents=True, exist_ok=True)
    for attr in ("source_path", "ptx_path", "cubin_path"):
        p = getattr(res, attr)
        if p is not None:
            src = entry / p.name
            if not src.is_file():
                return None
            dst = workdir / p.name
            shutil.copyfile(src, dst)
            setattr(res, attr, dst)
    res.cached = True
    return res


def _to_cache(cache_dir: Path | None, key: str, res: CompileResult) -> None:
    if cache_dir is None:
        return
    entry = cache_dir / key
    tmp = cache_dir / f".{key}.tmp{time.time_ns()}"
    tmp.mkdir(parents=True, exist_ok=True)
    for p in (res.source_path, res.ptx_path, res.cubin_path):
        if p is not None and p.is_file():
            shutil.copyfile(p, tmp / p.name)
    (tmp / "result.json").write_text(json.dumps(res.to_dict()))
    try:
        tmp.rename(entry)  # atomic publish; a concurrent writer of the same key simply wins
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def compile_cuda(source: str, arch: str, workdir: Path, extra_flags: Sequence[str] = (),
                 cache_dir: Path | None = None, name: str = "kernel", timeout: float = 300,
                 include_dirs: Sequence[str | Path] = ()) -> CompileResult:
    """nvcc SOURCE for one target (sm_90a -> compute_90a/sm_90a), keeping .ptx, .cubin and ptxas -v text."""
    nvcc = require_tool("nvcc")
    workdir = Path(workdir)
    gencode = gencode_flags(arch)
    flags = [*filter_arch_flags(extra_flags), *(f"-I{d}" for d in include_dirs)]
    key = _cache_key("cu", source, arch, flags, nvcc)
    hit = _from_cache(cache_dir, key, workdir)
    if hit is not None:
        return hit
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / f"{name}.cu"
    src.write_text(source)
    cubin = workdir / f"{name}.cubin"
    ptx = workdir / f"{name}.ptx"
    for stale in (cubin, ptx):
        stale.unlink(missing_ok=True)
    cmd = [str(nvcc), *gencode, "-cubin", "-o", cubin.name, "-keep", "-keep-dir", str(workdir),
           "-Xptxas", "-v", "-lineinfo", *flags, src.name]
    t0 = time.perf_counter()
    rc, log = _run(cmd, workdir, timeout)
    seconds = time.perf_counter() - t0
    res = CompileResult(
        ok=rc == 0 and cubin.is_file(), arch=arch, source_path=src,
        ptx_path=ptx if ptx.is_file() else None, cubin_path=cubin if cubin.is_file() else None,
        ptxas_log="\n".join(ln for ln in log.splitlines() if ln.startswith("ptxas") or ln.startswith("    ")),
        diagnostics=parse_diagnostics(log, workdir), resources=parse_ptxas_resources(log),
        seconds=seconds, command=cmd, log=log)
    if not res.ok and not res.errors:
        res.diagnostics.append(Diagnostic(src.name, None, "error", f"nvcc exited with status {rc}: "
                                          + (log.strip().splitlines() or ["no output"])[-1], "nvcc"))
    _to_cache(cache_dir, key, res)
    return res


def assemble_ptx(ptx_text: str, arch: str, workdir: Path, extra_flags: Sequence[str] = (),
                 cache_dir: Path | None = None, name: str = "kernel", timeout: float = 300) -> CompileResult:
    """ptxas a raw .ptx for one target (-arch=sm_90a), keeping the cubin and the -v report."""
    ptxas = require_tool("ptxas")
    workdir = Path(workdir)
    num, suffix = parse_arch(arch)
    flags = [f for f in filter_arch_flags(extra_flags) if f != "-v"]
    key = _cache_key("ptx", ptx_text, arch, flags, ptxas)
    hit = _from_cache(cache_dir, key, workdir)
    if hit is not None:
        return hit
    workdir.mkdir(parents=True, exist_ok=True)
    ptx = workdir / f"{name}.ptx"
    ptx.write_text(ptx_text)
    cubin = workdir / f"{name}.cubin"
    cubin.unlink(missing_ok=True)
    cmd = [str(ptxas), f"-arch=sm_{num}{suffix}", "-v", "-lineinfo", *flags, "-o", cubin.name, ptx.name]
    t0 = time.perf_counter()
    rc, log = _run(cmd, workdir, timeout)
    res = CompileResult(
        ok=rc == 0 and cubin.is_file(), arch=arch, source_path=ptx, ptx_path=ptx,
        cubin_path=cubin if cubin.is_file() else None, ptxas_log=log,
        diagnostics=parse_diagnostics(log, workdir), resources=parse_ptxas_resources(log),
        seconds=time.perf_counter() - t0, command=cmd, log=log)
    if not res.ok and not res.errors:
        res.diagnostics.append(Diagnostic(ptx.name, None, "error", f"ptxas exited with status {rc}", "ptxas"))
    _to_cache(cache_dir, key, res)
    return res


# -- why a compile failed, in one line ------------------------------------------------------------
_NOT_ON_TARGET = re.compile(r"Instruction '(?P<instr>[^']+)' not supported on \.target '(?P<target>sm_\w+)'")
_NOT_FOR_ARCH = re.compile(r"Instruction '[^']+' cannot be compiled for architecture")
# PTX instruction families that exist on one architecture only, and what the other one uses instead.
_ARCH_ONLY = {
    "wgmma": ("Hopper-only", "sm_90a", {"sm_100a": "tcgen05.mma", "sm_101a": "tcgen05.mma", "sm_103a": "tcgen05.mma",
                                        "sm_110a": "tcgen05.mma", "sm_120a": "mma.sync", "sm_121a": "mma.sync"}),
    "tcgen05": ("Blackwell-only", "sm_100a", {"sm_90a": "wgmma"}),
}


# Architecture names by compute capability major version, for one-line causes.
_FAMILY = {"9": "Hopper", "10": "Blackwell", "11": "Blackwell", "12": "Blackwell", "8": "Ampere"}


def arch_family_name(arch: str) -> str:
    """'Hopper' for sm_90a, 'Blackwell' for sm_100a; the target itself for others."""
    num, _ = parse_arch(arch)
    return _FAMILY.get(num[:-1], arch)


@dataclass(frozen=True)
class Cause:
    short: str      # for a table cell: "Hopper-only (wgmma)"
    line: str       # the sentence: "wgmma is Hopper-only (sm_90a); sm_100a uses tcgen05.mma"


def _diag(d: Diagnostic | dict) -> Diagnostic:
    return d if isinstance(d, Diagnostic) else Diagnostic(**d)


def compile_cause(diagnostics: Sequence[Diagnostic | dict], arch: str) -> Cause | None:
    """The one-line reason a compile failed, from its error diagnostics; None when there is no error."""
    errors = [d for d in map(_diag, diagnostics) if d.severity in ("error", "fatal")]
    if not errors:
        return None
    for d in errors:
        m = _NOT_ON_TARGET.search(d.message)
        if not m:
            continue
        family = m.group("instr").split(".")[0].split()[0]
        if family in _ARCH_ONLY:
            only, home, instead = _ARCH_ONLY[family]
            if home.rstrip("af") == m.group("target"):
                return Cause(f"needs {home} ({family})", f"{family} needs the arch-specific target {home}, not "
                             f"{m.group('target')}")
            alt = instead.get(m.group("target"))
            return Cause(f"{only} ({family})", f"{family} is {only} ({home}); "
                         + (f"{m.group('target')} uses {alt}" if alt else f"{m.group('target')} has no {family}"))
        return Cause(f"no {family} on {m.group('target')}", f"{m.group('instr')} is not supported on {m.group('target')}")
    d = errors[0]
    where = f"{d.file}:{d.line}" if d.line else d.file
    msg = d.message if len(d.message) <= 100 else d.message[:99] + "…"
    return Cause("compile error", f"{where}: {msg}")


def grouped_diagnostics(diagnostics: Sequence[Diagnostic | dict]) -> list[tuple[Diagnostic, list[int]]]:
    """Each diagnostic once: ptxas's "cannot be compiled for architecture" twin of a "not supported on
    .target" error is dropped, and one message at several lines of a file becomes one entry with its lines."""
    diags = list(map(_diag, diagnostics))
    on_target = {(d.file, d.line) for d in diags if _NOT_ON_TARGET.search(d.message)}
    groups: dict[tuple[str, str, str], tuple[Diagnostic, list[int]]] = {}
    for d in diags:
        if _NOT_FOR_ARCH.search(d.message) and (d.file, d.line) in on_target:
            continue
        key = (d.file, d.severity, d.message)
        if key not in groups:
            groups[key] = (d, [])
        if d.line and d.line not in groups[key][1]:
            groups[key][1].append(d.line)
    return list(groups.values())


def nvcc_archs() -> set[str] | None:
    """The compute capabilities ('90', '100', ...) this nvcc can target; None without nvcc."""
    from kernelpro.toolchain import find_tool

    nvcc = find_tool("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = set(re.findall(r"compute_(\d+)", out))
    return found or None


def check_target(arch: str) -> str:
    """`arch` when it is a target kernelpro can verify (a feature catalog) and nvcc can build; else a
    one-line error naming the targets that work."""
    from kernelpro.static.features import catalog_arch, load_catalog

    num, _ = parse_arch(arch)
    try:
        catalog_arch(arch)
    except KernelProError:
        raise KernelProError(f"--arch {arch}: not a target kernelpro verifies; use one of "
                             f"{', '.join(load_catalog().archs)}") from None
    have = nvcc_archs()
    if have is not None and num not in have:
        raise KernelProError(f"--arch {arch}: this nvcc cannot build compute_{num} (it lists "
                             f"{', '.join('sm_' + a for a in sorted(have, key=int))}); install a newer CUDA toolkit")
    return arch
