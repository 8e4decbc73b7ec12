"""The job a worker runs: one typed record, built with `Job(...)` by every producer (bench, compare,
the agent's evaluator, the corpus) and parsed from the worker's JSON with `Job.from_dict`, which rejects
unknown keys, so a misspelt or retired option is an error instead of a silently ignored one.

`EvalConfig` is the part the in-process evaluator reads; `Job` adds what the parent and the worker
process need (identity for records, wall-clock limit, memory caps).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kernelpro.errors import KernelProError

SIZES = ("default", "shown", "heldout", "all")
RIVAL_KEYS = {"label", "path", "ext_dir"}


@dataclass(frozen=True)
class EvalConfig:
    task_path: str
    candidate_path: str
    task_suite: str | None = None
    device: str = "cuda"
    sizes: str = "all"           # which of the task's sizes to check: default | shown | heldout | all
    trials: int = 3              # fresh seeds per size (alternating orders)
    timing: bool = True
    baselines: tuple[str, ...] = ("eager",)
    graphs: bool = False
    energy: bool = True          # joules per call from NVML beside every GPU timing (opt out)
    # Timing protocols (kernelpro.harness.timing), the first is the headline: interleaved for A/B
    # (compare, the search), isolated first for suite figures (bench).
    protocols: tuple[str, ...] = ("interleaved",)
    windows: int = 4             # isolated: windows per function, alternated A B A B
    steady: bool = True          # warm up until SM clock and power settle before timing
    ceilings: dict[str, float] = field(default_factory=dict)
    warmup_ms: float = 25.0
    rep_ms: float = 200.0
    async_wait_s: float = 0.05   # CPU: how long to watch an output for late writes
    check_only: bool = False     # sanitizer runs: one trial per size, no timing
    # Other candidates timed in the same interleaved loop (`kernelpro compare`): [{"label", "path", "ext_dir"}].
    rivals: tuple[dict[str, str], ...] = ()
    # KernelBench tasks: which of its tolerance rules judges them, "current" (fp32 1e-4) or "v0" (1e-2).
    kb_tolerance: str = "current"
    # The named evaluation profile (kernelpro.harness.profiles): KernelPro's own, or PTXBench's tolerance
    # and timing schedule; recorded in every result.
    profile: str = "kernelpro"

    def __post_init__(self) -> None:
        # The worker runs in its own folder: relative paths would point nowhere there.
        for name in ("task_path", "candidate_path"):
            object.__setattr__(self, name, os.path.abspath(getattr(self, name)))
        if self.sizes not in SIZES:
            raise KernelProError(f"job: sizes={self.sizes!r} is not one of {', '.join(SIZES)}")
        if isinstance(self.baselines, str) or not all(isinstance(b, str) for b in self.baselines):
            raise KernelProError(f"job: baselines must be a list of names, not {self.baselines!r}")
        object.__setattr__(self, "baselines", tuple(self.baselines))
        if isinstance(self.protocols, str) or not self.protocols or any(
                p not in ("interleaved", "isolated", "ptxbench") for p in self.protocols) or len(set(self.protocols)) != len(self.protocols):
            raise KernelProError(f"job: protocols must name interleaved, isolated or ptxbench once each, not {self.protocols!r}")
        object.__setattr__(self, "protocols", tuple(self.protocols))
        if self.windows < 1:
            raise KernelProError(f"job: windows must be at least 1, not {self.windows}")
        for r in self.rivals:
            if set(r) != RIVAL_KEYS:
                raise KernelProError(f"job: a rival needs exactly the keys {sorted(RIVAL_KEYS)}, got {sorted(r)}")
        object.__setattr__(self, "rivals", tuple(dict(r) for r in self.rivals))
        if self.kb_tolerance not in ("current", "v0"):
            raise KernelProError(f"job: kb_tolerance={self.kb_tolerance!r} is not one of current, v0")
        from kernelpro.harness.profiles import PROFILES

        if self.profile not in PROFILES:
            raise KernelProError(f"job: profile={self.profile!r} is not one of {', '.join(PROFILES)}")
        if self.trials < 1:
            raise KernelProError(f"job: trials must be at least 1, not {self.trials}")


@dataclass(frozen=True)
class Job(EvalConfig):
    task_key: str | None = None
    candidate_hash: str | None = None
    timeout_s: float | None = None      # wall-clock limit of the worker (None: the caller's default)
    mem_fraction: float = 0.9           # of the GPU's memory, through PyTorch's allocator
    cpu_mem_limit_gb: float | None = None
    preimport_dynamo: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        """The one parser of a job record (the worker's JSON, a stored run's jobs)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KernelProError(f"job: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        missing = [k for k in ("task_path", "candidate_path") if k not in d]
        if missing:
            raise KernelProError(f"job: missing {', '.join(missing)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["baselines"] = list(self.baselines)
        d["protocols"] = list(self.protocols)
        d["rivals"] = [dict(r) for r in self.rivals]
        return d

    def eval_config(self) -> EvalConfig:
        return EvalConfig(**{f.name: getattr(self, f.name) for f in fields(EvalConfig)})
