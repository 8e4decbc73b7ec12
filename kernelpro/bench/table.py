"""The bench table: per-task rows and suite metrics built from the store, and their rich rendering."""

from __future__ import annotations

from typing import Any

from kernelpro.results.fidelity import fidelity_lines


def features_cell(vers: list[dict[str, Any]]) -> tuple[str, bool | None]:
    parts = []
    oks = []
    for v in vers:
        p = v["payload"]
        oks.append(p.get("features_ok"))
        if p.get("error"):
            parts.append(f"{v['arch']}: {'no CUDA' if 'loads no CUDA' in p['error'] else 'error'}")
        elif p.get("requested"):
            feats = p.get("features", {})
            parts.append(f"{v['arch']}: " + " ".join(f"{f}{'+' if feats.get(f) == 'emitted' else '-'}"
                                                      for f in p["requested"]))
        else:
            parts.append(f"{v['arch']}: {'compiled' if p.get('compiled') else 'compile failed'}")
    seen = [o for o in oks if o is not None]
    return "; ".join(parts), (all(seen) if seen else None)


def build_report(store: Any, run_id: int, rows: dict[str, dict[str, Any]], archs: list[str], run_arch: str | None,
                 baselines: list[str]) -> dict[str, Any]:
    """Per-task rows and suite metrics from what the store holds for this run (also used by --resume)."""
    from kernelpro.results.metrics import Outcome, per_task, summarize

    out_rows = []
    outcomes = []
    for key, row in rows.items():
        cid = row["cid"]
        vers = [v for v in store.results("verifications", cid) if v["arch"] in archs]
        feat_cell, feat_ok = features_cell(vers)
        if run_arch:
            # the feature-use rate counts the arch the candidate ran on, when there is one
            for v in vers:
                if v["arch"] == run_arch:
                    feat_ok = v["payload"].get("features_ok")
        evals = [e for e in store.results("evaluations", cid) if not str(e["arch"] or "").startswith("sanitizer")]
        ev = evals[-1]["payload"] if evals else None
        san = [e for e in store.results("evaluations", cid) if str(e["arch"] or "").startswith("sanitizer")]
        r: dict[str, Any] = {"task": key, "candidate_id": cid, "features": feat_cell, "features_ok": feat_ok,
                             "compiled": None, "correct": None, "correct_shown": None, "correct_heldout": None,
                             "reason": None, "detail": None, "time_ms": None, "baseline_ms": {}, "speedup": {},
                             "tflops": None, "gbps": None, "floor_ms": None, "energy_j": {}, "failed_checks": [],
                             "sanitizer": san[-1]["payload"].get("reason") if san else None,
                             "executed_ok": None, "executed": {}, "correct_with_arch": None,
                             "protocol": None, "fidelity": []}
        primary = [v for v in vers if v["arch"] == (run_arch or archs[0])]
        if ev is None and primary and "compiled" in primary[-1]["payload"]:
            # No run (no GPU): the static nvcc compile for the primary target is the compile verdict.
            r["compiled"] = bool(primary[-1]["payload"]["compiled"])
        if ev is not None:
            stats = (ev.get("timing") or {}).get("stats", {})
            work = ev.get("work") or {}
            r.update(compiled=ev.get("compiled"), correct=bool(ev.get("ok")) and bool(ev.get("correct")),
                     correct_shown=ev.get("correct_shown"), correct_heldout=ev.get("correct_heldout"),
                     reason=ev.get("reason"), detail=ev.get("detail"), failed_checks=ev.get("failed_checks", []),
                     time_ms=(stats.get("candidate") or {}).get("median_ms"),
                     baseline_ms={b: s["median_ms"] for b, s in stats.items() if b != "candidate"},
                     speedup=ev.get("speedup") or {}, tflops=work.get("tflops"), gbps=work.get("gbps"),
                     floor_ms=work.get("floor_ms"),
                     energy_j={k: v.get("j_per_call") for k, v in (ev.get("energy") or {}).items()
                               if isinstance(v, dict) and "j_per_call" in v},
                     protocol=(ev.get("timing") or {}).get("protocol", "interleaved"),
                     fidelity=fidelity_lines(ev, baselines=baselines))
            if san and san[-1]["payload"].get("reason") == "sanitizer":
                r["correct"] = False
            ran_on = run_arch or evals[-1]["arch"]   # a re-read without the GPU: the arch it ran on
            ex = [p["payload"] for p in store.results("profiles", cid)
                  if p["payload"].get("kind") == "executed" and p["arch"] == ran_on]
            if ex:
                r["executed_ok"] = ex[-1].get("executed_ok")
                r["executed"] = {f: e.get("executed") for f, e in (ex[-1].get("features") or {}).items()}
            # PTXBench's rule: correct AND requested SASS present (static) AND executed (ncu); static
            # presence alone never counts, so no ncu evidence leaves it unjudged unless already incorrect.
            if not row["task"].requested_features(ran_on):
                pass   # the rule needs requested features; a task without any is not scored by it
            elif r["correct"] is False or feat_ok is False or r["executed_ok"] is False:
                r["correct_with_arch"] = False
            elif r["correct"] and feat_ok and r["executed_ok"]:
                r["correct_with_arch"] = True
        out_rows.append(r)
        outcomes.append(Outcome(task=key, compiled=r["compiled"], correct=r["correct"] if ev is not None else None,
                                features_ok=feat_ok, candidate_ms=r["time_ms"], baseline_ms=r["baseline_ms"],
                                floor_ms=r["floor_ms"], correct_with_arch=r["correct_with_arch"]))
    main_base = baselines[0] if baselines else "eager"
    summary = {b: summarize(outcomes, b) for b in baselines} or {"eager": summarize(outcomes)}
    return {"rows": out_rows, "summary": summary, "per_task": per_task(outcomes, main_base),
            "main_baseline": main_base}


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def yn(x: bool | None) -> str:
    return "-" if x is None else ("[green]yes[/]" if x else "[red]no[/]")


def print_report(console: Any, report: dict[str, Any], baselines: list[str]) -> None:
    from rich.table import Table

    from kernelpro.results.metrics import fmt_rate

    cols = ["task", "compile", "correct s/h", "features", "time ms"] + [f"{b} ms" for b in baselines] + \
           [f"x {b}" for b in baselines] + ["TFLOP/s", "GB/s", "J/call", "with arch", "verdict"]
    rows = []
    for r in report["rows"]:
        verdict = "[green]ok[/]" if r["correct"] else (f"[red]{r['reason']}[/]" if r["reason"] else "-")
        rows.append([r["task"].split("/")[-1], yn(r["compiled"]),
                     f"{yn(r['correct_shown'])}/{yn(r['correct_heldout'])}", r["features"] or "-",
                     fmt(r["time_ms"]), *[fmt(r["baseline_ms"].get(b)) for b in baselines],
                     *[fmt(r["speedup"].get(b), ".2f") for b in baselines], fmt(r["tflops"]), fmt(r["gbps"]),
                     fmt(r["energy_j"].get("candidate")), yn(r["correct_with_arch"]), verdict])
    # Columns nothing was measured for (no GPU: every timing column) only squeeze the ones that matter.
    keep = [i for i, c in enumerate(cols) if i < 4 or any(row[i] not in ("-", "-/-") for row in rows)]
    t = Table(title=f"kernelpro bench: run {report['run_id']} ({report['suite']}, {report['device']})")
    for i in keep:
        t.add_column(cols[i], overflow="fold")
    for row in rows:
        t.add_row(*[row[i] for i in keep])
    console.print(t)
    print_fidelity(console, report)
    for n in report["notes"]:
        console.print(f"note: {n}", markup=False, highlight=False, soft_wrap=True)
    if report.get("skipped"):
        console.print(f"skipped: {report['skipped']}", markup=False, highlight=False, soft_wrap=True)
    b = report["main_baseline"]
    s = report["summary"].get(b, {})
    fp = s.get("fast_p", {})
    gm = s.get("geomean_speedup")
    console.print(f"summary ({s.get('n', 0)} candidates, vs {b}): compile {fmt_rate(s.get('compile_rate'))}, "
                  f"correct {fmt_rate(s.get('correct_rate'))}, features {fmt_rate(s.get('feature_rate'))}, "
                  f"correct_with_arch {fmt_rate(s.get('correct_with_arch_rate'))}, "
                  f"fast_1 {fmt_rate(fp.get('1'))}, fast_1.2 {fmt_rate(fp.get('1.2'))}, "
                  f"geomean {'-' if gm is None else f'{gm:.2f}x'} (n={s.get('geomean_n', 0)}); "
                  f"run id {report['run_id']}", markup=False, highlight=False, soft_wrap=True)


def print_fidelity(console: Any, report: dict[str, Any]) -> None:
    """Under the table: each task's ratios under both timing protocols, with the clocks, power and energy
    they were measured at (the x columns above are the headline protocol's)."""
    lines = [(r["task"].split("/")[-1], r) for r in report["rows"] if r.get("fidelity")]
    if not lines:
        return
    heads = sorted({r["protocol"] for _, r in lines if r.get("protocol")})
    console.print(f"timing protocols (x columns above: {', '.join(heads) or '-'}); SM clock, power, temperature "
                  "and throttle reason are medians over each side's timing windows", markup=False, highlight=False,
                  soft_wrap=True)
    for name, r in lines:
        for ln in r["fidelity"]:
            console.print(f"  {name} {ln}", markup=False, highlight=False, soft_wrap=True)
