"""Named evaluation profiles: how correctness is judged and how time is taken, chosen per run
(`kernelpro bench --profile NAME`) and recorded in every result, so a number taken as PTXBench defines it
can stand beside KernelPro's own in one table.

- `kernelpro` (the default): each task's own tolerance (META, or KernelPro's by dtype: elementwise
  allclose plus a norm-relative bound) and KernelPro's timing, isolated headline with interleaved beside
  it, each after a steady-state warm-up.
- `ptxbench`: PTXBench's defaults (FlashInfer-Bench's evaluator, read not copied): atol = rtol = 1e-2
  where an element is wrong only when |x-y| > atol AND |x-y|/(|y|+1e-8) > rtol, every element must pass,
  no norm check; timing by `timing`'s `ptxbench` protocol (10 warm-ups, 3 trials x 50 calls, L2 flushed
  before each call, median per trial, mean over trials). Every anti-gaming check still applies.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from kernelpro.errors import KernelProError


@dataclass(frozen=True)
class Profile:
    name: str
    tolerance: dict[str, Any] | None        # replaces the task's tolerance; None keeps it
    protocols: tuple[str, ...]              # timing protocols, the first is the headline
    steady: bool                            # settle clocks and power before timing
    description: str


PTXBENCH_TOLERANCE: dict[str, Any] = {"atol": 1e-2, "rtol": 1e-2, "rel_norm": math.inf, "elementwise": "abs_and_rel"}

PROFILES: dict[str, Profile] = {
    "kernelpro": Profile("kernelpro", None, ("isolated", "interleaved"), True,
                         "the task's tolerance; isolated timing after a steady-state warm-up"),
    "ptxbench": Profile("ptxbench", PTXBENCH_TOLERANCE, ("ptxbench",), False,
                        "atol=rtol=1e-2 (wrong where both are exceeded); 10 warm-ups, 3 trials x 50 calls, cold L2, "
                        "median per trial, mean over trials"),
}


def get_profile(name: str | None) -> Profile:
    """The profile by name (None: kernelpro); a one-line error naming the choices."""
    p = PROFILES.get(name or "kernelpro")
    if p is None:
        raise KernelProError(f"--profile {name!r}: choose {' or '.join(PROFILES)}")
    return p


def apply(task: Any, name: str | None) -> Any:
    """`task` as the profile judges it (its tolerance replaced where the profile names one)."""
    p = get_profile(name)
    return task if p.tolerance is None else dataclasses.replace(task, tolerance=dict(p.tolerance))


def tolerance_text(tol: dict[str, Any]) -> str | None:
    """The profile's own wording of a tolerance it set, None for a task's own."""
    if tol.get("elementwise") != "abs_and_rel":
        return None
    return (f"atol=rtol={tol['atol']:g}, an element wrong only where both are exceeded, no norm check "
            "(PTXBench)")
