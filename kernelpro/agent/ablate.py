"""`kernelpro ablate TASK...`: the search's ablations as a study, resumable cell by cell.

Arms are (feedback, strategy) pairs, e.g. advice-mcts, none-greedy, raw-mcts: the profile feedback that
steers the expansion (advice: the tools' findings; raw: metrics only; none: blind) and the tree policy
(MCTS or greedy), on one policy (--policy param, the LLM-free template search, or --policy llm against
an endpoint). Every (arm, task, seed) cell is an ordinary optimize run with a fixed node budget from the
template's GENERIC_START (param) or the reference (llm), followed by --confirm rounds of start vs best
side by side (kernelpro compare). A finished cell is one row of the store's ablation_cells table,
written in one transaction; running the same study again skips recorded cells and says so, and an
interrupted cell resumes its search from the stored nodes.

Per arm the report gives the best confirmed speedup over the start (median of the side-by-side rounds),
the search's own best speedup, the nodes a search needed to reach 90% of the best speedup any arm found
for that task, and the GPU-minutes its jobs held the GPU, with percentile-bootstrap intervals over the
cells, and a paired test across (task, seed) between arms that differ in one factor.
"""

from __future__ import annotations

import argparse
import statistics
import textwrap
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

FEEDBACKS = ("advice", "raw", "none")
STRATEGIES = ("mcts", "greedy")
DEFAULT_ARMS = "advice-mcts,advice-greedy,none-mcts,none-greedy"
REACH = 0.9


@dataclass(frozen=True)
class Arm:
    feedback: str
    strategy: str

    @property
    def name(self) -> str:
        return f"{self.feedback}-{self.strategy}"

    @classmethod
    def parse(cls, text: str) -> Arm:
        fb, _, st = text.strip().partition("-")
        if fb not in FEEDBACKS or st not in STRATEGIES:
            raise KernelProError(f"--arms: {text!r} is not FEEDBACK-STRATEGY with FEEDBACK in "
                                 f"{'|'.join(FEEDBACKS)} and STRATEGY in {'|'.join(STRATEGIES)} (e.g. advice-mcts)")
        return cls(fb, st)


@dataclass
class CellResult:
    """One finished cell. `trajectory`: the best speedup found after each spent node, in node order."""
    arm: str
    task: str
    seed: int
    policy: str
    optimize_run: int
    nodes: int
    working: int
    stop_reason: str
    timed: bool                               # False: static evaluator (no GPU), nothing measured
    device: str = "cuda"                      # where the timed jobs ran (cpu: --device cpu)
    start_speedup: float | None = None        # vs the harness baseline
    best_speedup: float | None = None         # the search's own figure (best of many: biased upward)
    confirmed: float | None = None            # median ms(start) / ms(best) over the confirm rounds
    confirm_rounds: int = 0
    confirm_run: int | None = None
    gpu_seconds: float = 0.0                  # wall time of the cell's GPU jobs (evaluations, profiles, confirm)
    trajectory: list[float | None] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CellResult:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KernelProError(f"ablation cell record has unknown keys {unknown}; was it written by a newer kernelpro?")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TimedEvaluator:
    """Passes every call through to the evaluator and adds up the wall time its jobs held the device."""

    def __init__(self, inner: Any):
        self.inner, self.seconds = inner, 0.0
        self.times = inner.times
        if hasattr(inner, "prepare"):
            self.prepare = inner.prepare

    def evaluate(self, task: Any, path: Path) -> Any:
        t0 = time.monotonic()
        try:
            return self.inner.evaluate(task, path)
        finally:
            self.seconds += time.monotonic() - t0


def add_arguments(p: argparse.ArgumentParser) -> None:
    from kernelpro.agent import optimize

    p.add_argument("task", nargs="+", help="tasks (suite/name, ptxbench name or task file), one or more families")
    g = p.add_argument_group("study")
    g.add_argument("--study", default="ablation", help="name of the study in the store; the same name resumes it "
                   "(default ablation)")
    g.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma-separated FEEDBACK-STRATEGY arms (default {DEFAULT_ARMS}; "
                   "raw-mcts / raw-greedy add the metrics-only arm)")
    g.add_argument("--seeds", default="0-4", help="seeds: a range A-B or a comma list (default 0-4)")
    g.add_argument("--budget-nodes", type=int, default=8, help="nodes per search, the start included (default 8)")
    g.add_argument("--confirm", type=int, default=4, metavar="ROUNDS",
                   help="side-by-side rounds of start vs best per cell (default 4; 0: none)")
    g.add_argument("--max-cells", type=int, help="stop after running this many new cells (a slice of the study)")
    g.add_argument("--max-minutes", type=float, help="start no new cell after this many minutes (a slice that fits "
                   "a time limit; the cell running then finishes)")
    g.add_argument("--report-only", action="store_true", help="print the study's table without running cells")
    # the search and evaluation flags of `kernelpro optimize`, with the same names and meanings
    s = argparse.ArgumentParser(add_help=False)
    optimize.add_arguments(s)
    keep = {"--policy", "--template", "--start", "--parallel", "--arch", "--evaluator", "--device", "--baseline",
            "--sizes", "--base-url", "--model", "--api-key", "--config", "--temperature", "--max-tokens",
            "--budget-calls", "--budget-tokens", "--quiet"}
    e = p.add_argument_group("search and evaluation (as in kernelpro optimize)")
    for a in s._actions:   # noqa: SLF001 - argparse offers no public way to copy actions between parsers
        if a.option_strings and a.option_strings[0] in keep:
            kw: dict[str, Any] = {"dest": a.dest, "default": "param" if a.dest == "policy" else a.default,
                                  "help": a.help}
            if a.nargs == 0:
                kw["action"] = "store_true"
            else:
                kw.update(type=a.type, choices=a.choices, metavar=a.metavar)
            e.add_argument(*a.option_strings, **kw)


def parse_seeds(text: str) -> list[int]:
    try:
        if "-" in text and "," not in text:
            a, b = (int(x) for x in text.split("-", 1))
            out = list(range(a, b + 1))
        else:
            out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise KernelProError(f"--seeds {text!r}: give a range like 0-4 or a list like 0,1,7") from None
    if not out:
        raise KernelProError(f"--seeds {text!r}: no seed")
    return out


def _study(store: Any, args: argparse.Namespace, arms: list[Arm], seeds: list[int], tasks: list[Any]) -> int:
    """The study's run: found by name (checked for a compatible setup) or created."""
    setup = {"study": args.study, "policy": args.policy, "budget_nodes": args.budget_nodes, "confirm": args.confirm,
             "start": args.start or "generic", "baseline": args.baseline}
    for r in store.runs("ablate"):
        if r["config"].get("study") == args.study:
            old = {k: r["config"].get(k) for k in setup}
            if old != setup:
                diff = ", ".join(f"{k} {old[k]} (now {setup[k]})" for k in setup if old[k] != setup[k])
                raise KernelProError(f"study {args.study!r} (run {r['id']}) was set up with {diff}; use another "
                                     "--study name or the same settings")
            return int(r["id"])
    return store.new_run("ablate", tasks[0].suite, {**setup, "arms": [a.name for a in arms], "seeds": seeds,
                                                     "tasks": [t.key for t in tasks]})


def main(args: argparse.Namespace) -> int:
    from kernelpro.agent.optimize import _arch
    from kernelpro.results.store import Store
    from kernelpro.suites.task import find_task

    arms = [Arm.parse(a) for a in str(args.arms).split(",") if a.strip()]
    if len({a.name for a in arms}) != len(arms) or not arms:
        raise KernelProError("--arms: give each arm once")
    seeds = parse_seeds(str(args.seeds))
    if args.budget_nodes < 2:
        raise KernelProError("--budget-nodes: at least 2 (the start and one expansion)")
    if args.confirm and args.confirm < 2:
        raise KernelProError(f"--confirm {args.confirm}: give 0 or at least 2 rounds (one judging each side)")
    tasks = [find_task(t) for t in args.task]
    args.arch = _arch(args)
    if args.policy == "param":
        from kernelpro.agent.policy_param import load_template

        for t in tasks:
            load_template(t, args.template)            # no template: one line before anything is recorded
    store = Store(args.db)
    study = _study(store, args, arms, seeds, tasks)
    done = {(c["arm"], c["task"], c["seed"]) for c in store.cells(study)}
    # seed-major: a slice of the study holds every arm of every task for its first seeds (paired data)
    cells = [(a, t, s) for s in seeds for t in tasks for a in arms]
    skip = [c for c in cells if (c[0].name, c[1].key, c[2]) in done]
    say(f"study {args.study!r} (run {study} in {store.path}): {len(cells)} cells = {len(arms)} arms x "
        f"{len(tasks)} tasks x {len(seeds)} seeds, {args.budget_nodes} nodes each; "
        f"{len(skip)} already recorded, skipped")
    ran, t0 = 0, time.monotonic()
    if not args.report_only:
        for arm, task, seed in cells:
            if (arm.name, task.key, seed) in done:
                continue
            if args.max_cells is not None and ran >= args.max_cells:
                say(f"--max-cells {args.max_cells} reached; run the same command again to continue")
                break
            if args.max_minutes is not None and time.monotonic() - t0 > 60 * args.max_minutes:
                say(f"--max-minutes {args.max_minutes:g} reached; run the same command again to continue")
                break
            res = run_cell(args, store, study, arm, task, seed)
            store.put_cell(study, arm.name, task.key, seed, res.optimize_run, res.to_dict())
            ran += 1
            if not args.quiet:
                say(f"cell {arm.name} {task.key} seed {seed}: {_cell_line(res)}")
    results = [CellResult.from_dict(c["payload"]) for c in store.cells(study)]
    print(render_report(results, [a.name for a in arms]))
    left = len(cells) - len(skip) - ran
    store.set_run_status(study, "done" if left == 0 else "interrupted")
    return 0


def say(text: str) -> None:
    """Plain lines folded at 80 columns (identifiers are never split)."""
    print("\n".join(textwrap.wrap(text, 80, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False)))


def _cell_line(r: CellResult) -> str:
    if not r.timed:
        return f"{r.working}/{r.nodes} nodes compiled and verified (static: not timed)"
    c = f", confirmed {r.confirmed:.3f}x over the start" if r.confirmed is not None else ""
    return (f"best {_x(r.best_speedup)} (start {_x(r.start_speedup)}){c}, {r.nodes} nodes, "
            f"{r.gpu_seconds / 60:.1f} {_unit(r.device)}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _evaluator(args: argparse.Namespace, arm: Arm) -> Any:
    from kernelpro.agent.optimize import make_evaluator

    ns = argparse.Namespace(**{**vars(args), "feedback": arm.feedback, "objective": "speed", "energy": False,
                               "protocol": None})
    return make_evaluator(ns, args.arch)


def _policy(args: argparse.Namespace, arm: Arm, task: Any) -> tuple[Any, Any]:
    if args.policy == "param":
        from kernelpro.agent.optimize import parse_start
        from kernelpro.agent.policy_param import ParamPolicy, load_template

        t = load_template(task, args.template)
        start = parse_start(args.start) if args.start else (t.generic_start or None)
        return ParamPolicy(t, start=start, feedback=arm.feedback), None
    from kernelpro.agent.optimize import make_llm
    from kernelpro.agent.policy_llm import LLMPolicy

    ns = argparse.Namespace(**{**vars(args), "budget_seconds": None})
    llm = make_llm(ns)
    return LLMPolicy(llm, task, args.arch, feedback=arm.feedback), llm


def run_cell(args: argparse.Namespace, store: Any, study: int, arm: Arm, task: Any, seed: int) -> CellResult:
    """One search of the arm on the task with the seed (resumed if an earlier attempt was cut off), then
    start vs best side by side."""
    from kernelpro.agent.mcts import Search, SearchConfig

    cfg_key = {"ablate_study": study, "arm": arm.name, "task_key": task.key, "seed": seed}
    prior = [r for r in store.runs("optimize") if all(r["config"].get(k) == v for k, v in cfg_key.items())]
    evaluator = TimedEvaluator(_evaluator(args, arm))
    policy, _llm = _policy(args, arm, task)
    if prior:
        run_id = int(prior[-1]["id"])
        store.set_run_status(run_id, "running")
    else:
        run_id = store.new_run("optimize", task.suite, {**cfg_key, "task": str(task.path), "policy": args.policy,
                                                        "feedback": arm.feedback, "search": arm.strategy,
                                                        "budget_nodes": args.budget_nodes, "start": args.start,
                                                        "arch": args.arch})
    workdir = store.path.parent / "ablate" / f"run{run_id}"
    search = Search(task, policy, evaluator, store, run_id,
                    SearchConfig(strategy=arm.strategy, budget_nodes=args.budget_nodes, seed=seed, arch=args.arch,
                                 parallel=max(1, args.parallel or 1), workdir=workdir))
    if prior and search.load() and not args.quiet:
        say(f"cell {arm.name} {task.key} seed {seed}: resuming run {run_id} ({search.spent} nodes stored)")
    try:
        res = search.run()
    except BaseException:
        store.set_run_status(run_id, "interrupted")
        raise
    out = CellResult(arm=arm.name, task=task.key, seed=seed, policy=args.policy, optimize_run=run_id,
                     nodes=search.spent, working=sum(1 for n in search.nodes.values() if n.ok and n.origin != "reference"),
                     stop_reason=res.stop_reason, timed=bool(evaluator.times), trajectory=trajectory(search),
                     device="cpu" if getattr(args, "device", "auto") == "cpu" else "cuda")
    root, best = res.root, res.best
    if evaluator.times:
        out.start_speedup = root.outcome.speedup if root is not None and root.outcome else None
        out.best_speedup = best.outcome.speedup if best is not None and best.outcome else None
    if evaluator.times and args.confirm and root is not None and best is not None:
        if best.key == root.key or root.origin == "reference":
            out.confirmed = 1.0 if best.key == root.key else None   # the start stayed best: no gain to confirm
        else:
            out.confirmed, out.confirm_rounds, out.confirm_run, secs = _confirm(args, store, run_id, task, root,
                                                                                best, workdir)
            evaluator.seconds += secs
    out.gpu_seconds = round(evaluator.seconds, 2) if evaluator.times else 0.0
    store.set_run_status(run_id, "interrupted" if res.interrupted else "done")
    return out


def trajectory(search: Any) -> list[float | None]:
    """The running best speedup after each spent node, in the order nodes were made."""
    best: float | None = None
    out: list[float | None] = []
    for n in sorted(search.nodes.values(), key=lambda n: int(n.key[1:])):
        if n.origin == "reference":
            continue
        s = n.outcome.speedup if n.ok and n.outcome is not None else None
        if s is not None and (best is None or s > best):
            best = s
        out.append(best)
    return out


def _confirm(args: argparse.Namespace, store: Any, run_id: int, task: Any, root: Any, best: Any,
             workdir: Path) -> tuple[float | None, int, int, float]:
    from kernelpro.harness.compare import stored_compare

    paths = [workdir / f"{n.key}.py" for n in (root, best)]
    for n, p in zip((root, best), paths, strict=True):
        if not p.is_file() or p.read_text() != n.source:
            p.write_text(n.source or "")
    labels = [f"start {root.key}", f"best {best.key}"]
    device = "cpu" if getattr(args, "device", "auto") == "cpu" else "cuda"
    t0 = time.monotonic()
    cmp_run, cmp = stored_compare(store, task, paths, labels, args.confirm,
                                  candidate_ids=[root.candidate_id, best.candidate_id],
                                  link={"optimize_run": run_id}, baseline=args.baseline, device=device)
    ratios = cmp.ratios(labels[1])
    return (statistics.median(ratios) if ratios else None), len(ratios), cmp_run, time.monotonic() - t0


# ---- the report ----------------------------------------------------------------------------------

def nodes_to_reach(traj: list[float | None], target: float) -> int | None:
    """1-based count of spent nodes after which the running best reached `target`; None if never."""
    for i, v in enumerate(traj, 1):
        if v is not None and v >= target:
            return i
    return None


def _ci(xs: list[float], fmt: str) -> str:
    from kernelpro.results.stats import bootstrap_ci

    if not xs:
        return "-"
    lo, hi = bootstrap_ci(xs)  # type: ignore[misc]
    return f"{format(statistics.median(xs), fmt)} [{format(lo, fmt)},{format(hi, fmt)}]"


def render_report(results: list[CellResult], arm_order: list[str]) -> str:
    """The study's table (80 columns) and the paired tests, as plain text."""
    from kernelpro.results.stats import PAIRED_TEST, sign_test

    arms = [a for a in arm_order if any(r.arm == a for r in results)]
    arms += sorted({r.arm for r in results} - set(arms))
    if not results:
        return "no cell recorded yet"
    lines = []
    timed = [r for r in results if r.timed]
    if not timed:
        lines += textwrap.wrap("static evaluator (no GPU): nothing was timed, so no speedup, nodes-to-90% or "
                               "paired test; per arm, nodes that compiled and verified:", 80)
        for a in arms:
            rs = [r for r in results if r.arm == a]
            lines.append(f"  {a:<15} {len(rs)} cells, {sum(r.working for r in rs)} of {sum(r.nodes for r in rs)} nodes")
        return "\n".join(lines)
    # the best speedup any arm found per task: the 90% target
    best_task: dict[str, float] = {}
    for r in timed:
        if r.best_speedup is not None:
            best_task[r.task] = max(best_task.get(r.task, 0.0), r.best_speedup)
    unit = _unit(timed[0].device) if len({r.device for r in timed}) == 1 else "dev-min"
    lines.append("median [95% bootstrap CI]; confirmed = ms(start)/ms(best), side by side")
    lines.append(f"{'arm':<13}{'cells':>5}  {'confirmed':<20}{'search best':<20}{'nodes to 90%':<13}{unit:>7}")
    for a in arms:
        rs = [r for r in timed if r.arm == a]
        conf = [r.confirmed for r in rs if r.confirmed is not None]
        sb = [r.best_speedup for r in rs if r.best_speedup is not None]
        reach = [nodes_to_reach(r.trajectory, REACH * best_task[r.task]) for r in rs if r.task in best_task]
        got = [float(n) for n in reach if n is not None]
        n90 = f"{statistics.median(got):.0f} ({len(got)}/{len(reach)})" if got else f"- (0/{len(reach)})"
        mins = sum(r.gpu_seconds for r in rs) / 60
        lines.append(f"{a:<13}{len(rs):>5}  {_ci(conf, '.3f'):<20}{_ci(sb, '.3f'):<20}{n90:<13}{mins:>7.1f}")
    lines += textwrap.wrap("nodes to 90%: median nodes until a search's best reached 90% of the best speedup any "
                           f"arm found on the task (searches that got there / all); {unit}: wall time of the "
                           f"cells' timed jobs ({'GPU' if unit == 'GPU-min' else 'device'}: evaluations, "
                           "profiling, confirm rounds), summed", 80)
    pairs = _contrasts(arms)
    if pairs:
        lines += textwrap.wrap(f"paired by (task, seed), on the confirmed speedup (the search's best where "
                               f"unconfirmed; tied: within 0.5%); {PAIRED_TEST}:", 80)
    for a, b in pairs:
        ka = {(r.task, r.seed): _figure(r) for r in timed if r.arm == a}
        kb = {(r.task, r.seed): _figure(r) for r in timed if r.arm == b}
        common = sorted(k for k in ka if k in kb and ka[k] is not None and kb[k] is not None)
        t = sign_test([ka[k] for k in common], [kb[k] for k in common], rel_tol=0.005)  # type: ignore[misc]
        p = "-" if t.p is None else f"{t.p:.3g}"
        lines += textwrap.wrap(f"  {a} vs {b}: {len(common)} pairs, {t.wins} better, {t.losses} worse, "
                               f"{t.ties} tied; p = {p}", 80, subsequent_indent="    ")
    return "\n".join(lines)


def _figure(r: CellResult) -> float | None:
    if r.confirmed is not None and r.start_speedup is not None:
        return r.confirmed * r.start_speedup        # the confirmed ratio on the start's speedup scale
    return r.best_speedup


def _contrasts(arms: list[str]) -> list[tuple[str, str]]:
    """Arm pairs that differ in exactly one factor: advice vs none (or raw) per strategy, mcts vs greedy."""
    parsed = {a: tuple(a.split("-", 1)) for a in arms}
    out = []
    for a in arms:
        for b in arms:
            fa, sa = parsed[a]
            fb, sb = parsed[b]
            if (sa == sb and FEEDBACKS.index(fa) < FEEDBACKS.index(fb)) or (fa == fb and sa == "mcts" and sb == "greedy"):
                out.append((a, b))
    return out


def _unit(device: str) -> str:
    return "CPU-min" if device == "cpu" else "GPU-min"
