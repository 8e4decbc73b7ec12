"""Degenerate problems: references whose output does not depend on their inputs or their parameters.

Some KernelBench problems compute a constant (a softmax over a dimension of size 1 is all ones; a value
minus its own mean over a size-1 dimension is zero; a ``min`` with a constant followed by a clamp pins
every element). A solution that returns the constant passes every correctness check and is credited with
any speedup it likes. This module finds them from the reference alone, on the CPU:

- the reference runs on its own ``get_inputs`` under several seeds, on inputs scaled and shifted
  (x * 4 + 0.5 for floating-point inputs), and with its parameters and buffers perturbed (the draw of
  `kernelpro.suites.perturb`);
- the change of each variant's output from the first is ``max |a - b| / (1 + |b|)``, the quantity
  ``torch.allclose(a, b, atol=t, rtol=t)`` compares with ``t``; the problem is degenerate at tolerance
  ``t`` when no variant changes it by more than ``t`` (so the figures at 1e-4 and 1e-2 come from one run);
- KernelBench's sizes can be far too large for a CPU (level 1's softmax is 4096 x 393216 in the current
  release), so the shapes are first read on the ``meta`` device (no memory) and, while the inputs plus
  parameters exceed `MAX_ELEMENTS` / `MAX_PARAMS`, the largest integer size global above 2 is halved (globals of 1
  and 2, the ones that make a problem degenerate, are never touched). The size checked is recorded;
- each problem has a time limit; one that runs out, raises, or cannot be shrunk is recorded as
  ``not_checked`` with the reason, never as degenerate or not.
- a shrunk size is applied by executing the problem file again with those top-level assignments
  replaced, so globals computed from them (a bias shape) follow.

The reference is code from a checkout, so it runs in a child process started by `kernelpro.sandbox.run`
(``python -m kernelpro.suites.degenerate FILE...``), which prints one JSON line per problem. Results are
cached per (file content, method version) under the cache root.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

METHOD_VERSION = 1
MAX_ELEMENTS = 1 << 21          # inputs of one checked size (2M floats, 8 MB)
MAX_PARAMS = 1 << 27            # parameters of one checked size (128M floats: VGG-sized networks run)
TIME_LIMIT_S = 40.0             # per problem, inside the probe process
SEEDS = (1, 2, 3)
TOLERANCES = (1e-4, 1e-2)        # KernelBench's current fp32 tolerance and v0's
STATUSES = ("degenerate", "ok", "not_checked")


@dataclass(frozen=True)
class Degeneracy:
    """What the probe found for one problem file."""

    file: str                       # the problem file's name (e.g. 23_Softmax.py)
    status: str                     # at `tol`: degenerate | ok | not_checked
    tol: float                      # the tolerance `status` refers to
    input_change: float | None = None   # largest change across input draws and scaled inputs
    param_change: float | None = None   # largest change with perturbed parameters (None: no parameters)
    size: dict[str, Any] = field(default_factory=dict)   # size globals changed to fit the CPU
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise KernelProError(f"degeneracy status {self.status!r} is not one of {', '.join(STATUSES)}")

    @property
    def change(self) -> float | None:
        vals = [v for v in (self.input_change, self.param_change) if v is not None]
        return max(vals) if vals else None

    def at(self, tol: float) -> Degeneracy:
        """The same measurement judged at another tolerance."""
        if self.status == "not_checked":
            return Degeneracy(**{**asdict(self), "tol": tol})
        c = self.change
        status = "degenerate" if c is not None and c <= tol else "ok"
        return Degeneracy(**{**asdict(self), "tol": tol, "status": status})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Degeneracy:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KernelProError(f"degeneracy record: unknown key(s) {', '.join(unknown)}")
        return cls(**d)


# ------------------------------------------------------------------------------------------------
# In the probe process (runs the reference)
# ------------------------------------------------------------------------------------------------

def change(a: Any, b: Any) -> float:
    """max |a - b| / (1 + |b|) over every tensor of two outputs; inf when shapes differ or NaNs move."""
    import torch

    from kernelpro.harness.tensors import chunks, flatten

    xs, ys = flatten(a), flatten(b)
    if len(xs) != len(ys):
        return math.inf
    worst = 0.0
    for x, y in zip(xs, ys, strict=True):
        if not isinstance(x, torch.Tensor):
            worst = max(worst, 0.0 if x == y else math.inf)
            continue
        if x.shape != y.shape:
            return math.inf
        if x.numel() == 0:
            continue
        # a slice at a time: the float64 copies of a whole KernelBench-size output do not fit beside it
        for xc, yc in zip(chunks(x), chunks(y), strict=True):
            xc, yc = xc.double(), yc.double()
            if not torch.equal(torch.isnan(xc), torch.isnan(yc)):
                return math.inf
            fin = ~torch.isnan(yc)
            if not bool(fin.any()):
                continue
            d = (xc[fin] - yc[fin]).abs() / (1 + yc[fin].abs())
            d = torch.nan_to_num(d, nan=math.inf)   # inf - inf
            worst = max(worst, float(d.max()))
    return worst


def _numel(xs: Sequence[Any]) -> int:
    import torch

    return sum(x.numel() for x in xs if isinstance(x, torch.Tensor))


def meta_tensors(mod: Any) -> tuple[list[Any], list[Any]]:
    """(input tensors, parameter and buffer tensors) at the module's globals, built on the meta device:
    shapes and dtypes, no memory."""
    import torch

    with torch.device("meta"):
        xs = [x for x in mod.get_inputs() if isinstance(x, torch.Tensor)]
        init = list(mod.get_init_inputs())
        model = mod.Model(*init)
    params = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    return xs, params


def _meta_elements(mod: Any) -> tuple[int, int]:
    """(input elements, parameter elements) at the module's globals, built on the meta device (no memory)."""
    xs, params = meta_tensors(mod)
    return _numel(xs), _numel(params)


def _size_globals(mod: Any) -> dict[str, int]:
    """The module's integer globals after import (literal or computed, e.g. ``N = 2048 * 2``)."""
    return {k: v for k, v in vars(mod).items()
            if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_") and k.upper() != "META"}


def _rebuild(path: Path, changed: dict[str, int], unique: str) -> Any:
    """The problem's module executed again with the top-level assignments of `changed` replaced by their
    new values, so globals computed from them (``bias_shape = (out_channels, 1, 1)``) follow."""
    import ast
    import types

    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in changed:
            node.value = ast.copy_location(ast.Constant(changed[node.targets[0].id]), node.value)
    mod = types.ModuleType(unique)
    mod.__file__ = str(path)
    sys.modules[unique] = mod
    exec(compile(tree, str(path), "exec"), mod.__dict__)
    return mod


def _shrink_once(globals_: dict[str, int], changed: dict[str, int]) -> bool:
    """Halve the largest integer size global above 2; False when none is left."""
    big = [(v, k) for k, v in globals_.items() if v > 2]
    if not big:
        return False
    v, k = max(big)
    globals_[k] = max(2, v // 2)
    changed[k] = globals_[k]
    return True


def _fit(path: Path, mod: Any, globals_: dict[str, int], max_elements: int, changed: dict[str, int],
         unique: str) -> Any:
    """Shrink until inputs fit `max_elements` and parameters `MAX_PARAMS`; the module at that size."""
    for _ in range(200):
        try:
            n_in, n_par = _meta_elements(mod)
        except Exception:  # noqa: BLE001 - a reference that cannot build on meta is measured as it is
            return mod
        if n_in <= max_elements and n_par <= MAX_PARAMS:
            return mod
        if not _shrink_once(globals_, changed):
            raise RuntimeError(f"{n_in} input and {n_par} parameter elements at the smallest size this method reaches")
        mod = _rebuild(path, changed, unique)
    raise RuntimeError("size reduction did not converge")


class _Timeout(Exception):
    pass


def probe_file(path: Path, seed: int = 0, max_elements: int = MAX_ELEMENTS,
               time_limit_s: float = TIME_LIMIT_S) -> Degeneracy:
    """Run one reference on its variants and measure how much its output moves (in this process)."""
    import torch

    from kernelpro.suites.perturb import load_values, perturbed_values
    from kernelpro.suites.task import import_module_from, load_task

    name = path.name
    try:
        load_task(path)   # a file not in the task format is reported, not run
    except KernelProError as e:
        return Degeneracy(name, "not_checked", TOLERANCES[0], detail=str(e)[:200])

    def alarm(signum: int, frame: Any) -> None:
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit_s)
    size: dict[str, int] = {}
    try:
        unique = f"kp_degenerate_{abs(hash(str(path)))}"
        mod = import_module_from(path, unique)
        globals_ = _size_globals(mod)
        mod = _fit(path, mod, globals_, max_elements, size, unique)

        def inputs(s: int, scaled: bool = False) -> list[Any]:
            torch.manual_seed(s)
            xs = list(mod.get_inputs())
            if scaled:
                xs = [x * 4 + 0.5 if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]
            return xs

        def run(model: Any, xs: list[Any]) -> Any:
            with torch.no_grad():
                return model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])

        # One call must leave room for the ~8 the method makes: shrink again while it does not.
        while True:
            init = list(mod.get_init_inputs())
            torch.manual_seed(seed)
            model = mod.Model(*init)   # left in train mode, as KernelBench's eval runs it
            base_in = inputs(seed)
            t0 = time.monotonic()
            base = run(model, base_in)
            if time.monotonic() - t0 <= time_limit_s / 12 or not _shrink_once(globals_, size):
                break
            mod = _rebuild(path, size, unique)
        in_change = 0.0
        for s in SEEDS:
            in_change = max(in_change, change(run(model, inputs(s)), base))
        in_change = max(in_change, change(run(model, inputs(seed, scaled=True)), base))
        p_change: float | None = None
        values = perturbed_values(model, seed + 17)
        if values:
            load_values(model, values)
            p_change = max(change(run(model, base_in), base), change(run(model, inputs(SEEDS[0])), base))
        deg = Degeneracy(name, "ok", TOLERANCES[0], in_change, p_change, size,
                         f"{len(SEEDS)} seeds + scaled inputs" + (f", {len(values)} tensors perturbed" if values else ""))
        return deg.at(TOLERANCES[0])
    except _Timeout:
        return Degeneracy(name, "not_checked", TOLERANCES[0], size=size,
                          detail=f"ran past {time_limit_s:g} s on the CPU")
    except Exception as e:  # noqa: BLE001 - any failure of the reference leaves the problem unchecked
        return Degeneracy(name, "not_checked", TOLERANCES[0], size=size,
                          detail=f"{type(e).__name__}: {str(e)[:160]}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _probe_main(argv: list[str]) -> int:
    import torch

    torch.set_num_threads(max(1, int(os.environ.get("KP_DEGENERATE_THREADS", "1"))))
    max_elements = int(os.environ.get("KP_DEGENERATE_MAX_ELEMENTS", MAX_ELEMENTS))
    limit = float(os.environ.get("KP_DEGENERATE_TIME_S", TIME_LIMIT_S))
    for p in argv:
        d = probe_file(Path(p), max_elements=max_elements, time_limit_s=limit)
        print(json.dumps({"path": p, **asdict(d)}, default=str), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------
# In the parent (KernelPro's own process)
# ------------------------------------------------------------------------------------------------

def _cache_key(path: Path, max_elements: int) -> str:
    h = hashlib.sha256(path.read_bytes())
    h.update(f"v{METHOD_VERSION}:{max_elements}:{SEEDS}".encode())
    return h.hexdigest()[:32]


def check_files(paths: Sequence[str | Path], *, tol: float = TOLERANCES[0], workers: int | None = None,
                max_elements: int = MAX_ELEMENTS, time_limit_s: float = TIME_LIMIT_S,
                cache: bool = True) -> dict[str, Degeneracy]:
    """{resolved path: Degeneracy at `tol`} for problem files, probed in sandboxed CPU processes."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelpro import sandbox
    from kernelpro.paths import cache_dir

    files = [Path(p).resolve() for p in paths]
    cdir = cache_dir("degenerate")
    found: dict[str, Degeneracy] = {}
    todo: list[Path] = []
    for p in files:
        cf = cdir / f"{_cache_key(p, max_elements)}.json"
        if cache and cf.is_file():
            try:
                found[str(p)] = Degeneracy.from_dict({**json.loads(cf.read_text()), "file": p.name}).at(tol)
                continue
            except (ValueError, KernelProError):
                pass   # a stale or corrupt cache entry is measured again
        todo.append(p)
    if todo:
        n = max(1, min(len(todo), workers or max(1, (os.cpu_count() or 2) // 2)))
        chunks = [todo[i::n] for i in range(n)]
        env = {**os.environ, "KP_DEGENERATE_MAX_ELEMENTS": str(max_elements),
               "KP_DEGENERATE_TIME_S": str(time_limit_s), "PYTHONPATH": os.pathsep.join(
                   [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}

        def one(chunk: list[Path]) -> list[tuple[Path, Degeneracy, bool]]:
            fin = sandbox.run([sys.executable, "-m", "kernelpro.suites.degenerate", *map(str, chunk)],
                              timeout_s=len(chunk) * (time_limit_s + 15) + 60, env=env, gpu=sandbox.NO_GPU)
            got: dict[str, Degeneracy] = {}
            for line in fin.stdout.splitlines():
                if line.startswith("{"):
                    d = json.loads(line)
                    key = d.pop("path")
                    got[key] = Degeneracy.from_dict(d)
            why = "probe process timed out" if fin.timed_out else f"probe process ended with rc {fin.rc}"
            tail = (fin.stderr.strip().splitlines() or [""])[-1][:120]
            return [(p, got[str(p)], True) if str(p) in got else
                    (p, Degeneracy(p.name, "not_checked", TOLERANCES[0], detail=f"{why} {tail}".strip()), False)
                    for p in chunk]

        with ThreadPoolExecutor(max_workers=n) as ex:
            for res in ex.map(one, chunks):
                for p, d, measured in res:
                    if cache and measured:   # a probe process that died is tried again next time
                        cdir.mkdir(parents=True, exist_ok=True)
                        (cdir / f"{_cache_key(p, max_elements)}.json").write_text(json.dumps(asdict(d)))
                    found[str(p)] = d.at(tol)
    return {str(p): found[str(p)] for p in files}


def check_tasks(tasks: Sequence[Any], **kw: Any) -> dict[str, Degeneracy]:
    """{task key: Degeneracy} for `Task`s (see `check_files`)."""
    by_path = check_files([t.path for t in tasks], **kw)
    return {t.key: by_path[str(Path(t.path).resolve())] for t in tasks}


if __name__ == "__main__":
    sys.exit(_probe_main(sys.argv[1:]))
