"""Search memory: a compact running log of what was tried, what worked and what failed, and why.

Fed to every expansion so the model (or the parameter policy) does not repeat a dead end. Compact on
purpose: recurring failures are folded into counted lessons, and only the most recent and the best
attempts are listed verbatim, under a character cap.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Attempt:
    node: str
    parent: str | None
    what: str              # one line: the change tried
    verdict: str           # 'ok 1.12x' / 'compile: ...' / 'correctness: ...'
    ok: bool
    score: float | None = None


def _norm_reason(verdict: str) -> str:
    """Fold a failure verdict into a lesson key: numbers, paths and identifiers-with-digits removed."""
    v = re.sub(r"/\S+", "<path>", verdict)
    v = re.sub(r"\b\w*\d+\w*\b", "#", v)
    return re.sub(r"\s+", " ", v).strip()[:120]


@dataclass
class SearchMemory:
    attempts: list[Attempt] = field(default_factory=list)
    max_chars: int = 3000
    recent: int = 8

    def add(self, node: str, parent: str | None, what: str, verdict: str, ok: bool,
            score: float | None = None) -> None:
        self.attempts.append(Attempt(node, parent, what.strip().splitlines()[0][:160] if what.strip() else "?",
                                     verdict.strip().splitlines()[0][:200] if verdict.strip() else "?",
                                     ok, score))

    def tried(self) -> set[str]:
        return {a.what for a in self.attempts}

    def render(self) -> str:
        if not self.attempts:
            return ""
        ok = [a for a in self.attempts if a.ok]
        failed = [a for a in self.attempts if not a.ok]
        lines = [f"{len(self.attempts)} attempts: {len(ok)} worked, {len(failed)} failed."]
        scored = sorted((a for a in ok if a.score is not None), key=lambda a: -a.score)
        if scored:
            lines.append("Best so far: " + "; ".join(f"[{a.node}] {a.what} -> {a.verdict}" for a in scored[:3]))
        lessons = Counter(_norm_reason(a.verdict) for a in failed)
        repeated = [(k, n) for k, n in lessons.most_common(5) if n > 1]
        if repeated:
            lines.append("Recurring failures (avoid): " + "; ".join(f"{k} (x{n})" for k, n in repeated))
        lines.append("Recent:")
        for a in self.attempts[-self.recent:]:
            lines.append(f"- [{a.node}] {a.what} -> {a.verdict}")
        text = "\n".join(lines)
        return text if len(text) <= self.max_chars else text[: self.max_chars - 12] + "\n...[cut]"
