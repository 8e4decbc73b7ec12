"""KernelBench's own evaluator and `kernelpro bench kernelbench`, side by side on the same problems and
solutions: both verdicts (at KernelBench's current fp32 tolerance 1e-4 and at v0's 1e-2), both speedups,
and every disagreement with its reason.

    python benchmarks/kernelbench_side_by_side.py --kb-path CHECKOUT [--level1 N] [--level2 N] [--level3 N]
        [--problems 1/19,2/80] [--cases all|none|NAME,...] [--parallel 4] [--budget-s 420] [--out DIR]

CHECKOUT is a clone of ScalingIntelligence/KernelBench. Its evaluator is imported from that checkout at
run time (``CHECKOUT/src`` on sys.path, in a child process); nothing of it is copied here. Its package
imports LLM clients (openai, litellm, dotenv, tqdm, requests) that its evaluator never calls: those that
are not installed are replaced by empty modules in the child, and the report names them. Without a
GPU the KernelBench side cannot run (its eval asserts CUDA) and the script says so.

Solutions, written to WORK/solutions*/ at run time (never committed):
- every selected problem's own Model as ModelNew (``class ModelNew(Model): pass``): the honest baseline;
- the cases in benchmarks/kernelbench_cases/ (each names its problem and the verdicts it expects): a
  degenerate problem answered with its constant, a LayerNorm with its affine replaced or ignored,
  multi-stream and CUDA-graph solutions, and a side stream left running.

KernelBench side: ``eval_kernel_against_ref`` with seed 42, 5 correctness trials, `--perf-trials` timed
calls, ``check_for_excessive_speedup=True`` (which times the reference the same way); speedup =
ref_runtime / runtime. Run once with its tolerance as shipped (1e-4) and timing, once more for
correctness with ``get_tolerance_for_precision`` answering 1e-2 (v0's rule).

Memory: KernelBench's current level-1 problems hold up to 6 GiB per tensor and each evaluator keeps several
copies, so processes of either side beside a large problem ran out of GPU memory. Each problem's inputs
and parameters are sized first on the meta device (in a sandboxed child, no memory); problems of at least
`--big-gib` (and the cases, and any that could not be sized) run one at a time after the small ones, which
run `--parallel` / `--kb-parallel` at once.

kernelpro side: ``kernelpro bench kernelbench --solutions DIR --task ... --baselines eager --json`` in
`--parallel` processes over disjoint task lists (each its own store). Its verdict at v0's tolerance is
derived from the errors it recorded: a candidate that failed only on its outputs passes at 1e-2 when
every trial's ``tol_needed`` (the smallest t with allclose(out, ref, atol=t, rtol=t)) is at most 1e-2.

Prints the table (<= 80 columns) and writes OUT/side_by_side.json and OUT/side_by_side.txt; solutions,
the stores and the logs of each side stay in --work (a temp folder by default).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CASES = Path(__file__).resolve().parent / "kernelbench_cases"
TOL_CURRENT, TOL_V0 = 1e-4, 1e-2
LLM_MODULES = ("openai", "litellm", "dotenv", "tqdm", "requests")
OWN = "own"


# ------------------------------------------------------------------------------------------------
# The KernelBench side, in a child process
# ------------------------------------------------------------------------------------------------

def _stub_missing() -> list[str]:
    """Empty stand-ins for the LLM-client modules KernelBench's package imports but its eval never uses."""
    import importlib.util
    import types

    stubbed = []
    for name in LLM_MODULES:
        if importlib.util.find_spec(name) is None:
            m = types.ModuleType(name)
            if name == "openai":
                m.OpenAI = type("OpenAI", (), {})
            if name == "litellm":
                m.completion = lambda *a, **k: None
            if name == "dotenv":
                m.load_dotenv = lambda *a, **k: None
            if name == "tqdm":
                m.tqdm = lambda it=None, *a, **k: it
            sys.modules[name] = m
            stubbed.append(name)
    return stubbed


def kb_worker(spec_path: str) -> int:
    """Evaluate each item of the spec with KernelBench's eval_kernel_against_ref; one JSON line each."""
    spec = json.loads(Path(spec_path).read_text())
    sys.path.insert(0, str(Path(spec["kb_path"]) / "src"))
    stubbed = _stub_missing()
    import contextlib
    import io

    import torch

    try:
        from kernelbench import eval as kb_eval
    except Exception as e:  # noqa: BLE001 - report why KernelBench's evaluator cannot be imported, then stop
        print(json.dumps({"fatal": f"cannot import kernelbench.eval: {type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps({"stubbed": stubbed}), flush=True)
    shipped = kb_eval.get_tolerance_for_precision
    for item in spec["items"]:
        ref_src = Path(item["problem"]).read_text()
        sol_src = Path(item["solution"]).read_text()
        rec: dict[str, Any] = {"key": item["key"]}
        for label, tol, perf in (("current", None, True), ("v0", TOL_V0, False)):
            kb_eval.get_tolerance_for_precision = shipped if tol is None else (lambda p, t=tol: t)
            t0 = time.time()
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf):
                    r = kb_eval.eval_kernel_against_ref(
                        ref_src, sol_src, seed_num=42, num_correct_trials=5, num_perf_trials=spec["perf_trials"],
                        measure_performance=perf, verbose=False, device=torch.device("cuda:0"), backend="cuda",
                        precision=torch.float32, check_for_excessive_speedup=perf)
                if r is None:
                    rec[label] = {"error": "eval returned None (a build lock; KernelBench asks to retry)"}
                else:
                    md = {k: str(v)[:200] for k, v in (r.metadata or {}).items()}
                    rec[label] = {"compiled": r.compiled, "correct": r.correctness, "runtime_ms": r.runtime,
                                  "ref_runtime_ms": r.ref_runtime, "metadata": md}
            except Exception as e:  # noqa: BLE001 - KernelBench's evaluator raising is its verdict on this item
                rec[label] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            rec[label]["wall_s"] = round(time.time() - t0, 2)
            torch.cuda.empty_cache()
        kb_eval.get_tolerance_for_precision = shipped
        print(json.dumps(rec, default=str), flush=True)
    return 0


# One child sizes every problem with the degenerate probe's meta-device build (shapes and dtypes, no
# memory): one JSON line per file ({"path", "bytes"} or {"path", "error"}).
_SIZER = r"""
import json, sys
from pathlib import Path
from kernelpro.suites.degenerate import meta_tensors
from kernelpro.suites.task import import_module_from
for i, path in enumerate(sys.argv[1:]):
    try:
        xs, params = meta_tensors(import_module_from(Path(path), f"kp_sized_{i}"))
        print(json.dumps({"path": path, "bytes": sum(t.numel() * t.element_size() for t in xs + params)}), flush=True)
    except Exception as e:   # a problem that cannot be sized runs alone, as a large one does
        print(json.dumps({"path": path, "error": f"{type(e).__name__}: {e}"[:200]}), flush=True)
"""


def problem_bytes(paths: list[str], timeout_s: float = 300.0) -> dict[str, int]:
    """{problem file: bytes of its inputs, parameters and buffers} for the files that could be sized."""
    from kernelpro import sandbox

    if not paths:
        return {}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    fin = sandbox.run([sys.executable, "-c", _SIZER, *paths], timeout_s=timeout_s, env=env)
    got: dict[str, int] = {}
    for line in fin.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if "bytes" in d:
                got[d["path"]] = int(d["bytes"])
    return got


def split_by_memory(keys: list[str], size_of: dict[str, int], big_bytes: float) -> tuple[list[str], list[str]]:
    """(small, large): the large ones (and the unsized) are run one at a time, after the small ones."""
    small = [k for k in keys if k in size_of and size_of[k] < big_bytes]
    return small, [k for k in keys if k not in small]


def run_kb_phased(items: list[dict[str, str]], kb_path: str, out: Path, perf_trials: int, deadline: float,
                  parallel: int, small: set[str]) -> tuple[dict[str, dict[str, Any]], list[str], str | None]:
    """`run_kb` over the small items with `parallel` children, then over the rest with one."""
    a = [it for it in items if it["key"] in small]
    b = [it for it in items if it["key"] not in small]
    got, stubbed, fatal = run_kb(a, kb_path, out, perf_trials, deadline, parallel) if a else ({}, [], None)
    if b and fatal is None and time.time() < deadline:
        got2, stubbed2, fatal = run_kb(b, kb_path, out, perf_trials, deadline, 1)
        got.update(got2)
        stubbed = stubbed or stubbed2
    return got, stubbed, fatal


def run_kb(items: list[dict[str, str]], kb_path: str, out: Path, perf_trials: int, deadline: float,
           parallel: int = 1) -> tuple[dict[str, dict[str, Any]], list[str], str | None]:
    """({key: KernelBench record}, stubbed module names, fatal error) for `items`, in sandboxed children;
    `parallel` children at once over disjoint shares of the items."""
    if parallel > 1 and len(items) > 1:
        shares = [items[i::parallel] for i in range(parallel)]
        with ThreadPoolExecutor(max_workers=parallel) as ex:
            parts = list(ex.map(lambda a: _run_kb_one(a[1], kb_path, out, perf_trials, deadline, str(a[0])),
                                enumerate(shares)))
        got = {k: v for g, _, _ in parts for k, v in g.items()}
        stubbed = next((s for _, s, _ in parts if s), [])
        return got, stubbed, next((f for _, _, f in parts if f), None)
    return _run_kb_one(items, kb_path, out, perf_trials, deadline)


def _run_kb_one(items: list[dict[str, str]], kb_path: str, out: Path, perf_trials: int, deadline: float,
                tag: str = "") -> tuple[dict[str, dict[str, Any]], list[str], str | None]:
    from kernelpro import sandbox

    got: dict[str, dict[str, Any]] = {}
    stubbed: list[str] = []
    todo = list(items)
    while todo and time.time() < deadline:
        spec = out / f"kb_spec{tag}.json"
        spec.write_text(json.dumps({"kb_path": str(Path(kb_path).resolve()), "items": todo,
                                    "perf_trials": perf_trials}))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        fin = sandbox.run([sys.executable, str(Path(__file__).resolve()), "--kb-worker", str(spec)],
                          timeout_s=max(30.0, deadline - time.time()), env=env, writable=[str(out)])
        for line in fin.stdout.splitlines():
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if "fatal" in d:
                return got, stubbed, d["fatal"]
            if "stubbed" in d:
                stubbed = d["stubbed"]
                continue
            got[d["key"]] = d
        left = [it for it in todo if it["key"] not in got]
        if left and left[0] is todo[0] and not fin.timed_out:
            # the child died on this item before printing it: record why, go on with the rest
            tail = (fin.stderr.strip().splitlines() or [f"rc {fin.rc}"])[-1][:160]
            got[left[0]["key"]] = {"key": left[0]["key"], "current": {"error": f"evaluator process died: {tail}"},
                                   "v0": {"error": "not run"}}
            left = left[1:]
        elif left and fin.timed_out:
            break
        todo = left
    return got, stubbed, None


# ------------------------------------------------------------------------------------------------
# The kernelpro side: its own command, in parallel processes
# ------------------------------------------------------------------------------------------------

KpJob = tuple[Path, list[str], Path]   # (solutions dir, task names, store)


def plan_kp(groups: list[tuple[Path, list[str]]], out: Path, parallel: int,
            small: set[str] | None) -> tuple[list[KpJob], list[KpJob]]:
    """(jobs run `parallel` at once, jobs run one at a time after them): the honest solutions' small
    problems spread over `parallel` processes; their large problems in one process; each case in its own."""
    wide: list[KpJob] = []
    alone: list[KpJob] = []
    for sol, names in groups:
        if sol.name != "solutions":
            alone.append((sol, names, out / f"kp_{sol.name}_0.db"))
            continue
        few = [n for n in names if small is None or n in small]
        many = [n for n in names if n not in few]
        n = max(1, min(parallel, len(few)))
        for i in range(n):
            if few[i::n]:
                wide.append((sol, few[i::n], out / f"kp_{sol.name}_{i}.db"))
        if many:
            alone.append((sol, many, out / f"kp_{sol.name}_large.db"))
    return wide, alone


def run_kp(groups: list[tuple[Path, list[str]]], kb_path: str, out: Path, parallel: int, trials: int,
           deadline: float, device: str = "cuda", small: set[str] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """{(solutions dir, task name): row} from `kernelpro bench kernelbench` over (dir, task names) groups,
    read back from each process's own store (so a process stopped at the budget still gives what it did).
    The honest solutions' `small` problems (all of them when None) run first in `parallel` processes; the
    other problems and the cases after them, one process at a time."""
    from kernelpro.results.store import Store

    wide, alone = plan_kp(groups, out, parallel, small)

    def one(job: tuple[Path, list[str], Path]) -> list[tuple[tuple[str, str], dict[str, Any]]]:
        sol, names, db = job
        if time.time() >= deadline - 5:   # a job of the serial phase the budget no longer reaches
            return [((sol.name, n), {"correct": None, "reason": "not_run", "detail": "budget ran out"}) for n in names]
        db.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "kernelpro", "bench", "kernelbench", "--db", str(db), "--path", kb_path,
               "--solutions", str(sol), "--baselines", "eager", "--trials", str(trials), "--arch", "sm_90a",
               "--executed", "off", "--device", device, "--timeout", "240", "--no-energy", "--json"]
        for n in names:
            cmd += ["--task", n]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               "KERNELPRO_CACHE": str(out / "cache")}
        # kernelpro's own command (trusted); it starts every candidate process through its sandbox itself.
        log = open(out / f"{db.stem}.log", "wb")
        proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=max(60.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        found: dict[str, dict[str, Any]] = {}
        if db.exists():
            store = Store(str(db))
            for run in store.runs("bench"):
                for c in store.candidates(run["id"]):
                    evs = [e for e in store.results("evaluations", c["id"])
                           if not str(e["arch"] or "").startswith("sanitizer")]
                    if not evs:
                        continue
                    pl = evs[-1]["payload"]
                    vals = [t.get("tol_needed") for t in (pl.get("correctness") or []) if isinstance(t, dict)]
                    deg = (c.get("info") or {}).get("degenerate") or {}
                    found[c["task"].split("/")[-1]] = {
                        "correct": bool(pl.get("ok")) and bool(pl.get("correct")), "reason": pl.get("reason"),
                        "detail": pl.get("detail"), "failed_checks": pl.get("failed_checks") or [],
                        "speedup": pl.get("speedup") or {}, "reference_change": pl.get("reference_change"),
                        "degenerate": deg.get("status") == "degenerate" or _static(pl),
                        "tol_needed": None if not vals or None in vals else max(vals),
                        "tolerance": [(c.get("info") or {}).get("tolerance")]}
        rows: list[tuple[tuple[str, str], dict[str, Any]]] = []
        for n in names:
            r = found.get(n) or {"correct": None, "reason": "not_run",
                                 "detail": "budget ran out" if timed_out else f"bench exited {proc.returncode}; "
                                 f"see {db.stem}.log"}
            rows.append(((sol.name, n), r))
        return rows

    got: dict[tuple[str, str], dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as ex:
        for rows in ex.map(one, wide):
            got.update(dict(rows))
    for job in alone:
        got.update(dict(one(job)))
    return got


# ------------------------------------------------------------------------------------------------
# Verdicts and the table
# ------------------------------------------------------------------------------------------------

def _static(payload: dict[str, Any]) -> bool:
    """kernelpro saw the reference's output move by no more than the tolerance at the full size."""
    rc, tol = payload.get("reference_change"), (payload.get("tolerance") or {}).get("atol")
    return bool(rc) and tol is not None and all(v is not None and v <= tol for v in rc.values())


def _kb_oom(rec: dict[str, Any] | None) -> bool:
    md = (rec or {}).get("metadata") or {}
    text = f"{(rec or {}).get('error') or ''} {md.get('runtime_error_name') or ''} {md.get('runtime_error') or ''}"
    return "OutOfMemoryError" in text or "out of memory" in text.lower()


def kb_verdict(rec: dict[str, Any] | None) -> str:
    if not rec:
        return "-"
    if _kb_oom(rec):
        return "oom"   # the GPU's memory, not the solution: not a verdict (see compare)
    if rec.get("error"):
        return "error"
    if not rec.get("compiled"):
        return "nocomp"
    return "pass" if rec.get("correct") else "FAIL"


def kb_reason(rec: dict[str, Any]) -> str:
    if rec.get("error"):
        return rec["error"]
    md = rec.get("metadata") or {}
    for k in ("correctness_issue", "runtime_error", "compilation_error", "max_difference"):
        if md.get(k):
            return f"{k}: {md[k]}"
    return "no reason recorded"


def kp_verdict(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    if row.get("reason") == "not_run":
        return "not_run"
    if row.get("correct"):
        return "degenerate_problem" if row.get("degenerate") else "pass"
    if row.get("reason") == "crash" and "OutOfMemoryError" in str(row.get("detail") or ""):
        return "oom"   # recorded before the harness named its own out-of-memory errors so
    return str(row.get("reason") or "FAIL")


def kp_v0(row: dict[str, Any] | None) -> str:
    """kernelpro's verdict at 1e-2, derived from the errors it recorded at 1e-4 (see the module doc)."""
    v = kp_verdict(row)
    if not row or v in ("pass", "degenerate_problem", "-", "not_run"):
        return v
    failed = set(row.get("failed_checks") or [])
    need = row.get("tol_needed")
    if failed and failed <= {"wrong_output", "lower_precision"} and need is not None and need <= TOL_V0:
        return "pass"
    return v


def _speedup(kb: dict[str, Any] | None) -> float | None:
    if not kb or not kb.get("correct"):
        return None
    rt, ref = kb.get("runtime_ms") or -1, kb.get("ref_runtime_ms") or -1
    return ref / rt if rt > 0 and ref > 0 else None


def _x(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.0f}")


def compare(entries: list[dict[str, Any]]) -> tuple[list[str], list[str], dict[str, Any]]:
    """(table lines, disagreement lines, counts) for the joined records."""
    head = f"{'problem / solution':<25}{'KB':>6}{'KBv0':>6}{'KB x':>7} {'kernelpro':<19}{'v0':>5}{'KP x':>7}  ="
    lines = [head, "-" * len(head)]
    dis: list[str] = []
    counts = {"problems": len(entries), "agree": 0, "kb_pass": 0, "kp_pass": 0, "kb_tol_changes": 0,
              "kp_tol_changes": 0, "disagree": 0}
    for e in entries:
        kb_c, kb_0 = kb_verdict(e["kb"].get("current")), kb_verdict(e["kb"].get("v0"))
        kp_c, kp_0 = kp_verdict(e["kp"]), kp_v0(e["kp"])
        kbx = _speedup(e["kb"].get("current"))
        kpx = (e["kp"] or {}).get("speedup", {}).get("eager") if kp_c in ("pass", "degenerate_problem") else None
        # Out of memory on either side says how full the GPU was, not what the solution does: not compared.
        judged = kb_c not in ("-", "oom") and kp_c not in ("-", "not_run", "oom")
        same = (kb_c == "pass") == (kp_c == "pass")
        counts["agree"] += judged and same
        counts["disagree"] += judged and not same
        counts["kb_pass"] += kb_c == "pass"
        counts["kp_pass"] += kp_c == "pass"
        counts["kb_tol_changes"] += kb_c != kb_0 and "oom" not in (kb_c, kb_0)
        counts["kp_tol_changes"] += kp_c != kp_0
        name = e["label"] if len(e["label"]) <= 24 else e["label"][:23] + "~"
        lines.append(f"{name:<25}{kb_c:>6}{kb_0:>6}{_x(kbx):>7} {kp_c[:18]:<19}{('=' if kp_0 == kp_c else kp_0[:4]):>5}"
                     f"{_x(kpx):>7}  {('y' if same else 'N') if judged else '?'}")
        why = []
        if judged and not same:
            if kb_c == "pass":
                why.append(f"kernelpro: {kp_c}: {(e['kp'] or {}).get('detail') or ''}")
            else:
                why.append(f"KernelBench: {kb_reason(e['kb'].get('current') or {})}")
                if kp_c == "pass":
                    why.append("kernelpro passed it")
                else:
                    why.append(f"kernelpro: {kp_c}: {(e['kp'] or {}).get('detail') or ''}")
        elif kbx and kpx and max(kbx, kpx) / min(kbx, kpx) > 1.5:
            why.append(f"speedups differ {kbx:.2f}x vs {kpx:.2f}x (KernelBench: mean of {e['perf_trials']} calls, "
                       "L2 flushed; kernelpro: median, vs eager in the same interleaved loop)")
        if "oom" in (kb_c, kp_c):
            why.append("not compared: " + " and ".join(n for n, v in (("KernelBench", kb_c), ("kernelpro", kp_c))
                                                       if v == "oom") + " ran out of GPU memory")
        if kb_c != kb_0 and "oom" not in (kb_c, kb_0):
            why.append(f"KernelBench verdict moves with the tolerance: {kb_c} at 1e-4, {kb_0} at 1e-2")
        if kp_c != kp_0:
            why.append(f"kernelpro verdict moves with the tolerance: {kp_c} at 1e-4, {kp_0} at 1e-2 "
                       f"(tol_needed {(e['kp'] or {}).get('tol_needed')})")
        if e.get("expect") and (e["expect"]["kb"] != kb_c or e["expect"]["kp"] != kp_c):
            why.append(f"expected KernelBench {e['expect']['kb']}, kernelpro {e['expect']['kp']}")
        if why:
            dis.append(f"{e['label']}:")
            for w in why:
                dis += textwrap.wrap(w, 78, initial_indent="  ", subsequent_indent="    ")
    return lines, dis, counts


# ------------------------------------------------------------------------------------------------
# Selection and solutions
# ------------------------------------------------------------------------------------------------

def load_prior(paths: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """({key: KernelBench record}, {key: kernelpro row}) kept from earlier runs' side_by_side.json, so a
    comparison too long for one sitting is finished over several (each side alone on the GPU, if need be).
    What a side did not reach, or ran out of memory on, is left out and runs again."""
    kb: dict[str, dict[str, Any]] = {}
    kp: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            entries = json.loads(Path(path).read_text())["entries"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"kernelbench_side_by_side: --prior {path}: not a side_by_side.json ({e})") from None
        for e in entries:
            k = e.get("key")
            rec = e.get("kb") or {}
            if k and rec and not (_kb_oom(rec.get("current")) or _kb_oom(rec.get("v0"))):
                kb[k] = rec
            row = e.get("kp")
            if k and row and kp_verdict(row) not in ("not_run", "oom"):
                kp[k] = row
    return kb, kp


def case_meta(path: Path) -> dict[str, str]:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    fields = dict(line.split(": ", 1) for line in doc.splitlines()[:3] if ": " in line)
    return {"problem": fields["problem"], "kb": fields["expect_kb"], "kp": fields["expect_kp"]}


def select(tasks: list[Any], args: argparse.Namespace) -> list[Any]:
    by_level: dict[int, list[Any]] = {}
    for t in tasks:
        by_level.setdefault(t.level, []).append(t)
    if args.problems:
        want = {tuple(p.split("/", 1)) for p in args.problems.split(",")}
        return [t for t in tasks if (str(t.level), t.path.stem.split("_", 1)[0]) in want
                or (str(t.level), t.path.stem) in want]
    rng = random.Random(args.seed)
    out = []
    for level, n in ((1, args.level1), (2, args.level2), (3, args.level3)):
        pool = by_level.get(level, [])
        out += pool if n < 0 or n >= len(pool) else sorted(rng.sample(pool, n), key=lambda t: t.path.stem)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb-path", help="a KernelBench checkout (root, holding src/kernelbench and KernelBench/)")
    ap.add_argument("--level1", type=int, default=-1, help="level-1 problems to take (-1: all, default)")
    ap.add_argument("--level2", type=int, default=10, help="level-2 sample size (default 10)")
    ap.add_argument("--level3", type=int, default=5, help="level-3 sample size (default 5)")
    ap.add_argument("--problems", help="only these, as LEVEL/ID comma list (e.g. 1/19,2/80)")
    ap.add_argument("--cases", default="all", help="all | none | comma list of benchmarks/kernelbench_cases names")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed for levels 2 and 3")
    ap.add_argument("--parallel", type=int, default=4, help="kernelpro bench processes at once (default 4)")
    ap.add_argument("--kp-trials", type=int, default=2, help="kernelpro: fresh seeds per size (default 2)")
    ap.add_argument("--perf-trials", type=int, default=20, help="KernelBench: timed calls (default 20)")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="wall-clock budget; KernelBench gets 45%% of it, what it does not reach is listed")
    ap.add_argument("--kp-device", choices=("cuda", "cpu"), default="cuda",
                    help="kernelpro's --device (cpu: a dry run of this script's kernelpro side without a GPU)")
    ap.add_argument("--big-gib", type=float, default=1.0,
                    help="problems whose inputs and parameters hold at least this many GiB run one at a time")
    ap.add_argument("--kb-parallel", type=int, default=1,
                    help="KernelBench evaluator processes at once over disjoint shares (default 1)")
    ap.add_argument("--concurrent", action="store_true",
                    help="run both sides at once for the whole budget (speedups then under each other's load)")
    ap.add_argument("--only", choices=("both", "kb", "kp"), default="both", help="run one side only")
    ap.add_argument("--prior", action="append", default=[], metavar="JSON",
                    help="an earlier run's side_by_side.json: its records are kept and not run again (a side "
                         "that did not reach a row, or ran out of memory on it, runs it again); repeatable")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/kb_side_by_side", help="output folder")
    ap.add_argument("--work", help="folder for solutions, stores and logs (default: a new temp folder)")
    ap.add_argument("--kb-worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.kb_worker:
        return kb_worker(args.kb_worker)
    if not args.kb_path:
        ap.error("--kb-path CHECKOUT is required (a clone of ScalingIntelligence/KernelBench)")
    sys.path.insert(0, str(REPO))
    from kernelpro.errors import KernelProError
    from kernelpro.suites.kernelbench import load_kernelbench

    t_start = time.time()
    final = Path(args.out)
    final.mkdir(parents=True, exist_ok=True)
    # solutions, stores, logs and caches stay in a work folder; OUT gets the two result files only
    out = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="kb_sbs_"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        tasks = [t for t in load_kernelbench(args.kb_path) if t.level in (1, 2, 3)]
    except KernelProError as e:
        print(f"kernelbench_side_by_side: {e}", file=sys.stderr)
        return 1
    chosen = select(tasks, args)
    by_key = {(t.level, t.path.stem): t for t in tasks}
    entries: list[dict[str, Any]] = []
    sol_root = out / "solutions"
    for t in chosen:
        d = sol_root / f"level{t.level}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / t.path.name
        p.write_text(t.path.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
        entries.append({"label": f"L{t.level} {t.path.stem}", "task": t, "solution": p, "dir": sol_root,
                        "expect": None})
    names = [] if args.cases == "none" else sorted(p.stem for p in CASES.glob("*.py")) if args.cases == "all" \
        else args.cases.split(",")
    for n in names:
        cp = CASES / f"{n}.py"
        if not cp.is_file():
            print(f"kernelbench_side_by_side: no case {n} in {CASES}", file=sys.stderr)
            return 1
        meta = case_meta(cp)
        level, stem = meta["problem"].split("/", 1)
        t = by_key.get((int(level), stem))
        if t is None:
            print(f"note: case {n}: this checkout has no level{level}/{stem}.py; left out", file=sys.stderr)
            continue
        d = out / f"solutions_{n}" / f"level{t.level}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / t.path.name
        p.write_text(t.path.read_text() + "\n\n" + cp.read_text())
        entries.append({"label": f"{n}", "task": t, "solution": p, "dir": out / f"solutions_{n}",
                        "expect": {"kb": meta["kb"], "kp": meta["kp"]}})
    for e in entries:
        e["key"] = f"{e['dir'].name}:{e['task'].name}"
        e["perf_trials"] = args.perf_trials
    print(f"{len(chosen)} problems + {len(entries) - len(chosen)} cases; work folder {out}", flush=True)

    entries = [e for e in entries if e["expect"]] + [e for e in entries if not e["expect"]]   # cases first
    prior_kb, prior_kp = load_prior(args.prior)
    if args.prior:
        print(f"kept from --prior: KernelBench {sum(e['key'] in prior_kb for e in entries)}, kernelpro "
              f"{sum(e['key'] in prior_kp for e in entries)} of {len(entries)} rows", flush=True)
    # Large problems run one at a time on either side (the module doc): size the honest solutions' problems.
    honest = [e for e in entries if e["dir"].name == "solutions"]
    sized = problem_bytes(sorted({str(e["task"].path) for e in honest}))
    small_paths, _ = split_by_memory([str(e["task"].path) for e in honest], sized, args.big_gib * 2**30)
    small_keys = {e["key"] for e in honest if str(e["task"].path) in small_paths}
    print(f"memory: {len(small_keys)} of {len(honest)} problems below {args.big_gib:g} GiB run "
          f"{args.parallel} (kernelpro) / {args.kb_parallel} (KernelBench) at once; the other "
          f"{len(entries) - len(small_keys)} rows one at a time ({len(honest) - len(sized)} could not be sized)",
          flush=True)
    # kernelpro's degenerate-problem probe runs on the CPU: fill its cache while the GPU runs KernelBench.
    os.environ["KERNELPRO_CACHE"] = str(out / "cache")
    from kernelpro.suites.degenerate import check_tasks

    pre = ThreadPoolExecutor(max_workers=1)
    probe = pre.submit(check_tasks, sorted({e["task"].key: e["task"] for e in entries}.values(), key=lambda t: t.key),
                       workers=max(1, (os.cpu_count() or 4) - 4)) if args.only != "kb" else None
    # --concurrent: both sides share the GPU for the whole budget (verdicts are unaffected; both sides'
    # speedups are then measured under each other's load, and the header says so).
    share = 1.0 if args.concurrent or args.only != "both" else 0.45
    kb_deadline = t_start + args.budget_s * share
    kb: dict[str, dict[str, Any]] = {}
    stubbed: list[str] = []
    fatal = None

    def kb_side() -> None:
        nonlocal kb, stubbed, fatal
        import torch

        if not torch.cuda.is_available():
            fatal = "no CUDA device: KernelBench's eval_kernel_against_ref asserts one"
        else:
            kb, stubbed, fatal = run_kb_phased([{"key": e["key"], "problem": str(e["task"].path),
                                                 "solution": str(e["solution"])}
                                                for e in entries if e["key"] not in prior_kb], args.kb_path, out,
                                               args.perf_trials, kb_deadline, args.kb_parallel, small_keys)
        print(f"KernelBench side: {len(kb)}/{len(entries)} evaluated in {time.time() - t_start:.0f} s"
              + (f"; stand-ins for uninstalled {', '.join(stubbed)}" if stubbed else "")
              + (f"; {fatal}" if fatal else ""), flush=True)

    kb_thread = None
    if args.only in ("both", "kb"):
        if args.concurrent:
            kb_thread = ThreadPoolExecutor(max_workers=1).submit(kb_side)
        else:
            kb_side()
    kp: dict[tuple[str, str], dict[str, Any]] = {}
    if args.only in ("both", "kp"):
        if probe is not None:
            probe.result()
        t_kp = time.time()
        groups: dict[Path, list[str]] = {}
        for e in entries:
            if e["key"] not in prior_kp:
                groups.setdefault(e["dir"], []).append(e["task"].name)
        kp = run_kp(list(groups.items()), args.kb_path, out, args.parallel, args.kp_trials,
                    t_start + args.budget_s, args.kp_device,
                    small={e["task"].name for e in honest if e["key"] in small_keys})
        print(f"kernelpro side: {sum(1 for v in kp.values() if v.get('reason') != 'not_run')}/{len(entries)} "
              f"evaluated in {time.time() - t_kp:.0f} s", flush=True)
    if kb_thread is not None:
        kb_thread.result()
    for e in entries:
        e["kb"] = kb.get(e["key"]) or prior_kb.get(e["key"], {})
        e["kp"] = kp.get((e["dir"].name, e["task"].name)) or prior_kp.get(e["key"])
    lines, dis, counts = compare(entries)
    tol = next((r["tolerance"] for r in kp.values() if r.get("tolerance")), None)
    text = "\n".join(
        [f"KernelBench eval_kernel_against_ref vs kernelpro bench ({time.strftime('%Y-%m-%d %H:%M:%S')}, "
         f"{_gpu_name()})",
         "KB/KBv0: KernelBench at atol=rtol 1e-4 (as shipped) / 1e-2 (v0); KP v0: '=' same at 1e-2",
         f"sides: {'run at the same time on one GPU (speedups under load)' if args.concurrent else 'one after the other'}"
         f"; kernelpro in {args.parallel} processes, KernelBench in {args.kb_parallel}",
         f"kernelpro tolerance: {'; '.join(tol) if tol else '-'}", ""] + lines + [""] +
        [f"{counts['problems']} rows: agree {counts['agree']}, disagree {counts['disagree']}; KernelBench passes "
         f"{counts['kb_pass']}, kernelpro passes {counts['kp_pass']}; verdicts that change between 1e-4 and "
         f"1e-2: KernelBench {counts['kb_tol_changes']}, kernelpro {counts['kp_tol_changes']}",
         f"not compared (a side did not reach it): {counts['problems'] - counts['agree'] - counts['disagree']}; "
         f"wall {time.time() - t_start:.0f} s" + (f"; KernelBench side: {fatal}" if fatal else "")
         + (f"; stand-ins for {', '.join(stubbed)}" if stubbed else ""), "", "disagreements and notes:"]
        + (dis or ["  none"]))
    text = "\n".join(w for line in text.splitlines() for w in (textwrap.wrap(line, 80, subsequent_indent="  ")
                                                              if len(line) > 80 else [line]))
    print(text)
    (final / "side_by_side.txt").write_text(text + "\n")
    (final / "side_by_side.json").write_text(json.dumps(
        {"counts": counts, "stubbed": stubbed, "fatal": fatal, "entries": [
            {k: (str(v) if isinstance(v, Path) else v) for k, v in e.items() if k != "task"} | {"task": e["task"].key}
            for e in entries]}, indent=1, default=str))
    return 0


def _gpu_name() -> str:
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except Exception:  # noqa: BLE001 - only a label in the header
        return "unknown GPU"


if __name__ == "__main__":
    sys.exit(main())
