"""The bench table: per-task rows and suite metrics built from the store, and their rich rendering."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError
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
                 baselines: list[str], profiles: list[str] | None = None) -> dict[str, Any]:
    """Per-task rows and suite metrics from what the store holds for this run (also used by --resume).

    With several evaluation profiles each task has one row per profile (the first profile's rows make the
    suite metrics); every row names its profile."""
    profiles = list(profiles or ["kernelpro"])
    rows = {(key, p): row for key, row in rows.items() for p in profiles}
    from kernelpro.results.facts import arch_counts, candidate_facts, verdict, verdict_label
    from kernelpro.results.metrics import Outcome, per_task, summarize
    from kernelpro.results.record import Result

    out_rows = []
    outcomes = []
    all_facts = []
    for (key, profile), row in rows.items():
        cid = row["cid"]
        # The read-model the HTML report uses too: per-target compile and feature verdicts, and the verdict.
        facts = candidate_facts(store, store.candidate(cid), profile=profile if len(profiles) > 1 else None)
        facts.per_arch = {a: x for a, x in facts.per_arch.items() if a in archs}
        all_facts.append(facts)
        vers = [v for v in store.results("verifications", cid) if v["arch"] in archs]
        feat_cell, feat_ok = features_cell(vers)
        if run_arch:
            # the feature-use rate counts the arch the candidate ran on, when there is one
            for v in vers:
                if v["arch"] == run_arch:
                    feat_ok = v["payload"].get("features_ok")
        evals = [e for e in store.results("evaluations", cid) if not str(e["arch"] or "").startswith("sanitizer")
                 and (e["payload"].get("profile") or "kernelpro") == profile]
        ev = Result.from_dict(evals[-1]["payload"]) if evals else None
        san = [e for e in store.results("evaluations", cid) if str(e["arch"] or "").startswith("sanitizer")]
        r: dict[str, Any] = {"task": key, "candidate_id": cid, "features": feat_cell, "features_ok": feat_ok,
                             "compiled": None, "correct": None, "correct_shown": None, "correct_heldout": None,
                             "reason": None, "detail": None, "time_ms": None, "baseline_ms": {}, "speedup": {},
                             "tflops": None, "gbps": None, "floor_ms": None, "energy_j": {}, "failed_checks": [],
                             "sanitizer": san[-1]["payload"].get("reason") if san else None,
                             "executed_ok": None, "executed": {}, "correct_with_arch": None,
                             "archs": {a: {**dataclasses.asdict(x), "cell": x.cell} for a, x in facts.per_arch.items()},
                             "verdict": verdict_label(verdict(facts, baseline=baselines[0] if baselines else None)),
                             "protocol": None, "fidelity": [], "profile": profile}
        primary = [v for v in vers if v["arch"] == (run_arch or archs[0])]
        if ev is None and primary and "compiled" in primary[-1]["payload"]:
            # No run (no GPU): the static nvcc compile for the primary target is the compile verdict.
            r["compiled"] = bool(primary[-1]["payload"]["compiled"])
        if ev is not None:
            work = ev.work or {}
            r.update(compiled=ev.compiled, correct=ev.passed, correct_shown=ev.correct_shown,
                     correct_heldout=ev.correct_heldout, reason=ev.reason, detail=ev.detail,
                     failed_checks=list(ev.failed_checks), time_ms=ev.candidate_ms, baseline_ms=ev.baseline_ms,
                     speedup=dict(ev.speedup), tflops=work.get("tflops"), gbps=work.get("gbps"),
                     floor_ms=work.get("floor_ms"), energy_j=ev.energy_j,
                     protocol=(ev.timing or {}).get("protocol", "interleaved"),
                     fidelity=fidelity_lines(ev.to_dict(), baselines=baselines))
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
        # A degenerate problem (its reference ignores its inputs): a pass proves nothing, the speedup is not counted.
        deg = row.get("degenerate")
        r["degenerate"] = bool(deg and deg.get("status") == "degenerate") or facts.reference_static
        if r["degenerate"] and r["correct"]:
            r["reason"] = "degenerate_problem"
        out_rows.append(r)
        if profile != profiles[0]:
            continue   # the suite metrics count each task once, under the first profile
        outcomes.append(Outcome(task=key, compiled=r["compiled"], correct=r["correct"] if ev is not None else None,
                                features_ok=feat_ok, candidate_ms=r["time_ms"], baseline_ms=r["baseline_ms"],
                                floor_ms=r["floor_ms"], correct_with_arch=r["correct_with_arch"],
                                degenerate=r["degenerate"]))
    main_base = baselines[0] if baselines else "eager"
    summary = {b: summarize(outcomes, b) for b in baselines} or {"eager": summarize(outcomes)}
    return {"rows": out_rows, "summary": summary, "per_task": per_task(outcomes, main_base),
            "main_baseline": main_base, "per_arch": arch_counts(all_facts), "archs": list(archs),
            "profiles": profiles}


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The lines under the table that say how it was judged: the tolerance, the degenerate problems, and
    fast_p / geomean with the degenerate problems' candidates counted (the summary line leaves them out)."""
    import textwrap

    from kernelpro.results.metrics import fmt_rate

    # Wrapped, not cut: a tolerance line names the tasks it covers, and every name matters.
    out = [textwrap.fill(f"tolerance: {t}", 80, subsequent_indent="  ", break_on_hyphens=False,
                         break_long_words=False) for t in report.get("tolerance") or []]
    deg, unk = report.get("degenerate") or [], report.get("not_checked") or []
    if deg or unk:
        out.append(f"degenerate problems ({len(deg)}, left out of fast_p and geomean): "
                   f"{', '.join(k.split('/')[-1] for k in deg) or 'none'}"
                   + (f"; {len(unk)} not checked (too large or failed on the CPU)" if unk else ""))
    s = report.get("summary", {}).get(report.get("main_baseline"), {})
    w = s.get("with_degenerate")
    if deg and w:
        gm = w.get("geomean_speedup")
        out.append(f"with degenerate problems counted: fast_1 {fmt_rate(w['fast_p'].get('1'))}, "
                   f"fast_1.2 {fmt_rate(w['fast_p'].get('1.2'))}, "
                   f"geomean {'-' if gm is None else f'{gm:.2f}x'} (n={w.get('geomean_n', 0)})")
    return out


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def yn(x: bool | None) -> str:
    return "-" if x is None else ("[green]yes[/]" if x else "[red]no[/]")


def device_label(device: str, gpus: Any = ()) -> str:
    """Where correctness and timing ran, in words: the card, the CPU, or nowhere."""
    if device == "cuda" and gpus:
        g = gpus[0]
        return f"{g.name}, {g.arch}" + (f" x{len(gpus)}" if len(gpus) > 1 else "")
    if device == "cpu":
        return "CPU: pure-PyTorch candidates only"
    return "no GPU: static checks only"


def start_line(run_id: int, store_path: Any, suite: str, n_with: int, n_without: int, archs: list[str],
               device: str) -> str:
    """The first thing `bench` prints, before any work: which run, where it is stored, what it will do."""
    skipped = f" ({n_without} without one: skipped)" if n_without else ""
    return (f"kernelpro bench: run {run_id} in {store_path}: {n_with} task{'s' if n_with != 1 else ''} of {suite} "
            f"with a candidate{skipped}; static checks for {', '.join(archs)}; {device}")


def skipped_note(names: list[str], solutions: str) -> str | None:
    """One line for every task that has no solution file."""
    if not names:
        return None
    where = "the suite's reference folder" if solutions == "reference" else solutions
    return f"skipped {len(names)} task{'s' if len(names) > 1 else ''} with no solution file in {where}: {', '.join(names)}"


# Targets whose suite references were written and statically verified without that GPU to run them on.
UNRUN_REFERENCE_ARCHS = {"sm_100a": "B200"}


def unrun_reference_note(solutions: str, archs: list[str], paths: list[Path]) -> str | None:
    """One line when the suite's own references are benched for a target none of them has run on: the
    references that declare a kernel for it (ARCHS) are compiled and statically verified only."""
    from kernelpro.static.verify import declared_archs

    if solutions != "reference":
        return None
    lines = []
    for arch in archs:
        if arch not in UNRUN_REFERENCE_ARCHS:
            continue
        n = 0
        for p in paths:
            try:
                n += arch in (declared_archs(p) or {})
            except KernelProError:
                pass   # a malformed ARCHS is reported by the verifier on that candidate's own line
        if n:
            lines.append(f"{arch} references ({n} declare a kernel for it) are compiled and statically verified "
                         f"only: no {UNRUN_REFERENCE_ARCHS[arch]} has run them")
    return "; ".join(lines) or None


def no_gpu_line(reason: str | None, archs: list[str], rows: list[dict[str, Any]]) -> str:
    """What a run without a GPU did and skipped; `--device cpu` is offered only when a candidate is pure
    PyTorch (a CUDA candidate cannot run on the CPU)."""
    pure = [r["task"].split("/")[-1] for r in rows
            if any(a.get("note", "").startswith("no CUDA") for a in r.get("archs", {}).values())]
    line = (f"no GPU ({reason}): compiled and verified statically for {', '.join(archs)}; skipped correctness, "
            "anti-gaming checks, timing and energy")
    if pure:
        line += f"; `--device cpu` runs the pure-PyTorch candidate{'s' if len(pure) > 1 else ''} ({', '.join(pure)}) on the CPU"
    return line


def verified_line(name: str, results: dict[str, tuple[bool | None, dict[str, Any]]]) -> str:
    """One progress line per task as its static checks finish (printed when there is no terminal)."""
    from kernelpro.results.facts import arch_facts

    cells = [f"{a} {arch_facts({'arch': a, 'ok': ok, 'payload': {**p, 'features_ok': ok}}).cell}"
             for a, (ok, p) in results.items()]
    return f"verified {name}: " + "; ".join(cells)


def _arch_cell(a: dict[str, Any] | None) -> str:
    if a is None:
        return "-"
    cell = a["cell"]
    if a.get("declared_out"):      # left out by the candidate's own ARCHS: plain, not a failure
        return cell
    if cell in ("ok", "compiled"):
        return f"[green]{cell}[/]"
    return f"[red]{cell}[/]" if a.get("compiled") is False or a.get("missing") else cell


def print_report(console: Any, report: dict[str, Any], baselines: list[str]) -> None:
    """The bench table in two parts that each fit 80 columns: what each check said per task (every target's
    compile and feature verdict, correctness, the verdict), then, when anything was timed, the timings."""
    from kernelpro.results.facts import arch_counts_text
    from kernelpro.results.metrics import fmt_rate
    from kernelpro.tables import Col, print_table

    archs = report.get("archs") or []
    title = f"kernelpro bench: run {report['run_id']} ({report['suite']}; {report['device']})"
    several = len(report.get("profiles") or []) > 1
    cols = [Col("task", ident=True), *([Col("profile")] if several else []), *(Col(a) for a in archs),
            Col("correct s/h"), Col("with arch"), Col("verdict")]
    rows = []
    for r in report["rows"]:
        v = r.get("verdict") or "-"
        if r["reason"] and r["reason"] not in v:
            v = f"{v}: {r['reason']}"
        style = "green" if v == "pass" else ("red" if v not in ("not run", "-") else "")
        rows.append([r["task"].split("/")[-1], *([r.get("profile") or "kernelpro"] if several else []),
                     *(_arch_cell(r["archs"].get(a)) for a in archs),
                     f"{yn(r['correct_shown'])}/{yn(r['correct_heldout'])}", yn(r["correct_with_arch"]),
                     f"[{style}]{v}[/]" if style else v])
    # Columns nothing was judged for (no GPU: correctness, with arch) are left out.
    keep = [i for i, _ in enumerate(cols) if i <= len(archs) + several
            or any(row[i] not in ("-", "-/-") for row in rows)]
    print_table(console, title, [cols[i] for i in keep], [[row[i] for i in keep] for row in rows])
    timed = [r for r in report["rows"] if r["time_ms"] is not None]
    if timed:
        tcols = [Col("task", ident=True), Col("profile"), Col("ms"), *(Col(f"{b} ms") for b in baselines),
                 *(Col(f"x {b}") for b in baselines), Col("TFLOP/s"), Col("GB/s"), Col("J/call")]
        trows = [[r["task"].split("/")[-1], r.get("profile") or "kernelpro", fmt(r["time_ms"]),
                  *[fmt(r["baseline_ms"].get(b)) for b in baselines],
                  *[fmt(r["speedup"].get(b), ".2f") for b in baselines], fmt(r["tflops"]), fmt(r["gbps"]),
                  fmt(r["energy_j"].get("candidate"))] for r in timed]
        tkeep = [i for i, _ in enumerate(tcols) if i == 0 or any(row[i] != "-" for row in trows)]
        print_table(console, "timings (median ms per call, ptxbench: mean of 3 trial medians; x = baseline time / "
                             "candidate time, against the baseline its column names)",
                    [tcols[i] for i in tkeep], [[row[i] for i in tkeep] for row in trows])
    print_fidelity(console, report)
    causes: dict[str, list[str]] = {}
    for r in report["rows"]:
        for a, x in r["archs"].items():
            if x.get("compiled") is False:
                # a target the candidate's ARCHS leaves out is not a failure to compile: say which it is
                head = "not built for" if x.get("declared_out") else "does not compile for"
                causes.setdefault(f"{head} {a}: {x.get('cause') or x.get('cause_short')}", []).append(
                    r["task"].split("/")[-1])
    plain = {"markup": False, "highlight": False}
    for cause, names in causes.items():
        console.print(f"{cause} ({len(names)}: {', '.join(names)})", **plain)
    for n in report["notes"]:
        console.print(f"note: {n}", **plain)
    if report.get("skipped"):
        console.print(f"skipped: {report['skipped']}", **plain)
    for line in summary_lines(report):
        console.print(line, **plain)
    b = report["main_baseline"]
    s = report["summary"].get(b, {})
    per_arch = report.get("per_arch") or {}
    n = s.get("n", 0)
    ran = s.get("correct_rate") is not None
    fp = s.get("fast_p", {})
    gm = s.get("geomean_speedup")

    def count(rate: float | None) -> str:
        return "-" if rate is None else f"{round(rate * n)}/{n} ({fmt_rate(rate)})"

    lines = [f"summary: {n} candidate{'s' if n != 1 else ''}, one per task with a solution; speedups vs {b}",
             f"  compiled   {arch_counts_text(per_arch, 'compiled')}  (nvcc + ptxas built it for the target)",
             f"  features   {arch_counts_text(per_arch, 'features_ok')}  (every requested feature in its SASS)"]
    if ran:
        lines += [f"  correct    {count(s.get('correct_rate'))}  (every shown and held-out size, no anti-gaming flag)",
                  f"  with arch  {count(s.get('correct_with_arch_rate'))}  (correct, requested SASS present and "
                  "executed per ncu)",
                  f"  fast_1     {fmt_rate(fp.get('1'))}, fast_1.2 {fmt_rate(fp.get('1.2'))}  (correct and more than "
                  f"1x / 1.2x faster than {b}, over all {n})",
                  f"  geomean    {'-' if gm is None else f'{gm:.2f}x'} over {s.get('geomean_n', 0)} correct, timed "
                  "candidates"]
    else:
        lines.append("  correct, fast_p, geomean: not run (nothing was executed)")
    lines.append(f"run {report['run_id']}: `kernelpro report {report['run_id']}` writes its HTML page; "
                 f"`--resume {report['run_id']}` continues it")
    for ln in lines:
        console.print(ln, **plain)


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
