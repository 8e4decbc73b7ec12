"""The LLM-free policy: expand a node by changing the parameters of an expert template.

A template is a module with a literal ``PARAMS`` dict and ``make_source(params) -> str`` (a standalone
candidate file); the suite's reference solutions are such templates (e.g. ptxbench/reference/gemm_bf16).
Moves change one knob one step along its value ladder (tile shapes, stages, consumer warpgroups,
cluster size, raster grouping), repairing coupled knobs (stages to fit shared memory, register split
to the consumer count) so that proposals respect the template's documented rules instead of wasting
a compile on a static_assert. The parent's profiling diagnoses weight the moves: a latency-bound
diagnosis favours deeper pipelines, a shared-memory/occupancy one shallower pipelines or smaller
tiles, a wave-quantization one other tile shapes, and so on.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelpro.agent.mcts import ExpandContext, Proposal
from kernelpro.errors import KernelProError
from kernelpro.results.store import source_hash
from kernelpro.suites.task import Task

# Value ladders for knobs the templates share; unknown int knobs step by x2 / /2.
LADDERS: dict[str, list[int]] = {
    "BM": [64, 128, 192, 256],
    "BN": [64, 128, 192, 256],
    "BK": [64, 128],
    "STAGES": [2, 3, 4, 5, 6, 7, 8],
    "CONSUMERS": [1, 2],
    "CLUSTER_M": [1, 2, 4],
    "GROUP_M": [1, 2, 4, 8, 16],
}
DERIVED = {"PRODUCER_REGS", "CONSUMER_REGS"}   # follow CONSUMERS, never mutated on their own
FIXED = {"B_KMAJOR"}                            # the task's operand layout, not a tuning knob

# (pattern in the diagnoses, knob, direction, weight)
GUIDANCE: list[tuple[str, str, int, float]] = [
    (r"latency|stall|long.?scoreboard|barrier wait|mbarrier|pipeline|tma.*(wait|starv)|producer", "STAGES", +1, 2.0),
    (r"shared.?memory|smem|occupancy|blocks? per sm|too many resources", "STAGES", -1, 2.0),
    (r"shared.?memory|smem|occupancy", "BK", -1, 1.0),
    (r"tail|wave|quantization|idle sm|sm.*underutil|load.?imbalance", "BN", -1, 1.5),
    (r"tail|wave|quantization|idle sm|sm.*underutil|load.?imbalance", "BM", -1, 1.0),
    (r"dram|memory.?bound|bandwidth|l2.*(miss|hit)|reuse", "GROUP_M", +1, 1.5),
    (r"dram|memory.?bound|bandwidth|l2.*(miss|hit)|multicast|reuse", "CLUSTER_M", +1, 1.5),
    (r"compute.?bound|tensor.?(pipe|core).*(low|under)|wgmma.*(issue|small)|arithmetic intensity", "BN", +1, 1.5),
    (r"compute.?bound|tensor.?(pipe|core).*(low|under)|arithmetic intensity", "BM", +1, 1.0),
    (r"register|spill", "BM", -1, 1.5),
    (r"register|spill", "CONSUMERS", +1, 1.0),
]

SMEM_LIMIT = 232448


def gemm_rules(p: dict[str, int]) -> str | None:
    """The Hopper GEMM template's documented rules (hopper_gemm.cu static_asserts); None if valid."""
    c, bm, bn, bk, st = p.get("CONSUMERS", 2), p.get("BM", 128), p.get("BN", 128), p.get("BK", 64), p.get("STAGES", 4)
    if c not in (1, 2):
        return "CONSUMERS must be 1 or 2"
    if bm > 256 or bm % (64 * c):
        return "BM must be <= 256 and a multiple of 64*CONSUMERS"
    if bn not in (64, 128, 192, 256) or bk not in (64, 128, 192, 256):
        return "BN and BK must be in {64,128,192,256}"
    if (bm // c // 64) * bn // 2 > 192:
        return "too many accumulators per consumer thread"
    if not 2 <= st <= 16 or 1024 + st * (bm * bk + bk * bn) * 2 + 16 * st > SMEM_LIMIT:
        return "STAGES outside [2,16] or shared memory over 227 KB"
    cm = p.get("CLUSTER_M", 1)
    if cm not in (1, 2, 4) or (not p.get("B_KMAJOR") and (bn // 64) % cm):
        return "CLUSTER_M must be 1, 2 or 4 and divide BN/64"
    if p.get("B_KMAJOR", 0) not in (0, 1):
        return "B_KMAJOR is 0 (B is K x N) or 1 (B is N x K)"
    if p.get("B_KMAJOR") and (bn // cm) % 8:
        return "BN/CLUSTER_M must be a multiple of 8"
    if p.get("GROUP_M", 1) < 1:
        return "GROUP_M must be >= 1"
    pr, cr = p.get("PRODUCER_REGS", 40), p.get("CONSUMER_REGS", 232)
    if pr % 8 or cr % 8 or not (24 <= pr <= 256 and 24 <= cr <= 256) or 128 * (pr + c * cr) > 65536:
        return "register split invalid"
    return None


def _max_stages(p: dict[str, int]) -> int:
    per = (p.get("BM", 128) * p.get("BK", 64) + p.get("BK", 64) * p.get("BN", 128)) * 2 + 16
    return max(0, min(16, (SMEM_LIMIT - 1024) // per))


def _fix_coupled(p: dict[str, int]) -> dict[str, int]:
    q = dict(p)
    if "STAGES" in q and {"BM", "BN", "BK"} <= set(q):
        q["STAGES"] = min(q["STAGES"], _max_stages(q))
    if {"CONSUMERS", "PRODUCER_REGS", "CONSUMER_REGS"} <= set(q):
        pr = q["PRODUCER_REGS"]
        q["CONSUMER_REGS"] = min(256, ((65536 // 128 - pr) // q["CONSUMERS"]) // 8 * 8)
    return q


class Template:
    def __init__(self, module: ModuleType, name: str):
        self.module, self.name = module, name
        params = getattr(module, "PARAMS", None)
        make = getattr(module, "make_source", None)
        if not isinstance(params, dict) or not callable(make):
            raise KernelProError(f"template {name} must define a PARAMS dict and make_source(params)")
        self.params: dict[str, Any] = dict(params)
        self.make_source: Callable[[dict], str] = make
        self.validate: Callable[[dict], str | None] = getattr(module, "validate", None) or (
            gemm_rules if {"BM", "BN", "BK", "STAGES"} <= set(params) else (lambda p: None))


def load_template(task: Task, path: str | None = None) -> Template:
    """The template for a task: --template PATH, else the suite's reference/<task name>.py."""
    if path:
        p = Path(path)
        if not p.is_file():
            raise KernelProError(f"template {path} not found")
        spec = importlib.util.spec_from_file_location(f"kp_template_{p.stem}", p)
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        return Template(mod, str(p))
    modname = f"kernelpro.suites.{task.suite}.reference.{task.name}"
    try:
        return Template(importlib.import_module(modname), modname)
    except ModuleNotFoundError as e:
        if e.name and modname.startswith(e.name):
            raise KernelProError(f"no parameterized template for {task.key} ({modname}); pass --template PATH "
                                 "or use --policy llm") from None
        raise


def params_of(source: str) -> dict[str, Any] | None:
    """The literal PARAMS dict of a generated candidate."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "PARAMS"):
            try:
                return dict(ast.literal_eval(node.value))
            except (ValueError, TypeError):
                return None
    return None


def _ladder(key: str, value: Any) -> list[int]:
    if key in LADDERS:
        lad = LADDERS[key]
        return lad if value in lad else sorted(set(lad + [value]))
    if isinstance(value, int) and value > 0:
        return sorted({max(1, value // 2), value, value * 2})
    return [value]


def moves(params: dict[str, Any], validate: Callable[[dict], str | None] = lambda p: None
          ) -> list[tuple[str, int, dict[str, Any]]]:
    """One-step neighbours: (knob, direction, new params), coupled knobs repaired, invalid ones skipped.

    "One step" is the nearest value along the knob's ladder that yields a valid configuration, so a
    knob blocked by a rule at its adjacent value (BM=192 with two consumers) still moves.
    """
    out: list[tuple[str, int, dict[str, Any]]] = []

    def add(key: str, d: int, q: dict[str, Any]) -> bool:
        if q != params and validate(q) is None and all(q != o[2] for o in out):
            out.append((key, d, q))
            return True
        return False

    for key, value in params.items():
        if key in DERIVED or key in FIXED or not isinstance(value, int) or isinstance(value, bool):
            continue
        lad = _ladder(key, value)
        i = lad.index(value)
        for d in (-1, +1):
            j = i + d
            while 0 <= j < len(lad) and not add(key, d, _fix_coupled({**params, key: lad[j]})):
                j += d
        if key == "STAGES" and {"BM", "BN", "BK"} <= set(params):   # the deepest pipeline that fits
            add(key, +1, {**params, "STAGES": _max_stages(params)})
    if {"BM", "BN"} <= set(params) and params["BM"] != params["BN"]:   # transpose the tile
        add("BM", +1 if params["BN"] > params["BM"] else -1,
            _fix_coupled({**params, "BM": params["BN"], "BN": params["BM"]}))
    return out


def describe(old: dict[str, Any], new: dict[str, Any]) -> str:
    return ", ".join(f"{k} {old.get(k)}->{v}" for k, v in new.items() if old.get(k) != v) or "no change"


class ParamPolicy:
    name = "param"
    repairs = False

    def __init__(self, template: Template, start: dict[str, Any] | None = None):
        self.t = template
        self.start = start_params(template, start) if start else None

    def root(self, task: Task) -> Proposal:
        # The start is evaluated like any node: the search must beat it, not assume it.
        if self.start is not None:
            return Proposal(self.t.make_source(self.start),
                            what=f"start ({describe(self.t.params, self.start)}) " + _short(self.start),
                            origin="policy", info={"params": self.start, "template": self.t.name})
        return Proposal(self.t.make_source(self.t.params), what="template defaults " + _short(self.t.params),
                        origin="policy", info={"params": self.t.params, "template": self.t.name})

    def weights(self, diagnoses: str) -> dict[tuple[str, int], float]:
        w: dict[tuple[str, int], float] = {}
        text = diagnoses.lower()
        for pat, key, d, weight in GUIDANCE:
            if re.search(pat, text):
                w[(key, d)] = w.get((key, d), 0.0) + weight
        return w

    def propose(self, ctx: ExpandContext) -> Proposal:
        parent = ctx.parent
        base = parent.info.get("params") or (params_of(parent.source) if parent.source else None) or self.t.params
        diag = parent.outcome.diagnoses if parent.outcome else ""
        w = self.weights(diag)
        ranked = []
        for key, d, q in moves(base, self.t.validate):
            src = self.t.make_source(q)
            if source_hash(src) in ctx.seen:
                continue
            ranked.append((1.0 + w.get((key, d), 0.0) + ctx.rng.random(), key, d, q, src))
        if not ranked:
            return Proposal(None, reason="every valid one-step change of this node was already tried", exhausted=True)
        ranked.sort(key=lambda r: -r[0])
        score, key, d, q, src = ranked[0]
        guided = w.get((key, d), 0.0) > 0
        return Proposal(src, what=describe(base, q) + (" (diagnosis-guided)" if guided else ""),
                        info={"params": q, "guided": guided, "template": self.t.name})


def start_params(t: Template, changes: dict[str, Any]) -> dict[str, Any]:
    """The template's PARAMS with `changes` applied (coupled knobs repaired); a one-line error if a key is
    unknown or the result breaks the template's rules."""
    unknown = sorted(set(changes) - set(t.params))
    if unknown:
        raise KernelProError(f"--start: {', '.join(unknown)} not a parameter of {t.name} "
                             f"(it has {', '.join(k for k in t.params if k not in DERIVED)})")
    derived = sorted(set(changes) & DERIVED)
    if derived:
        raise KernelProError(f"--start: {', '.join(derived)} follow(s) CONSUMERS; set CONSUMERS instead")
    fixed = sorted(k for k in set(changes) & FIXED if changes[k] != t.params[k])
    if fixed:
        raise KernelProError(f"--start: {', '.join(fixed)} is fixed by the task's operand layout")
    p = _fix_coupled({**t.params, **changes})
    if "STAGES" in changes:   # asked for explicitly: judged by the rules below, not clamped to what fits
        p["STAGES"] = changes["STAGES"]
    why = t.validate(p)
    if why:
        raise KernelProError(f"--start {describe(t.params, p)}: {why}")
    return p


def _short(p: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items() if k not in DERIVED)
