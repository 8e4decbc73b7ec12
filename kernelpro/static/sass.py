"""SASS of a cubin (cuobjdump -sass): per-function instructions, calls, local-memory traffic, the mix."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.errors import KernelProError
from kernelpro.static.compile import KernelResources
from kernelpro.toolchain import require_tool


@dataclass
class SassInstr:
    offset: int
    opcode: str                 # full, e.g. HGMMA.64x128x16.F32.BF16
    base: str                   # e.g. HGMMA
    modifiers: list[str]
    operands: str               # operand text as printed
    predicate: str | None = None  # e.g. "P0", "!UP1"


@dataclass
class SassReport:
    name: str
    registers: int | None
    smem_bytes: int | None
    stack_bytes: int | None
    local_bytes: int | None
    spill_stores: int | None
    spill_loads: int | None
    ldl: int
    stl: int
    instructions: int
    mix: dict[str, int] = field(default_factory=dict)   # opcode family -> count
    callees: list[str] = field(default_factory=list)


_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSTR = re.compile(r"^\s*/\*(?P<off>[0-9a-f]{4,})\*/\s+(?:@(?P<pred>!?U?P[T0-9]+)\s+)?"
                    r"(?P<op>[A-Z][A-Za-z0-9_.]*)\s*(?P<args>[^;]*);")
_CALLEE = re.compile(r"`\(([^)]+)\)")


def parse_sass(text: str) -> dict[str, list[SassInstr]]:
    """Function name -> instructions, from `cuobjdump -sass` (or `nvdisasm`) text."""
    out: dict[str, list[SassInstr]] = {}
    current: list[SassInstr] | None = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            parts = m.group("op").split(".")
            current.append(SassInstr(int(m.group("off"), 16), m.group("op"), parts[0], parts[1:],
                                     m.group("args").strip(), m.group("pred")))
    return out


def _cuobjdump(args: list[str], cubin: Path) -> str:
    tool = require_tool("cuobjdump")
    try:
        p = subprocess.run([str(tool), *args, str(cubin)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise KernelProError(f"cuobjdump {' '.join(args)} timed out on {cubin}") from None
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        raise KernelProError(f"cuobjdump {' '.join(args)} failed on {cubin}: {msg[-1] if msg else p.returncode}")
    return p.stdout


def disassemble(cubin: str | Path) -> dict[str, list[SassInstr]]:
    cubin = Path(cubin)
    if not cubin.is_file():
        raise KernelProError(f"no cubin at {cubin}; compile the candidate first")
    return parse_sass(_cuobjdump(["-sass"], cubin))


_RES = re.compile(r"^\s*Function (\S+):\s*$")


def resource_usage(cubin: str | Path) -> dict[str, dict[str, int]]:
    """Function -> {REG, STACK, SHARED, LOCAL, ...} from `cuobjdump -res-usage`."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in _cuobjdump(["-res-usage"], Path(cubin)).splitlines():
        m = _RES.match(line)
        if m:
            current = m.group(1)
            continue
        if current and ":" in line:
            out[current] = {k: int(v) for k, v in re.findall(r"([A-Z_\[\]0-9]+):(\d+)", line)}
            current = None
    return out


def callees(instrs: list[SassInstr]) -> list[str]:
    """Functions named by CALL instructions (relocatable code names its targets; whole-program code inlines)."""
    out = []
    for i in instrs:
        if i.base == "CALL":
            for name in _CALLEE.findall(i.operands):
                if name not in out:
                    out.append(name)
    return out


_SYM = re.compile(r"^\s*0x([0-9a-f]+)\s+\S+\s+\S+\s+FUNC\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)\s*$")
_EDGE = re.compile(r"^\s*<(\d+),(\d+)>\s*$")


def callgraph(cubin: str | Path) -> dict[str, set[str]]:
    """Caller -> callees from the cubin's .nv.callgraph section (relocatable code prints CALL 0x0)."""
    text = _cuobjdump(["-elf"], Path(cubin))
    syms: dict[int, str] = {}
    edges: list[tuple[int, int]] = []
    in_graph = False
    for line in text.splitlines():
        m = _SYM.match(line)
        if m:
            syms[int(m.group(1), 16)] = m.group(2)
            continue
        if line.strip() == ".nv.callgraph":
            in_graph = True
            continue
        if in_graph:
            m = _EDGE.match(line)
            if m:
                edges.append((int(m.group(1)), int(m.group(2))))
            elif line.strip() and not line.strip().startswith("<"):
                in_graph = False
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        if a in syms and b in syms:
            graph.setdefault(syms[a], set()).add(syms[b])
    return graph


def reachable(funcs: dict[str, list[SassInstr]], kernel: str,
              graph: dict[str, set[str]] | None = None) -> list[str]:
    """The kernel and the functions it calls (by CALL operand names and the ELF call graph)."""
    seen: list[str] = []
    stack = [kernel]
    while stack:
        f = stack.pop()
        if f in seen or f not in funcs:
            continue
        seen.append(f)
        stack.extend(callees(funcs[f]))
        stack.extend(sorted((graph or {}).get(f, ())))
    return seen


# Opcode families for the instruction mix; first match on the base opcode wins.
_FAMILIES: list[tuple[str, re.Pattern[str]]] = [
    ("tensor_core", re.compile(r"^(HGMMA|QGMMA|IGMMA|BGMMA|HMMA|IMMA|DMMA|BMMA|UTC\w*MMA|UTCCP|UTCBAR|LDTM|STTM|WARPGROUP)$")),
    ("tma_bulk", re.compile(r"^(UTMA\w*|UBLK\w*)$")),
    ("sync", re.compile(r"^(SYNCS|BAR|MEMBAR|FENCE|ERRBAR|CGAERRBAR|UCGABAR_\w+|DEPBAR|LDGDEPBAR|WARPSYNC|BSSY|BSYNC|ELECT|VOTE|VOTEU|NANOSLEEP|ARRIVES|REDUX)$")),
    ("global_mem", re.compile(r"^(LDG|STG|LDGSTS|RED|ATOMG|LD|ST|ATOM|CCTL)$")),
    ("shared_mem", re.compile(r"^(LDS|STS|LDSM|STSM|ATOMS|STAS|REDAS)$")),
    ("local_mem", re.compile(r"^(LDL|STL)$")),
    ("constant", re.compile(r"^(LDC|LDCU|ULDC)$")),
    ("fp32", re.compile(r"^(FADD|FMUL|FFMA|FMNMX|FSETP|FSEL|FCHK|FSET|FSWZADD|MUFU|FRND)$")),
    ("fp16_packed", re.compile(r"^(HADD2|HMUL2|HFMA2|HMNMX2|HSETP2)$")),
    ("fp64", re.compile(r"^(DADD|DMUL|DFMA|DSETP)$")),
    ("conversion", re.compile(r"^(F2F|F2I|I2F|I2FP|F2FP|FRND|I2I)$")),
    ("int", re.compile(r"^(IMAD|IADD3|IADD|LEA|LOP3|SHF|ISETP|IMNMX|VIADD|VIADDMNMX|IABS|POPC|FLO|BREV|PRMT|SEL|SGXT|BMSK|PLOP3|P2R|R2P)$")),
    ("uniform", re.compile(r"^U\w+$")),
    ("move", re.compile(r"^(MOV|S2R|S2UR|CS2R|R2UR|SHFL)$")),
    ("control", re.compile(r"^(BRA|EXIT|RET|CALL|JMP|BRX|BPT|YIELD|KILL|WARPSYNC)$")),
]


def family(base: str) -> str:
    for name, pat in _FAMILIES:
        if pat.match(base):
            return name
    return "other"


def instruction_mix(instrs: list[SassInstr]) -> dict[str, int]:
    counts = Counter(family(i.base) for i in instrs if i.base != "NOP")
    return dict(counts.most_common())


def kernel_report(name: str, funcs: dict[str, list[SassInstr]],
                  res_usage: dict[str, dict[str, int]] | None = None,
                  ptxas: dict[str, KernelResources] | None = None,
                  graph: dict[str, set[str]] | None = None) -> SassReport:
    """Resources and SASS statistics for one kernel, including the functions it calls."""
    instrs = [i for f in reachable(funcs, name, graph) for i in funcs[f]]
    ru = (res_usage or {}).get(name, {})
    px = (ptxas or {}).get(name)
    return SassReport(
        name=name,
        registers=ru.get("REG", px.registers if px else None),
        # ptxas counts the kernel's own static shared memory; -res-usage adds the 1 KiB the system reserves.
        smem_bytes=px.smem_bytes if px else ru.get("SHARED"),
        stack_bytes=ru.get("STACK", px.stack_bytes if px else None),
        local_bytes=ru.get("LOCAL"),
        spill_stores=px.spill_stores if px else None,
        spill_loads=px.spill_loads if px else None,
        ldl=sum(1 for i in instrs if i.base == "LDL"),
        stl=sum(1 for i in instrs if i.base == "STL"),
        instructions=sum(1 for i in instrs if i.base != "NOP"),
        mix=instruction_mix(instrs),
        callees=[f for f in reachable(funcs, name, graph) if f != name],
    )
