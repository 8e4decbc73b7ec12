"""Print a suite's task list as a markdown table (from `load_suite`), or refresh it inside a README.

    python docs/measurements/recipes/list_tasks.py ptxbench                       # print the table
    python docs/measurements/recipes/list_tasks.py ptxbench --update kernelpro/suites/ptxbench/README.md

`--update` replaces the text between `<!-- tasks:begin -->` and `<!-- tasks:end -->`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from kernelpro.errors import KernelProError  # noqa: E402
from kernelpro.suites.task import Task, load_suite  # noqa: E402

BEGIN, END = "<!-- tasks:begin -->", "<!-- tasks:end -->"


def _size(size: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in size.items() if not isinstance(v, float))


def _sizes(task: Task, which: str) -> str:
    return "; ".join(_size(s) for s in (task.shown_sizes if which == "shown" else task.heldout_sizes))


def _tflop(task: Task) -> str:
    flops, _ = task.work()
    return f"{flops / 1e12:.2f}" if flops else "-"


def markdown_table(suite: str) -> str:
    tasks = load_suite(suite)
    rows = [
        "| task | level | dtype | headline | default size | TFLOP | shown sizes | held-out sizes | "
        "sm_90a features | sm_100a features | baseline |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in tasks:
        rows.append(
            f"| {t.name} | {t.level} | {t.dtype} | {'yes' if t.headline else ''} | {_size(t.default_size)} | "
            f"{_tflop(t)} | {_sizes(t, 'shown')} | {_sizes(t, 'heldout')} | "
            f"{', '.join(t.requested_features('sm_90a'))} | {', '.join(t.requested_features('sm_100a'))} | "
            f"{t.baseline} |")
    return "\n".join(rows) + "\n"


def update(path: Path, table: str) -> None:
    text = path.read_text()
    head, sep1, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep1 and sep2):
        raise KernelProError(f"{path}: needs '{BEGIN}' and '{END}' markers around the task table")
    path.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", nargs="?", default="ptxbench", help="suite name or folder of task files")
    ap.add_argument("--update", type=Path, metavar="README", help="rewrite the table inside this file")
    args = ap.parse_args(argv)
    try:
        table = markdown_table(args.suite)
        if args.update:
            update(args.update, table)
        else:
            sys.stdout.write(table)
    except KernelProError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
