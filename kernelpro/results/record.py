"""The worker's result record: what one evaluation of one candidate found, as one typed, versioned record.

Produced by the harness (`harness.worker.run_job`, its `failure_record`) and read by every consumer
(bench's table, `comparison.add_round`, the agent's `outcome_from_record`, `facts.candidate_facts`).
It lives here, below the harness, because the read-model parses stored payloads with it. Stored
payloads stay JSON (`to_dict`); `from_dict` is the one parser and rejects unknown top-level keys, so a
key no stage writes is an error instead of something a reader guesses at. Nested measurement records
(`timing`, `checks`, `correctness`, `energy`, `work`, `worker`) stay dicts inside typed fields.

Schema history: 1 = the first stored records (same keys, no `build`); 2 = adds `build` (the CPU build
stage's record of the shared extension build the worker loaded).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kernelpro.errors import KernelProError

RESULT_SCHEMA = 2
# timing["observed"]["kernel_names"] keeps at most this many names; a list this long may be cut, and a
# consumer comparing kernels across processes must not judge on it.
KERNEL_NAMES_KEPT = 20
READABLE_SCHEMAS = (1, 2)


@dataclass(frozen=True)
class Result:
    candidate: str                      # the candidate file the worker evaluated
    device: str
    ok: bool                            # no failed check
    status: str = "failed"              # passed | failed
    reason: str | None = None           # the first failed check
    detail: str = ""
    compiled: bool = False
    correct: bool = False
    correct_shown: bool | None = None
    correct_heldout: bool | None = None
    checks: list[dict[str, Any]] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    correctness: list[dict[str, Any]] = field(default_factory=list)    # per-trial records
    task: str | None = None
    task_key: str | None = None
    schema: int = RESULT_SCHEMA
    compile_s: float | None = None
    wall_s: float | None = None
    phases: dict[str, float] | None = None              # wall seconds per evaluation stage (import, ...)
    dtype: str | None = None
    precision: Any = None
    gpu: str | None = None
    torch: str | None = None
    evaluator_traceback: str | None = None
    timing: dict[str, Any] | None = None                # {"size", "stats": {name: {"median_ms", ...}}, "notes"}
    speedup: dict[str, float] = field(default_factory=dict)    # baseline -> baseline ms / candidate ms
    tolerance: dict[str, Any] | None = None             # atol, rtol and the rule they came from
    profile: str | None = None                          # the evaluation profile (kernelpro | ptxbench)
    reference_change: dict[str, float] | None = None    # per size: the reference's max move between draws
    protocols: dict[str, Any] | None = None             # {protocol: its timing run} (interleaved, isolated)
    rivals: dict[str, Any] | None = None
    energy: dict[str, Any] | None = None
    work: dict[str, Any] | None = None                  # {"tflops", "gbps", "floor_ms", ...}
    source_warnings: list[Any] = field(default_factory=list)
    worker: dict[str, Any] | None = None                # rc, wall, timeout, gpu, log tail, isolation
    build: dict[str, Any] | None = None                 # the shared build the worker used (schema 2)
    memory: dict[str, Any] | None = None                # the worker's peaks: gpu_peak_bytes, rss_peak_bytes
    # What the consumer that stored the record says about it:
    mode: str | None = None                             # "sanitizer:<tool>" for a sanitizer pass
    compare_run: int | None = None
    compare_round: int | None = None
    compare_label: str | None = None
    executed_evidence: dict[str, Any] | None = None     # the search's ncu pass (correct_with_arch)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        """The one parser of a worker result (the worker's JSON file, a stored evaluation payload)."""
        if not isinstance(d, dict):
            raise KernelProError(f"result record: expected a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise KernelProError(f"result record: unknown key(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
        schema = d.get("schema", RESULT_SCHEMA)
        if schema not in READABLE_SCHEMAS:
            raise KernelProError(f"result record: schema {schema!r} not readable by this kernelpro "
                                 f"(reads {READABLE_SCHEMAS}); upgrade kernelpro")
        missing = [k for k in ("candidate", "device", "ok") if k not in d]
        if missing:
            raise KernelProError(f"result record: missing {', '.join(missing)}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_(self, **changes: Any) -> Result:
        """A copy with `changes` (validated like a parsed record)."""
        return Result.from_dict({**self.to_dict(), **changes})

    # -- what consumers read ----------------------------------------------------------------------
    @property
    def passed(self) -> bool:
        """Evaluated, correct and no failed check."""
        return bool(self.ok) and bool(self.correct)

    @property
    def stats(self) -> dict[str, dict[str, Any]]:
        return dict((self.timing or {}).get("stats") or {})

    @property
    def candidate_ms(self) -> float | None:
        return (self.stats.get("candidate") or {}).get("median_ms")

    def median_ms(self, name: str) -> float | None:
        return (self.stats.get(name) or {}).get("median_ms")

    @property
    def baseline_ms(self) -> dict[str, float]:
        return {b: s["median_ms"] for b, s in self.stats.items()
                if b != "candidate" and not b.startswith("rival:") and isinstance(s, dict) and "median_ms" in s}

    def j_per_call(self, name: str) -> float | None:
        e = (self.energy or {}).get(name)
        return e.get("j_per_call") if isinstance(e, dict) else None

    @property
    def energy_j(self) -> dict[str, float]:
        return {k: v["j_per_call"] for k, v in (self.energy or {}).items()
                if isinstance(v, dict) and "j_per_call" in v}


def failure_record(task_key: str | None, candidate: str, device: str, name: str, detail: str,
                   compiled: bool = False) -> Result:
    """The record of an evaluation that never produced one of its own (timeout, crash, build failure)."""
    return Result(task=task_key, task_key=task_key, candidate=candidate, device=device, status="failed",
                  ok=False, reason=name, detail=detail, compiled=compiled, correct=False,
                  checks=[{"name": name, "ok": False, "severity": "fail", "detail": detail}],
                  failed_checks=[name])
