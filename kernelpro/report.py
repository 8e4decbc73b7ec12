"""`kernelpro report`: one self-contained HTML file about one or more runs.

Everything the page needs is inside it: CSS, a few lines of JavaScript (sortable tables, an error
hook), and the plots as inline SVG drawn here by hand, so it opens from a laptop with no network and no
plotting library. Sections: a summary of each run, fast_p curves, the speedup distribution, a
side-by-side comparison of the runs, and per run a per-task table, a feature-usage heat map (task x
feature: declared / emitted / executed) and, for optimize runs, the search tree with each node's verdict
and speedup.

The store's payloads are written by several stages (harness, agent, verifier, profiler) and keep
evolving, so `candidate_facts` reads them by the names each stage uses and treats a missing field as
"not measured", never as a failure.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import KernelProError

# Verdicts, in the order a candidate meets the checks. Fixit uses the same names for its categories.
VERDICTS = ("compile_error", "missing_feature", "wrong_output", "flagged", "slow", "pass", "pending")
VERDICT_COLOR = {"compile_error": "#d62728", "missing_feature": "#9467bd", "wrong_output": "#ff7f0e",
                 "flagged": "#111111", "slow": "#bcbd22", "pass": "#2ca02c", "pending": "#b0b0b0"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
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
    stage: str = ""
    reason: str = ""
    compile_log: str = ""
    verify_log: str = ""
    correctness: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    arch: str | None = None
    evaluated: bool = False

    @property
    def primary(self) -> str | None:
        """The baseline a bare speedup refers to: the vendor library first, then eager PyTorch."""
        return next((b for b in BASELINE_ORDER if b in self.speedups), next(iter(self.speedups), None))

    def speedup(self, baseline: str | None = None) -> float | None:
        b = baseline or self.primary
        return self.speedups.get(b) if b else None

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


def candidate_facts(store: Any, cand: dict[str, Any]) -> Facts:
    f = Facts(id=cand["id"], run_id=cand["run_id"], task=cand["task"], origin=cand["origin"],
              parent_id=cand["parent_id"], info=cand.get("info") or {}, source=cand["source"], hash=cand["hash"])
    comp = store.latest("compiles", cand["id"])
    if comp is not None:
        f.compiled = bool(comp["ok"])
        f.compile_log = _text(_first(comp["payload"], "errors", "log", "stderr", "diagnostics", default=""))
        f.arch = comp["arch"]
    ver = store.latest("verifications", cand["id"])
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
    evs = store.results("evaluations", cand["id"])
    # A side-by-side round (compare / --confirm) re-times a candidate at one size; its own verdict stays the
    # evaluation it had in its run, unless it has no other (a candidate of a compare run).
    own = [e for e in evs if "compare_round" not in e["payload"]]
    ev = (own or evs)[-1] if evs else None
    if ev is not None:
        f.evaluated = True
        p = ev["payload"]
        f.arch = ev["arch"] or f.arch
        comp_ok = p.get("compiled")
        stage = str(p.get("stage") or "")
        if comp_ok is not None:
            f.compiled = bool(comp_ok)
        elif stage == "compile":
            f.compiled = False
        elif f.compiled is None and stage not in ("", "generate"):
            f.compiled = True
        f.correct = _bool(p.get("correct"))
        if f.correct is None and isinstance(p.get("correctness"), dict):
            f.correct = _bool(p["correctness"])
        if isinstance(p.get("correctness"), dict):
            f.correctness = p["correctness"]
        # Outcome records may list every failed check as a flag; only anti-gaming ones are flags here.
        f.flags = [x for x in _names(_first(p, "flags", "gaming_flags")) if x not in NOT_FLAGS]
        failed = [str(x) for x in (p.get("failed_checks") or [])]
        f.flags += [x for x in failed if x not in NOT_FLAGS and x not in f.flags]
        if isinstance(p.get("correctness"), list):  # the harness's per-trial records
            f.correctness = {"sizes": p["correctness"]}
        sp = p.get("speedups") if isinstance(p.get("speedups"), dict) else p.get("speedup")
        if isinstance(sp, dict):
            f.speedups = {str(k): float(v) for k, v in sp.items() if isinstance(v, int | float) and v > 0}
        s1 = _first(p, "speedup", "speedup_vs_baseline")
        if isinstance(s1, int | float) and s1 > 0 and not f.speedups:
            f.speedups = {str(_first(p, "baseline", default="baseline")): float(s1)}
        en = p.get("energy")
        f.energy_j = _first(p, "energy_j", "energy_per_call_j")
        f.baseline_energy_j = _first(p, "baseline_energy_j")
        if isinstance(en, dict):
            cand_e = _first(en, "candidate", "new", "ModelNew")
            if isinstance(cand_e, dict):
                f.energy_j = f.energy_j or _first(cand_e, "j_per_call")
            for k in BASELINE_ORDER:
                if isinstance(en.get(k), dict) and f.baseline_energy_j is None:
                    f.baseline_energy_j = en[k].get("j_per_call")
        f.timings = p.get("timings") if isinstance(p.get("timings"), dict) else {}
        f.stage, f.reason = stage, _text(_first(p, "reason", "error", default=""))
        if p.get("detail"):
            f.reason = f"{f.reason}: {p['detail']}" if f.reason else str(p["detail"])
        if not stage and failed:
            first = failed[0]
            f.stage = ("compile" if first == "compile_error" else
                       "correctness" if first in NOT_FLAGS else "gaming")
        f.compile_log = f.compile_log or _text(_first(p, "compile_errors", "compile_log", default=""))
        f.verify_log = f.verify_log or _text(_first(p, "verify_errors", default=""))
        miss = _names(_first(p, "missing_features"))
        f.missing = f.missing or miss
        f.advice = _text(_first(p, "diagnoses", "advice", default=""))
        if stage == "verify" and not f.missing:
            f.missing = ["(requested features)"]
        if stage == "compile" and f.correct is None:
            f.correct = False
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


def verdict(f: Facts, slow_below: float = 1.0, baseline: str | None = None) -> str:
    """compile_error | missing_feature | wrong_output | flagged | slow | pass | pending."""
    if f.compiled is False:
        return "compile_error"
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
    from .compare import load_comparison

    cmp_ids = [run_id] if run["kind"] == "compare" else [
        r["id"] for r in store.runs("compare") if r["config"].get("optimize_run") == run_id]
    return RunView(run, facts, dict(sorted(best.items())), baselines, primary, store.nodes(run_id),
                   [load_comparison(store, i) for i in cmp_ids])


def fast_p(view: RunView, p: float) -> float:
    if not view.best:
        return 0.0
    hits = sum(1 for f in view.best.values() if f.ok and (f.speedup(view.baseline) or 0) > p)
    return hits / len(view.best)


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ------------------------------------------------------------------------------------------------
# SVG, by hand
# ------------------------------------------------------------------------------------------------

def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, t = [], start
    while t <= hi + 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) >= 0.01 or v == 0 else f"{v:.1e}"


def svg_lines(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
              ymax: float | None = None, width: int = 560, height: int = 320, klass: str = "plot") -> str:
    """A step/line chart: one polyline per series, with axes, grid, ticks and a legend."""
    ml, mr, mt, mb = 56, 16, 30, 44 + 16 * len(series)
    height += 16 * len(series)
    pts = [p for s in series.values() for p in s]
    xs = [p[0] for p in pts] or [0, 1]
    ys = [p[1] for p in pts] or [0, 1]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), ymax if ymax is not None else max(ys) * 1.05 or 1.0
    if x1 <= x0:
        x1 = x0 + 1
    pw, ph = width - ml - mr, height - mt - mb

    def X(x: float) -> float:
        return ml + (x - x0) / (x1 - x0) * pw

    def Y(y: float) -> float:
        return mt + ph - (y - y0) / (y1 - y0) * ph

    out = [f'<svg class="{klass}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           f'<title>{_e(title)}</title>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="ttl">{_e(title)}</text>']
    for t in _nice_ticks(x0, x1):
        out.append(f'<line x1="{X(t):.1f}" y1="{mt}" x2="{X(t):.1f}" y2="{mt + ph}" class="grid"/>'
                   f'<text x="{X(t):.1f}" y="{mt + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    for t in _nice_ticks(y0, y1):
        out.append(f'<line x1="{ml}" y1="{Y(t):.1f}" x2="{ml + pw}" y2="{Y(t):.1f}" class="grid"/>'
                   f'<text x="{ml - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" class="frame"/>')
    out.append(f'<text x="{ml + pw / 2}" y="{mt + ph + 34}" text-anchor="middle">{_e(xlabel)}</text>')
    out.append(f'<text transform="translate(14,{mt + ph / 2}) rotate(-90)" text-anchor="middle">{_e(ylabel)}</text>')
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        if s:
            path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" class="series">'
                       f'<title>{_e(name)}</title></polyline>')
        ly = mt + ph + 50 + i * 16
        out.append(f'<rect x="{ml}" y="{ly - 4}" width="14" height="3" fill="{color}"/>'
                   f'<text x="{ml + 20}" y="{ly}">{_e(name[:80])}</text>')
    out.append("</svg>")
    return "".join(out)


def svg_histogram(series: dict[str, list[float]], title: str, width: int = 560, height: int = 320) -> str:
    """Speedups binned on a log2 axis (equal ratios, equal widths); one bar group per bin."""
    ml, mr, mt, mb = 56, 16, 30, 44 + 16 * len(series)
    height += 16 * len(series)
    vals = [v for s in series.values() for v in s if v > 0]
    lo = math.floor(math.log2(min(vals))) if vals else -1
    hi = math.ceil(math.log2(max(vals))) if vals else 1
    if hi <= lo:
        hi = lo + 1
    nb = max(1, int((hi - lo) * 2))  # half-octave bins
    edges = [lo + i * (hi - lo) / nb for i in range(nb + 1)]
    counts = {name: [0] * nb for name in series}
    for name, s in series.items():
        for v in s:
            if v > 0:
                k = min(nb - 1, max(0, int((math.log2(v) - lo) / (hi - lo) * nb)))
                counts[name][k] += 1
    cmax = max([c for cs in counts.values() for c in cs] + [1])
    pw, ph = width - ml - mr, height - mt - mb
    bw = pw / nb
    out = [f'<svg class="plot" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           f'<title>{_e(title)}</title>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="ttl">{_e(title)}</text>']
    for t in _nice_ticks(0, cmax, min(5, cmax)):
        if t != int(t):
            continue  # counts are whole numbers
        y = mt + ph - t / cmax * ph
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for i, e in enumerate(edges):
        if i % max(1, nb // 8) == 0 or i == nb:
            x = ml + i * bw
            out.append(f'<text x="{x:.1f}" y="{mt + ph + 16}" text-anchor="middle">{2 ** e:.3g}x</text>')
    if lo < 0 < hi:  # parity line
        x = ml + (0 - lo) / (hi - lo) * pw
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" class="parity"/>')
    ns = max(1, len(series))
    for j, (name, cs) in enumerate(counts.items()):
        color = PALETTE[j % len(PALETTE)]
        for k, c in enumerate(cs):
            if c:
                h = c / cmax * ph
                x = ml + k * bw + j * bw / ns + 1
                out.append(f'<rect x="{x:.1f}" y="{mt + ph - h:.1f}" width="{max(1.0, bw / ns - 2):.1f}" '
                           f'height="{h:.1f}" fill="{color}" class="bar"><title>{_e(name)}: {c} in '
                           f'[{2 ** edges[k]:.3g}x, {2 ** edges[k + 1]:.3g}x)</title></rect>')
        ly = mt + ph + 50 + j * 16
        out.append(f'<rect x="{ml}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{ml + 16}" y="{ly}">{_e(name[:80])}</text>')
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" class="frame"/>')
    out.append(f'<text x="{ml + pw / 2}" y="{mt + ph + 34}" text-anchor="middle">speedup (log scale)</text>')
    out.append(f'<text transform="translate(14,{mt + ph / 2}) rotate(-90)" text-anchor="middle">tasks</text>')
    out.append("</svg>")
    return "".join(out)


HEAT = {"executed": ("#2ca02c", "X"), "emitted": ("#f2c14e", "E"), "missing": ("#d62728", "D"),
        "extra": ("#9ecae1", "+"), "none": ("#f4f4f4", "")}


def svg_heatmap(view: RunView) -> str:
    """Task x feature: declared (D, requested but absent), emitted (E, in PTX/SASS), executed (X)."""
    tasks = list(view.best)
    feats: list[str] = []
    for f in view.best.values():
        for x in f.requested + f.emitted + (f.executed or []):
            if x not in feats and not x.startswith("("):
                feats.append(x)
    if not tasks or not feats:
        return '<p class="muted">No feature verification recorded for this run.</p>'
    cw, ch = 34, 22
    left = max(120, 7 * max(len(t.split("/")[-1]) for t in tasks))
    top = 20 + int(5.5 * max(len(x) for x in feats))
    width, height = left + max(cw * len(feats), 600) + 20, top + ch * len(tasks) + 40
    out = [f'<svg class="heat" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           '<title>feature usage: task x feature</title>']
    for j, name in enumerate(feats):
        x = left + j * cw + cw / 2
        out.append(f'<text transform="translate({x:.1f},{top - 6}) rotate(-55)">{_e(name)}</text>')
    for i, t in enumerate(tasks):
        f = view.best[t]
        y = top + i * ch
        out.append(f'<text x="{left - 6}" y="{y + ch / 2 + 4}" text-anchor="end">{_e(t.split("/")[-1])}</text>')
        for j, name in enumerate(feats):
            declared = name in f.requested
            if f.executed is not None and name in f.executed:
                state = "executed"
            elif name in f.emitted:
                state = "emitted" if declared or f.executed is None else "extra"
            elif declared:
                state = "missing"
            else:
                state = "none"
            if state == "emitted" and not declared:
                state = "extra"
            color, mark = HEAT[state]
            tip = f"{t}: {name}: " + {"executed": "emitted and executed", "emitted": "emitted in PTX/SASS",
                                      "missing": "declared but not found", "extra": "used, not declared",
                                      "none": "not declared, not used"}[state]
            if declared and state != "missing":
                tip += " (declared)"
            out.append(f'<rect x="{left + j * cw}" y="{y}" width="{cw - 2}" height="{ch - 2}" fill="{color}" '
                       f'class="cell"><title>{_e(tip)}</title></rect>')
            if mark:
                out.append(f'<text x="{left + j * cw + cw / 2 - 1}" y="{y + ch / 2 + 4}" text-anchor="middle" '
                           f'class="mark">{mark}</text>')
    ly = top + ch * len(tasks) + 18
    for k, (state, label) in enumerate((("executed", "X executed"), ("emitted", "E emitted (static)"),
                                        ("missing", "D declared, absent"), ("extra", "+ used, undeclared"))):
        out.append(f'<rect x="{left + k * 150}" y="{ly - 10}" width="12" height="12" fill="{HEAT[state][0]}"/>'
                   f'<text x="{left + k * 150 + 16}" y="{ly}">{label}</text>')
    out.append("</svg>")
    return "".join(out)


def _node_facts(view: RunView, node: dict[str, Any]) -> tuple[str, float | None, str]:
    """(verdict, speedup, one-line reason) for a search node, from its stored outcome or candidate."""
    by_id = {f.id: f for f in view.facts}
    f = by_id.get(node["candidate_id"]) if node["candidate_id"] else None
    out = (node.get("payload") or {}).get("outcome") or {}
    if f is not None and f.evaluated:
        v = verdict(f, baseline=view.baseline)
        return v, f.speedup(view.baseline), (f.reason or f.stage or "")[:160]
    if out:
        stage = out.get("stage", "")
        v = {"compile": "compile_error", "verify": "missing_feature", "correctness": "wrong_output",
             "gaming": "flagged", "crash": "wrong_output", "generate": "compile_error"}.get(stage)
        sp = out.get("speedup")
        if v is None:
            v = "slow" if isinstance(sp, int | float) and sp < 1.0 else ("pass" if out.get("ok") else "pending")
        return v, sp, str(out.get("reason", ""))[:160]
    if f is not None and f.origin == "reference":
        return "pass", 1.0, "reference"
    return "pending", None, ""


def svg_tree(view: RunView) -> str:
    """The search tree: x by leaf order, y by depth; colour = verdict; label = speedup."""
    nodes = {n["node_key"]: n for n in view.nodes}
    if not nodes:
        return '<p class="muted">No search tree stored for this run.</p>'
    kids: dict[str | None, list[str]] = {}
    for k, n in nodes.items():
        parent = n["parent_key"] if n["parent_key"] in nodes else None
        kids.setdefault(parent, []).append(k)
    pos: dict[str, tuple[float, int]] = {}
    leaf = [0]

    def place(k: str, depth: int) -> float:
        cs = kids.get(k, [])
        if not cs:
            x = float(leaf[0])
            leaf[0] += 1
        else:
            xs = [place(c, depth + 1) for c in cs]
            x = (xs[0] + xs[-1]) / 2
        pos[k] = (x, depth)
        return x

    for r in kids.get(None, []):
        place(r, 0)
    maxd = max(d for _, d in pos.values())
    sx, sy, m = 46, 64, 30
    width, height = int(m * 2 + max(1, leaf[0]) * sx), int(m * 2 + (maxd + 1) * sy + 10)
    info = {k: _node_facts(view, n) for k, n in nodes.items()}
    scored = [(s, k) for k, (v, s, _) in info.items() if v == "pass" and s is not None]
    best = max(scored)[1] if scored else None
    out = [f'<svg class="tree" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           '<title>search tree</title>']
    for k, n in nodes.items():
        p = n["parent_key"]
        if p in pos:
            (x0, d0), (x1, d1) = pos[p], pos[k]
            out.append(f'<line x1="{m + x0 * sx + sx / 2:.1f}" y1="{m + d0 * sy:.1f}" x2="{m + x1 * sx + sx / 2:.1f}" '
                       f'y2="{m + d1 * sy:.1f}" class="edge"/>')
    for k, n in nodes.items():
        x, d = pos[k]
        cx, cy = m + x * sx + sx / 2, m + d * sy
        v, s, reason = info[k]
        what = (n.get("payload") or {}).get("what", "")
        tip = (f"{k} [{n['status']}] verdict={v} speedup={'-' if s is None else f'{s:.3f}x'} "
               f"visits={n['visits']} value={n['value']:.2f}" + (f"\n{what}" if what else "")
               + (f"\n{reason}" if reason else ""))
        ring = ' stroke="#000" stroke-width="3"' if k == best else ""
        dash = ' stroke-dasharray="3,2" stroke="#666"' if n["status"] == "pruned" else ""
        out.append(f'<g class="node" data-verdict="{v}"><circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" '
                   f'fill="{VERDICT_COLOR[v]}"{ring or dash}><title>{_e(tip)}</title></circle>'
                   f'<text x="{cx:.1f}" y="{cy + 22:.1f}" text-anchor="middle" class="lbl">'
                   f'{"" if s is None else f"{s:.2f}x"}</text></g>')
    out.append("</svg>")
    legend = " ".join(f'<span class="chip" style="background:{VERDICT_COLOR[v]}"></span>{v}' for v in VERDICTS)
    return "".join(out) + f'<p class="legend">{legend}; thick ring: best node; dashed: pruned.</p>'


# ------------------------------------------------------------------------------------------------
# HTML
# ------------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left}
th{background:#f3f3f3;cursor:pointer;user-select:none}td.num{text-align:right;font-variant-numeric:tabular-nums}
.v-pass{color:#1a7f1a}.v-slow{color:#8a8a00}.v-compile_error,.v-wrong_output{color:#c62828}
.v-flagged{color:#000;font-weight:bold}.v-missing_feature{color:#6a3d9a}.muted{color:#888}
svg text{font-size:11px;fill:#333}svg .ttl{font-size:13px;font-weight:600}svg .grid{stroke:#eee}
svg .frame{fill:none;stroke:#999}svg .parity{stroke:#555;stroke-dasharray:4,3}svg .edge{stroke:#999}
svg .mark{font-size:10px;font-weight:bold;fill:#222}svg .lbl{font-size:9px}
.plots{display:flex;flex-wrap:wrap;gap:16px}.chip{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px}
.scroll{overflow-x:auto}#kp-errors{color:#c62828}
"""

JS = """
window.__kpErrors=[];
window.addEventListener('error',function(e){window.__kpErrors.push(String(e.message));
  var p=document.getElementById('kp-errors');if(p){p.textContent=window.__kpErrors.join('\\n');}});
document.addEventListener('DOMContentLoaded',function(){
  document.querySelectorAll('table.sortable th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var tb=th.closest('table').tBodies[0],rows=Array.from(tb.rows),asc=th.dataset.asc!=='1';
      rows.sort(function(a,b){var x=a.cells[i].dataset.v||a.cells[i].textContent,
        y=b.cells[i].dataset.v||b.cells[i].textContent,nx=parseFloat(x),ny=parseFloat(y);
        var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
      rows.forEach(function(r){tb.appendChild(r);});th.dataset.asc=asc?'1':'0';});});
  document.body.setAttribute('data-kp-ready',String(document.querySelectorAll('svg').length));
});
"""


def _td(v: Any, num: bool = False, sort: Any = None, klass: str = "") -> str:
    cls = " ".join(c for c in ("num" if num else "", klass) if c)
    attrs = (f' class="{cls}"' if cls else "") + (f' data-v="{_e(sort)}"' if sort is not None else "")
    return f"<td{attrs}>{_e(v)}</td>"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def task_table(view: RunView) -> str:
    bases = view.baselines
    head = ["task", "attempts", "verdict", "compiled", "correct", "flags", "features emitted", "executed",
            "missing"] + \
        [f"speedup vs {b}" for b in bases] + ["energy / call", "energy vs baseline"]
    attempts: dict[str, int] = {}
    for f in view.facts:
        attempts[f.task] = attempts.get(f.task, 0) + 1
    rows = []
    for task, f in view.best.items():
        v = verdict(f, baseline=view.baseline)
        eratio = (f.baseline_energy_j / f.energy_j) if f.energy_j and f.baseline_energy_j else None
        cells = [_td(task.split("/", 1)[-1]), _td(attempts[task], True), _td(v, klass=f"v-{v}"),
                 _td(_yn(f.compiled)), _td(_yn(f.correct)), _td(", ".join(f.flags) or "-"),
                 _td(", ".join(f.emitted) or "-"),
                 _td("not profiled" if f.executed is None else ", ".join(f.executed) or "none"),
                 _td(", ".join(f.missing) or "-")]
        cells += [_td(_x(f.speedups.get(b)), True, f.speedups.get(b, -1)) for b in bases]
        cells += [_td("-" if f.energy_j is None else f"{f.energy_j * 1e3:.4g} mJ", True, f.energy_j or -1),
                  _td(_x(eratio), True, eratio or -1)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ('<div class="scroll"><table class="sortable"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def summary_row(view: RunView) -> dict[str, Any]:
    fs = list(view.best.values())
    n = len(fs)
    sp = [f.speedup(view.baseline) for f in fs if f.ok and f.speedup(view.baseline)]
    return {
        "run": view.run["id"], "kind": view.run["kind"], "suite": view.run["suite"] or "-",
        "status": view.run["status"], "tasks": n, "candidates": len(view.facts),
        "compiled": sum(f.compiled is not False for f in fs), "correct": sum(f.ok for f in fs),
        "baseline": view.baseline or "-", "fast_1": fast_p(view, 1.0) if n else None,
        "geomean": geomean(sp), "host": view.run["host"] or "-",
        "created": time.strftime("%Y-%m-%d %H:%M", time.localtime(view.run["created"])),
    }


def comparison_table(views: list[RunView]) -> str:
    tasks = sorted({t for v in views for t in v.best})
    head = ["task"] + [v.label for v in views]
    rows = []
    for t in tasks:
        cells = [_td(t.split("/", 1)[-1])]
        for v in views:
            f = v.best.get(t)
            if f is None:
                cells.append(_td("-"))
                continue
            vd = verdict(f, baseline=v.baseline)
            s = f.speedup(v.baseline)
            cells.append(_td(f"{vd} {_x(s)}" if s is not None else vd, klass=f"v-{vd}", sort=s or -1))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    sums = [summary_row(v) for v in views]
    foot = ["<tr><th>correct</th>" + "".join(f"<td>{s['correct']}/{s['tasks']}</td>" for s in sums) + "</tr>",
            "<tr><th>fast_1</th>" + "".join(f"<td>{_rate(s['fast_1'])}</td>" for s in sums) + "</tr>",
            "<tr><th>geomean speedup (correct)</th>" + "".join(f"<td>{_x(s['geomean'])}</td>" for s in sums) + "</tr>"]
    return ('<div class="scroll"><table class="sortable"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody><tfoot>" + "".join(foot) + "</tfoot></table></div>")


def comparison_rounds_table(c: Any) -> str:
    """A compare.Comparison as a table: ms per candidate per round, ratio vs the first, median [min, max]."""
    first = c.labels[0]
    head = ["round", "judged"] + [f"{lab} ms" for lab in c.labels] + [f"ms({first}) / ms({lab})" for lab in c.labels[1:]]
    rows = []
    for k, (row, judged) in enumerate(zip(c.rounds, c.judged, strict=True), 1):
        cells = [_td(k, True), _td(judged)] + [_td(f"{row[lab]:.4f}" if row.get(lab) else "-", True) for lab in c.labels]
        cells += [_td(f"{row[first] / row[lab]:.3f}" if row.get(first) and row.get(lab) else "-", True)
                  for lab in c.labels[1:]]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    summ = c.summary()
    foot = ([_td("median"), _td("")] + [_td(f"{s['median_ms']:.4f}" if s["median_ms"] else "-", True) for s in summ]
            + [_td(f"{s['ratio_median']:.3f} [{s['ratio_min']:.3f}, {s['ratio_max']:.3f}]" if s["ratio_median"]
                   else "-", True) for s in summ[1:]])
    notes = "".join(f"<li>{_e(n)}</li>" for n in c.notes)
    return ('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody><tfoot><tr>" + "".join(foot) + "</tr></tfoot></table>"
            + (f'<ul class="muted">{notes}</ul>' if notes else "") + "</div>")


def fast_p_series(views: list[RunView]) -> dict[str, list[tuple[float, float]]]:
    top = max([f.speedup(v.baseline) or 0 for v in views for f in v.best.values() if f.ok] + [2.0]) * 1.05
    ps = [top * i / 200 for i in range(201)]
    return {f"{v.label} vs {v.baseline or '-'}": [(p, fast_p(v, p)) for p in ps] for v in views}


def render(views: list[RunView], db_path: str = "") -> str:
    sums = [summary_row(v) for v in views]
    cols = ["run", "kind", "suite", "status", "tasks", "candidates", "compiled", "correct", "baseline", "fast_1",
            "geomean", "host", "created"]
    srows = "".join("<tr>" + "".join(
        _td(_rate(s[c]) if c == "fast_1" else (_x(s[c]) if c == "geomean" else s[c]),
            c in ("tasks", "candidates", "compiled", "correct")) for c in cols) + "</tr>" for s in sums)
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>KernelPro report: runs {', '.join(str(v.run['id']) for v in views)}</title>",
        f"<style>{CSS}</style><script>{JS}</script></head><body>",
        f"<h1>KernelPro report: {', '.join(v.label for v in views)}</h1>",
        f'<p class="muted">store {_e(db_path)}; generated {time.strftime("%Y-%m-%d %H:%M:%S")}. fast_p: tasks '
        "that are correct, unflagged, use every requested feature and are more than p times faster than the "
        "baseline, over all tasks of the run (KernelBench's definition). Speedups are as the harness stored them.</p>",
        '<pre id="kp-errors"></pre>',
        '<h2>Runs</h2><table class="sortable"><thead><tr>' + "".join(f"<th>{c}</th>" for c in cols)
        + f"</tr></thead><tbody>{srows}</tbody></table>",
        '<h2>fast_p and speedup distribution</h2><div class="plots">',
        svg_lines(fast_p_series(views), "fast_p: fraction of tasks correct and faster than p x baseline",
                  "p (speedup threshold)", "fast_p", ymax=1.0, klass="plot fastp"),
        svg_histogram({v.label: [f.speedup(v.baseline) for f in v.best.values()
                                 if f.ok and f.speedup(v.baseline)] for v in views},
                      "speedup of correct tasks (best candidate per task)"),
        "</div>",
    ]
    if len(views) > 1:
        parts += ["<h2>Side-by-side</h2>", comparison_table(views)]
    for v in views:
        cfg = json.dumps(v.run["config"], default=str)
        parts += [f'<h2 id="run-{v.run["id"]}">{_e(v.label)}</h2>',
                  f'<p class="muted">suite {_e(v.run["suite"] or "-")}, status {_e(v.run["status"])}, '
                  f"config <code>{_e(cfg[:400])}{'...' if len(cfg) > 400 else ''}</code></p>",
                  "<h3>Per task</h3>", task_table(v),
                  "<h3>Feature usage</h3>", f'<div class="scroll">{svg_heatmap(v)}</div>']
        if v.run["kind"] == "optimize" or v.nodes:
            parts += ["<h3>Search tree</h3>", f'<div class="scroll">{svg_tree(v)}</div>']
        for c in v.comparisons:
            parts += ["<h3>Side by side in one worker</h3>", comparison_rounds_table(c)]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(store: Any, run_ids: list[int], out: str | Path) -> Path:
    views = [load_run(store, r) for r in run_ids]
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render(views, str(store.path)))
    except OSError as e:
        raise KernelProError(f"cannot write report {out}: {e.strerror}; pass -o with a writable path") from None
    return out


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_ids", nargs="*", type=int, metavar="RUN_ID", help="runs to report (several: compared)")
    p.add_argument("-o", "--output", help="HTML file to write (default report-<ids>.html)")
    p.add_argument("--list", action="store_true", help="list the runs in the store and exit")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .store import Store, default_db_path

    store = Store(args.db or default_db_path(), readonly=True)
    console = Console()
    if args.list or not args.run_ids:
        runs = store.runs()
        if not runs and not args.list:
            raise KernelProError(f"no runs in {store.path}; run `kernelpro bench` or `kernelpro optimize` first")
        table = Table(title=f"runs in {store.path}")
        for c in ("id", "kind", "suite", "status", "candidates", "created"):
            table.add_column(c)
        for r in runs:
            n = store.db.execute("SELECT COUNT(*) FROM candidates WHERE run_id=?", (r["id"],)).fetchone()[0]
            table.add_row(str(r["id"]), r["kind"], r["suite"] or "-", r["status"], str(n),
                          time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])))
        console.print(table)
        if not args.list:
            console.print("give one or more RUN_IDs to write a report")
            return 2
        return 0
    out = args.output or f"report-{'-'.join(map(str, args.run_ids))}.html"
    path = write_report(store, args.run_ids, out)
    console.print(f"wrote {path} ({path.stat().st_size // 1024} KiB, {len(args.run_ids)} run(s))")
    return 0
