"""Suite metrics: compile rate, correctness rate, feature-use rate, fast_p, geometric-mean speedup.

Definitions (KernelBench's fast_p, PTXBench's feature-use rate):
- compile rate: candidates that compiled / candidates evaluated.
- correct rate: candidates that passed every correctness and anti-gaming check / candidates evaluated.
- feature-use rate: candidates whose static verification found every requested feature / candidates
  verified (for one arch).
- correct_with_arch rate (PTXBench): candidates correct AND whose requested SASS families are present AND
  executed (ncu counts > 0) / candidates judged (no ncu evidence: unjudged, never a pass).
- fast_p: candidates that are correct AND more than p times faster than the baseline / all candidates.
- geomean speedup: over correct candidates with a timing, of baseline_time / max(candidate_time, floor),
  where floor is the task's roofline time (max(FLOPs/peak, bytes/bandwidth)). The floor keeps one absurd
  timing (a bug, a clock glitch, a result cached by a mechanism we did not catch) from dominating the mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """What the metrics need from one candidate of one task."""

    task: str
    compiled: bool | None = None       # None: not attempted
    correct: bool | None = None
    features_ok: bool | None = None
    candidate_ms: float | None = None
    baseline_ms: dict[str, float] = field(default_factory=dict)
    floor_ms: float | None = None
    correct_with_arch: bool | None = None   # PTXBench: correct + requested SASS present + executed (ncu)
    degenerate: bool = False                # the task's reference ignores its inputs: no speedup counts

    def speedup(self, baseline: str) -> float | None:
        return floored_speedup(self.baseline_ms.get(baseline), self.candidate_ms, self.floor_ms)


def floored_speedup(base_ms: float | None, cand_ms: float | None, floor_ms: float | None) -> float | None:
    if not base_ms or not cand_ms or base_ms <= 0 or cand_ms <= 0:
        return None
    return base_ms / max(cand_ms, floor_ms or 0.0)


def _rate(values: list[bool | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return sum(seen) / len(seen) if seen else None


def fast_p(outcomes: list[Outcome], p: float, baseline: str) -> float | None:
    if not outcomes:
        return None
    hits = 0
    for o in outcomes:
        s = o.speedup(baseline)
        hits += bool(o.correct and s is not None and s > p)
    return hits / len(outcomes)


def geomean_speedup(outcomes: list[Outcome], baseline: str) -> tuple[float | None, int]:
    """(geometric mean, number of candidates it is over)."""
    logs = [math.log(s) for o in outcomes if o.correct and (s := o.speedup(baseline)) is not None]
    return (math.exp(sum(logs) / len(logs)) if logs else None), len(logs)


def summarize(outcomes: list[Outcome], baseline: str = "eager", ps: tuple[float, ...] = (1.0, 1.2)) -> dict[str, Any]:
    judged = [o for o in outcomes if o.correct is not None]
    kept = [o for o in outcomes if not o.degenerate]
    gm, n_gm = geomean_speedup(kept, baseline)
    gm_all, n_all = geomean_speedup(outcomes, baseline)
    return {
        "n": len(outcomes),
        "baseline": baseline,
        "compile_rate": _rate([o.compiled for o in outcomes]),
        "correct_rate": _rate([o.correct if o.compiled is not None else None for o in outcomes]),
        "feature_rate": _rate([o.features_ok for o in outcomes]),
        "correct_with_arch_rate": _rate([o.correct_with_arch for o in outcomes]),
        "fast_p": {f"{p:g}": fast_p([o for o in judged if not o.degenerate], p, baseline) for p in ps},
        "geomean_speedup": gm,
        "geomean_n": n_gm,
        "degenerate_n": sum(o.degenerate for o in outcomes),
        "with_degenerate": {"fast_p": {f"{p:g}": fast_p(judged, p, baseline) for p in ps},
                            "geomean_speedup": gm_all, "geomean_n": n_all},
    }


def per_task(outcomes: list[Outcome], baseline: str = "eager", ps: tuple[float, ...] = (1.0, 1.2)) -> dict[str, dict[str, Any]]:
    by: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by.setdefault(o.task, []).append(o)
    return {t: summarize(v, baseline, ps) for t, v in sorted(by.items())}


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"
