"""The `kernelpro` command. Each sub-command lives in the module that owns its stage.

A stage module exposes `add_arguments(parser)` and `main(args) -> int`; it keeps heavy imports
(torch) inside functions so that `kernelpro --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from rich.console import Console

from kernelpro import __version__
from kernelpro.errors import KernelProError

# name -> (module, one-line help, issue that builds it). The order is the pipeline's order.
COMMANDS: dict[str, tuple[str, str]] = {
    "tasks": ("kernelpro.cli", "list the tasks of a suite (ptxbench, or a folder of task files)"),
    "doctor": ("kernelpro.cli", "show the CUDA tools and GPUs found, and what each missing piece disables"),
    "verify": ("kernelpro.static.verify", "compile a candidate and prove which architecture features it uses (PTX + SASS)"),
    "bench": ("kernelpro.bench.pipeline", "evaluate candidates: correctness, anti-gaming checks, timing and energy vs baselines"),
    "build": ("kernelpro.bench.prebuild", "build every candidate's extensions in parallel into the shared cache (bench's CPU stage)"),
    "compare": ("kernelpro.harness.compare", "time candidates side by side in one worker over several rounds (start vs best)"),
    "profile": ("kernelpro.profile", "profile a candidate with Nsight Compute and turn the metrics into advice"),
    "optimize": ("kernelpro.agent.optimize", "search for faster kernels: MCTS or greedy, with an LLM or the LLM-free policy"),
    "ablate": ("kernelpro.agent.ablate", "the search's ablations: feedback x strategy arms over tasks and seeds, "
               "resumable, with confidence intervals and paired tests"),
    "fixit": ("kernelpro.fixit", "export fine-tuning data from failed-then-fixed attempts, and train on it"),
    "report": ("kernelpro.report.html", "write a self-contained HTML report of one or more runs"),
}

console = Console(stderr=False)


def _tasks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", nargs="?", default="ptxbench", help="suite name or folder of task files (default ptxbench)")
    p.add_argument("--path", help="a KernelBench checkout (with `kernelbench` as the suite)")
    p.add_argument("--level", type=int, help="only tasks of this level")
    p.add_argument("--kb-tolerance", choices=("current", "v0"), default=None,
                   help="KernelBench: the tolerance the degenerate column is judged at (current 1e-4, v0 1e-2)")
    p.add_argument("--degenerate", choices=("check", "skip"), default="check",
                   help="KernelBench: probe every reference on the CPU for outputs that ignore its inputs and "
                        "parameters (cached; default check)")


def _tasks_main(args: argparse.Namespace) -> int:
    from kernelpro.suites.suite import get_suite, is_named
    from kernelpro.suites.task import load_suite, reference_solution
    from kernelpro.tables import Col, print_table

    deg: dict = {}
    if is_named(args.suite):
        tasks = get_suite(args.suite).tasks(path=args.path, level=args.level, tolerance=args.kb_tolerance)
        if args.degenerate == "check" and tasks and tasks[0].suite == "kernelbench":
            from kernelpro.suites.degenerate import check_tasks

            with console.status(f"probing {len(tasks)} references for degenerate outputs (CPU, cached)"):
                deg = check_tasks(tasks, tol=tasks[0].tolerance["atol"])
    else:
        if args.kb_tolerance not in (None, "current"):
            raise KernelProError("--kb-tolerance applies to KernelBench checkouts (`kernelpro tasks kernelbench --path`)")
        tasks = load_suite(args.suite)
    if args.level is not None:
        tasks = [t for t in tasks if t.level == args.level]
        if not tasks:
            raise KernelProError(f"{args.suite} has no level-{args.level} tasks; drop --level to list them all")
    # a FlashInfer-Trace definition's reference is its own run() (`--solutions reference` runs it)
    refs = {t.key: (t.path if t.suite == "flashinfer-trace" else
                    reference_solution(t) if t.suite != "kernelbench" else None) for t in tasks}
    n_ref = sum(p is not None for p in refs.values())
    cols = [Col("task", ident=True), Col("lvl"), Col("ref"), Col("dtype"), Col("baseline"), Col("sizes s/h"),
            Col("sm_90a features"), Col("sm_100a features")] + ([Col("degenerate (change)")] if deg else [])
    rows = [[t.name + (" *" if t.headline else ""), str(t.level), "yes" if refs[t.key] else "-", t.dtype, t.baseline,
             f"{len(t.shown_sizes)}/{len(t.heldout_sizes)}", ", ".join(t.requested_features("sm_90a")) or "-",
             ", ".join(t.requested_features("sm_100a")) or "-"] + ([_degenerate_cell(deg[t.key])] if deg else [])
            for t in tasks]
    print_table(console, f"{args.suite}: {len(tasks)} tasks, {n_ref} with a reference solution", cols, rows)
    if deg:
        hits = [t.name for t in tasks if deg[t.key].status == "degenerate"]
        unk = [t.name for t in tasks if deg[t.key].status == "not_checked"]
        from kernelpro.suites.kernelbench import tolerance_text

        console.print(f"tolerance: {tolerance_text(tasks[0], args.kb_tolerance)}; change = max |a-b|/(1+|b|) of the "
                      "reference's output across seeds, scaled inputs and perturbed parameters", markup=False)
        console.print(f"degenerate ({len(hits)}): {', '.join(hits) or 'none'}", markup=False, soft_wrap=True)
        if unk:
            console.print(f"not checked ({len(unk)}): " + "; ".join(f"{n}: {deg[t.key].detail}" for t in tasks
                          if (n := t.name) in unk), markup=False, soft_wrap=True)
    if any(t.headline for t in tasks):
        console.print("* headline task (PTXBench's published set)")
    if n_ref:
        console.print("ref: the suite ships a reference solution (`kernelpro bench SUITE --solutions reference` "
                      "runs those)", highlight=False)
    return 0


def _degenerate_cell(d: object) -> str:
    word = {"degenerate": "yes", "ok": "no", "not_checked": "not checked"}[d.status]
    return word + (f" ({d.change:.2g})" if d.change is not None else "")


def _doctor_arguments(p: argparse.ArgumentParser) -> None:
    pass


def _doctor_main(args: argparse.Namespace) -> int:
    from kernelpro.tables import Col, print_table
    from kernelpro.toolchain import doctor_rows

    rows = [[name, f"[green]{status}[/]" if status == "ok" else f"[yellow]{status}[/]", detail]
            for name, status, detail in doctor_rows()]
    print_table(console, f"kernelpro {__version__}: environment",
                [Col("component", ident=True), Col("status", inline=True), Col("detail", ident=True)], rows)
    return 0


LOCAL = {"tasks": (_tasks_arguments, _tasks_main), "doctor": (_doctor_arguments, _doctor_main)}


def _resolve(name: str) -> tuple[Callable | None, Callable | None, str | None]:
    """(add_arguments, main, reason-not-built) for a sub-command."""
    if name in LOCAL:
        return (*LOCAL[name], None)
    module = COMMANDS[name][0]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return None, None, f"`kernelpro {name}` is not built yet ({module} is missing)"
        raise
    add, main_fn = getattr(mod, "add_arguments", None), getattr(mod, "main", None)
    if add is None or main_fn is None:
        return None, None, f"`kernelpro {name}` is not built yet ({module} has no CLI entry)"
    return add, main_fn, None


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable | str]]:
    parser = argparse.ArgumentParser(
        prog="kernelpro",
        description="Benchmark and optimize LLM-written GPU kernels down to architecture-specific PTX.")
    parser.add_argument("--version", action="version", version=f"kernelpro {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="one stage of the pipeline (COMMAND --help)")
    handlers: dict[str, Callable | str] = {}
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--db", help="run store (SQLite file); default $KERNELPRO_DB or ~/.kernelpro/runs.db")
        add, main_fn, reason = _resolve(name)
        if reason:
            handlers[name] = reason
            continue
        add(p)
        handlers[name] = main_fn
    return parser, handlers


def _protocol_alias(argv: list[str]) -> list[str]:
    """`kernelpro bench [SUITE|TASK...] --protocol ptxbench ...` is PTXBench's multi-turn protocol, which
    lives with the agent: rewrite it as `kernelpro optimize TASK... --protocol ptxbench ...`. A suite name
    stands for its headline tasks, PTXBench's published set."""
    if not argv or argv[0] != "bench" or not any(a == "--protocol" or a.startswith("--protocol=") for a in argv):
        return argv
    from kernelpro.agent.optimize import add_arguments as optimize_arguments
    from kernelpro.suites.task import SUITES_DIR, load_suite

    probe = argparse.ArgumentParser(add_help=False)
    optimize_arguments(probe)
    # Flags that take no value, read off optimize's own parser, tell positionals from flag values.
    flag_only = {o for a in probe._actions if a.nargs == 0 for o in a.option_strings}
    out = ["optimize"]
    for i, a in enumerate(argv[1:], 1):
        prev = argv[i - 1]
        is_positional = not a.startswith("-") and not (prev.startswith("--") and "=" not in prev
                                                         and prev not in flag_only)
        if is_positional and (SUITES_DIR / a / "tasks").is_dir():
            out += [t.key for t in load_suite(a) if t.headline]
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(_protocol_alias(list(sys.argv[1:] if argv is None else argv)))
    if not args.command:
        parser.print_help()
        return 2
    handler = handlers[args.command]
    if isinstance(handler, str):
        print(f"kernelpro: {handler}", file=sys.stderr)
        return 2
    try:
        return int(handler(args) or 0)
    except KernelProError as e:
        # print, not rich: rich wraps long lines, and this must stay one line.
        print(f"kernelpro {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kernelpro {args.command}: interrupted; results so far are in the run store", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
