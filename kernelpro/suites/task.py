"""The task format: a KernelBench-compatible Python file plus a literal ``META`` dict.

A task file defines ``Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``, exactly as in
KernelBench; problem sizes are module-level globals (``M = 4096``) that ``get_inputs`` reads. The
globals as written are the size that is timed. KernelPro's metadata is one module-level constant::

    META = {
        "name": "gemm_bf16",                      # default: file stem
        "level": 1,
        "dtype": "bf16",                          # fp32 | tf32 | fp16 | bf16 | fp8_e4m3
        "tolerance": {"atol": 2e-2, "rtol": 2e-2, "rel_norm": 1e-2},   # default: by dtype
        "sizes": {"shown": [{"M": 512, ...}], "heldout": [{"M": 1000, ...}]},
        "features": {"sm_90a": ["wgmma", "tma", "mbarrier"], "sm_100a": ["tcgen05_mma", "tmem"]},
        "baseline": "cublas",                     # the vendor path the reference Model itself takes
        "forbid_ops": ["aten::mm", "aten::matmul"],   # library ops a candidate may not fall back to
        "forbid_kernels": "gemm|cutlass|nvjet",   # regex on launched kernel names, same purpose
        "flops": "2*M*N*K",                       # arithmetic in the size globals
        "bytes": "2*(M*K + K*N + M*N)",
        "headline": False,
        "description": "C = A @ B in bf16 with fp32 accumulation.",
        "sdpa": {"direction": "backward", "causal": False},   # attention: the cudnn_frontend/torch_sdpa baselines
        "triton": "grouped_mm",                   # a TRITON_KERNELS name: the `triton` baseline, timed by default
    }

A task whose ``get_inputs`` returns fixed data (a recorded blob) may also define ``get_fresh_inputs()``,
a set of the same kind drawn anew: the harness gives the fixed data to the first trial of each size and
fresh sets to every other draw (``Evaluator._inputs``).

``META`` is read with ``ast.literal_eval`` so listing a suite never executes task code. A file
without ``META`` (a plain KernelBench problem) gets defaults.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.errors import TaskError

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3")

# Tight enough that an fp32 task computed in bf16 (rel. error ~3e-3) or in TF32 (~5e-4) fails.
DEFAULT_TOLERANCE: dict[str, dict[str, float]] = {
    "fp32": {"atol": 1e-4, "rtol": 1e-4, "rel_norm": 1e-4},
    "tf32": {"atol": 5e-3, "rtol": 5e-3, "rel_norm": 2e-3},
    "fp16": {"atol": 1e-2, "rtol": 1e-2, "rel_norm": 5e-3},
    "bf16": {"atol": 2e-2, "rtol": 2e-2, "rel_norm": 1e-2},
    "fp8_e4m3": {"atol": 1e-1, "rtol": 1e-1, "rel_norm": 5e-2},
}

KNOWN_KEYS = {
    "name", "suite", "level", "dtype", "tolerance", "sizes", "features", "baseline", "forbid_ops",
    "forbid_kernels", "flops", "bytes", "headline", "description", "sdpa",
    "triton",
}
ARCHS = ("sm_90a", "sm_100a")


@dataclass(frozen=True)
class Task:
    name: str
    suite: str
    path: Path
    level: int = 1
    dtype: str = "fp32"
    tolerance: dict[str, float] = field(default_factory=dict)
    default_size: dict[str, Any] = field(default_factory=dict)
    shown_sizes: tuple[dict[str, Any], ...] = ()
    heldout_sizes: tuple[dict[str, Any], ...] = ()
    features: dict[str, tuple[str, ...]] = field(default_factory=dict)
    baseline: str = "torch"
    forbid_ops: tuple[str, ...] = ()
    forbid_kernels: str = ""
    flops: str | None = None
    bytes: str | None = None
    headline: bool = False
    description: str = ""
    sdpa: dict[str, Any] = field(default_factory=dict)   # {"direction": forward|backward, "causal": bool}
    triton: str = ""   # a kernelpro.harness.triton_grouped.TRITON_KERNELS name: the task's `triton` baseline

    @property
    def named_baselines(self) -> tuple[str, ...]:
        """The baselines the task's META names itself (added to bench's default set)."""
        return ("triton",) if self.triton else ()

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.name}"

    def requested_features(self, arch: str) -> tuple[str, ...]:
        return self.features.get(arch, ())

    def sizes(self, which: str = "all") -> list[dict[str, Any]]:
        """Problem sizes as full global assignments: 'default', 'shown', 'heldout' or 'all'."""
        out: list[dict[str, Any]] = []
        if which in ("default", "all"):
            out.append(dict(self.default_size))
        if which in ("shown", "all"):
            out += [{**self.default_size, **s} for s in self.shown_sizes]
        if which in ("heldout", "all"):
            out += [{**self.default_size, **s} for s in self.heldout_sizes]
        return out

    def work(self, size: dict[str, Any] | None = None) -> tuple[float | None, float | None]:
        """(flops, bytes) for one call at `size`, from the META expressions; None where not declared."""
        env = {**self.default_size, **(size or {})}
        return (_eval_expr(self.flops, env, self.path) if self.flops else None,
                _eval_expr(self.bytes, env, self.path) if self.bytes else None)


_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Add,
                  ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.USub, ast.UAdd,
                  ast.Call)


def _eval_expr(expr: str, env: dict[str, Any], path: Path) -> float:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise TaskError(f"{path}: META expression {expr!r} is not valid Python: {e.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise TaskError(f"{path}: META expression {expr!r} may only use arithmetic on size globals")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in ("min", "max", "ceil")):
            raise TaskError(f"{path}: META expression {expr!r} may call only min, max, ceil")
    scope = {k: v for k, v in env.items() if isinstance(v, int | float)}
    try:
        return float(eval(compile(tree, str(path), "eval"),
                          {"__builtins__": {}, "min": min, "max": max, "ceil": math.ceil}, scope))
    except NameError as e:
        raise TaskError(f"{path}: META expression {expr!r} names an unknown size global ({e})") from None


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Top-level `NAME = <literal>` assignments: the task's size globals (and META)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                # Not a literal (a computed value): only META must be literal, and that is checked below.
                if node.targets[0].id == "META":
                    raise
    return out


def load_task(path: str | Path, suite: str | None = None) -> Task:
    """Parse a task file without executing it. Raises TaskError with a one-line message."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TaskError(f"{path}: cannot read task file ({e.strerror})") from None
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise TaskError(f"{path}:{e.lineno}: task file is not valid Python: {e.msg}") from None
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if required not in defined:
            raise TaskError(f"{path}: task file must define {required} (KernelBench format)")
    try:
        consts = _module_constants(tree)
    except (ValueError, SyntaxError, TypeError):
        raise TaskError(f"{path}: META must be a literal dict (strings, numbers, lists, dicts)") from None
    meta = consts.pop("META", {})
    if not isinstance(meta, dict):
        raise TaskError(f"{path}: META must be a dict, got {type(meta).__name__}")
    unknown = set(meta) - KNOWN_KEYS
    if unknown:
        raise TaskError(f"{path}: META has unknown key(s) {sorted(unknown)}; known: {sorted(KNOWN_KEYS)}")
    dtype = meta.get("dtype", "fp32")
    if dtype not in DTYPES:
        raise TaskError(f"{path}: META dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    tol = {**DEFAULT_TOLERANCE[dtype], **meta.get("tolerance", {})}
    if set(tol) != {"atol", "rtol", "rel_norm"} or not all(isinstance(v, int | float) for v in tol.values()):
        raise TaskError(f"{path}: META tolerance takes numeric atol, rtol and rel_norm only")
    sizes = meta.get("sizes", {})
    if not isinstance(sizes, dict) or set(sizes) - {"shown", "heldout"}:
        raise TaskError(f"{path}: META sizes must be a dict with 'shown' and/or 'heldout' lists")
    default_size = {k: v for k, v in consts.items() if isinstance(v, int | float | bool) and not k.startswith("_")}
    for which in ("shown", "heldout"):
        for s in sizes.get(which, []):
            if not isinstance(s, dict):
                raise TaskError(f"{path}: META sizes.{which} entries must be dicts of size globals")
            missing = set(s) - set(default_size)
            if missing:
                raise TaskError(f"{path}: META sizes.{which} sets {sorted(missing)}, which the file does not define")
    features = meta.get("features", {})
    if not isinstance(features, dict) or not all(isinstance(v, list) for v in features.values()):
        raise TaskError(f"{path}: META features must map an arch (e.g. 'sm_90a') to a list of feature names")
    bad_arch = set(features) - set(ARCHS)
    if bad_arch:
        raise TaskError(f"{path}: META features names unknown arch(s) {sorted(bad_arch)}; known: {ARCHS}")
    sdpa = meta.get("sdpa", {})
    if not isinstance(sdpa, dict) or set(sdpa) - {"direction", "causal"} or (
            sdpa and (sdpa.get("direction") not in ("forward", "backward") or not isinstance(sdpa.get("causal"), bool))):
        raise TaskError(f"{path}: META sdpa must be {{'direction': 'forward'|'backward', 'causal': true|false}}")
    triton = meta.get("triton", "")
    if triton:
        # the registry's names only: importing the module does not import Triton
        from kernelpro.harness.triton_grouped import TRITON_KERNELS

        if not isinstance(triton, str) or triton not in TRITON_KERNELS:
            raise TaskError(f"{path}: META triton must name a Triton baseline kernel, one of "
                            f"{sorted(TRITON_KERNELS)}; got {triton!r}")
    task = Task(
        name=str(meta.get("name", path.stem)),
        suite=str(meta.get("suite", suite or path.parent.name)),
        path=path.resolve(),
        level=int(meta.get("level", 1)),
        dtype=dtype,
        tolerance=tol,
        default_size=default_size,
        shown_sizes=tuple(sizes.get("shown", [])),
        heldout_sizes=tuple(sizes.get("heldout", [])),
        features={a: tuple(v) for a, v in features.items()},
        baseline=str(meta.get("baseline", "torch")),
        forbid_ops=tuple(meta.get("forbid_ops", [])),
        forbid_kernels=str(meta.get("forbid_kernels", "")),
        flops=meta.get("flops"),
        bytes=meta.get("bytes"),
        headline=bool(meta.get("headline", False)),
        description=str(meta.get("description", "")),
        sdpa=dict(sdpa),
        triton=str(triton),
    )
    for size in task.sizes():  # catch bad expressions at load time, not mid-run
        task.work(size)
    return task


SUITES_DIR = Path(__file__).parent


def suite_dir(suite: str) -> Path:
    d = SUITES_DIR / suite / "tasks"
    if not d.is_dir():
        known = sorted(p.name for p in SUITES_DIR.iterdir() if (p / "tasks").is_dir())
        raise TaskError(f"unknown suite {suite!r}; shipped suites: {', '.join(known)} (or pass a folder path)")
    return d


def load_suite(suite: str | Path) -> list[Task]:
    """All tasks of a shipped suite (by name) or of a folder of task files, sorted by level then name."""
    folder = Path(suite)
    name = folder.name
    if not folder.is_dir():
        folder = suite_dir(str(suite))
        name = str(suite)
    tasks = [load_task(p, suite=name) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]
    if not tasks:
        raise TaskError(f"{folder} holds no task files (*.py with Model, get_inputs, get_init_inputs); pass a "
                        "suite name (ptxbench) or a folder of task files")
    return sorted(tasks, key=lambda t: (t.level, t.name))


def reference_solution(task: Task) -> Path | None:
    """The suite's own solution for a task (reference/<name>.py|.cu|.ptx beside tasks/), if it ships one."""
    base = task.path.parent.parent / "reference"
    for ext in (".py", ".cu", ".ptx"):
        p = base / f"{task.name}{ext}"
        if p.is_file():
            return p
    return None


def find_task(spec: str) -> Task:
    """A task by file path, by 'suite/name', or by bare name in the ptxbench suite."""
    p = Path(spec)
    if p.suffix == ".py" and p.exists():
        return load_task(p)
    suite, _, name = spec.rpartition("/")
    for t in load_suite(suite or "ptxbench"):
        if t.name == name:
            return t
    raise TaskError(f"no task {spec!r}; list them with `kernelpro tasks {suite or 'ptxbench'}`")


def import_module_from(path: Path, unique: str) -> Any:
    """Import a Python file as a fresh module (never cached under its own name)."""
    spec = importlib.util.spec_from_file_location(unique, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[unique] = mod  # dataclasses and pickling look modules up here
    spec.loader.exec_module(mod)
    return mod


def instantiate(task: Task, size: dict[str, Any] | None = None, device: str = "cpu",
                seed: int = 0) -> tuple[Any, Any, list[Any]]:
    """Import the task file, apply `size` to its globals, and build (module, Model, inputs).

    Inputs are created with `device` as the default device, so large tensors are born on the GPU;
    any that a KernelBench file still makes on the CPU are moved.
    """
    import torch

    mod = import_module_from(task.path, f"kp_task_{task.suite}_{task.name}_{abs(hash(str(size)))}")
    mod.__dict__.update(size or {})
    torch.manual_seed(seed)
    with torch.device(device):
        init = list(mod.get_init_inputs())
        model = mod.Model(*init).to(device)
        torch.manual_seed(seed + 1)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    return mod, model, inputs
