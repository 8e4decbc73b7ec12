"""FlashInfer-Trace trace sets (PTXBench's task format) as a suite: `kernelpro bench flashinfer-trace --path DIR`.

A trace set is a folder with ``definitions/**/*.json`` and ``workloads/**/*.jsonl`` (FlashInfer-Bench's
layout; PTXBench keeps its trace sets under ``data/datasets/<name>/`` of a checkout, which is accepted
too). A definition names its axes (``const`` with a value, or ``var``), typed inputs and outputs (shape as
axis names, dtype), and a reference ``run()`` in Python that takes the inputs and returns the outputs; a
workload line gives the var axes' values and how each input is made (``random``, ``scalar`` or
``safetensors``). Facts read from FlashInfer-Bench's data model and evaluator (not copied):

- random inputs: ``torch.randn`` for fp32/fp16/bf16; fp8 from a clamped ([-2, 2]) fp32 normal; ints from
  randint (int8 [-128, 128), others [-1024, 1024)); bool from randint(0, 2); unlisted inputs are random;
- outputs are allocated by the harness (``torch.empty`` of the definition's shapes) and passed after the
  inputs when the solution is destination-passing (``run(A, B, C)``);
- correctness: an element is wrong when ``|x-y| > atol`` and ``|x-y|/(|y|+1e-8) > rtol``, none may be.

Each definition becomes one KernelPro task: a generated KernelBench-format file (``Model`` runs the
definition's ``run()``, ``get_inputs`` makes one workload's inputs) in KernelPro's cache, keyed by the
content of the definition and its workloads, whose literal ``META`` carries everything the task is. So
the worker, the build stage and the static verifier read it like any task file. The first workload line
is the timed size; every other line is a checked size.

Solutions (``--solutions DIR``): ``DIR/<definition>/kernel.cu``, ``DIR/<definition>.cu`` or a
FlashInfer-Bench ``solution.json`` anywhere under DIR whose ``definition`` names it. Each is wrapped
unchanged in a generated candidate (``ModelNew`` loads the TVM-FFI build, allocates the outputs and
calls ``run``), so every check of the harness applies to it. ``--solutions reference`` runs each
definition's own ``run()`` as the candidate.
"""

from __future__ import annotations

import ast
import hashlib
import json
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError, TaskError
from kernelpro.suites.task import Task, load_task

SUITE = "flashinfer-trace"
SHIM_VERSION = 1

# FlashInfer-Trace dtype -> (torch dtype name, KernelPro dtype or None)
DTYPES: dict[str, tuple[str, str | None]] = {
    "float32": ("float32", "fp32"), "float16": ("float16", "fp16"), "bfloat16": ("bfloat16", "bf16"),
    "float8_e4m3fn": ("float8_e4m3fn", "fp8_e4m3"), "float8_e5m2": ("float8_e5m2", None),
    "float4_e2m1": ("float4_e2m1fn_x2", None), "int64": ("int64", None), "int32": ("int32", None),
    "int16": ("int16", None), "int8": ("int8", None), "bool": ("bool", None),
}
# PTXBench's architecture check (REQUIRED_INSTS of its problem scripts): TMA and the arch's tensor-core
# MMA, on every definition; KernelPro's feature names.
PTXBENCH_FEATURES = {"sm_90a": ("tma", "wgmma"), "sm_100a": ("tma", "tcgen05_mma")}

DEFINITION_KEYS = {"name", "op_type", "axes", "inputs", "outputs", "reference", "tags", "description",
                   "constraints"}
AXIS_KEYS = {"type", "value", "description"}
TENSOR_KEYS = {"shape", "dtype", "description"}
TRACE_KEYS = {"definition", "workload", "solution", "evaluation"}
WORKLOAD_KEYS = {"axes", "inputs", "uuid", "outputs"}
INPUT_KEYS = {"random": {"type"}, "scalar": {"type", "value"}, "safetensors": {"type", "path", "tensor_key"}}
SOLUTION_KEYS = {"name", "definition", "author", "spec", "sources", "description"}
SPEC_KEYS = {"language", "target_hardware", "entry_point", "dependencies", "destination_passing_style", "binding"}


def _check_keys(where: str, what: str, d: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise TaskError(f"{where}: {what} must be a JSON object, got {type(d).__name__}")
    unknown = sorted(set(d) - known)
    if unknown:
        raise TaskError(f"{where}: {what} has unknown key(s) {unknown}; known: {sorted(known)}")
    return d


# -- records ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Axis:
    name: str
    kind: str            # const | var
    value: int | None    # const only

    @classmethod
    def from_dict(cls, name: str, d: Any, where: str) -> Axis:
        d = _check_keys(where, f"axis {name!r}", d, AXIS_KEYS)
        kind = d.get("type")
        if kind == "const":
            v = d.get("value")
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise TaskError(f"{where}: const axis {name!r} needs a non-negative integer value, got {v!r}")
            return cls(name, "const", v)
        if kind == "var":
            if d.get("value") is not None:
                raise TaskError(f"{where}: var axis {name!r} takes no value (workloads give it)")
            return cls(name, "var", None)
        raise TaskError(f"{where}: axis {name!r} has type {kind!r}; choose const or var")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[str, ...] | None    # None: a scalar
    dtype: str

    @classmethod
    def from_dict(cls, name: str, d: Any, where: str, axes: dict[str, Axis]) -> TensorSpec:
        d = _check_keys(where, f"tensor {name!r}", d, TENSOR_KEYS)
        if d.get("dtype") not in DTYPES:
            raise TaskError(f"{where}: tensor {name!r} dtype {d.get('dtype')!r} is not one of {', '.join(DTYPES)}")
        shape = d.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(a, str) and a for a in shape):
                raise TaskError(f"{where}: tensor {name!r} shape must be a list of axis names or null")
            bad = [a for a in shape if a not in axes]
            if bad:
                raise TaskError(f"{where}: tensor {name!r} uses undefined axis {bad[0]!r}; define it under axes")
            shape = tuple(shape)
        return cls(name, shape, d["dtype"])

    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, DTYPES[self.dtype][0])

    def dims(self, axes: dict[str, int]) -> tuple[int, ...] | None:
        return None if self.shape is None else tuple(axes[a] for a in self.shape)


@dataclass(frozen=True)
class Definition:
    name: str
    op_type: str
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: str
    tags: tuple[str, ...]
    description: str
    constraints: tuple[str, ...]
    path: Path

    @classmethod
    def from_dict(cls, d: Any, path: Path) -> Definition:
        where = str(path)
        d = _check_keys(where, "definition", d, DEFINITION_KEYS)
        for k in ("name", "op_type", "reference"):
            if not isinstance(d.get(k), str) or not d[k]:
                raise TaskError(f"{where}: definition needs a non-empty string {k!r}")
        for k in ("axes", "inputs", "outputs"):
            if not isinstance(d.get(k), dict) or (k != "axes" and not d[k]):
                raise TaskError(f"{where}: definition needs {k!r} as a JSON object" + ("" if k == "axes" else
                                                                                     " with at least one entry"))
        axes = {n: Axis.from_dict(n, a, where) for n, a in d["axes"].items()}
        inputs = {n: TensorSpec.from_dict(n, t, where, axes) for n, t in d["inputs"].items()}
        outputs = {n: TensorSpec.from_dict(n, t, where, axes) for n, t in d["outputs"].items()}
        both = sorted(set(inputs) & set(outputs))
        if both:
            raise TaskError(f"{where}: input and output names overlap: {both}")
        try:
            tree = ast.parse(d["reference"], filename=f"{where}:reference")
        except SyntaxError as e:
            raise TaskError(f"{where}: reference is not valid Python (line {e.lineno}: {e.msg})") from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            raise TaskError(f"{where}: reference must define a top-level function run()")
        for c in d.get("constraints") or []:
            try:
                ast.parse(c, mode="eval")
            except SyntaxError:
                raise TaskError(f"{where}: constraint {c!r} is not a Python expression") from None
        return cls(name=d["name"], op_type=d["op_type"], axes=axes, inputs=inputs, outputs=outputs,
                   reference=d["reference"], tags=tuple(d.get("tags") or ()), description=str(d.get("description") or ""),
                   constraints=tuple(d.get("constraints") or ()), path=path.resolve())

    @property
    def const_axes(self) -> dict[str, int]:
        return {n: a.value for n, a in self.axes.items() if a.kind == "const" and a.value is not None}

    @property
    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if a.kind == "var"]

    def bind(self, inputs: list[Any]) -> dict[str, int]:
        """Every axis value, the var ones read from the inputs' shapes (as FlashInfer-Bench binds them)."""
        out = dict(self.const_axes)
        for spec, x in zip(self.inputs.values(), inputs, strict=False):
            if spec.shape is None or not hasattr(x, "shape"):
                continue
            if len(x.shape) != len(spec.shape):
                raise ValueError(f"input {spec.name}: {len(x.shape)} dims, the definition has {len(spec.shape)}")
            for a, n in zip(spec.shape, x.shape, strict=True):
                if out.setdefault(a, int(n)) != int(n):
                    raise ValueError(f"axis {a}: {out[a]} and {int(n)} in different inputs")
        return out


@dataclass(frozen=True)
class InputSpec:
    kind: str                       # random | scalar | safetensors
    value: int | float | bool | None = None
    path: str | None = None
    tensor_key: str | None = None

    @classmethod
    def from_dict(cls, name: str, d: Any, where: str) -> InputSpec:
        if not isinstance(d, dict) or d.get("type") not in INPUT_KEYS:
            raise TaskError(f"{where}: input {name!r} needs type random, scalar or safetensors")
        _check_keys(where, f"input {name!r}", d, INPUT_KEYS[d["type"]])
        if d["type"] == "scalar":
            if not isinstance(d.get("value"), int | float | bool):
                raise TaskError(f"{where}: scalar input {name!r} needs a number or boolean value")
            return cls("scalar", value=d["value"])
        if d["type"] == "safetensors":
            if not isinstance(d.get("path"), str) or not isinstance(d.get("tensor_key"), str):
                raise TaskError(f"{where}: safetensors input {name!r} needs string path and tensor_key")
            return cls("safetensors", path=d["path"], tensor_key=d["tensor_key"])
        return cls("random")


@dataclass(frozen=True)
class Workload:
    definition: str
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, InputSpec]
    where: str                      # file:line

    @classmethod
    def from_line(cls, text: str, path: Path, lineno: int) -> Workload:
        where = f"{path}:{lineno}"
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskError(f"{where}: workload line is not JSON ({e.msg})") from None
        d = _check_keys(where, "workload line", d, TRACE_KEYS)
        if not isinstance(d.get("definition"), str) or not d["definition"]:
            raise TaskError(f"{where}: workload line needs the definition's name under 'definition'")
        w = _check_keys(where, "workload", d.get("workload"), WORKLOAD_KEYS)
        if not isinstance(w.get("uuid"), str) or not w["uuid"]:
            raise TaskError(f"{where}: workload needs a uuid")
        axes = w.get("axes")
        if not isinstance(axes, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                 for v in axes.values()):
            raise TaskError(f"{where}: workload axes must map axis names to non-negative integers")
        inputs = w.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise TaskError(f"{where}: workload inputs must be a JSON object")
        return cls(d["definition"], w["uuid"], dict(axes),
                   {n: InputSpec.from_dict(n, s, where) for n, s in inputs.items()}, where)

    def check_against(self, defn: Definition) -> None:
        extra = sorted(set(self.axes) - set(defn.axes))
        if extra:
            raise TaskError(f"{self.where}: workload sets axis {extra[0]!r}, which {defn.name} does not define")
        for a, v in self.axes.items():
            if defn.axes[a].kind == "const" and defn.axes[a].value != v:
                raise TaskError(f"{self.where}: workload sets const axis {a}={v}; {defn.name} fixes it at "
                                f"{defn.axes[a].value}")
        missing = [a for a in defn.var_axes if a not in self.axes]
        if missing:
            raise TaskError(f"{self.where}: workload gives no value for var axis {missing[0]!r} of {defn.name}")
        bad = sorted(set(self.inputs) - set(defn.inputs))
        if bad:
            raise TaskError(f"{self.where}: workload input {bad[0]!r} is not an input of {defn.name}")
        for n, s in self.inputs.items():
            if s.kind == "scalar" and defn.inputs[n].shape is not None:
                raise TaskError(f"{self.where}: input {n!r} is a tensor in {defn.name}; a scalar value cannot fill it")


@dataclass(frozen=True)
class TraceSet:
    root: Path
    definitions: dict[str, Definition]
    workloads: dict[str, list[Workload]]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise TaskError(f"{path}: cannot read ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: not JSON ({getattr(e, 'msg', e)})") from None


def find_root(path: str | Path | None) -> Path:
    """The trace set at `path`: the folder holding definitions/ (and workloads/), or a PTXBench checkout
    whose data/datasets/ holds exactly one trace set."""
    if not path:
        raise TaskError(f"the {SUITE} suite needs --path DIR (a FlashInfer-Trace trace set with definitions/ and "
                        "workloads/, or a PTXBench checkout with one under data/datasets/)")
    root = Path(path).expanduser()
    if (root / "definitions").is_dir():
        return root
    sets = sorted(p for p in (root / "data" / "datasets").glob("*") if (p / "definitions").is_dir())
    if len(sets) == 1:
        return sets[0]
    if len(sets) > 1:
        raise TaskError(f"{root}: several trace sets under data/datasets ({', '.join(p.name for p in sets)}); "
                        "pass one of them with --path")
    raise TaskError(f"{root} is not a FlashInfer-Trace trace set (no definitions/ folder, nor one under "
                    "data/datasets/*); pass the folder that holds definitions/ and workloads/")


def load_trace_set(path: str | Path | None) -> TraceSet:
    """Every definition and workload under the trace set; one-line TaskErrors naming the file (and line)."""
    root = find_root(path)
    defs: dict[str, Definition] = {}
    for p in sorted((root / "definitions").rglob("*.json")):
        d = Definition.from_dict(_read_json(p), p)
        if d.name in defs:
            raise TaskError(f"{p}: definition {d.name!r} is also defined in {defs[d.name].path}")
        defs[d.name] = d
    if not defs:
        raise TaskError(f"{root / 'definitions'}: no definition files (*.json)")
    loads: dict[str, list[Workload]] = {}
    for p in sorted((root / "workloads").rglob("*.jsonl")) if (root / "workloads").is_dir() else []:
        try:
            lines = p.read_text().splitlines()
        except OSError as e:
            raise TaskError(f"{p}: cannot read ({e.strerror})") from None
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            w = Workload.from_line(line, p, i)
            if w.definition not in defs:
                raise TaskError(f"{w.where}: workload names definition {w.definition!r}, which is not in "
                                f"{root / 'definitions'}")
            w.check_against(defs[w.definition])
            loads.setdefault(w.definition, []).append(w)
    return TraceSet(root.resolve(), defs, loads)


# -- tasks --------------------------------------------------------------------------------------------
def _kp_dtype(defn: Definition) -> str:
    for spec in defn.outputs.values():
        kp = DTYPES[spec.dtype][1]
        if kp:
            return kp
    return "fp32"


def _sdpa_meta(defn: Definition) -> dict[str, Any] | None:
    """What the cuDNN-frontend SDPA baseline needs, for attention definitions shaped as PTXBench's are:
    forward run(Q, K, V) -> (O, LSE), backward run(Q, K, V, O, dO, LSE) -> (dQ, dK, dV), (B, H, S, D)."""
    names = list(defn.inputs)
    tags = {t.lower() for t in defn.tags}
    causal = "causal:true" in tags or defn.name.endswith("_causal")
    four = all(s.shape is not None and len(s.shape) == 4 for s in list(defn.inputs.values())[:3])
    if defn.op_type != "attention" or not four:
        return None
    if names[:3] == ["Q", "K", "V"] and len(names) == 3 and len(defn.outputs) in (1, 2):
        return {"direction": "forward", "causal": causal}
    if names[:5] == ["Q", "K", "V", "O", "dO"] and len(names) == 6 and len(defn.outputs) == 3:
        return {"direction": "backward", "causal": causal}
    return None


def _shim_text(ts: TraceSet, defn: Definition, loads: list[Workload]) -> str:
    default = {a: loads[0].axes[a] for a in defn.var_axes}
    shown = [{**{a: w.axes[a] for a in defn.var_axes}, "KP_WORKLOAD": i} for i, w in enumerate(loads) if i]
    meta: dict[str, Any] = {
        "name": defn.name, "suite": SUITE, "level": 1, "dtype": _kp_dtype(defn),
        "sizes": {"shown": shown, "heldout": []},
        "features": {a: list(f) for a, f in PTXBENCH_FEATURES.items()},
        "description": (defn.description or f"{defn.op_type} definition {defn.name}")[:300],
    }
    sdpa = _sdpa_meta(defn)
    if sdpa:
        meta["sdpa"] = sdpa
    workload_file = next((w.where.rsplit(":", 1)[0] for w in loads), "")
    lines = [
        f'"""{defn.name}: generated by KernelPro from a FlashInfer-Trace definition (edit the definition, not this',
        'file). Model runs the definition\'s reference run(); get_inputs makes workload KP_WORKLOAD\'s inputs;',
        'get_fresh_inputs the same with a blob drawn anew where the definition allows it."""',
        "",
        "from kernelpro.suites.flashinfer import TraceRuntime",
        "",
        f"TRACE_ROOT = {str(ts.root)!r}",
        f"DEFINITION = {str(defn.path)!r}",
        f"WORKLOADS = {workload_file!r}",
        f"UUIDS = {[w.uuid for w in loads]!r}",
        "KP_WORKLOAD = 0",
        *(f"{a} = {v!r}" for a, v in default.items()),
        f"META = {meta!r}",
        "",
        "_rt = TraceRuntime(TRACE_ROOT, DEFINITION, UUIDS)",
        "",
        "",
        "class Model(_rt.Reference):",
        "    pass",
        "",
        "",
        "def get_inputs():",
        "    return _rt.inputs(globals())",
        "",
        "",
        "def get_fresh_inputs():",
        "    return _rt.inputs(globals(), fresh=True)",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(lines)


def task_files(ts: TraceSet) -> list[Path]:
    """The generated task file of every definition that has workloads (content-addressed, written once)."""
    from kernelpro import paths

    out = []
    for name, defn in sorted(ts.definitions.items()):
        loads = ts.workloads.get(name)
        if not loads:
            continue
        text = _shim_text(ts, defn, loads)
        key = hashlib.sha256((text + defn.path.read_text()).encode()).hexdigest()[:16]
        p = paths.cache_dir("flashinfer_trace") / f"v{SHIM_VERSION}-{key}" / f"{name}.py"
        if not p.is_file() or p.read_text() != text:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(p)
        out.append(p)
    return out


def load_tasks(path: str | Path | None) -> list[Task]:
    ts = load_trace_set(path)
    files = task_files(ts)
    if not files:
        raise TaskError(f"{ts.root}: no definition has a workload (workloads/**/*.jsonl lines naming it)")
    return [load_task(p, suite=SUITE) for p in files]


# -- what the generated task file runs (inside the worker) -------------------------------------------
def _rand(shape: tuple[int, ...], dtype: Any) -> Any:
    import torch

    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return torch.randn(shape, dtype=dtype)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.randn(shape, dtype=torch.float32).clamp_(-2.0, 2.0).to(dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, dtype=torch.bool)
    lo, hi = (-128, 128) if dtype is torch.int8 else (-1024, 1024)
    return torch.randint(lo, hi, shape, dtype=dtype)


def reference_module(defn: Definition) -> types.ModuleType:
    """The definition's reference code as a fresh module (it is the task's code, run like a task file)."""
    mod = types.ModuleType(f"kp_fib_ref_{defn.name}")
    mod.__file__ = f"{defn.path}:reference"
    exec(compile(defn.reference, f"{defn.path}:reference", "exec"), mod.__dict__)  # noqa: S102 - the task's own code
    return mod


def normalize_outputs(defn: Definition, result: Any, axes: dict[str, int]) -> list[Any]:
    """A run()'s result as the definition's outputs in order, each in its declared dtype and shape."""
    import torch

    specs = list(defn.outputs.values())
    if isinstance(result, dict):
        result = [result[s.name] for s in specs]
    elif isinstance(result, torch.Tensor) or not isinstance(result, list | tuple):
        result = [result]
    if len(result) != len(specs):
        raise ValueError(f"{defn.name}: run() returned {len(result)} output(s), the definition has {len(specs)}")
    out = []
    for spec, x in zip(specs, result, strict=True):
        t = x if isinstance(x, torch.Tensor) else torch.tensor(x)
        want = spec.dims(axes)
        if want is not None and tuple(t.shape) != want:
            t = t.reshape(want)   # e.g. LSE returned as (B, H, S, 1) for a (B, H, S) output
        out.append(t.to(spec.torch_dtype()))
    return out


class TraceRuntime:
    """The task side of one definition: its reference as a Model, its workloads' inputs."""

    def __init__(self, root: str, definition: str, uuids: list[str]):
        self.root = Path(root)
        self.defn = Definition.from_dict(_read_json(Path(definition)), Path(definition))
        ts = load_trace_set(self.root)
        by_uuid = {w.uuid: w for w in ts.workloads.get(self.defn.name, [])}
        missing = [u for u in uuids if u not in by_uuid]
        if missing:
            raise TaskError(f"{definition}: workload {missing[0]} is no longer in {self.root}; list the suite again")
        self.loads = [by_uuid[u] for u in uuids]
        self._safetensors: dict[str, dict[str, Any]] = {}
        self._sdpa = _sdpa_meta(self.defn)
        self._backward = bool(self._sdpa and self._sdpa["direction"] == "backward")
        self.Reference = self._reference_class()

    def _reference_class(self) -> type:
        import torch

        defn, ref = self.defn, reference_module(self.defn)

        class Reference(torch.nn.Module):
            def forward(self, *inputs: Any) -> Any:
                outs = normalize_outputs(defn, ref.run(*inputs), defn.bind(list(inputs)))
                return outs[0] if len(outs) == 1 else tuple(outs)

        return Reference

    def _tensor_file(self, rel: str) -> dict[str, Any]:
        if rel not in self._safetensors:
            try:
                from safetensors.torch import load_file
            except ImportError:
                raise KernelProError("safetensors workload inputs need the safetensors package "
                                     "(pip install safetensors)") from None
            p = Path(rel) if Path(rel).is_absolute() else self.root / rel
            self._safetensors[rel] = load_file(str(p))
        return self._safetensors[rel]

    def redraws(self, w: Workload) -> bool:
        """Whether a fresh set of this workload can be drawn in place of its safetensors blob: only where the
        blob holds nothing a random draw cannot remake consistently. For attention backward PTXBench's blobs
        are random Q, K, V, dO with O and LSE from a forward, which `inputs` makes the same way; other blobs
        (fp8 values with the scales they were quantised with, index tensors) are kept as they are."""
        import torch

        blobs = [n for n, how in w.inputs.items() if how.kind == "safetensors"]
        return bool(blobs and self._backward
                    and all(self.defn.inputs[n].shape is not None
                            and self.defn.inputs[n].torch_dtype() in (torch.bfloat16, torch.float16, torch.float32)
                            for n in blobs))

    def inputs(self, g: dict[str, Any], fresh: bool = False) -> list[Any]:
        """One workload's inputs in definition order; var axes from the task globals (the size). `fresh`:
        a blob that `redraws` allows is drawn anew instead (the harness's probes and timed calls, so a
        candidate that knows the blob's answer gains nothing there)."""
        w = self.loads[int(g.get("KP_WORKLOAD", 0))]
        axes = {**self.defn.const_axes, **{a: int(g.get(a, w.axes[a])) for a in self.defn.var_axes}}
        names, specs = list(self.defn.inputs), list(self.defn.inputs.values())
        redraw = fresh and self.redraws(w)

        def how_of(name: str) -> InputSpec:
            how = w.inputs.get(name, InputSpec("random"))
            return InputSpec("random") if redraw and how.kind == "safetensors" else how

        # O and LSE drawn at random make P = exp(S - LSE) unnormalised (entries in the hundreds), a problem no
        # forward produces, where any bf16 P/dS kernel fails an fp32 run() elementwise. PTXBench makes its
        # backward workloads as here: random Q, K, V, dO, then O and LSE from a forward of the same Q, K, V;
        # done per set, so every seed's set is fresh and consistent.
        derive = self._backward and all(how_of(names[i]).kind == "random" for i in (3, 5))
        out: list[Any] = []
        for i, (name, spec) in enumerate(zip(names, specs, strict=True)):
            how = how_of(name)
            if derive and i in (3, 5):
                out.append(None)     # made below from this set's Q, K, V
            elif how.kind == "scalar":
                out.append(how.value)
            elif how.kind == "safetensors":
                out.append(self._tensor_file(str(how.path))[str(how.tensor_key)].clone())
            elif spec.shape is None:
                out.append(_rand((), spec.torch_dtype()).item())
            else:
                out.append(_rand(spec.dims(axes) or (), spec.torch_dtype()))
        if derive:
            o, lse = _forward_o_lse(out[0], out[1], out[2], self._sdpa["causal"])
            out[3] = o.to(specs[3].torch_dtype())
            out[5] = lse.reshape(specs[5].dims(axes) or lse.shape).to(specs[5].torch_dtype())
        return out


def _forward_o_lse(q: Any, k: Any, v: Any, causal: bool) -> tuple[Any, Any]:
    """softmax(Q K^T / sqrt(d)) V and its natural-log LSE in fp32, (B, H, S, d) and (B, H, S), on the inputs'
    device; causal masks key j > query i (top-left aligned, as the definitions' run() does). Computed on the
    GPU when there is one, whatever device the inputs were made on: a backward workload at PTXBench's sizes
    is a teraflop of forward. One (batch, head) and 1024 query rows at a time, so the score block stays at
    1024 x S fp32."""
    import math

    import torch

    dev = q.device if q.is_cuda or not torch.cuda.is_available() else torch.device("cuda")
    b, h, s, d = q.shape
    sk = k.shape[2]
    o = torch.empty((b, h, s, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(d)
    cols = torch.arange(sk, device=dev)
    for i in range(b):
        for j in range(h):
            kk, vv = k[i, j].to(dev).float(), v[i, j].to(dev).float()
            for r in range(0, s, 1024):
                sc = (q[i, j, r:r + 1024].to(dev).float() @ kk.T) * scale
                if causal:
                    rows = torch.arange(r, r + sc.shape[0], device=dev)
                    sc.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
                m = torch.logsumexp(sc, -1)
                o[i, j, r:r + 1024] = (torch.exp(sc - m[:, None]) @ vv).to(q.device)
                lse[i, j, r:r + 1024] = m.to(q.device)
    return o, lse


# -- solutions ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Solution:
    """A TVM-FFI solution: its sources (path -> text), entry file and symbol, calling style."""

    name: str
    definition: str
    sources: dict[str, str]
    entry_file: str
    entry_symbol: str
    dps: bool
    origin: Path

    @classmethod
    def from_json(cls, path: Path) -> Solution:
        where = str(path)
        d = _check_keys(where, "solution", _read_json(path), SOLUTION_KEYS)
        spec = _check_keys(where, "solution spec", d.get("spec"), SPEC_KEYS)
        lang, binding = spec.get("language"), spec.get("binding") or "tvm-ffi"
        if lang not in ("cuda", "cpp") or binding != "tvm-ffi":
            raise TaskError(f"{where}: KernelPro runs CUDA/C++ solutions with the tvm-ffi binding; this one is "
                            f"{lang!r} with binding {binding!r}")
        entry = spec.get("entry_point")
        if not isinstance(entry, str) or entry.count("::") != 1:
            raise TaskError(f"{where}: entry_point must be '<file>::<function>', got {entry!r}")
        efile, esym = entry.split("::")
        srcs = d.get("sources")
        if not isinstance(srcs, list) or not srcs:
            raise TaskError(f"{where}: solution needs a non-empty list of sources")
        sources: dict[str, str] = {}
        for s in srcs:
            s = _check_keys(where, "source", s, {"path", "content"})
            if not isinstance(s.get("path"), str) or not isinstance(s.get("content"), str):
                raise TaskError(f"{where}: each source needs string path and content")
            p = Path(s["path"])
            if p.is_absolute() or ".." in p.parts:
                raise TaskError(f"{where}: source path {s['path']!r} must be relative, without '..'")
            if s["path"] in sources:
                raise TaskError(f"{where}: source path {s['path']!r} appears twice")
            sources[s["path"]] = s["content"]
        if efile not in sources:
            raise TaskError(f"{where}: entry file {efile!r} is not among the sources")
        return cls(str(d.get("name") or path.stem), str(d.get("definition") or ""), sources, efile, esym,
                   bool(spec.get("destination_passing_style", True)), path.resolve())

    @classmethod
    def from_kernel(cls, path: Path, definition: str) -> Solution:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise KernelProError(f"{path}: cannot read the solution ({e})") from None
        return cls(path.stem, definition, {path.name: text}, path.name, "run", True, path.resolve())


def find_solution(task: Task, solutions: str | Path) -> Solution | None:
    base = Path(solutions)
    for p in (base / task.name / "kernel.cu", base / f"{task.name}.cu"):
        if p.is_file():
            return Solution.from_kernel(p, task.name)
    for p in sorted([base / task.name / "solution.json", *base.rglob("*.json")]):
        if not p.is_file():
            continue
        try:
            d = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue   # not a solution bundle (some other JSON in the folder)
        if isinstance(d, dict) and d.get("definition") == task.name and "sources" in d:
            return Solution.from_json(p)
    return None


def _adapter_text(task: Task, defn_path: str, sol: Solution | None) -> str:
    head = [
        f'"""KernelPro candidate for {task.name}: '
        + ("the definition\'s reference run()." if sol is None else
           f"the TVM-FFI solution {sol.origin.name} run unchanged (built with nvcc against apache-tvm-ffi;"
           " outputs allocated by the harness and passed in)." if sol.dps else
           f"the TVM-FFI solution {sol.origin.name} run unchanged (value-returning).")
        + '"""',
        "",
        "from kernelpro.suites.flashinfer import FfiCandidate",
        "",
        f"DEFINITION = {defn_path!r}",
    ]
    if sol is None:
        body = ["SOURCES = None", "ENTRY = None", "DPS = True"]
    else:
        body = [f"SOURCES = {sol.sources!r}", f"ENTRY = {sol.entry_symbol!r}", f"DPS = {sol.dps!r}",
                f"ORIGIN = {str(sol.origin)!r}"]
    tail = ["", "_c = FfiCandidate(DEFINITION, SOURCES, ENTRY, DPS)", "", "",
            "class ModelNew(_c.Module):", "    pass", ""]
    return "\n".join(head + body + tail)


def candidate_for(task: Task, solutions: str) -> Path | None:
    """The generated candidate .py for `task`'s solution in `solutions` ('reference': its own run()),
    content-addressed in the cache; None when the folder has none for it."""
    from kernelpro import paths

    consts: dict[str, Any] = {}
    tree = ast.parse(task.path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "DEFINITION":
            consts["DEFINITION"] = ast.literal_eval(node.value)
    if "DEFINITION" not in consts:
        raise KernelProError(f"{task.path}: not a generated {SUITE} task file; list the suite again")
    if solutions == "reference":
        sol = None
    else:
        if not Path(solutions).is_dir():
            raise KernelProError(f"--solutions {solutions}: not a folder; pass 'reference' or a folder with "
                                 "<definition>/kernel.cu, <definition>.cu or solution.json bundles")
        sol = find_solution(task, solutions)
        if sol is None:
            return None
    text = _adapter_text(task, consts["DEFINITION"], sol)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    p = paths.cache_dir("flashinfer_trace") / "candidates" / key / f"{task.name}.py"
    if not p.is_file():
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(p)
    return p


class FfiCandidate:
    """The candidate side: a Module whose forward calls the solution as PTXBench does."""

    def __init__(self, definition: str, sources: dict[str, str] | None, entry: str | None, dps: bool):
        self.defn = Definition.from_dict(_read_json(Path(definition)), Path(definition))
        self.sources, self.entry, self.dps = sources, entry, dps
        self.Module = self._module_class()

    def load(self) -> Any:
        from kernelpro.suites import tvmffi

        if self.sources is None:
            return reference_module(self.defn).run
        name = "".join(ch if ch.isalnum() else "_" for ch in self.defn.name)
        # looked up on the module at call time: the static verifier's recorder stands in for it
        return tvmffi.build_module(name, self.sources, self.entry or "run")

    def _module_class(self) -> type:
        import torch

        owner = self

        class Module(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                # built with the model, not on the first call: the compile stays out of timed calls and
                # happens in the sandboxed build stage, which constructs ModelNew
                self._fn = owner.load()

            def forward(self, *inputs: Any) -> Any:
                defn = owner.defn
                axes = defn.bind(list(inputs))
                if owner.sources is None:
                    outs = normalize_outputs(defn, self._fn(*inputs), axes)
                elif owner.dps:
                    dev = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)
                    outs = [torch.empty(s.dims(axes) or (), dtype=s.torch_dtype(), device=dev)
                            for s in defn.outputs.values()]
                    _call(self._fn, [*inputs, *outs])
                else:
                    outs = normalize_outputs(defn, _call(self._fn, list(inputs)), axes)
                return outs[0] if len(outs) == 1 else tuple(outs)

        return Module


def _call(fn: Any, args: list[Any]) -> Any:
    import torch

    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        import tvm_ffi

        with tvm_ffi.use_torch_stream():   # the kernel's TVMFFIEnvGetStream is the caller's current stream
            return fn(*args)
    return fn(*args)


# -- the suite ----------------------------------------------------------------------------------------
class FlashInferSuite:
    """A FlashInfer-Trace trace set (`--path`), each definition a task."""

    name = SUITE

    def tasks(self, *, path: str | None = None, level: int | None = None,
              tolerance: str | None = None) -> list[Task]:
        if tolerance not in (None, "current"):
            raise KernelProError(f"--kb-tolerance applies to KernelBench checkouts; {SUITE} tasks take "
                                 "--profile ptxbench for PTXBench's tolerance")
        tasks = load_tasks(path)
        return [t for t in tasks if level is None or t.level == level]

    def task_from_file(self, path: str | Path, tolerance: str | None = None) -> Task:
        return load_task(path, suite=SUITE)

    def solution_for(self, task: Task, solutions: str) -> Path | None:
        return candidate_for(task, solutions)

