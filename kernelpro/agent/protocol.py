"""PTXBench's multi-turn refinement protocol, and its results table.

One *trajectory* = one conversation: the model writes a kernel, the tool results come back (compile
errors, correctness, anti-gaming flags, speedup, the missing-feature warning), the model revises; up
to `turns` turns, ending early once the target speedup is met with the required features. Trajectories
run for each prompt variant (hardware context documents on/off, pattern documents) x `repeats`.

Results follow PTXBench's aggregation (benchmark/aggregate_sass_metrics.py there): for a turn limit L,
a trajectory counts as `correct` if any of its first L turns is correct, as `correct_with_arch` if any
of them is correct AND its required instruction family was present in SASS AND executed (ncu); the
best speedup is the maximum over correct turns within the limit. Reported at L = 1, 4, 8.
Every turn (reply, candidate, verdict, feedback) is a node in the run store, so a run resumes.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.agent.evaluator import EvalOutcome, Evaluator
from kernelpro.agent.llm import BudgetExhausted, LLMClient
from kernelpro.agent.policy_llm import ENDPOINT_REASONS
from kernelpro.agent.prompts import PromptContext, build_messages, extract_code, missing_feature_warning
from kernelpro.results.store import Store
from kernelpro.suites.task import Task

# variant -> (hardware context documents, pattern documents)
VARIANTS: dict[str, tuple[bool, bool]] = {"base": (False, False), "hwdocs": (True, False),
                                          "hwdocs+patterns": (True, True)}
REPORT_TURNS = (1, 4, 8)


@dataclass
class ProtocolConfig:
    model: str
    arch: str = "sm_90a"
    turns: int = 8
    target_speedup: float = 1.2
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    repeats: int = 1
    report_turns: tuple[int, ...] = REPORT_TURNS
    max_endpoint_errors: int = 3
    workdir: Path = Path(".")


@dataclass
class Turn:
    task: str
    variant: str
    repeat: int
    turn: int                          # 1-based
    ok: bool = False
    correct: bool = False
    correct_with_arch: bool | None = None
    speedup: float | None = None
    verdict: str = ""
    target_met: bool = False
    candidate_id: int | None = None
    reply: str = ""
    feedback: str = ""
    endpoint_error: bool = False       # the endpoint failed this turn: redone on --resume


def feedback_text(o: EvalOutcome | None, reason: str, arch: str, target: float) -> tuple[str, bool]:
    """The tool-result message for the model after one turn, and whether the target is met."""
    if o is None:
        return f"Your reply could not be used: {reason}. Reply with the complete file in one ```python block.", False
    parts: list[str] = []
    met = False
    if o.stage == "compile":
        parts.append("Compilation failed:\n" + (o.compile_errors or o.reason)[-4000:])
    elif o.stage == "gaming":
        parts.append(f"Rejected: {o.reason}. The computation must run in your own kernels.")
    elif not o.ok:
        parts.append(f"The kernel is not usable ({o.stage or 'failed'}): {o.reason}"
                     + (f"\n{o.verify_errors}" if o.verify_errors else ""))
    else:
        sp = o.speedup
        if sp is None:
            parts.append("The kernel compiled and passed static checks (it was not timed on this machine).")
        elif sp >= target and not o.missing_features:
            met = True
            parts.append(f"Kernel is correct. Speedup {sp:.3f}x: target {target:.2f}x achieved.")
        else:
            parts.append(f"Kernel is correct. Speedup {sp:.3f}x (target {target:.2f}x). Keep optimizing.")
        if o.diagnoses:
            parts.append("Profiling diagnosis:\n" + o.diagnoses[:4000])
    warn = missing_feature_warning(arch, o.missing_features)
    if warn:
        parts.append(warn)
    if not met:
        parts.append("Reply with the complete revised file in one ```python block.")
    return "\n\n".join(parts), met


def is_correct(o: EvalOutcome | None) -> bool:
    # Correctness is a measured fact; a static-only evaluation (correct=None) never counts.
    return bool(o is not None and o.ok and o.correct)


class Protocol:
    def __init__(self, task: Task, client: LLMClient, evaluator: Evaluator, store: Store, run_id: int,
                 cfg: ProtocolConfig, hw_context: Any = None):
        self.task, self.client, self.evaluator = task, client, evaluator
        self.store, self.run_id, self.cfg = store, run_id, cfg
        self.hw_context = hw_context or (lambda arch, with_docs, with_patterns: "")
        self.cfg.workdir.mkdir(parents=True, exist_ok=True)
        self._endpoint_errors = 0

    def stored_turns(self) -> dict[tuple[str, int], list[Turn]]:
        out: dict[tuple[str, int], list[Turn]] = {}
        for r in self.store.nodes(self.run_id):
            t = Turn(**r["payload"]["turn"])
            if t.task == self.task.key:
                out.setdefault((t.variant, t.repeat), []).append(t)
        for v in out.values():
            v.sort(key=lambda t: t.turn)
        return out

    def run(self, on_turn: Any = None) -> tuple[list[Turn], str]:
        """All trajectories of this task; returns (turns, stop reason or '')."""
        done = self.stored_turns()
        turns: list[Turn] = []
        for variant in self.cfg.variants:
            for rep in range(self.cfg.repeats):
                prior = done.get((variant, rep), [])
                try:
                    turns += self.trajectory(variant, rep, prior, on_turn)
                except BudgetExhausted as e:
                    return turns + prior, f"LLM budget: {e}"
                if self._endpoint_errors >= self.cfg.max_endpoint_errors:
                    return turns, (f"LLM endpoint failed {self._endpoint_errors} times in a row; "
                                   f"resume with --resume {self.run_id}")
        return turns, ""

    def trajectory(self, variant: str, rep: int, prior: list[Turn], on_turn: Any = None) -> list[Turn]:
        docs, patterns = VARIANTS[variant]
        src = self.task.path.read_text()
        ctx = PromptContext(task=self.task, arch=self.cfg.arch, task_source=src,
                            hw_context=self.hw_context(self.cfg.arch, docs, patterns) if docs or patterns else "")
        messages = build_messages(ctx)
        while prior and prior[-1].endpoint_error:   # an outage must not cost the model its turns
            prior = prior[:-1]
        out = list(prior)
        for t in prior:   # resume: replay the stored conversation
            messages += [{"role": "assistant", "content": t.reply or "(no reply)"},
                         {"role": "user", "content": t.feedback}]
        if prior and (prior[-1].target_met or prior[-1].turn >= self.cfg.turns):
            return out
        for turn_no in range(len(prior) + 1, self.cfg.turns + 1):
            reply = self.client.chat(messages)
            turn = Turn(self.task.key, variant, rep, turn_no, reply=reply.text)
            outcome, reason = None, reply.reason
            if reply.ok:
                ex = extract_code(reply.text, truncated=reply.truncated)
                if ex.code:
                    path = self.cfg.workdir / f"{self.task.name}_{variant.replace('+', '_')}_r{rep}_t{turn_no}.py"
                    path.write_text(ex.code)
                    outcome = self.evaluator.evaluate(self.task, path)
                    turn.candidate_id = self.store.add_candidate(
                        self.run_id, self.task.key, ex.code, kind="py", origin="llm",
                        info={"protocol": "ptxbench", "variant": variant, "repeat": rep, "turn": turn_no,
                              "model": self.cfg.model, "reply": reply.text})  # Fixit's explanation source
                    if not outcome.recorded:
                        self.store.record("evaluations", turn.candidate_id, outcome.ok, outcome.to_payload(),
                                          arch=self.cfg.arch)
                else:
                    reason = ex.reason
                self._endpoint_errors = 0
            else:
                turn.endpoint_error = reason.startswith(ENDPOINT_REASONS)
                self._endpoint_errors = self._endpoint_errors + 1 if turn.endpoint_error else 0
            turn.feedback, turn.target_met = feedback_text(outcome, reason, self.cfg.arch, self.cfg.target_speedup)
            turn.ok = bool(outcome and outcome.ok)
            turn.correct = is_correct(outcome)
            turn.correct_with_arch = outcome.correct_with_arch if outcome else None
            turn.speedup = outcome.speedup if outcome else None
            turn.verdict = outcome.summary() if outcome else f"no candidate: {reason}"
            self.store.put_node(self.run_id, f"{self.task.key}/{variant}/r{rep}/t{turn_no}",
                                f"{self.task.key}/{variant}/r{rep}/t{turn_no - 1}" if turn_no > 1 else None,
                                turn.candidate_id, turn_no, 1, float(turn.correct), "open" if turn.ok else "failed",
                                {"turn": asdict(turn)})
            out.append(turn)
            if on_turn:
                on_turn(turn)
            if turn.target_met or self._endpoint_errors >= self.cfg.max_endpoint_errors:
                break
            messages = messages + [{"role": "assistant", "content": reply.text or "(no reply)"},
                                   {"role": "user", "content": turn.feedback}]
        return out


def aggregate(turns: list[Turn], model: str, arch: str, limits: tuple[int, ...] = REPORT_TURNS) -> list[dict[str, Any]]:
    """PTXBench's per-(model, task, turn limit) rows."""
    rows = []
    by_task: dict[str, dict[tuple[str, int], list[Turn]]] = {}
    for t in turns:
        by_task.setdefault(t.task, {}).setdefault((t.variant, t.repeat), []).append(t)
    for task, trajs in sorted(by_task.items()):
        for limit in limits:
            n = len(trajs)
            sel = {k: [t for t in v if t.turn <= limit] for k, v in trajs.items()}
            correct = sum(any(t.correct for t in v) for v in sel.values())
            cwa_known = any(t.correct and t.correct_with_arch is not None for v in sel.values() for t in v)
            cwa = sum(any(t.correct and t.correct_with_arch for t in v) for v in sel.values())
            speeds = [t.speedup for v in sel.values() for t in v if t.correct and t.speedup is not None]
            rows.append({"model": model, "arch": arch, "definition": task, "turn_limit": limit,
                         "n_trajectories": n, "correct": correct, "correctness_rate": correct / n if n else 0.0,
                         "correct_with_arch": cwa if cwa_known or not correct else None,
                         "best_speedup": max(speeds) if speeds else None})
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["model"])
        w.writeheader()
        w.writerows(rows)


def render_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="PTXBench protocol: per model, per task, after turns 1/4/8")
    for col in ("model", "task", "turns", "n", "correct", "correct_with_arch", "best speedup"):
        table.add_column(col, justify="left" if col in ("model", "task") else "right")
    for r in rows:
        cwa = "n/a" if r["correct_with_arch"] is None else f"{r['correct_with_arch']}/{r['n_trajectories']}"
        table.add_row(r["model"], r["definition"], f"<={r['turn_limit']}", str(r["n_trajectories"]),
                      f"{r['correct']}/{r['n_trajectories']}", cwa,
                      f"{r['best_speedup']:.3f}x" if r["best_speedup"] is not None else "-")
    return table


def dumps(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=1)
