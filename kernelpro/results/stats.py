"""Small statistics for ablation studies: percentile-bootstrap confidence intervals and an exact paired
sign test. Pure Python on purpose: scipy is not a dependency of KernelPro, so the paired test is the
exact two-sided sign test (binomial, ties dropped), which needs no distributional assumption about
speedup differences; a study says which test it used."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PAIRED_TEST = "exact two-sided sign test (binomial, ties dropped; scipy is not a dependency)"


def bootstrap_ci(values: Sequence[float], stat: Callable[[Sequence[float]], float] = statistics.median,
                 level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `stat` over `values` (None for no values; a point for one)."""
    xs = [float(v) for v in values]
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0], xs[0]
    rng = random.Random(seed)
    boots = sorted(stat([xs[rng.randrange(len(xs))] for _ in xs]) for _ in range(resamples))
    lo = boots[int(math.floor((1 - level) / 2 * (resamples - 1)))]
    hi = boots[int(math.ceil((1 + level) / 2 * (resamples - 1)))]
    return lo, hi


@dataclass(frozen=True)
class PairedTest:
    n: int              # pairs with a difference (ties excluded)
    wins: int           # pairs where a > b
    losses: int
    ties: int
    p: float | None     # two-sided; None without a non-tied pair
    method: str = PAIRED_TEST


def sign_test(a: Sequence[float], b: Sequence[float], rel_tol: float = 0.0) -> PairedTest:
    """Exact two-sided sign test of paired samples: P(|wins - n/2| at least as extreme) under p = 1/2.
    Pairs within `rel_tol` of each other (relative) count as ties."""
    if len(a) != len(b):
        raise ValueError("paired samples must have the same length")
    wins = losses = ties = 0
    for x, y in zip(a, b, strict=True):
        if math.isclose(x, y, rel_tol=rel_tol, abs_tol=0.0) or x == y:
            ties += 1
        elif x > y:
            wins += 1
        else:
            losses += 1
    n = wins + losses
    if n == 0:
        return PairedTest(0, 0, 0, ties, None)
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return PairedTest(n, wins, losses, ties, min(1.0, 2 * tail))
