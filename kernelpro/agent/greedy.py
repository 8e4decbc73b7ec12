"""Greedy baseline: always expand the best kernel found so far (hill climbing).

Shares the engine, persistence and budgets with MCTS (mcts.Search with strategy='greedy'), so the two
are compared on exactly the same node budget. When the best node has no new move left, the next best
is expanded; a failed parent is never refined (greedy does not repair).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .mcts import Node, Search


def select_greedy(search: Search) -> Node | None:
    ranked = sorted((n for n in search.nodes.values()
                     if (n.ok or n.origin == "reference") and not n.exhausted and n.status != "pruned"),
                    key=lambda n: (n.score if n.score is not None else float("-inf"), -int(n.key[1:])),
                    reverse=True)
    return ranked[0] if ranked else None
