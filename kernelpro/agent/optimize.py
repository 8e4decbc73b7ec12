"""`kernelpro optimize TASK`: search for faster kernels (MCTS or greedy, LLM or parameter policy),
or run PTXBench's multi-turn protocol (`--protocol ptxbench`).

Every node of a search and every turn of the protocol is saved in the run store as it happens;
`--resume RUN_ID` continues a run with its stored configuration (budgets may be raised).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError

# Every parsed argument is stored with the run so --resume rebuilds the same search; these few are taken
# from the resuming command line instead (budgets may be raised), and the key is never stored.
FRESH_ON_RESUME = ("resume", "db", "workdir", "quiet", "table_csv", "config", "budget_calls", "budget_nodes",
                   "budget_seconds", "budget_tokens", "api_key")
NEVER_STORED = ("api_key",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", nargs="*", help="task: suite/name, bare ptxbench name, or a task file "
                                           "(several tasks with --protocol); omit with --resume")
    g = p.add_argument_group("search")
    g.add_argument("--policy", choices=("llm", "param"), default="llm",
                   help="llm: a model writes kernels; param: mutate the task's parameterized reference (no LLM)")
    g.add_argument("--search", choices=("mcts", "greedy"), default="mcts",
                   help="mcts: tree search that revisits promising branches; greedy: always expand the best node "
                        "so far (default mcts)")
    g.add_argument("--budget-nodes", type=int, default=20, help="expansions, the start included (default 20)")
    g.add_argument("--budget-tokens", type=int, help="hard cap on LLM tokens (prompt + completion)")
    g.add_argument("--budget-calls", type=int, help="hard cap on LLM requests")
    g.add_argument("--budget-seconds", type=float, help="wall-time cap for the whole search")
    g.add_argument("--objective", choices=("speed", "energy", "mix"), default="speed",
                   help="what a node is scored by: speed (speedup vs --baseline), energy (joules per call), or "
                        "mix (weighted by --energy-weight); default speed")
    g.add_argument("--energy-weight", type=float, default=0.5, help="weight of energy in --objective mix")
    g.add_argument("--max-slowdown", type=float, default=0.02, metavar="FRACTION",
                   help="--objective energy/mix: candidates more than this fraction slower than the start are "
                        "penalised steeply (default 0.02; a negative value turns the floor off)")
    g.add_argument("--parallel", type=int, default=1, help="expansions per batch; their builds overlap")
    g.add_argument("--seed", type=int, default=0, help="random seed of the search and the parameter policy "
                   "(same seed, same tree; default 0)")
    g.add_argument("--resume", type=int, metavar="RUN_ID", help="continue a stored optimize run")
    g.add_argument("--template", help="parameterized template module (PARAMS + make_source) for --policy param")
    g.add_argument("--start", metavar="K=V,...",
                   help="--policy param: start from the template with these parameters changed, e.g. BM=128,STAGES=3")
    g.add_argument("--confirm", type=int, default=0, metavar="ROUNDS",
                   help="after the search, time start and best side by side in one worker for ROUNDS rounds "
                        "(kernelpro compare) and report that ratio, not the search's own best-of-many figure")
    g.add_argument("--workdir", help="where candidate files are written (default: next to the run store)")
    e = p.add_argument_group("evaluation")
    e.add_argument("--arch", help="target, e.g. sm_90a (default: the GPU's, else sm_90a)")
    e.add_argument("--evaluator", choices=("harness", "static"),
                   help="harness: run on the GPU (default with a GPU); static: compile + feature check only")
    e.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="with --evaluator harness: 'cpu' runs pure-PyTorch candidates on the CPU (no profiling)")
    e.add_argument("--feedback", choices=("advice", "raw", "none"), default="advice",
                   help="profiling feedback given to the next expansion: advice (the tools' findings; with --policy "
                        "param they pick the knob moves through the template's ADVICE rules), raw (metrics only; "
                        "param ranks moves by a fixed metric heuristic), none (no profiling; param moves blind)")
    e.add_argument("--baseline", default="eager", help="speedup baseline of the harness (eager|compile|vendor)")
    e.add_argument("--sizes", default="all", help="sizes checked for correctness: default|shown|heldout|all")
    e.add_argument("--energy", action="store_true", help="measure energy per call (implied by --objective energy/mix)")
    m = p.add_argument_group("LLM endpoint (flags > KERNELPRO_* environment > config file)")
    m.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    m.add_argument("--model", help="model name as the endpoint serves it")
    m.add_argument("--api-key", help="API key (default $KERNELPRO_API_KEY, $OPENAI_API_KEY, or 'EMPTY')")
    m.add_argument("--config", help="TOML config with an [llm] table (default ~/.config/kernelpro/config.toml)")
    m.add_argument("--temperature", type=float, help="sampling temperature of the model (default: the config "
                   "file's, else the endpoint's)")
    m.add_argument("--max-tokens", type=int, help="per reply")
    m.add_argument("--hw-docs", action=argparse.BooleanOptionalAction, default=True,
                   help="include hardware context documents in prompts")
    m.add_argument("--patterns", action=argparse.BooleanOptionalAction, default=False,
                   help="include pattern documents in prompts")
    m.add_argument("--cutlass", help="CUTLASS checkout for the code-search tool (default: nvidia-cutlass wheel)")
    m.add_argument("--no-codesearch", action="store_true", help="do not offer the CUTLASS code-search tool")
    r = p.add_argument_group("PTXBench protocol")
    r.add_argument("--protocol", choices=("ptxbench",), help="run PTXBench's multi-turn refinement protocol")
    r.add_argument("--turns", type=int, default=8, help="refinement turns per trajectory (default 8)")
    r.add_argument("--target-speedup", type=float, default=1.2,
                   help="a trajectory stops early once a correct candidate reaches this speedup (default 1.2)")
    r.add_argument("--variants", default="base,hwdocs,hwdocs+patterns",
                   help="comma-separated prompt variants: base, hwdocs, hwdocs+patterns")
    r.add_argument("--repeats", type=int, default=1, help="trajectories per task and prompt variant (default 1)")
    r.add_argument("--table-csv", help="also write the results table as CSV (PTXBench's columns)")
    p.add_argument("--quiet", action="store_true", help="no live progress")


def _arch(args: argparse.Namespace) -> str:
    if args.arch:
        return args.arch
    from kernelpro.toolchain import gpus

    g = gpus()
    return g[0].arch if g else "sm_90a"


def _hw_context(arch: str, with_docs: bool, with_patterns: bool) -> str:
    try:
        from kernelpro.agent.prompting import hardware_context
    except ImportError:
        return ""
    return hardware_context(arch, with_docs, with_patterns)


def make_evaluator(args: argparse.Namespace, arch: str) -> Any:
    from kernelpro.agent.evaluator import HarnessEvaluator, StaticEvaluator
    from kernelpro.toolchain import no_gpu_reason

    kind = args.evaluator
    if kind is None:
        kind = "static" if no_gpu_reason() else "harness"
    if kind == "harness" and getattr(args, "device", "auto") == "cpu":
        # Pure-PyTorch candidates on the CPU: correctness and anti-gaming checks are real, timings are
        # CPU timings, and there is nothing to profile or to verify in SASS.
        return HarnessEvaluator(arch=arch, feedback="none", baseline=args.baseline, sizes=args.sizes,
                                verify_features=False, device="cpu")
    if kind == "harness":
        reason = no_gpu_reason()
        if reason:
            raise KernelProError(f"--evaluator harness needs a GPU ({reason}); use --evaluator static to compile "
                                 "and verify features only")
        return HarnessEvaluator(arch=arch, feedback=args.feedback, baseline=args.baseline,
                                energy=args.energy or args.objective != "speed", sizes=args.sizes,
                                verify_features=args.policy != "param",
                                arch_evidence=bool(getattr(args, "protocol", None)))
    return StaticEvaluator(arch)


def make_llm(args: argparse.Namespace) -> Any:
    from kernelpro.agent.llm import Budget, LLMClient, load_config

    cfg = load_config(args.base_url, args.model, args.api_key, args.config)
    if args.temperature is not None:
        cfg.temperature = args.temperature
    if args.max_tokens:
        cfg.max_tokens = args.max_tokens
    return LLMClient(cfg, Budget(max_calls=args.budget_calls, max_tokens=args.budget_tokens,
                                 max_seconds=args.budget_seconds))


def _restore(args: argparse.Namespace, store: Any) -> dict[str, Any]:
    run = store.get_run(args.resume)
    if run["kind"] != "optimize":
        raise KernelProError(f"run {args.resume} is a {run['kind']} run, not an optimize run")
    from kernelpro.runargs import restore_args

    # the stored task is the task files' paths, found again wherever they live; task_key is derived
    restore_args(args, run["config"], fresh=(*FRESH_ON_RESUME, "task_key"))
    return run


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kernelpro.results.store import Store
    from kernelpro.suites.task import find_task

    console = Console()
    store = Store(args.db)
    run = _restore(args, store) if args.resume else None
    if not args.task:
        raise KernelProError("give a task (e.g. ptxbench/gemm_bf16) or --resume RUN_ID")
    tasks = [find_task(t) for t in (args.task if isinstance(args.task, list) else [args.task])]
    if len(tasks) > 1 and not args.protocol:
        raise KernelProError("optimize searches one task at a time; several tasks need --protocol ptxbench")
    arch = _arch(args)
    args.arch = arch
    if arch not in ("sm_90a", "sm_100a"):
        raise KernelProError(f"--arch {arch}: the optimizer targets sm_90a or sm_100a")
    if args.confirm and args.confirm < 2:
        raise KernelProError(f"--confirm {args.confirm}: give at least 2 rounds, one judging the start in full and "
                             "one the best")
    if args.policy == "param" and args.protocol:
        raise KernelProError("--protocol ptxbench is a conversation with a model; it needs --policy llm")
    if args.policy == "param" and not args.protocol:
        from kernelpro.agent.policy_param import load_template

        load_template(tasks[0], args.template)   # no template: one line now, before a run is recorded
    evaluator = make_evaluator(args, arch)
    from kernelpro.runargs import args_config

    config = args_config(args, never=NEVER_STORED)
    # Paths, not keys: a task given as a file outside the shipped suites must be found again on --resume.
    config["task"] = [str(t.path) for t in tasks] if args.protocol else str(tasks[0].path)
    config["task_key"] = [t.key for t in tasks] if args.protocol else tasks[0].key
    run_id = args.resume or store.new_run("optimize", tasks[0].suite, config)
    if run is not None:
        store.set_run_status(run_id, "running")
    workdir = Path(args.workdir) if args.workdir else store.path.parent / "optimize" / f"run{run_id}"
    console.print(f"run {run_id} in {store.path} (candidates under {workdir})", highlight=False)
    try:
        if args.protocol:
            rc = _protocol(args, console, store, run_id, tasks, evaluator, arch, workdir)
        else:
            rc = _search(args, console, store, run_id, tasks[0], evaluator, arch, workdir, resumed=run is not None)
    except KeyboardInterrupt:
        store.set_run_status(run_id, "interrupted")
        raise
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise
    return rc


def _search(args: argparse.Namespace, console: Any, store: Any, run_id: int, task: Any, evaluator: Any,
            arch: str, workdir: Path, resumed: bool) -> int:
    from kernelpro.agent.mcts import Search, SearchConfig
    from kernelpro.agent.ui import Progress, summary_table

    llm = None
    if args.policy == "param":
        from kernelpro.agent.policy_param import ParamPolicy, load_template

        policy: Any = ParamPolicy(load_template(task, args.template), start=parse_start(args.start),
                                  feedback=args.feedback)
    else:
        from kernelpro.agent.policy_llm import LLMPolicy

        llm = make_llm(args)
        index = None
        if not args.no_codesearch:
            from kernelpro.agent.codesearch import default_index

            index = default_index(args.cutlass)
            if index is None:
                console.print("code search off: no CUTLASS headers (pip install nvidia-cutlass, or --cutlass PATH)")
        hw = _hw_context(arch, args.hw_docs, args.patterns) if (args.hw_docs or args.patterns) else ""
        policy = LLMPolicy(llm, task, arch, hw_context=hw, feedback=args.feedback, index=index)
    cfg = SearchConfig(strategy=args.search, budget_nodes=args.budget_nodes, budget_seconds=args.budget_seconds,
                       objective=args.objective, energy_weight=args.energy_weight,
                       max_slowdown=args.max_slowdown if args.max_slowdown is not None and args.max_slowdown >= 0
                       else None, parallel=max(1, args.parallel),
                       seed=args.seed, arch=arch, workdir=workdir)
    timed = type(evaluator).__name__ == "HarnessEvaluator"
    if not timed:
        from kernelpro.agent.ui import static_only_line
        from kernelpro.toolchain import no_gpu_reason

        console.print(static_only_line(no_gpu_reason(), arch), markup=False, highlight=False)
    with Progress(console, llm=llm, enabled=not args.quiet) as progress:
        search = Search(task, policy, evaluator, store, run_id, cfg, on_progress=progress)
        if resumed:
            n = search.load()
            console.print(f"resumed run {run_id}: {n} nodes from the store")
        res = search.run()
    if timed:
        console.print(summary_table(search, res, args.objective))
    else:
        from kernelpro.agent.ui import static_summary

        console.print(static_summary(search, res), markup=False, highlight=False)
    if llm is not None:
        u = llm.usage
        console.print(f"LLM: {u.calls} requests, {u.replies} replies, {u.failures} failed, {u.prompt_tokens} prompt + "
                      f"{u.completion_tokens} completion tokens" + (f", ${u.cost_usd:.2f}" if u.cost_usd else ""))
    status = "interrupted" if res.interrupted else "done"
    if res.best is None:
        store.set_run_status(run_id, status)
        console.print("no working candidate found")
        return 1
    if args.confirm and status == "done" and not evaluator.times:
        console.print("--confirm needs the harness evaluator (a GPU, or --device cpu); skipped")
    elif args.confirm and status == "done":
        _confirm(args, console, store, run_id, task, res, workdir)
    store.set_run_status(run_id, status)
    return 0


def parse_start(text: str | None) -> dict[str, Any] | None:
    """'BM=128,STAGES=3' -> {'BM': 128, 'STAGES': 3}; values are Python literals (ints, bools, strings)."""
    import ast

    if not text:
        return None
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise KernelProError(f"--start {text!r}: expected KEY=VALUE pairs separated by commas, e.g. BM=128,STAGES=3")
        try:
            out[key.strip()] = ast.literal_eval(val.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = val.strip()
    return out


def _confirm(args: argparse.Namespace, console: Any, store: Any, run_id: int, task: Any, res: Any,
             workdir: Path) -> None:
    """Start vs best, side by side in one worker, several rounds; stored as a `compare` run linked here."""
    from kernelpro.harness.compare import render, stored_compare

    root, best = res.root, res.best
    if root is None or not root.ok or best.key == root.key or root.origin == "reference":
        console.print("confirm: nothing to compare (the start is the best working node)")
        return
    paths = [workdir / f"{n.key}.py" for n in (root, best)]
    for n, p in zip((root, best), paths, strict=True):
        if not p.is_file() or p.read_text() != n.source:   # resumed elsewhere: write the stored source back
            p.write_text(n.source or "")
    labels = [f"start {root.key}", f"best {best.key}"]

    def on_round(r: int, i: int, rec: dict[str, Any]) -> None:
        if not args.quiet:
            console.print(f"confirm round {r + 1}/{args.confirm} done", highlight=False)

    device = "cpu" if getattr(args, "device", "auto") == "cpu" else "cuda"
    cmp_run, cmp = stored_compare(store, task, paths, labels, args.confirm,
                                  candidate_ids=[root.candidate_id, best.candidate_id], link={"optimize_run": run_id},
                                  baseline=args.baseline, device=device, on_round=on_round)
    console.print(render(cmp, args.baseline))
    console.print(f"comparison stored as run {cmp_run} (its rounds are evaluations of the two nodes' candidates)",
                  highlight=False)


def _protocol(args: argparse.Namespace, console: Any, store: Any, run_id: int, tasks: list[Any], evaluator: Any,
              arch: str, workdir: Path) -> int:
    from kernelpro.agent.protocol import (
        VARIANTS,
        Protocol,
        ProtocolConfig,
        aggregate,
        render_table,
        write_csv,
    )

    variants = [v.strip() for v in str(args.variants).split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise KernelProError(f"unknown --variants {bad}; known: {', '.join(VARIANTS)}")
    llm = make_llm(args)
    cfg = ProtocolConfig(model=llm.config.model, arch=arch, turns=args.turns, target_speedup=args.target_speedup,
                         variants=variants, repeats=args.repeats,
                         report_turns=tuple(sorted({min(x, args.turns) for x in (1, 4, 8)})), workdir=workdir)
    all_turns, stop = [], ""

    def on_turn(t: Any) -> None:
        if not args.quiet:
            console.print(f"{t.task} {t.variant} r{t.repeat} turn {t.turn}: {t.verdict[:100]}",
                          markup=False, highlight=False)

    for task in tasks:
        proto = Protocol(task, llm, evaluator, store, run_id, cfg, hw_context=_hw_context)
        turns, stop = proto.run(on_turn)
        all_turns += turns
        if stop:
            break
    rows = aggregate(all_turns, cfg.model, arch, cfg.report_turns)
    console.print(render_table(rows))
    if args.table_csv:
        write_csv(rows, Path(args.table_csv))
        console.print(f"table written to {args.table_csv}")
    u = llm.usage
    console.print(f"LLM: {u.calls} requests, {u.prompt_tokens} prompt + {u.completion_tokens} completion tokens"
                  + (f"; stopped: {stop}" if stop else ""), highlight=False)
    store.set_run_status(run_id, "interrupted" if stop else "done")
    return 0

