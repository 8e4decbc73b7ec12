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

# Step sizes for int knobs a template gives no ladder for: halve or double.
_DEFAULT_STEP = 2


class Template:
    """A template module and what it says about its own search space. Only PARAMS and make_source are
    required; the rest is optional and read from the module, so this policy knows no template's rules:

    - ``validate(params) -> str | None``: why a combination is invalid (the kernel's static_asserts);
    - ``repair(params) -> params``: fix knobs coupled to the one that moved (e.g. stages to fit memory);
    - ``LADDERS``: {knob: [values]}; other int knobs halve or double;
    - ``DERIVED``: {knob: what it follows}, knobs that never move on their own; ``FIXED``: set by the task;
    - ``GUIDANCE``: [(regex over profiling diagnoses, knob, direction, weight)];
    - ``extra_moves(params) -> [(knob, direction, params)]``: moves beyond one-knob steps.
    """

    def __init__(self, module: ModuleType, name: str):
        self.module, self.name = module, name
        params = getattr(module, "PARAMS", None)
        make = getattr(module, "make_source", None)
        if not isinstance(params, dict) or not callable(make):
            raise KernelProError(f"template {name} must define a PARAMS dict and make_source(params)")
        self.params: dict[str, Any] = dict(params)
        self.make_source: Callable[[dict], str] = make
        self.validate: Callable[[dict], str | None] = getattr(module, "validate", None) or (lambda p: None)
        self.repair: Callable[[dict], dict] = getattr(module, "repair", None) or dict
        self.ladders: dict[str, list[Any]] = dict(getattr(module, "LADDERS", {}))
        derived = getattr(module, "DERIVED", {})
        # knob -> the knob(s) it follows; a plain list of names is accepted too
        self.follows: dict[str, str] = dict(derived) if isinstance(derived, dict) else dict.fromkeys(derived, "other knobs")
        self.derived: frozenset[str] = frozenset(self.follows)
        self.fixed: frozenset[str] = frozenset(getattr(module, "FIXED", ()))
        self.guidance: list[tuple[str, str, int, float]] = list(getattr(module, "GUIDANCE", ()))
        self.extra_moves: Callable[[dict], list] = getattr(module, "extra_moves", None) or (lambda p: [])


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


def _ladder(t: Template, key: str, value: Any) -> list[Any]:
    if key in t.ladders:
        lad = t.ladders[key]
        return lad if value in lad else sorted(set(lad + [value]))
    if isinstance(value, int) and value > 0:
        return sorted({max(1, value // _DEFAULT_STEP), value, value * _DEFAULT_STEP})
    return [value]


def moves(t: Template, params: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """One-step neighbours: (knob, direction, new params), coupled knobs repaired, invalid ones skipped.

    "One step" is the nearest value along the knob's ladder that yields a valid configuration, so a
    knob blocked by a rule at its adjacent value (BM=192 with two consumers) still moves.
    """
    out: list[tuple[str, int, dict[str, Any]]] = []

    def add(key: str, d: int, q: dict[str, Any]) -> bool:
        if q != params and t.validate(q) is None and all(q != o[2] for o in out):
            out.append((key, d, q))
            return True
        return False

    for key, value in params.items():
        if key in t.derived or key in t.fixed or not isinstance(value, int) or isinstance(value, bool):
            continue
        lad = _ladder(t, key, value)
        i = lad.index(value)
        for d in (-1, +1):
            j = i + d
            while 0 <= j < len(lad) and not add(key, d, t.repair({**params, key: lad[j]})):
                j += d
    for key, d, q in t.extra_moves(params):
        add(key, d, q)
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
                            what=f"start ({describe(self.t.params, self.start)}) " + _short(self.start, self.t.derived),
                            origin="policy", info={"params": self.start, "template": self.t.name})
        return Proposal(self.t.make_source(self.t.params), what="template defaults " + _short(self.t.params, self.t.derived),
                        origin="policy", info={"params": self.t.params, "template": self.t.name})

    def weights(self, diagnoses: str) -> dict[tuple[str, int], float]:
        w: dict[tuple[str, int], float] = {}
        text = diagnoses.lower()
        for pat, key, d, weight in self.t.guidance:
            if re.search(pat, text):
                w[(key, d)] = w.get((key, d), 0.0) + weight
        return w

    def propose(self, ctx: ExpandContext) -> Proposal:
        parent = ctx.parent
        base = parent.info.get("params") or (params_of(parent.source) if parent.source else None) or self.t.params
        diag = parent.outcome.diagnoses if parent.outcome else ""
        w = self.weights(diag)
        ranked = []
        for key, d, q in moves(self.t, base):
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
                             f"(it has {', '.join(k for k in t.params if k not in t.derived)})")
    derived = sorted(set(changes) & t.derived)
    if derived:
        leaders = sorted({t.follows[k] for k in derived})
        raise KernelProError(f"--start: {', '.join(derived)} follow(s) {', '.join(leaders)}; "
                             f"set {', '.join(leaders)} instead")
    fixed = sorted(k for k in set(changes) & t.fixed if changes[k] != t.params[k])
    if fixed:
        raise KernelProError(f"--start: {', '.join(fixed)} is fixed by the task's operand layout")
    p = t.repair({**t.params, **changes})
    # Knobs asked for explicitly are judged by the rules below, not silently repaired away.
    p.update({k: v for k, v in changes.items() if k not in t.derived})
    why = t.validate(p)
    if why:
        raise KernelProError(f"--start {describe(t.params, p)}: {why}")
    return p


def _short(p: dict[str, Any], derived: frozenset[str] = frozenset()) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items() if k not in derived)
