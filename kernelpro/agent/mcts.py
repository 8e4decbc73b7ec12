"""Tree search over candidate kernels: a domain-adapted MCTS, plus the engine shared with greedy.

- Selection: UCT on log-scaled rewards (see evaluator.reward), with progressive widening: a node may
  have at most max(1, floor(c_pw * (visits+1)^alpha * (0.5 + Q))) children, so promising nodes
  (high mean reward Q) get more children than weak ones (asymmetric branching). A failed node may get
  one repair child when the policy can repair (the LLM can; parameter mutation cannot).
- Dead-end pruning: every node counts the failed expansions in its subtree since the last success;
  a subtree that fails `prune_after` times in a row is pruned (never the root or the best node).
- Persistence: every node (code, verdict, timings, diagnoses) goes to the run store as it is made,
  each write its own transaction, so `--resume RUN_ID` rebuilds the tree and continues the budget.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernelpro.agent.evaluator import EvalOutcome, Evaluator, objective_score, reward
from kernelpro.agent.llm import BudgetExhausted
from kernelpro.agent.memory import SearchMemory
from kernelpro.results.store import Store, source_hash
from kernelpro.suites.task import Task

Q_MAX_WEIGHT = 0.5


@dataclass
class Proposal:
    """One child proposed by a policy: a candidate source, or a failure with its reason."""
    source: str | None
    what: str = ""                       # one-line description of the change
    kind: str = "py"
    origin: str = "policy"
    info: dict[str, Any] = field(default_factory=dict)
    reason: str = ""                     # why source is None
    endpoint_error: bool = False         # the LLM endpoint failed (not the model's answer)
    exhausted: bool = False              # the policy has no new move from this parent


@dataclass
class ExpandContext:
    parent: Node
    best: Node | None
    memory: SearchMemory
    seen: set[str]                       # source hashes already in the tree
    rng: random.Random


class Policy(Protocol):
    name: str
    repairs: bool                        # may a failed node be expanded (repair its error)?

    def root(self, task: Task) -> Proposal | None: ...
    def propose(self, ctx: ExpandContext) -> Proposal: ...


@dataclass
class Node:
    key: str
    parent: str | None
    depth: int
    source: str | None
    what: str = ""
    kind: str = "py"
    origin: str = "policy"
    info: dict[str, Any] = field(default_factory=dict)
    outcome: EvalOutcome | None = None
    score: float | None = None
    visits: int = 0
    value: float = 0.0
    status: str = "open"                 # open | expanded | failed | pruned
    children: list[str] = field(default_factory=list)
    fail_streak: int = 0
    exhausted: bool = False
    candidate_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not None and self.outcome.ok

    best_r: float = 0.0                  # best reward in the subtree

    @property
    def mean(self) -> float:
        return self.value / self.visits if self.visits else 0.0

    @property
    def q(self) -> float:
        # Single-player, deterministic-ish rewards: what a subtree *can* reach matters more than its
        # average, so the exploitation term mixes the mean with the subtree's best reward.
        return (1 - Q_MAX_WEIGHT) * self.mean + Q_MAX_WEIGHT * self.best_r


@dataclass
class SearchConfig:
    strategy: str = "mcts"               # mcts | greedy
    budget_nodes: int = 20               # evaluated + failed expansions, root included
    budget_seconds: float | None = None
    objective: str = "speed"
    energy_weight: float = 0.5
    # energy / mix: a candidate more than this fraction slower than the start is penalised (None: no floor)
    max_slowdown: float | None = None
    c_uct: float = 0.4
    c_pw: float = 1.5
    alpha: float = 0.5
    prune_after: int = 3
    parallel: int = 1                    # expansions per batch (candidate builds overlap; timing is serial)
    max_endpoint_errors: int = 3
    seed: int = 0
    arch: str = "sm_90a"
    workdir: Path = Path(".")


@dataclass
class SearchResult:
    best: Node | None
    root: Node | None
    nodes: int
    failed: int
    pruned: int
    stop_reason: str
    elapsed_s: float
    interrupted: bool = False     # stopped by a failing LLM endpoint: the run can be resumed


class Search:
    def __init__(self, task: Task, policy: Policy, evaluator: Evaluator, store: Store, run_id: int,
                 config: SearchConfig, memory: SearchMemory | None = None,
                 on_progress: Callable[[Search], None] | None = None):
        self.task, self.policy, self.evaluator = task, policy, evaluator
        self.store, self.run_id, self.cfg = store, run_id, config
        self.memory = memory or SearchMemory()
        self.on_progress = on_progress
        self.nodes: dict[str, Node] = {}
        self.seen: set[str] = set()
        self.rng = random.Random(config.seed)
        self.started = time.monotonic()
        self.stop_reason = ""
        self.interrupted = False
        self._pending: dict[str, int] = {}
        self._reserved: set[str] = set()        # hashes proposed in the batch being made, not yet evaluated
        self._lock = threading.Lock()
        self._endpoint_errors = 0
        self.cfg.workdir.mkdir(parents=True, exist_ok=True)

    # -- bookkeeping -----------------------------------------------------------------------------
    @property
    def root(self) -> Node | None:
        return self.nodes.get("n0")

    @property
    def spent(self) -> int:
        """Nodes that cost an expansion (the reference root, never evaluated, costs nothing)."""
        return sum(1 for n in self.nodes.values() if n.origin != "reference")

    def best(self) -> Node | None:
        """The best working candidate by objective score; the reference baseline only if none works."""
        oks = [n for n in self.nodes.values() if n.ok and n.origin != "reference"]
        if not oks:
            return self.root if self.root is not None and self.root.ok else None
        return max(oks, key=lambda n: (n.score if n.score is not None else float("-inf"), -int(n.key[1:])))

    def speed_floor(self) -> float | None:
        """The slowest speedup an energy or mix objective accepts unpenalised: the start's, less max_slowdown."""
        r = self.root
        if self.cfg.max_slowdown is None or r is None or r.outcome is None or r.outcome.speedup is None:
            return None
        return r.outcome.speedup * (1 - self.cfg.max_slowdown)

    def seconds_left(self) -> float | None:
        b = self.cfg.budget_seconds
        return None if b is None else b - (time.monotonic() - self.started)

    def _next_key(self) -> str:
        return f"n{max((int(k[1:]) for k in self.nodes), default=-1) + 1}"

    def _save(self, n: Node) -> None:
        o = n.outcome
        payload = {
            "what": n.what, "kind": n.kind, "origin": n.origin, "info": n.info, "score": n.score,
            "fail_streak": n.fail_streak, "exhausted": n.exhausted,
            "outcome": o.to_payload() if o is not None else None,
        }
        if payload["outcome"] is not None:
            payload["outcome"].pop("record", None)  # the full record is in the evaluations table
        self.store.put_node(self.run_id, n.key, n.parent, n.candidate_id, n.depth, n.visits, n.value,
                            n.status, payload)

    # -- resume ----------------------------------------------------------------------------------
    def load(self) -> int:
        """Rebuild the tree of this run from the store; returns the number of nodes loaded."""
        rows = self.store.nodes(self.run_id)
        for r in rows:
            p = r["payload"]
            src = self.store.candidate(r["candidate_id"])["source"] if r["candidate_id"] else None
            o = EvalOutcome.from_payload(p["outcome"]) if p.get("outcome") else None
            n = Node(key=r["node_key"], parent=r["parent_key"], depth=r["depth"], source=src,
                     what=p.get("what", ""), kind=p.get("kind", "py"), origin=p.get("origin", "policy"),
                     info=p.get("info", {}), outcome=o, score=p.get("score"), visits=r["visits"],
                     value=r["value"], status=r["status"], fail_streak=p.get("fail_streak", 0),
                     exhausted=p.get("exhausted", False), candidate_id=r["candidate_id"])
            self.nodes[n.key] = n
            if src:
                self.seen.add(source_hash(src))
        for n in self.nodes.values():
            if n.parent in self.nodes:
                self.nodes[n.parent].children.append(n.key)
        for n in sorted(self.nodes.values(), key=lambda n: -n.depth):   # leaves first
            n.best_r = max([reward(n.score, n.ok)] + [self.nodes[c].best_r for c in n.children])
        for n in sorted(self.nodes.values(), key=lambda n: int(n.key[1:])):
            if n.key == "n0":
                continue
            verdict = n.outcome.summary() if n.outcome else (n.info.get("reason") or "failed")
            self.memory.add(n.key, n.parent, n.what, verdict, n.ok, n.score)
        return len(rows)

    # -- tree policy -----------------------------------------------------------------------------
    def max_children(self, n: Node) -> int:
        if not n.ok and n.origin != "reference":
            return 1 if self.policy.repairs else 0
        return max(1, math.floor(self.cfg.c_pw * (n.visits + 1) ** self.cfg.alpha * (0.5 + n.q)))

    def can_expand(self, n: Node) -> bool:
        if n.status == "pruned" or n.exhausted:
            return False
        return len(n.children) + self._pending.get(n.key, 0) < self.max_children(n)

    def _live_children(self, n: Node) -> list[Node]:
        return [self.nodes[c] for c in n.children if self.nodes[c].status != "pruned"]

    def _subtree_open(self, n: Node) -> bool:
        """Could a selection descending into n still find something to expand?"""
        if n.status == "pruned":
            return False
        if self.can_expand(n) or (not n.exhausted and (n.ok or n.origin == "reference")):
            return True
        return any(self._subtree_open(c) for c in self._live_children(n))

    def select_mcts(self) -> Node | None:
        n = self.root
        while n is not None:
            if self.can_expand(n):
                return n
            kids = [c for c in self._live_children(n) if self._subtree_open(c)]
            if not kids:
                # Widening limit reached and every child is closed: widen anyway if this node can grow.
                if not n.exhausted and (n.ok or n.origin == "reference") and n.status != "pruned":
                    return n
                return None
            total = max(1, sum(c.visits for c in kids))
            n = max(kids, key=lambda c: c.q + self.cfg.c_uct * math.sqrt(math.log(total + 1) / (c.visits + 1))
                    + 1e-9 * self.rng.random())
        return None

    def select(self) -> Node | None:
        if self.cfg.strategy == "greedy":
            return select_greedy(self)
        return self.select_mcts()

    # -- expansion -------------------------------------------------------------------------------
    def _propose(self, parent: Node) -> Proposal:
        # Proposals of one batch are made concurrently; each reserves its hash so that two of them (often
        # from the same parent) cannot be the same kernel, which would spend two nodes of budget on one.
        for _ in range(3):
            with self._lock:
                seen = self.seen | self._reserved
            ctx = ExpandContext(parent=parent, best=self.best(), memory=self.memory, seen=seen, rng=self.rng)
            prop = self.policy.propose(ctx)
            if prop.source is None:
                return prop
            h = source_hash(prop.source)
            with self._lock:
                if h not in self.seen and h not in self._reserved:
                    self._reserved.add(h)
                    return prop
        return Proposal(None, reason="policy repeated an existing candidate", exhausted=True)

    def _evaluate(self, prop: Proposal, key: str) -> EvalOutcome:
        suffix = {"py": ".py", "cu": ".cu", "ptx": ".ptx"}.get(prop.kind, ".py")
        path = self.cfg.workdir / f"{key}{suffix}"
        path.write_text(prop.source or "")
        try:
            return self.evaluator.evaluate(self.task, path)
        except Exception as e:  # noqa: BLE001 - an evaluator bug must not lose the tree
            return EvalOutcome(False, reason=f"evaluator error: {type(e).__name__}: {str(e)[:200]}", stage="crash")

    def _add(self, parent: Node | None, prop: Proposal, outcome: EvalOutcome | None) -> Node:
        key = self._next_key()
        n = Node(key=key, parent=parent.key if parent else None, depth=parent.depth + 1 if parent else 0,
                 source=prop.source, what=prop.what, kind=prop.kind, origin=prop.origin,
                 info=dict(prop.info))
        if prop.endpoint_error:
            n.info["endpoint_error"] = True
        if outcome is None:   # no candidate came back (LLM reply unusable)
            outcome = EvalOutcome(False, reason=prop.reason or "no candidate", stage="generate")
        n.outcome = outcome
        n.score = objective_score(outcome, self.cfg.objective, self.cfg.energy_weight, self.speed_floor())
        n.status = "open" if outcome.ok else "failed"
        if prop.source is not None:
            self.seen.add(source_hash(prop.source))
            n.candidate_id = self.store.add_candidate(
                self.run_id, self.task.key, prop.source, kind=prop.kind if prop.kind != "reference" else "py",
                origin=prop.origin, parent_id=parent.candidate_id if parent else None,
                info={"node": key, "what": prop.what, **prop.info})
            if not outcome.recorded and prop.origin != "reference":
                self.store.record("evaluations", n.candidate_id, outcome.ok, outcome.to_payload(), arch=self.cfg.arch)
        self.nodes[key] = n
        if parent is not None:
            parent.children.append(key)
            if parent.status == "open":
                parent.status = "expanded"
        self._backprop(n, reward(n.score, outcome.ok))
        if parent is not None:
            self.memory.add(key, parent.key, prop.what, outcome.summary(), outcome.ok, n.score)
        return n

    def _backprop(self, n: Node, r: float) -> None:
        best = self.best()
        cur: Node | None = n
        # An endpoint outage says nothing about the subtree, so it does not count towards pruning.
        failed = not n.ok and not n.info.get("endpoint_error")
        streak_changes = n.ok or failed
        while cur is not None:
            cur.visits += 1
            cur.value += r
            cur.best_r = max(cur.best_r, r)
            if cur is not n and streak_changes:
                cur.fail_streak = cur.fail_streak + 1 if failed else 0
                if (cur.fail_streak >= self.cfg.prune_after and cur.parent is not None
                        and cur is not best and cur.status != "pruned"):
                    cur.status = "pruned"
            self._save(cur)
            cur = self.nodes.get(cur.parent) if cur.parent else None

    # -- main loop -------------------------------------------------------------------------------
    def _out_of_budget(self) -> str:
        if self.spent >= self.cfg.budget_nodes:
            return f"node budget spent ({self.cfg.budget_nodes})"
        left = self.seconds_left()
        if left is not None and left <= 0:
            return f"time budget spent ({self.cfg.budget_seconds:.0f}s)"
        return ""

    def init_root(self) -> None:
        if self.root is not None:
            return
        prop = self.policy.root(self.task)
        if prop is None:
            raise ValueError("policy gave no root")
        if prop.origin == "reference":
            outcome = EvalOutcome(True, speedup=1.0, stage="reference", reason="the task's reference (baseline)")
        else:
            outcome = self._evaluate(prop, "n0")
        self._add(None, prop, outcome)
        if self.on_progress:
            self.on_progress(self)

    def run(self) -> SearchResult:
        try:
            self.init_root()
            while not (reason := self._out_of_budget()):
                batch = self._select_batch(min(self.cfg.parallel, self.cfg.budget_nodes - self.spent))
                if not batch:
                    self.stop_reason = "search space exhausted (every subtree closed or pruned)"
                    break
                if self._expand_batch(batch):
                    break
            else:
                self.stop_reason = reason
        except BudgetExhausted as e:
            self.stop_reason = f"LLM budget: {e}"
        best = self.best()
        return SearchResult(best=best, root=self.root, nodes=len(self.nodes),
                            failed=sum(1 for n in self.nodes.values() if not n.ok),
                            pruned=sum(1 for n in self.nodes.values() if n.status == "pruned"),
                            stop_reason=self.stop_reason, elapsed_s=time.monotonic() - self.started,
                            interrupted=self.interrupted)

    def _select_batch(self, k: int) -> list[Node]:
        picked: list[Node] = []
        for _ in range(max(1, k)):
            n = self.select()
            if n is None:
                break
            picked.append(n)
            self._pending[n.key] = self._pending.get(n.key, 0) + 1   # virtual child for the next pick
        return picked

    def _expand_batch(self, parents: list[Node]) -> bool:
        """Propose (concurrently), evaluate (serially), integrate. Returns True when the search must stop."""
        try:
            if len(parents) == 1:
                props = [self._propose(parents[0])]
            else:
                with ThreadPoolExecutor(len(parents)) as ex:
                    props = list(ex.map(self._propose, parents))
        finally:
            self._pending.clear()
            self._reserved.clear()
        prepare = getattr(self.evaluator, "prepare", None)
        if prepare is not None and len(props) > 1:
            # Builds overlap; the extension cache makes the serial evaluation below a cache hit.
            paths = []
            for i, p in enumerate(props):
                if p.source is not None:
                    path = self.cfg.workdir / f"prepare_{source_hash(p.source)[:12]}_{i}.py"
                    path.write_text(p.source)
                    paths.append(path)
            if paths:
                with ThreadPoolExecutor(len(paths)) as ex:
                    list(ex.map(lambda pth: prepare(self.task, pth), paths))
        for parent, prop in zip(parents, props, strict=True):
            if prop.source is None and prop.exhausted:
                parent.exhausted = True
                self._save(parent)
                continue
            outcome = self._evaluate(prop, self._next_key()) if prop.source is not None else None
            self._add(parent, prop, outcome)
            self._endpoint_errors = self._endpoint_errors + 1 if prop.endpoint_error else 0
            if self.on_progress:
                self.on_progress(self)
            if self._endpoint_errors >= self.cfg.max_endpoint_errors:
                self.stop_reason = (f"LLM endpoint failed {self._endpoint_errors} times in a row "
                                    f"({prop.reason}); resume later with --resume {self.run_id}")
                self.interrupted = True
                return True
            if self._out_of_budget():
                break
        return False


# Greedy baseline: always expand the best kernel found so far (hill climbing). It shares the engine,
# persistence and budgets with MCTS (Search(strategy='greedy')), so the two are compared on exactly the
# same node budget. When the best node has no new move left, the next best is expanded; a failed parent
# is never refined (greedy does not repair).
def select_greedy(search: Search) -> Node | None:
    ranked = sorted((n for n in search.nodes.values()
                     if (n.ok or n.origin == "reference") and not n.exhausted and n.status != "pruned"),
                    key=lambda n: (n.score if n.score is not None else float("-inf"), -int(n.key[1:])),
                    reverse=True)
    return ranked[0] if ranked else None
