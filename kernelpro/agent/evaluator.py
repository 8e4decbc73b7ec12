"""The narrow interface between the search and the rest of KernelPro: evaluate one candidate file.

The search only needs an `EvalOutcome` per candidate. Two real implementations live here:

- `HarnessEvaluator`: the evaluation harness (isolated process: compile, correctness on several sizes,
  anti-gaming checks, timing/energy vs the baseline) plus micro-profiling advice, imported lazily.
- `StaticEvaluator`: compile + static feature verification only (no GPU needed). It never claims a
  speedup; the search treats its successes as "compiles and uses the requested features".
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kernelpro.suites.task import Task

if TYPE_CHECKING:
    from kernelpro.results.record import Result


@dataclass
class EvalOutcome:
    ok: bool                                  # compiled, correct and clean: usable as a search result
    speedup: float | None = None              # baseline time / candidate time (None: not timed)
    energy_j: float | None = None             # energy per call of the candidate
    baseline_energy_j: float | None = None    # energy per call of the baseline, same measurement
    reason: str = ""                          # one line: why not ok
    stage: str = ""                           # compile | verify | correctness | gaming | timing | crash | ok
    flags: list[str] = field(default_factory=list)      # named anti-gaming flags
    diagnoses: str = ""                       # profiling advice text for the next expansion
    # The same profile as records, for the LLM-free policy: the stage-two findings (advice mode:
    # {tool, kernel, title, severity}) and the core metrics per kernel (raw and advice modes).
    findings: list[dict[str, Any]] = field(default_factory=list)
    raw_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    compile_errors: str = ""
    verify_errors: str = ""
    missing_features: list[str] = field(default_factory=list)
    correct: bool | None = None
    correct_with_arch: bool | None = None     # PTXBench rule: correct + SASS present + executed (ncu)
    timings: dict[str, float] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)  # the raw harness record, kept for the store
    recorded: bool = False                    # the harness already wrote this outcome to the store

    def summary(self) -> str:
        if self.ok:
            parts = [f"ok {self.speedup:.3f}x" if self.speedup is not None else "ok (not timed)"]
            if self.energy_j is not None:
                parts.append(f"{self.energy_j * 1e3:.3f} mJ/call")
            if self.missing_features:
                parts.append("missing " + ",".join(self.missing_features))
            return ", ".join(parts)
        return f"{self.stage or 'failed'}: {self.reason}"

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, d: dict[str, Any]) -> EvalOutcome:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


class Evaluator(Protocol):
    """Anything that turns a candidate file into an outcome. Must not raise for a bad candidate.
    `times` says whether its outcomes carry measured times (what `optimize --confirm` needs)."""

    times: bool

    def evaluate(self, task: Task, candidate_path: Path) -> EvalOutcome: ...


SLOWDOWN_PENALTY = 20.0   # exponent of (speedup / floor) below the speed floor: 2% under it costs a third


def objective_score(o: EvalOutcome, objective: str = "speed", energy_weight: float = 0.5,
                    min_speedup: float | None = None) -> float | None:
    """Higher is better; 1.0 is parity with the baseline. None when the outcome has no measurement.

    energy: baseline energy / candidate energy per call; mix: speedup^(1-w) * energy_ratio^w
    (a weighted geometric mean, so neither term can hide a collapse of the other). With `min_speedup`
    (the search sets it from the start and --max-slowdown), an energy or mix score of a candidate
    slower than that floor is multiplied by (speedup / floor)^SLOWDOWN_PENALTY, so saving joules by
    running slower ranks below a configuration that keeps the speed.
    """
    if not o.ok:
        return None
    score = _objective(o, objective, energy_weight)
    if (score is not None and objective != "speed" and min_speedup and o.speedup is not None
            and o.speedup < min_speedup):
        score *= (o.speedup / min_speedup) ** SLOWDOWN_PENALTY
    return score


def _objective(o: EvalOutcome, objective: str, energy_weight: float) -> float | None:
    eratio = (o.baseline_energy_j / o.energy_j
              if o.energy_j and o.baseline_energy_j and o.energy_j > 0 else None)
    if objective == "energy":
        return eratio if eratio is not None else o.speedup
    if objective == "mix":
        if eratio is None or o.speedup is None:
            return o.speedup if o.speedup is not None else eratio
        w = min(max(energy_weight, 0.0), 1.0)
        return float(o.speedup ** (1 - w) * eratio ** w)
    return o.speedup


def reward(score: float | None, ok: bool) -> float:
    """Log-scaled reward in [0, 1]: failure 0, parity 0.5, 8x faster 1.0, 8x slower ~0.02.

    Speedups multiply, so equal ratios should move the value by equal amounts; a correct-but-slow
    kernel still earns more than a failure so its subtree stays worth refining.
    """
    if not ok:
        return 0.0
    if score is None or score <= 0:
        return 0.25  # correct but not timed (static evaluation): better than failing, worse than parity
    return min(1.0, max(0.02, 0.5 + math.log2(score) / 6.0))


# --------------------------------------------------------------------------------------------------
# Static evaluator: real compile + static verification, no GPU.
# --------------------------------------------------------------------------------------------------

class StaticEvaluator:
    """Compile and statically verify a candidate for `arch` (kernelpro.static.verify), no execution."""

    times = False

    def __init__(self, arch: str = "sm_90a", cache_dir: Path | None = None):
        self.arch, self.cache_dir = arch, cache_dir
        self._done: dict[str, EvalOutcome] = {}

    def prepare(self, task: Task, candidate_path: Path) -> None:
        """Verify ahead (the search calls this concurrently for a batch); evaluate() then reuses it."""
        from kernelpro.results.store import source_hash

        self._done[source_hash(Path(candidate_path).read_text())] = self._evaluate(task, candidate_path)

    def evaluate(self, task: Task, candidate_path: Path) -> EvalOutcome:
        from kernelpro.results.store import source_hash

        h = source_hash(Path(candidate_path).read_text())
        return self._done.pop(h) if h in self._done else self._evaluate(task, candidate_path)

    def _evaluate(self, task: Task, candidate_path: Path) -> EvalOutcome:
        requested = list(task.requested_features(self.arch))
        try:
            from kernelpro.static.verify import verify
        except ImportError as e:
            return EvalOutcome(False, reason=f"static verifier unavailable ({e})", stage="verify")
        try:
            rep = verify(str(lazy_build_shim(Path(candidate_path))), self.arch, requested, cache_dir=self.cache_dir)
        except Exception as e:  # noqa: BLE001 - a candidate must never take the search down
            msg = str(e).strip().splitlines()
            return EvalOutcome(False, reason=(msg[0] if msg else type(e).__name__)[:300], stage="compile",
                               compile_errors=str(e)[-4000:])
        return outcome_from_verify(rep, rep.requested or requested)


def lazy_build_shim(path: Path) -> Path:
    """Templates (PARAMS + `_build(params)`) build their extension in forward(), where the verifier's
    import-time capture cannot see it; a shim that imports the candidate and calls `_build(PARAMS)` at
    module level makes the build visible. Other candidates are returned unchanged."""
    try:
        src = path.read_text()
    except OSError:
        return path
    if path.suffix != ".py" or "def _build(" not in src or "PARAMS" not in src:
        return path
    shim = path.with_name(path.stem + "_kpbuild.py")
    shim.write_text("import importlib.util\n"
                    f"_s = importlib.util.spec_from_file_location('kp_candidate', {str(path.resolve())!r})\n"
                    "_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
                    "_m._build(_m.PARAMS)\n")
    return shim


def outcome_from_verify(rep: Any, requested: list[str]) -> EvalOutcome:
    """Map a verify.VerifyReport to an outcome: ok = compiled and every requested feature emitted in SASS."""
    errors = [d for d in rep.diagnostics if d.severity in ("error", "fatal", "catastrophic error")]
    text = "\n".join(f"{d.file}:{d.line}: {d.severity}: {d.message}" + (f"\n    {d.context}" if d.context else "")
                      for d in errors)
    record = rep.to_dict()
    record.pop("sources", None)
    if not rep.compiled:
        first = f"{errors[0].file}:{errors[0].line}: {errors[0].message}" if errors else "compile failed"
        return EvalOutcome(False, reason=first[:300], stage="compile", compile_errors=text[-4000:], record=record)
    missing = [f for f in requested if rep.features.get(f) != "emitted"]
    if missing:
        why = ", ".join(f"{f} ({rep.features.get(f, 'absent')})" for f in missing)
        return EvalOutcome(False, reason=f"requested features not emitted in SASS: {why}", stage="verify",
                           verify_errors=f"requested features not emitted in SASS: {why}", missing_features=missing,
                           record=record)
    return EvalOutcome(True, stage="ok", record=record)


# --------------------------------------------------------------------------------------------------
# Harness evaluator: the isolated-process evaluation (bench) and micro-profiling advice.
# --------------------------------------------------------------------------------------------------

class HarnessEvaluator:
    """Adapter to the evaluation harness: `worker.run_job` (isolated process: compile, correctness on the
    task's sizes, anti-gaming checks, interleaved timing vs baselines, NVML energy), static feature
    verification (`verify.verify`, for the missing-feature warning) and micro-profiling advice
    (`profile.profile_candidate`). All imported lazily.

    `feedback` chooses what the next expansion sees: 'advice' (profiling findings as expert advice),
    'raw' (the raw metrics), or 'none' (no profiling at all).
    """

    times = True

    def __init__(self, arch: str = "sm_90a", feedback: str = "advice", baseline: str = "eager",
                 energy: bool = False, sizes: str = "all", timeout_s: float = 900.0, gpu: int | None = None,
                 verify_features: bool = True, arch_evidence: bool = False, device: str = "cuda"):
        self.arch, self.feedback, self.baseline = arch, feedback, baseline
        # "cpu" runs pure-PyTorch candidates through the same worker and checks (no kernels, no profiling).
        self.device = device
        self.arch_evidence = arch_evidence
        self.energy, self.sizes, self.timeout_s, self.gpu = energy, sizes, timeout_s, gpu
        self.verify_features = verify_features
        self._verified: dict[str, tuple[list[str], str]] = {}

    def prepare(self, task: Task, path: Path) -> None:
        """Build (and statically verify) a candidate ahead of evaluation; safe to run concurrently."""
        from kernelpro.harness.worker import extension_dir
        from kernelpro.results.store import source_hash

        h = source_hash(Path(path).read_text())
        precompile(Path(path), ext_dir=extension_dir(h), timeout_s=self.timeout_s)
        if self.verify_features:
            self._missing(task, Path(path), h)

    def _missing(self, task: Task, path: Path, h: str) -> tuple[list[str], str]:
        if h not in self._verified:
            requested = list(task.requested_features(self.arch))
            try:
                from kernelpro.static.verify import verify
                rep = verify(str(lazy_build_shim(path)), self.arch, requested)
                missing = [f for f in requested if rep.features.get(f) != "emitted"]
                self._verified[h] = (missing, "")
            except Exception as e:  # noqa: BLE001 - verification is advisory here; the harness judged the run
                self._verified[h] = ([], f"static verification failed: {str(e)[:200]}")
        return self._verified[h]

    def evaluate(self, task: Task, candidate_path: Path) -> EvalOutcome:
        from kernelpro.harness.job import Job
        from kernelpro.harness.worker import run_job
        from kernelpro.results.store import source_hash

        path = Path(candidate_path).resolve()
        h = source_hash(path.read_text())
        job = Job(task_path=str(task.path), task_suite=task.suite, task_key=task.key,
                  candidate_path=str(path), candidate_hash=h, device=self.device, sizes=self.sizes,
                  baselines=(self.baseline,), energy=self.energy)
        try:
            rec = run_job(job, timeout_s=self.timeout_s, gpu=self.gpu)
        except Exception as e:  # noqa: BLE001 - run_job isolates candidates; this is a harness bug
            return EvalOutcome(False, reason=f"harness error: {type(e).__name__}: {str(e)[:200]}", stage="crash")
        out = outcome_from_record(rec, self.baseline)
        if out.ok and self.verify_features:
            out.missing_features, note = self._missing(task, path, h)
            if note:
                out.verify_errors = note
        if out.ok and self.arch_evidence:
            out.correct_with_arch, ev = self._executed(task, path, out.missing_features, rec)
            out.record["executed_evidence"] = ev
        if out.ok and self.feedback != "none":
            self._advise(out, task, path)
        return out

    def _executed(self, task: Task, path: Path, missing: list[str],
                  rec: Result | None = None) -> tuple[bool | None, dict[str, Any]]:
        """PTXBench's correct_with_arch for a correct candidate: the requested features are emitted in
        SASS (static) AND executed (ncu per-opcode counts > 0). None when ncu cannot run."""
        if missing:
            return False, {"static_missing": missing}
        try:
            from kernelpro.profile.executed import candidate_evidence, worker_kernels

            ev = candidate_evidence(path, task, self.arch, timeout=self.timeout_s,
                                    worker_kernels=worker_kernels(rec) if rec is not None else None)
            return bool(ev["executed_ok"]), ev
        except Exception as e:  # noqa: BLE001 - no ncu / ncu refused: unknown, never a pass
            return None, {"error": f"{type(e).__name__}: {str(e)[:200]}"}

    def _advise(self, out: EvalOutcome, task: Task, path: Path) -> None:
        """Profile a working candidate: the text for a model, and the records for the parameter policy.
        In raw mode the findings are withheld, as they are from the model's prompt."""
        try:
            from kernelpro.profile import profile_candidate

            res = profile_candidate(path, task, mode=self.feedback, arch=self.arch, system=False)
        except Exception as e:  # noqa: BLE001 - advice is optional; the search continues without it
            out.diagnoses = f"(profiling unavailable: {type(e).__name__}: {str(e)[:160]})"
            return
        out.diagnoses = res.text
        out.raw_metrics = {k: dict(v) for k, v in res.raw_metrics.items()}
        if self.feedback == "advice":
            out.findings = [finding_record(f) for f in res.findings]


def finding_record(f: Any) -> dict[str, Any]:
    """The part of a profile Finding the parameter policy reads (and the store keeps per node)."""
    return {"tool": f.tool, "kernel": f.kernel, "title": f.title, "severity": f.severity}


STAGE_OF = {"compile_error": "compile", "timeout": "timeout", "oom": "crash", "crash": "crash",
            "wrong_output": "correctness"}


def outcome_from_record(rec: Result, baseline: str = "eager") -> EvalOutcome:
    """Map the harness's result record (worker.run_job) to an outcome."""
    failed = [str(f) for f in rec.failed_checks]
    reason = rec.reason
    speedup = rec.speedup.get(baseline)
    cand_e, base_e = rec.j_per_call("candidate"), rec.j_per_call(baseline)
    timings: dict[str, float] = {}
    for k, v in rec.stats.items():
        if isinstance(v, dict) and isinstance(v.get("median_ms"), int | float):
            timings[f"{k}_median_ms"] = float(v["median_ms"])
    if rec.compile_s is not None:
        timings["compile_s"] = float(rec.compile_s)
    ok = rec.passed
    out = EvalOutcome(ok=ok, speedup=float(speedup) if speedup is not None else None, energy_j=cand_e,
                      baseline_energy_j=base_e, flags=[] if ok else failed, correct=rec.correct,
                      timings=timings, record=rec.to_dict())
    if ok:
        out.stage = "ok"
        return out
    detail = rec.detail or ""
    out.stage = STAGE_OF.get(str(reason), "gaming" if reason else "crash")
    if out.stage == "compile":
        out.compile_errors = detail[-4000:]
    first = next((ln for ln in detail.splitlines() if "error" in ln.lower()), detail.splitlines()[0] if detail else "")
    out.reason = f"{reason or 'failed'}: {first[:300]}" if first else str(reason or "failed")
    return out


def precompile(path: Path, ext_dir: Path | None = None, timeout_s: float = 900.0) -> str | None:
    """Import a load_inline candidate in a child process so its extension build lands in the cache.

    Lets the search build several candidates at once while timing stays serial: the worker later finds
    the build in the same TORCH_EXTENSIONS_DIR. Template candidates that build lazily (in forward)
    expose `_build(PARAMS)`, which is called too. Returns the error tail on failure, None on success.
    """
    code = ("import importlib.util,sys;s=importlib.util.spec_from_file_location('kp_pre',sys.argv[1]);"
            "m=importlib.util.module_from_spec(s);s.loader.exec_module(m);"
            "b=getattr(m,'_build',None);p=getattr(m,'PARAMS',None);"
            "b(p) if callable(b) and isinstance(p,dict) else None")
    env = dict(os.environ)
    if ext_dir is not None:
        ext_dir.mkdir(parents=True, exist_ok=True)
        env["TORCH_EXTENSIONS_DIR"] = str(ext_dir)
    from kernelpro import sandbox

    p = sandbox.run([sys.executable, "-c", code, str(path)], timeout_s=timeout_s, env=env, cwd=Path(path).parent,
                    gpu=sandbox.NO_GPU, writable=[ext_dir] if ext_dir is not None else [])
    if p.timed_out:
        return f"build timed out after {timeout_s:.0f}s"
    return None if p.rc == 0 else (p.stderr or p.stdout)[-3000:]
