"""Terminal progress for a search (tree size, best so far, budget left) and the final summary."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from kernelpro.agent.mcts import Node, Search, SearchResult


def _fmt(x: float | None, unit: str = "x") -> str:
    return "-" if x is None else f"{x:.3f}{unit}"


class Progress:
    """A live status table; falls back to one line per node when the terminal is not interactive."""

    def __init__(self, console: Console | None = None, llm: Any = None, enabled: bool = True):
        self.console = console or Console()
        self.llm = llm
        self.enabled = enabled
        self.live: Live | None = None

    def __enter__(self) -> Progress:
        if self.enabled and self.console.is_terminal:
            self.live = Live(Table(), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def status(self, s: Search) -> Table:
        best = s.best()
        t = Table(title=f"kernelpro optimize {s.task.key} ({s.cfg.strategy}, run {s.run_id})", show_header=False)
        t.add_column("k")
        t.add_column("v")
        failed = sum(1 for n in s.nodes.values() if not n.ok)
        pruned = sum(1 for n in s.nodes.values() if n.status == "pruned")
        t.add_row("tree", f"{len(s.nodes)} nodes ({failed} failed, {pruned} pruned), depth "
                          f"{max((n.depth for n in s.nodes.values()), default=0)}")
        t.add_row("best", f"{_fmt(best.score if best else None)} [{best.key if best else '-'}] "
                          f"{best.what[:60] if best else ''}")
        left = s.seconds_left()
        budget = f"{s.cfg.budget_nodes - s.spent} nodes"
        if left is not None:
            budget += f", {max(0, left):.0f}s"
        if self.llm is not None:
            u, b = self.llm.usage, self.llm.budget
            budget += f", {u.tokens} tokens used" + (f" of {b.max_tokens}" if b.max_tokens else "")
            if u.cost_usd:
                budget += f" (${u.cost_usd:.2f})"
        t.add_row("budget left", budget)
        t.add_row("elapsed", f"{time.monotonic() - s.started:.0f}s")
        return t

    def __call__(self, s: Search) -> None:
        if not self.enabled:
            return
        if self.live is not None:
            self.live.update(self.status(s))
            return
        last = s.nodes[f"n{max(int(k[1:]) for k in s.nodes)}"]
        best = s.best()
        verdict = last.outcome.summary() if last.outcome else "?"
        self.console.print(f"[{len(s.nodes)}/{s.cfg.budget_nodes}] {last.key} <- {last.parent or '-'}: "
                           f"{last.what[:70]} -> {verdict[:90]} | best {_fmt(best.score if best else None)}",
                           markup=False, highlight=False)


def static_only_line(reason: str | None, arch: str) -> str:
    """Said before a search whose evaluator can only compile and verify: what it checks, what it cannot."""
    why = f"no GPU ({reason})" if reason else "static evaluator"
    return (f"{why}: nothing can be timed or run for correctness, so no node is ranked by speed; each variant "
            f"is compiled for {arch} and its requested features are verified in PTX and SASS")


def static_summary(s: Search, res: SearchResult) -> str:
    """The end of a static-only search: which variants compiled and verified, none called best."""
    ok = [n.key for n in s.nodes.values() if n.ok]
    return (f"{s.task.key}: {s.cfg.strategy} search, run {s.run_id}, static checks only: {len(ok)} of {res.nodes} "
            f"variants compiled and verified ({', '.join(ok) or 'none'}); not timed, so none is named best; "
            f"stopped: {res.stop_reason}")


def summary_table(s: Search, res: SearchResult, objective: str) -> Table:
    t = Table(title=f"{s.task.key}: {s.cfg.strategy} search, objective {objective}, run {s.run_id}")
    for col in ("", "node", "speedup", "energy/call", "energy ratio", "change"):
        t.add_column(col)

    def row(label: str, n: Node | None) -> None:
        if n is None:
            t.add_row(label, "-", "-", "-", "-", "-")
            return
        o = n.outcome
        e = o.energy_j if o else None
        ratio = o.baseline_energy_j / e if o and e and o.baseline_energy_j else None
        t.add_row(label, n.key, _fmt(o.speedup if o else None), "-" if e is None else f"{e * 1e3:.3f} mJ",
                  _fmt(ratio), n.what[:70])

    row("start", res.root)
    row("best", res.best)
    t.caption = (f"{res.nodes} nodes, {res.failed} failed, {res.pruned} pruned, {res.elapsed_s:.0f}s; "
                 f"stopped: {res.stop_reason}")
    return t
