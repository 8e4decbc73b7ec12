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
import json
import time
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError
from kernelpro.report.svg import esc, svg_heatmap, svg_histogram, svg_lines, svg_tree
from kernelpro.results.facts import (
    RunView,
    arch_counts,
    arch_counts_text,
    fast_p,
    geomean,
    load_run,
    verdict,
    verdict_label,
)
from kernelpro.results.fidelity import format_short

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
    attrs = (f' class="{cls}"' if cls else "") + (f' data-v="{esc(sort)}"' if sort is not None else "")
    return f"<td{attrs}>{esc(v)}</td>"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _rate(v: float | None) -> str:
    return "not timed" if v is None else f"{v:.2f}"


def _yn(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "no")


def task_table(view: RunView) -> str:
    bases = view.baselines
    archs = list(dict.fromkeys(a for f in view.best.values() for a in f.per_arch))
    head = ["task", "attempts", "verdict", *(f"{a}" for a in archs), "compiled", "correct", "flags",
            "features emitted", "executed", "missing"] + \
        [f"speedup vs {b}" for b in bases] + ["energy / call", "energy vs baseline"]
    attempts: dict[str, int] = {}
    for f in view.facts:
        attempts[f.task] = attempts.get(f.task, 0) + 1
    rows = []
    for task, f in view.best.items():
        v = verdict(f, baseline=view.baseline)
        eratio = (f.baseline_energy_j / f.energy_j) if f.energy_j and f.baseline_energy_j else None
        cells = [_td(task.split("/", 1)[-1]), _td(attempts[task], True), _td(verdict_label(v), klass=f"v-{v}"),
                 *(_td(f.per_arch[a].cell if a in f.per_arch else "-",
                       klass="v-compile_error" if a in f.per_arch and f.per_arch[a].compiled is False else "")
                   for a in archs),
                 _td(_yn(f.compiled)), _td("not run" if not f.evaluated else _yn(f.correct)),
                 _td(", ".join(f.flags) or "-"),
                 _td(", ".join(f.emitted) or "-"),
                 _td("not profiled" if f.executed is None else ", ".join(f.executed) or "none"),
                 _td(", ".join(f.missing) or "-")]
        cells += [_td(_x(f.speedups.get(b)) if f.evaluated else "not timed", True, f.speedups.get(b, -1))
                  for b in bases]
        cells += [_td("-" if f.energy_j is None else f"{f.energy_j * 1e3:.4g} mJ", True, f.energy_j or -1),
                  _td(_x(eratio), True, eratio or -1)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return ('<div class="scroll"><table class="sortable"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def summary_row(view: RunView) -> dict[str, Any]:
    fs = list(view.best.values())
    n = len(fs)
    sp = [f.speedup(view.baseline) for f in fs if f.ok and not f.degenerate and f.speedup(view.baseline)]
    counts = arch_counts(fs)
    # Nothing ran (no GPU): correctness and fast_p are unknown, not zero.
    evaluated = any(f.evaluated for f in fs)
    timed = any(f.speedups for f in fs)
    return {
        "run": view.run["id"], "kind": view.run["kind"], "suite": view.run["suite"] or "-",
        "status": view.run["status"], "tasks": n, "candidates": len(view.facts),
        "compiled": (arch_counts_text(counts, "compiled") if counts
                     else f"{sum(f.compiled is not False for f in fs)}/{n}"),
        "features": arch_counts_text(counts, "features_ok") if counts else "-",
        "correct": sum(f.ok for f in fs), "evaluated": evaluated,
        "correct_text": f"{sum(f.ok for f in fs)}/{n}" if evaluated else "not run",
        "baseline": view.baseline or "-", "fast_1": fast_p(view, 1.0) if n and timed else None,
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
            cells.append(_td(f"{verdict_label(vd)} {_x(s)}" if s is not None else verdict_label(vd), klass=f"v-{vd}",
                             sort=s or -1))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    sums = [summary_row(v) for v in views]
    foot = ["<tr><th>correct</th>" + "".join(f"<td>{s['correct_text']}</td>" for s in sums) + "</tr>",
            "<tr><th>fast_1</th>" + "".join(f"<td>{_rate(s['fast_1'])}</td>" for s in sums) + "</tr>",
            "<tr><th>geomean speedup (correct)</th>" + "".join(f"<td>{_x(s['geomean'])}</td>" for s in sums) + "</tr>"]
    return ('<div class="scroll"><table class="sortable"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
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
    if any(v for e in c.energy for v in e.values()):   # joules per call per round, and J(first) / J(x)
        head += [f"{lab} mJ/call" for lab in c.labels] + [f"J({first}) / J({lab})" for lab in c.labels[1:]]
        for i, e in enumerate(c.energy):
            extra = [_td(f"{e[lab] * 1e3:.4g}" if e.get(lab) else "-", True) for lab in c.labels]
            extra += [_td(f"{e[first] / e[lab]:.3f}" if e.get(first) and e.get(lab) else "-", True)
                      for lab in c.labels[1:]]
            rows[i] = rows[i][:-len("</tr>")] + "".join(extra) + "</tr>"
        foot += [_td(f"{s['j_per_call_median'] * 1e3:.4g}" if s["j_per_call_median"] else "-", True) for s in summ]
        foot += [_td(f"{s['energy_ratio_median']:.3f} [{s['energy_ratio_min']:.3f}, {s['energy_ratio_max']:.3f}]"
                     if s["energy_ratio_median"] else "-", True) for s in summ[1:]]
    notes = "".join(f"<li>{esc(n)}</li>" for n in c.notes)
    return ('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody><tfoot><tr>" + "".join(foot) + "</tr></tfoot></table>"
            + (f'<ul class="muted">{notes}</ul>' if notes else "") + "</div>")


def telemetry_section(view: RunView, max_plots: int = 4) -> str:
    """How each best candidate was timed: per protocol the ratio, each side's clock, power, temperature
    and throttle reason, the steady-state outcome, energy per call and per TFLOP; then power and SM
    clock traces of the isolated windows (each side's own) for the first `max_plots` tasks."""
    rows, plots = [], []
    for task, f in view.best.items():
        for proto, run in f.protocols.items():
            tel = run.get("telemetry") or {}
            sides = "; ".join(f"{k}: {format_short(v)}" for k, v in tel.items())
            ratios = ", ".join(f"x {b} {v:.3f}" for b, v in (run.get("speedup") or {}).items()) or "-"
            rows.append("<tr>" + _td(task.split("/", 1)[-1]) + _td(proto) + _td(ratios) + _td(sides or "-")
                        + _td((run.get("steady") or {}).get("outcome", "-")) + "</tr>")
        sides_e = [(k, v) for k, v in f.energy.items() if isinstance(v, dict) and v.get("j_per_call")]
        if sides_e or f.energy.get("error"):
            m = f.energy.get("method") or {}
            txt = ", ".join(f"{k} {v['j_per_call'] * 1e3:.4g} mJ/call"
                            + (f" ({v['j_per_tflop']:.3g} J/TFLOP, {v.get('avg_watts') or 0:.0f} W)"
                               if v.get("j_per_tflop") else "") for k, v in sides_e) or f.energy.get("error", "")
            rows.append("<tr>" + _td(task.split("/", 1)[-1]) + _td("energy") + _td(txt)
                        + _td(f"windows of {m.get('window_s', 0):g} s, bound {m['bound']:.1%}" if m.get("bound")
                              else m.get("rule", "-")) + _td("") + "</tr>")
        iso = (f.protocols.get("isolated") or {}).get("telemetry") or {}
        if iso and len(plots) < max_plots:
            power = {k: [(p[0], p[2]) for p in v.get("trace", [])] for k, v in iso.items() if v.get("trace")}
            clock = {k: [(p[0], p[1]) for p in v.get("trace", [])] for k, v in iso.items() if v.get("trace")}
            if power:
                name = task.split("/", 1)[-1]
                plots += [svg_lines(power, f"{name}: board power, isolated windows", "s", "W", width=420,
                                    height=240, klass="plot power"),
                          svg_lines(clock, f"{name}: SM clock, isolated windows", "s", "MHz", width=420,
                                    height=240, klass="plot clock")]
    if not rows:
        return '<p class="muted">no telemetry recorded (runs before it existed, or no GPU)</p>'
    head = ["task", "protocol", "ratio / energy", "clock, power, temperature, throttle (medians)", "steady state"]
    return ('<div class="scroll"><table><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>"
            + (f'<div class="plots">{"".join(plots)}</div>' if plots else ""))


def comparison_traces(c: Any) -> str:
    """Power and SM clock over each compare round's interleaved window, and J/call per round."""
    power = {f"round {k}": [(p[0], p[2]) for p in (t.get("*") or {}).get("trace", [])]
             for k, t in enumerate(c.telemetry, 1) if (t.get("*") or {}).get("trace")}
    clock = {f"round {k}": [(p[0], p[1]) for p in (t.get("*") or {}).get("trace", [])]
             for k, t in enumerate(c.telemetry, 1) if (t.get("*") or {}).get("trace")}
    energy = {lab: [(k, e[lab] * 1e3) for k, e in enumerate(c.energy, 1) if e.get(lab)] for lab in c.labels}
    energy = {k: v for k, v in energy.items() if v}
    parts = []
    if power:
        parts += [svg_lines(power, "board power per round (interleaved window)", "s", "W", width=420, height=240,
                            klass="plot power"),
                  svg_lines(clock, "SM clock per round (interleaved window)", "s", "MHz", width=420, height=240,
                            klass="plot clock")]
    if energy:
        parts.append(svg_lines(energy, "energy per call by round (isolated windows)", "round", "mJ/call",
                               width=420, height=240, klass="plot energy"))
    return f'<div class="plots">{"".join(parts)}</div>' if parts else ""


def fast_p_series(views: list[RunView]) -> dict[str, list[tuple[float, float]]]:
    top = max([f.speedup(v.baseline) or 0 for v in views for f in v.best.values() if f.ok] + [2.0]) * 1.05
    ps = [top * i / 200 for i in range(201)]
    return {f"{v.label} vs {v.baseline or '-'}": [(p, fast_p(v, p)) for p in ps] for v in views}


def render(views: list[RunView], db_path: str = "") -> str:
    sums = [summary_row(v) for v in views]
    cols = ["run", "kind", "suite", "status", "tasks", "candidates", "compiled", "features", "correct", "baseline",
            "fast_1", "geomean", "host", "created"]
    srows = "".join("<tr>" + "".join(
        _td(_rate(s[c]) if c == "fast_1" else ((_x(s[c]) if s[c] is not None else "not timed") if c == "geomean"
                                              else s["correct_text"] if c == "correct" else s[c]),
            c in ("tasks", "candidates")) for c in cols) + "</tr>" for s in sums)
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>KernelPro report: runs {', '.join(str(v.run['id']) for v in views)}</title>",
        f"<style>{CSS}</style><script>{JS}</script></head><body>",
        f"<h1>KernelPro report: {', '.join(v.label for v in views)}</h1>",
        f'<p class="muted">store {esc(db_path)}; generated {time.strftime("%Y-%m-%d %H:%M:%S")}. fast_p: tasks '
        "that are correct, unflagged, use every requested feature and are more than p times faster than the "
        "baseline, over all tasks of the run (KernelBench's definition). Speedups are as the harness stored them.</p>",
        '<pre id="kp-errors"></pre>',
        '<h2>Runs</h2><table class="sortable"><thead><tr>' + "".join(f"<th>{c}</th>" for c in cols)
        + f"</tr></thead><tbody>{srows}</tbody></table>",
    ]
    timed = [v for v, sm in zip(views, sums, strict=True) if sm["fast_1"] is not None]
    untimed = [v.label for v in views if v not in timed]
    parts.append("<h2>fast_p and speedup distribution</h2>")
    if untimed:
        parts.append(f'<p class="muted">not timed (nothing ran on a GPU): {esc(", ".join(untimed))}; '
                     "no fast_p or speedup figures for it.</p>")
    if timed:
        parts += ['<div class="plots">',
                  svg_lines(fast_p_series(timed), "fast_p: fraction of tasks correct and faster than p x baseline",
                            "p (speedup threshold)", "fast_p", ymax=1.0, klass="plot fastp"),
                  svg_histogram({v.label: [f.speedup(v.baseline) for f in v.best.values()
                                           if f.ok and f.speedup(v.baseline)] for v in timed},
                                "speedup of correct tasks (best candidate per task)"),
                  "</div>"]
    if len(views) > 1:
        parts += ["<h2>Side-by-side</h2>", comparison_table(views)]
    for v in views:
        cfg = json.dumps(v.run["config"], default=str)
        parts += [f'<h2 id="run-{v.run["id"]}">{esc(v.label)}</h2>',
                  f'<p class="muted">suite {esc(v.run["suite"] or "-")}, status {esc(v.run["status"])}, '
                  f"config <code>{esc(cfg[:400])}{'...' if len(cfg) > 400 else ''}</code></p>",
                  "<h3>Per task</h3>", task_table(v),
                  "<h3>Feature usage</h3>", f'<div class="scroll">{svg_heatmap(v)}</div>']
        if v.run["kind"] == "optimize" or v.nodes:
            parts += ["<h3>Search tree</h3>", f'<div class="scroll">{svg_tree(v)}</div>']
        parts += ["<h3>Measurement conditions (protocols, telemetry, energy)</h3>", telemetry_section(v)]
        for c in v.comparisons:
            parts += ["<h3>Side by side in one worker</h3>", comparison_rounds_table(c), comparison_traces(c)]
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
    p.add_argument("-o", "--output", help="HTML file to write (default: reports/report-<ids>.html beside the store)")
    p.add_argument("--list", action="store_true", help="list the runs in the store and exit")
    p.add_argument("--all", action="store_true", help="with --list: include `kernelpro verify` runs (hidden by default)")


# `kernelpro verify` records each check as a run of its own; lists leave them out unless asked.
HIDDEN_KINDS = ("verify",)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kernelpro import paths
    from kernelpro.results.store import Store, default_db_path
    from kernelpro.tables import Col, print_table

    store = Store(args.db or default_db_path(), readonly=True)
    console = Console()
    if args.list or not args.run_ids:
        runs = store.runs()
        shown = [r for r in runs if getattr(args, "all", False) or r["kind"] not in HIDDEN_KINDS]
        if not shown and not args.list:
            raise KernelProError(f"no runs in {store.path}; run `kernelpro bench` or `kernelpro optimize` first")
        rows = []
        for r in shown:
            n = store.db.execute("SELECT COUNT(*) FROM candidates WHERE run_id=?", (r["id"],)).fetchone()[0]
            rows.append([str(r["id"]), r["kind"], r["suite"] or "-", r["status"], str(n),
                         time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"]))])
        print_table(console, f"runs in {store.path}", [Col("id", ident=True), Col("kind"), Col("suite", ident=True),
                                                      Col("status"), Col("candidates"), Col("created")], rows)
        hidden = len(runs) - len(shown)
        if hidden:
            console.print(f"{hidden} verify run{'s' if hidden > 1 else ''} not listed (--all lists them)",
                          highlight=False)
        if not args.list:
            console.print("give one or more RUN_IDs to write a report")
            return 2
        return 0
    out = Path(args.output) if args.output else \
        paths.reports_dir(store.path) / f"report-{'-'.join(map(str, args.run_ids))}.html"
    path = write_report(store, args.run_ids, out).resolve()
    console.print(f"wrote {path} ({path.stat().st_size // 1024} KiB, {len(args.run_ids)} run(s))",
                  highlight=False, soft_wrap=True)
    return 0
