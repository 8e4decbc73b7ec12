"""Plots as inline SVG, drawn by hand so the report opens with no network and no plotting library."""

from __future__ import annotations

import html
import math
from typing import Any

from kernelpro.results.facts import VERDICTS, RunView, verdict

VERDICT_COLOR = {"compile_error": "#d62728", "missing_feature": "#9467bd", "wrong_output": "#ff7f0e",
                 "flagged": "#111111", "degenerate_problem": "#8c564b", "slow": "#bcbd22", "pass": "#2ca02c", "pending": "#b0b0b0",
                 "not_for_target": "#dddddd"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")

# ------------------------------------------------------------------------------------------------
# SVG, by hand
# ------------------------------------------------------------------------------------------------

def esc(s: Any) -> str:
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
           f'<title>{esc(title)}</title>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="ttl">{esc(title)}</text>']
    for t in _nice_ticks(x0, x1):
        out.append(f'<line x1="{X(t):.1f}" y1="{mt}" x2="{X(t):.1f}" y2="{mt + ph}" class="grid"/>'
                   f'<text x="{X(t):.1f}" y="{mt + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    for t in _nice_ticks(y0, y1):
        out.append(f'<line x1="{ml}" y1="{Y(t):.1f}" x2="{ml + pw}" y2="{Y(t):.1f}" class="grid"/>'
                   f'<text x="{ml - 6}" y="{Y(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" class="frame"/>')
    out.append(f'<text x="{ml + pw / 2}" y="{mt + ph + 34}" text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text transform="translate(14,{mt + ph / 2}) rotate(-90)" text-anchor="middle">{esc(ylabel)}</text>')
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        if s:
            path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" class="series">'
                       f'<title>{esc(name)}</title></polyline>')
        ly = mt + ph + 50 + i * 16
        out.append(f'<rect x="{ml}" y="{ly - 4}" width="14" height="3" fill="{color}"/>'
                   f'<text x="{ml + 20}" y="{ly}">{esc(name[:80])}</text>')
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
           f'<title>{esc(title)}</title>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="ttl">{esc(title)}</text>']
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
                           f'height="{h:.1f}" fill="{color}" class="bar"><title>{esc(name)}: {c} in '
                           f'[{2 ** edges[k]:.3g}x, {2 ** edges[k + 1]:.3g}x)</title></rect>')
        ly = mt + ph + 50 + j * 16
        out.append(f'<rect x="{ml}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{ml + 16}" y="{ly}">{esc(name[:80])}</text>')
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
        out.append(f'<text transform="translate({x:.1f},{top - 6}) rotate(-55)">{esc(name)}</text>')
    for i, t in enumerate(tasks):
        f = view.best[t]
        y = top + i * ch
        out.append(f'<text x="{left - 6}" y="{y + ch / 2 + 4}" text-anchor="end">{esc(t.split("/")[-1])}</text>')
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
                       f'class="cell"><title>{esc(tip)}</title></rect>')
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
                   f'fill="{VERDICT_COLOR[v]}"{ring or dash}><title>{esc(tip)}</title></circle>'
                   f'<text x="{cx:.1f}" y="{cy + 22:.1f}" text-anchor="middle" class="lbl">'
                   f'{"" if s is None else f"{s:.2f}x"}</text></g>')
    out.append("</svg>")
    legend = " ".join(f'<span class="chip" style="background:{VERDICT_COLOR[v]}"></span>{v}' for v in VERDICTS)
    return "".join(out) + f'<p class="legend">{legend}; thick ring: best node; dashed: pruned.</p>'
