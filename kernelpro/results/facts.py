"""The run store's read-model: one `Facts` per candidate, read from what each stage recorded, and the
figures every consumer shares (verdict, best per task, fast_p, geomean). `bench`, `report`, `fixit` and
`optimize` read results through here and nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kernelpro.results.fidelity import protocols
from kernelpro.results.record import Result

# Verdicts, in the order a candidate meets the checks. Fixit uses the same names for its categories.
VERDICTS = ("compile_error", "missing_feature", "wrong_output", "flagged", "degenerate_problem", "slow", "pass",
            "pending", "not_for_target")
BASELINE_ORDER = ("cublas", "cudnn", "eager", "torch", "compile", "torch_compile", "reference")
# The harness's failed checks that mean "wrong or broken", not "gaming the measurement".
NOT_FLAGS = {"compile_error", "crash", "timeout", "oom", "wrong_output", "nan_inf", "unwritten_output", "sanitizer"}


# ------------------------------------------------------------------------------------------------
# Facts about a candidate, read from whatever the stages stored
# ------------------------------------------------------------------------------------------------

@dataclass
class Facts:
    id: int
    run_id: int
    task: str
    origin: str
    parent_id: int | None
    info: dict[str, Any]
    source: str
    hash: str
    compiled: bool | None = None
    correct: bool | None = None
    flags: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    emitted: list[str] = field(default_factory=list)
    executed: list[str] | None = None
    missing: list[str] = field(default_factory=list)
    speedups: dict[str, float] = field(default_factory=dict)
    energy_j: float | None = None
    baseline_energy_j: float | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    # How it was timed: {protocol: stored run (stats, speedup, telemetry, steady)} and the energy record
    protocols: dict[str, Any] = field(default_factory=dict)
    energy: dict[str, Any] = field(default_factory=dict)
    stage: str = ""
    reason: str = ""
    compile_log: str = ""
    verify_log: str = ""
    correctness: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    arch: str | None = None
    evaluated: bool = False
    per_arch: dict[str, ArchFacts] = field(default_factory=dict)   # every target it was verified for

    @property
    def primary(self) -> str | None:
        """The baseline a bare speedup refers to: the vendor library first, then eager PyTorch."""
        return next((b for b in BASELINE_ORDER if b in self.speedups), next(iter(self.speedups), None))

    def speedup(self, baseline: str | None = None) -> float | None:
        b = baseline or self.primary
        return self.speedups.get(b) if b else None

    @property
    def degenerate(self) -> bool:
        """The task's reference output ignores its inputs and parameters (recorded with the candidate)."""
        d = self.info.get("degenerate") if isinstance(self.info, dict) else None
        return bool(isinstance(d, dict) and d.get("status") == "degenerate") or self.reference_static

    @property
    def reference_static(self) -> bool:
        """The evaluation saw the reference's output move by no more than the tolerance between input draws."""
        rc, tol = self.correctness.get("reference_change"), self.correctness.get("tolerance")
        return bool(isinstance(rc, dict) and rc and isinstance(tol, dict) and tol.get("atol") is not None
                    and all(v is not None and v <= tol["atol"] for v in rc.values()))

    @property
    def ok(self) -> bool:
        return bool(self.compiled is not False and self.correct and not self.flags and not self.missing)


def _first(d: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if isinstance(d, dict) and d.get(n) is not None:
            return d[n]
    return default


def _names(v: Any) -> list[str]:
    """Feature or flag names from a list of names, a list of {name: ...} dicts, or a {name: truthy} dict."""
    if not v:
        return []
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            if isinstance(x, dict):
                x = _first(x, "executed", "triggered", "present", "found", "used", "value", "ok", default=True)
            if isinstance(x, str):  # the verifier's status: emitted | declared, not emitted | absent
                x = x in ("emitted", "executed")
            if x:
                out.append(str(k))
        return out
    if isinstance(v, list | tuple | set):
        out = []
        for x in v:
            if isinstance(x, dict):
                if _first(x, "triggered", "present", "found", default=True):
                    out.append(str(_first(x, "name", "feature", "flag", default=x)))
            else:
                out.append(str(x))
        return out
    return [str(v)]


def _bool(v: Any) -> bool | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return _bool(_first(v, "ok", "passed", "correct", "all_passed"))
    return bool(v)


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return "\n".join(map(str, v))
    return str(v)


@dataclass(frozen=True)
class ArchFacts:
    """One target's static verdict for a candidate: did nvcc/ptxas build it, and which requested features
    it emits. `compiled` None: not judged (a pure-PyTorch candidate has no CUDA to build)."""

    arch: str
    compiled: bool | None
    features_ok: bool | None
    requested: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    cause: str = ""           # why it did not compile, one line
    cause_short: str = ""     # the same for a table cell, e.g. "Hopper-only (wgmma)"
    note: str = ""            # why it was not judged
    declared_out: bool = False   # the candidate's ARCHS leaves this target out: not built, by its own word

    @property
    def cell(self) -> str:
        """ok | fails: CAUSE | missing: F, G | compiled | a note."""
        if self.note:
            return self.note
        if self.declared_out:
            return f"not built: {self.cause_short}"
        if self.compiled is False:
            return f"fails: {self.cause_short or 'compile error'}"
        if self.missing:
            return "missing " + ", ".join(self.missing)
        return "ok" if self.requested else "compiled"


def arch_facts(ver: dict[str, Any]) -> ArchFacts:
    """An ArchFacts from one stored verification record (the static verifier's payload)."""
    p = ver["payload"]
    arch = str(ver["arch"] or p.get("arch") or "?")
    if p.get("error"):
        err = str(p["error"])
        note = "no CUDA (pure PyTorch)" if "loads no CUDA" in err else "not verified"
        return ArchFacts(arch, None, p.get("features_ok"), note=note, cause=err)
    requested = tuple(_names(p.get("requested")))
    compiled = p.get("compiled")
    missing = tuple(p.get("missing_features") or []) if compiled is not False else ()
    cause = short = ""
    if compiled is False:
        errors = [d for d in p.get("diagnostics") or [] if isinstance(d, dict) and d.get("severity") in ("error", "fatal")]
        first = (f"{errors[0].get('file')}:{errors[0].get('line')}: {errors[0].get('message')}" if errors
                 else "no diagnostics")
        cause, short = str(p.get("cause") or first), str(p.get("cause_short") or "compile error")
    ok = p.get("features_ok", p.get("passed", ver.get("ok")))
    return ArchFacts(arch, None if compiled is None else bool(compiled), None if ok is None else bool(ok),
                     requested, missing, cause, short, declared_out=bool(p.get("not_declared")))


def candidate_facts(store: Any, cand: dict[str, Any], profile: str | None = None) -> Facts:
    """The read-model of one candidate; with `profile`, its verdict is that evaluation profile's (a bench
    run under several profiles has one evaluation per profile, and each table row is one of them)."""
    f = Facts(id=cand["id"], run_id=cand["run_id"], task=cand["task"], origin=cand["origin"],
              parent_id=cand["parent_id"], info=cand.get("info") or {}, source=cand["source"], hash=cand["hash"])
    evs = store.results("evaluations", cand["id"])
    vers = store.results("verifications", cand["id"])
    for v in vers:
        a = arch_facts(v)
        f.per_arch[a.arch] = a
    # The target a candidate is judged by: the one it ran on, else the first it was verified for (a bench
    # run verifies its --arch list in order); every other target is in per_arch.
    ran_on = next((e["arch"] for e in reversed(evs) if e["arch"] in f.per_arch), None)
    primary = ran_on or (vers[0]["arch"] if vers else None)
    comps = store.results("compiles", cand["id"])
    comp = next((c for c in reversed(comps) if c["arch"] == primary), comps[-1] if comps else None)
    if comp is not None:
        f.compiled = bool(comp["ok"])
        f.compile_log = _text(_first(comp["payload"], "errors", "log", "stderr", "diagnostics", default=""))
        f.arch = comp["arch"]
    ver = next((v for v in reversed(vers) if v["arch"] == primary), None)
    if ver is not None:
        p = ver["payload"]
        f.arch = ver["arch"] or f.arch
        f.requested = _names(_first(p, "requested", "requested_features"))
        f.emitted = _names(_first(p, "found", "emitted", "present", "features", "used"))
        if f.arch is None and p.get("arch"):
            f.arch = str(p["arch"])
        f.missing = _names(_first(p, "missing", "missing_features"))
        ex = _first(p, "executed", "executed_features")
        f.executed = _names(ex) if ex is not None else None
        f.verify_log = _text(_first(p, "summary", "reason", "errors", default=""))
        if not ver["ok"] and not f.missing and p.get("compiled") is not False and f.requested:
            f.missing = [x for x in f.requested if x not in f.emitted]
        if p.get("compiled") is False and f.compiled is None:
            f.compiled = False
            f.compile_log = f.compile_log or _text(_first(p, "compile_errors", "errors", "log", default=""))
        if not f.requested and not ver["ok"] and not f.missing:
            f.verify_log = f.verify_log or "verification failed"
    # A side-by-side round (compare / --confirm) re-times a candidate at one size; its own verdict stays the
    # evaluation it had in its run, unless it has no other (a candidate of a compare run).
    own = [e for e in evs if "compare_round" not in e["payload"]]
    if profile is not None:
        own = [e for e in own if (e["payload"].get("profile") or "kernelpro") == profile]
    pool = own if (own or profile is not None) else evs
    ev = pool[-1] if pool else None
    if ev is not None:
        f.evaluated = True
        f.arch = ev["arch"] or f.arch
        if is_outcome_payload(ev["payload"]):
            _from_outcome(f, ev["payload"])
        else:
            _from_result(f, Result.from_dict(ev["payload"]))
    prof = store.latest("profiles", cand["id"])
    if prof is not None:
        p = prof["payload"]
        ex = _first(p, "executed_features", "executed")
        if isinstance(ex, dict) and isinstance(ex.get("features"), dict):  # evidence_payload shape
            ex = ex["features"]
        if ex is not None and f.executed is None:
            f.executed = _names(ex)
        adv = _first(p, "advice", "findings", "summary")
        if adv and not f.advice:
            f.advice = _advice_text(adv)
    return f


def is_outcome_payload(p: dict[str, Any]) -> bool:
    """An evaluation stored by the search (the agent's EvalOutcome: its fields plus the harness `record`),
    as opposed to a bare harness result record (bench, compare)."""
    return "stage" in p and "candidate" not in p


def _flags(failed: list[str]) -> list[str]:
    out: list[str] = []
    for x in failed:
        if x not in NOT_FLAGS and x not in out:
            out.append(x)
    return out


def _from_result(f: Facts, r: Result) -> None:
    """Facts from the harness's result record."""
    f.compiled = bool(r.compiled)
    f.correct = bool(r.correct)
    f.correctness = {"sizes": r.correctness} if r.correctness else {}
    if r.reference_change:   # how far the reference moved between input draws (degenerate at this size?)
        f.correctness.update(reference_change=r.reference_change, tolerance=r.tolerance)
    f.flags = _flags([str(x) for x in r.failed_checks])   # only anti-gaming failures are flags here
    f.speedups = {str(k): float(v) for k, v in r.speedup.items() if isinstance(v, int | float) and v > 0}
    f.protocols = protocols(r.to_dict())
    f.energy = dict(r.energy or {})
    f.energy_j = r.j_per_call("candidate")
    f.baseline_energy_j = next((r.j_per_call(b) for b in BASELINE_ORDER if r.j_per_call(b) is not None), None)
    f.reason = r.reason or ""
    if r.detail:
        f.reason = f"{f.reason}: {r.detail}" if f.reason else r.detail
    if r.failed_checks:
        first = r.failed_checks[0]
        f.stage = "compile" if first == "compile_error" else "correctness" if first in NOT_FLAGS else "gaming"


def _from_outcome(f: Facts, p: dict[str, Any]) -> None:
    """Facts from the search's outcome payload (agent.evaluator.EvalOutcome.to_payload)."""
    stage = str(p.get("stage") or "")
    if stage == "compile":
        f.compiled = False
    elif f.compiled is None and stage not in ("", "generate"):
        f.compiled = True
    f.correct = p.get("correct")
    f.flags = _flags([str(x) for x in p.get("flags") or []])
    rec = p.get("record") or {}
    if isinstance(rec.get("correctness"), list) and rec["correctness"]:
        f.correctness = {"sizes": rec["correctness"]}
    named = rec.get("speedup") if isinstance(rec.get("speedup"), dict) else {}
    if named:      # the harness's record names the baseline each speedup is against
        f.speedups = {str(k): float(v) for k, v in named.items() if isinstance(v, int | float) and v > 0}
    elif isinstance(p.get("speedup"), int | float) and p["speedup"] > 0:
        f.speedups = {"baseline": float(p["speedup"])}
    f.energy_j = p.get("energy_j")
    f.baseline_energy_j = p.get("baseline_energy_j")
    f.protocols = protocols(rec)
    f.timings = dict(p.get("timings") or {})
    f.stage, f.reason = stage, str(p.get("reason") or "")
    f.compile_log = f.compile_log or str(p.get("compile_errors") or "")
    f.verify_log = f.verify_log or str(p.get("verify_errors") or "")
    f.missing = f.missing or [str(x) for x in p.get("missing_features") or []]
    f.advice = str(p.get("diagnoses") or "")
    if stage == "verify" and not f.missing:
        f.missing = ["(requested features)"]
    if stage == "compile" and f.correct is None:
        f.correct = False


def _advice_text(adv: Any) -> str:
    if isinstance(adv, list):
        lines = []
        for a in adv:
            if isinstance(a, dict):
                acts = a.get("actions")
                lines.append(" ".join([str(a[k]) for k in ("title", "text", "finding", "message", "action") if a.get(k)]
                                      + ([" ".join(map(str, acts))] if isinstance(acts, list) else [])))
            else:
                lines.append(str(a))
        return "\n".join(lines)
    return _text(adv)


# How a verdict reads in tables and pages: "pending" is a candidate nothing has run yet (no GPU).
VERDICT_LABELS = {"pending": "not run", "not_for_target": "not for target"}


def verdict_label(v: str) -> str:
    return VERDICT_LABELS.get(v, v)


def arch_counts(facts: list[Facts]) -> dict[str, dict[str, int]]:
    """Per target: how many candidates were verified for it, compiled for it, and emit every requested
    feature on it; the one figure the bench table and the report both print."""
    out: dict[str, dict[str, int]] = {}
    for f in facts:
        for arch, a in f.per_arch.items():
            c = out.setdefault(arch, {"n": 0, "judged": 0, "compiled": 0, "features_ok": 0, "not_for_target": 0})
            c["n"] += 1
            if a.declared_out:      # the candidate says it is not built for this target: not judged on it
                c["not_for_target"] += 1
                continue
            c["judged"] += a.compiled is not None
            c["compiled"] += a.compiled is True
            c["features_ok"] += bool(a.compiled and a.features_ok)
    return out


def arch_counts_text(counts: dict[str, dict[str, int]], what: str) -> str:
    """'sm_90a 10/10, sm_100a 3/10' for what = 'compiled' or 'features_ok'."""
    return ", ".join(f"{a} {c[what]}/{c['judged']}"
                     + (f" (+{c['not_for_target']} not for it)" if c.get("not_for_target") else "")
                     for a, c in counts.items() if c["judged"]) or "-"


def verdict(f: Facts, slow_below: float = 1.0, baseline: str | None = None) -> str:
    """compile_error | missing_feature | wrong_output | flagged | degenerate_problem | slow | pass | pending.

    `degenerate_problem`: a candidate that passed on a problem whose reference ignores its inputs; the pass
    proves nothing and its speedup is not counted."""
    if f.compiled is False:
        # A target the candidate declares it does not build for (ARCHS) is no error of the candidate's.
        a = f.per_arch.get(f.arch or "")
        return "not_for_target" if a is not None and a.declared_out else "compile_error"
    if f.flags:
        return "flagged"
    if f.correct is False:
        return "wrong_output"
    if f.missing:
        return "missing_feature"
    if f.correct is None and not f.evaluated:
        return "pending"
    if f.correct is None:
        return "wrong_output" if f.stage in ("correctness", "crash") else "pending"
    if f.degenerate:
        return "degenerate_problem"
    s = f.speedup(baseline)
    if s is not None and s < slow_below:
        return "slow"
    return "pass"


# ------------------------------------------------------------------------------------------------
# Run views
# ------------------------------------------------------------------------------------------------

@dataclass
class RunView:
    run: dict[str, Any]
    facts: list[Facts]
    best: dict[str, Facts]          # per task: the candidate the run is judged by
    baselines: list[str]
    baseline: str | None            # the primary one (fast_p, distribution)
    nodes: list[dict[str, Any]]
    comparisons: list[Any] = field(default_factory=list)   # compare.Comparison: this run's, or its --confirm

    @property
    def label(self) -> str:
        cfg = self.run["config"] or {}
        extra = [str(cfg[k]) for k in ("strategy", "policy", "model", "label") if isinstance(cfg.get(k), str)]
        return f"run {self.run['id']} ({self.run['kind']}{', ' + ', '.join(extra) if extra else ''})"


def _rank(f: Facts, baseline: str | None) -> tuple:
    s = f.speedup(baseline) or 0.0
    return (f.ok, f.correct is True, f.compiled is not False, s, -f.id)


def load_run(store: Any, run_id: int) -> RunView:
    run = store.get_run(run_id)
    facts = [candidate_facts(store, c) for c in store.candidates(run_id)]
    counts: dict[str, int] = {}
    for f in facts:
        for b in f.speedups:
            counts[b] = counts.get(b, 0) + 1
    baselines = sorted(counts, key=lambda b: (-counts[b], BASELINE_ORDER.index(b) if b in BASELINE_ORDER else 99, b))
    primary = baselines[0] if baselines else None
    best: dict[str, Facts] = {}
    for f in facts:
        if f.origin == "reference" and run["kind"] == "optimize":
            continue  # the starting point of a search is not its result
        if f.task not in best or _rank(f, primary) > _rank(best[f.task], primary):
            best[f.task] = f
    for f in facts:  # a search that produced nothing else is still judged by its reference
        best.setdefault(f.task, f)
    from kernelpro.results.comparison import load_comparison

    cmp_ids = [run_id] if run["kind"] == "compare" else [
        r["id"] for r in store.runs("compare") if r["config"].get("optimize_run") == run_id]
    return RunView(run, facts, dict(sorted(best.items())), baselines, primary, store.nodes(run_id),
                   [load_comparison(store, i) for i in cmp_ids])


def fast_p(view: RunView, p: float, include_degenerate: bool = False) -> float:
    """Tasks whose best candidate is correct and > p x faster / tasks; degenerate tasks left out unless asked."""
    best = [f for f in view.best.values() if include_degenerate or not f.degenerate]
    if not best:
        return 0.0
    hits = sum(1 for f in best if f.ok and (f.speedup(view.baseline) or 0) > p)
    return hits / len(best)


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None
