"""The LLM-free policy: expand a node by changing the parameters of an expert template.

A template is a module with a literal ``PARAMS`` dict and ``make_source(params) -> str`` (a standalone
candidate file); the suite's reference solutions are such templates (e.g. ptxbench/reference/gemm_bf16).
Moves change one knob one step along its value ladder (tile shapes, stages, consumer warpgroups,
cluster size, raster grouping), repairing coupled knobs (stages to fit shared memory, register split
to the consumer count) so that proposals respect the template's documented rules instead of wasting
a compile on a static_assert.

What steers the choice among the moves is the feedback mode, the same three as the LLM path's
``--feedback``:

- ``advice``: the parent's stage-two findings (kernelpro.profile.tools). The template's ``ADVICE`` rules
  say which knobs a finding implicates and in which direction (a shared-memory occupancy limit argues
  for fewer stages, a barrier stall for a deeper ring); moves argued for come first.
- ``raw``: the parent's core metrics only (no tool ran for the policy). A fixed heuristic of a few
  thresholds (RAW_HEURISTIC) names the tool whose territory the numbers point at; that tool's rules apply
  at half weight with their title qualifiers ignored, since raw metrics cannot tell a shared-memory
  occupancy limit from a register one.
- ``none``: blind; moves are drawn uniformly (seeded).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelpro.agent.mcts import ExpandContext, Proposal
from kernelpro.errors import KernelProError
from kernelpro.results.store import source_hash
from kernelpro.suites.task import Task

# Step sizes for int knobs a template gives no ladder for: halve or double.
_DEFAULT_STEP = 2
FEEDBACK_MODES = ("advice", "raw", "none")
SEVERITY_WEIGHT = {"high": 1.0, "medium": 0.7, "low": 0.4}
RAW_WEIGHT = 0.5


@dataclass(frozen=True)
class AdviceRule:
    """One line of a template's ``ADVICE``: a finding of `tool` (whose title matches `match`, a regex;
    empty: any) argues for moving `knob` in `direction` (+1 up its ladder, -1 down) with `weight`."""
    tool: str
    match: str
    knob: str
    direction: int
    weight: float
    why: str

    def applies(self, finding: dict[str, Any], titles: bool = True) -> bool:
        if finding.get("tool") != self.tool:
            return False
        return not titles or not self.match or re.search(self.match, str(finding.get("title", "")), re.I) is not None


def _rules(module: ModuleType, name: str, params: dict[str, Any], frozen: frozenset[str]) -> list[AdviceRule]:
    from kernelpro.profile.tools.registry import load_all

    tools = set(load_all())
    out = []
    for i, row in enumerate(getattr(module, "ADVICE", ())):
        if not (isinstance(row, tuple) and len(row) == 6):
            raise KernelProError(f"template {name}: ADVICE[{i}] must be (tool, title regex, knob, direction, "
                                 "weight, why)")
        r = AdviceRule(*row)
        if r.tool not in tools:
            raise KernelProError(f"template {name}: ADVICE[{i}] names tool {r.tool!r}; tools: {', '.join(sorted(tools))}")
        if r.knob not in params or r.knob in frozen:
            raise KernelProError(f"template {name}: ADVICE[{i}] moves {r.knob!r}, not a free knob of its PARAMS")
        if r.direction not in (-1, 1) or not r.weight > 0 or not r.why.strip():
            raise KernelProError(f"template {name}: ADVICE[{i}] needs direction +1/-1, a positive weight and a reason")
        re.compile(r.match)
        out.append(r)
    return out


# The raw mode's fixed heuristic: (tool whose territory it is, test on one kernel's core metrics).
# Thresholds are the textbook ones a reader of the numbers would use, no micro-profiling behind them.
def _raw_tools(m: dict[str, Any]) -> list[str]:
    def num(k: str) -> float | None:
        v = m.get(k)
        return float(v) if isinstance(v, int | float) else None

    dur, sm = num("gpu__time_duration.sum"), num("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem = num("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    warps, regs = num("sm__warps_active.avg.pct_of_peak_sustained_active"), num("launch__registers_per_thread")
    waves = num("launch__waves_per_multiprocessor")
    out = []
    if dur is not None and dur < 8e3:                                   # ns: about a launch's cost
        out.append("launch_overhead")
    if (warps is not None and warps < 25) or (waves is not None and waves < 1):
        out.append("occupancy")
    if regs is not None and regs >= 255:
        out.append("spills")
    if sm is not None and mem is not None:
        out.append("dram_bandwidth" if mem >= sm else "tensor_core")
    if waves is not None and 1 <= waves < 4 and 0 < waves % 1 < 0.5:
        out.append("tail_effect")
    return out


RAW_HEURISTIC = ("launch_overhead: duration < 8 us; occupancy: warps active < 25% or < 1 wave; spills: 255 "
                 "registers; dram_bandwidth: memory SOL >= SM SOL, else tensor_core; tail_effect: 1-4 waves, "
                 "last under half full")


class Template:
    """A template module and what it says about its own search space. Only PARAMS and make_source are
    required; the rest is optional and read from the module, so this policy knows no template's rules:

    - ``validate(params) -> str | None``: why a combination is invalid (the kernel's static_asserts);
    - ``repair(params) -> params``: fix knobs coupled to the one that moved (e.g. stages to fit memory);
    - ``LADDERS``: {knob: [values]}; other int knobs halve or double;
    - ``DERIVED``: {knob: what it follows}, knobs that never move on their own; ``FIXED``: set by the task;
    - ``ADVICE``: [(tool, regex over the finding's title, knob, direction, weight, why)]: which knobs a
      stage-two finding implicates (see AdviceRule);
    - ``GUIDANCE``: [(regex over profiling diagnoses text, knob, direction, weight)], read only for a
      parent whose outcome carries advice text but no finding records (stored before they existed);
    - ``extra_moves(params) -> [(knob, direction, params)]``: moves beyond one-knob steps;
    - ``GENERIC_START``: the untuned configuration a first version would have (knob -> value), where
      ablation studies start so that the arms have room to differ.
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
        self.advice: list[AdviceRule] = _rules(module, name, self.params, self.derived | self.fixed)
        self.generic_start: dict[str, Any] = dict(getattr(module, "GENERIC_START", {}))
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
    missing = (f"no parameterized template for {task.key} ({modname}{{}}); pass --template PATH (a module with "
               "PARAMS and make_source) or use --policy llm")
    spec = None
    try:
        spec = importlib.util.find_spec(modname)
    except ModuleNotFoundError:   # the suite has no reference package at all
        pass
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise KernelProError(missing.format(""))
    # Read before importing: a reference that is no template may build its extension at import time,
    # which needs a GPU toolchain and would fail with a traceback instead of this line.
    if not _defines_template(Path(spec.origin).read_text()):
        raise KernelProError(missing.format(" defines no PARAMS and make_source"))
    try:
        return Template(importlib.import_module(modname), modname)
    except KernelProError:
        raise
    except Exception as e:  # noqa: BLE001 - any import failure of the template is the user's to fix
        msg = str(e).strip().splitlines()
        raise KernelProError(f"template {modname} failed to import ({type(e).__name__}: "
                             f"{msg[0][:160] if msg else ''}); pass --template PATH or use --policy llm") from None


def _defines_template(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {"PARAMS", "make_source"} <= names


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

    def __init__(self, template: Template, start: dict[str, Any] | None = None, feedback: str = "advice"):
        if feedback not in FEEDBACK_MODES:
            raise KernelProError(f"--feedback {feedback!r}: one of {', '.join(FEEDBACK_MODES)}")
        self.t = template
        self.start = start_params(template, start) if start else None
        self.feedback = feedback

    def root(self, task: Task) -> Proposal:
        # The start is evaluated like any node: the search must beat it, not assume it.
        if self.start is not None:
            return Proposal(self.t.make_source(self.start),
                            what=f"start ({describe(self.t.params, self.start)}) " + _short(self.start, self.t.derived),
                            origin="policy", info={"params": self.start, "template": self.t.name})
        return Proposal(self.t.make_source(self.t.params), what="template defaults " + _short(self.t.params, self.t.derived),
                        origin="policy", info={"params": self.t.params, "template": self.t.name})

    def weights(self, diagnoses: str) -> dict[tuple[str, int], float]:
        """Legacy steering: the template's GUIDANCE regexes over advice text."""
        w: dict[tuple[str, int], float] = {}
        text = diagnoses.lower()
        for pat, key, d, weight in self.t.guidance:
            if re.search(pat, text):
                w[(key, d)] = w.get((key, d), 0.0) + weight
        return w

    def steer(self, outcome: Any) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], str]]:
        """(knob, direction) -> weight, and -> the reason, from the parent's profile under this mode."""
        w: dict[tuple[str, int], float] = {}
        why: dict[tuple[str, int], str] = {}
        if outcome is None or self.feedback == "none":
            return w, why
        if self.feedback == "advice":
            findings = list(getattr(outcome, "findings", None) or [])
            # Advice text without records is an outcome stored before findings were kept (a profiled
            # outcome now always carries its core metrics): only then do the text rules apply.
            legacy = (not findings and not getattr(outcome, "raw_metrics", None) and outcome.diagnoses
                      and not outcome.diagnoses.startswith("(profiling unavailable"))
            if legacy:
                return self.weights(outcome.diagnoses), {}
            pairs = [(f, SEVERITY_WEIGHT.get(str(f.get("severity")), 0.4), True) for f in findings]
            label = "advice"
        else:
            metrics = getattr(outcome, "raw_metrics", None) or {}
            if not metrics:
                return w, why
            # the longest kernel stands for the candidate, as it dominates its time
            main = max(metrics.values(), key=lambda m: float(m.get("gpu__time_duration.sum") or 0))
            pairs = [({"tool": t, "title": ""}, RAW_WEIGHT, False) for t in _raw_tools(main)]
            label = "raw"
        for f, scale, titles in pairs:
            for r in self.t.advice:
                if r.applies(f, titles):
                    k = (r.knob, r.direction)
                    w[k] = w.get(k, 0.0) + r.weight * scale
                    why.setdefault(k, f"{label}: {r.tool}{(' (' + str(f['title']) + ')') if f.get('title') else ''}"
                                      f" -> {r.why}")
        return w, why

    def propose(self, ctx: ExpandContext) -> Proposal:
        parent = ctx.parent
        base = parent.info.get("params") or (params_of(parent.source) if parent.source else None) or self.t.params
        w, why = self.steer(parent.outcome)
        ranked = []
        for key, d, q in moves(self.t, base):
            src = self.t.make_source(q)
            if source_hash(src) in ctx.seen:
                continue
            # The profile's weight decides; the seeded draw only breaks ties (and orders unargued moves).
            ranked.append(((w.get((key, d), 0.0), ctx.rng.random()), key, d, q, src))
        if not ranked:
            return Proposal(None, reason="every valid one-step change of this node was already tried", exhausted=True)
        ranked.sort(key=lambda r: r[0], reverse=True)
        _, key, d, q, src = ranked[0]
        guided = w.get((key, d), 0.0) > 0
        note = f" ({why[(key, d)]})" if (key, d) in why else (" (diagnosis-guided)" if guided else "")
        info = {"params": q, "guided": guided, "template": self.t.name, "feedback": self.feedback}
        if (key, d) in why:
            info["steer"] = why[(key, d)]
        return Proposal(src, what=describe(base, q) + note, info=info)


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
