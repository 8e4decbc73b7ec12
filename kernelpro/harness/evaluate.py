"""Correctness and anti-gaming checks for one candidate, run inside the isolated worker process.

Every verdict is a named check (see CHECKS). The evidence is behavioural wherever possible: we watch
what the candidate *does* (outputs on poisoned memory, results in both run orders, kernels and aten ops
it launches, streams it uses, exceptions it swallows, threads/processes it starts, objects it replaces)
rather than grepping its source; a source scan only ever adds a warning.

Threat model and its limit: the candidate runs in the same Python process as these checks (it must, to
be called), so a determined adversary could tamper with this module's own state. We bind what we use
before the candidate is imported, snapshot the identities of torch/time/kernelpro functions and compare
after every call, and keep each candidate in its own process so tampering cannot outlive it. A
candidate that defeats all of that is out of scope, as it is for every Python-level evaluator.

The checks (all sizes the task declares, several fresh seeds each, unpredictable seeds from os.urandom):
- poisoned outputs: before each candidate call, blocks of the reference outputs' sizes are allocated,
  filled with all-ones bytes (a NaN payload no arithmetic produces) and freed, so a `torch.empty` the
  candidate does not fully write shows the pattern -> `unwritten_output`;
- both orders: reference first with its outputs kept alive, and candidate first after the allocator
  cache is emptied; correct only when the reference ran first -> `reads_reference_output`; correct only
  when the reference's freed output block is handed back -> `memory_reuse`;
- inputs cloned per model and compared bitwise after the call -> `input_mutated`;
- outputs must be plain `torch.Tensor` (exact type) on the right device, not sharing storage with an
  input -> `lazy_output`, `output_aliases_input`;
- same tensors with new values in place (same identity and address) -> stale result -> `output_cached`;
- streams judged by the timed window: side streams and graph replays joined back into the caller's stream
  before it returns pass; a kernel of the candidate's that ends after a fill enqueued on the caller's
  stream right after the call began (profiler), or an output still being written after the caller's
  stream completed (snapshot vs. after device sync) -> `async_leftover`; a different current stream
  left set -> `other_stream`;
- parameters and buffers: the reference's get new values (seeded, by name and shape) and the candidate
  the same ones, by name, else by a unique shape; a reference tensor with no place -> `param_mismatch`;
- aten ops in `task.forbid_ops` or kernel names matching `task.forbid_kernels` -> `library_fallback`;
  an exception raised and swallowed inside the candidate, followed by the reference's own ops ->
  `try_except_fallback`; with forbidden ops made to raise (forced kernel path), a candidate that
  then fails depends on the library -> `library_fallback`;
- identities of torch functions, `torch.cuda.Event`, `time.perf_counter`, builtins and kernelpro's own
  functions compared with a snapshot taken before import -> `patched_torch` / `patched_timer`;
- precision: TF32 off for fp32 tasks on both sides; a candidate that flips the flags, returns a lower
  dtype, or whose error matches a bf16/fp16/TF32-degraded reference -> `lower_precision`;
- threads started during a call or running candidate code, child processes, fork/spawn audit events ->
  `spawned_threads` / `spawned_process`;
- after timing: re-check on inputs regenerated from a seed drawn only then -> `wrong_output`;
- speed of light: median time below max(FLOPs/peak, bytes/bandwidth) -> `impossible_speed`.
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import re
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from kernelpro.harness.checks import _AUDIT_FRAME_EVENTS, CorrectnessChecks
from kernelpro.harness.guards import (
    _AUDIT_SPAWN,
    PRECISION_FLAGS,
    CandidateFailure,
    _Audit,
    classify_exception,
    compare_snapshot,
    precision_flags,
    restore_precision,
    set_precision_policy,
    snapshot,
)
from kernelpro.harness.job import EvalConfig
from kernelpro.harness.timed import TimingStage
from kernelpro.suites.perturb import perturb_pair
from kernelpro.suites.task import Task, import_module_from

_perf_counter = time.perf_counter

CHECKS: dict[str, str] = {
    "compile_error": "the candidate did not import/build, or defines no ModelNew",
    "crash": "the candidate raised, segfaulted or hit an illegal address / CUDA error",
    "timeout": "the candidate ran past the wall-clock limit (killed)",
    "oom": "the candidate ran out of (capped) memory",
    "wrong_output": "output differs from the reference beyond the dtype's tolerance (or wrong shape/dtype)",
    "nan_inf": "output has NaN/Inf where the reference is finite",
    "unwritten_output": "output elements still hold the poison pattern (never written)",
    "other_stream": "the candidate left a stream other than the caller's current",
    "async_leftover": "work still running, or output still being written, after the caller's stream completed",
    "param_mismatch": "the candidate's parameters cannot take the reference's values (a name or shape has no match)",
    "output_cached": "a stale output returned for new input values (cached / keyed on identity)",
    "output_aliases_input": "an output shares storage with an input",
    "input_mutated": "the candidate wrote to its inputs",
    "library_fallback": "the candidate launched the library op/kernel the task asks it to replace",
    "patched_torch": "the candidate replaced a torch/builtins/kernelpro function",
    "patched_timer": "the candidate replaced a timer (time.*, torch.cuda.Event/synchronize, kernelpro.harness.timing)",
    "reads_reference_output": "correct only when the reference ran first, or searched the heap for it",
    "lower_precision": "computed in lower precision than the task allows",
    "lazy_output": "an output is not a plain materialised torch.Tensor",
    "memory_reuse": "output is the reference's freed memory, handed back by the allocator",
    "spawned_threads": "the candidate started threads",
    "spawned_process": "the candidate started processes",
    "try_except_fallback": "an exception was swallowed and the reference path ran instead",
    "impossible_speed": "faster than the speed-of-light floor for the problem (not counted)",
    "sanitizer": "compute-sanitizer reported errors",
    "frame_access": "the candidate's code reached interpreter frames (sys._getframe, inspect/traceback stacks, "
                    "a traceback's or generator's frame) during import or a call: the harness's state is there",
    "writes_outside": "the candidate wrote (or tried to write) outside its private folders: the run store, "
                      "caches, task files or other candidates",
    "timed_differs": "the timed calls did not do what the checked calls did (other kernels, kernel counts, "
                     "ops or streams), or their samples disagree with the kernels' own activity record",
}

# When several checks fail, the most specific name is the reason.
PRIORITY = ["compile_error", "timeout", "crash", "oom", "sanitizer", "patched_timer", "frame_access", "patched_torch",
            "writes_outside", "spawned_process", "spawned_threads", "reads_reference_output", "memory_reuse", "output_cached",
            "lazy_output", "output_aliases_input", "input_mutated", "param_mismatch", "other_stream", "async_leftover",
            "try_except_fallback", "library_fallback", "lower_precision", "unwritten_output", "nan_inf",
            "wrong_output", "timed_differs", "impossible_speed"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    severity: str = "fail"  # fail | warn

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



class Evaluator(CorrectnessChecks, TimingStage):
    def __init__(self, cfg: EvalConfig):
        self.cfg = cfg
        from kernelpro.harness.profiles import apply
        from kernelpro.suites.suite import get_suite

        # the run's evaluation profile decides the tolerance (ptxbench: PTXBench's rule) for every suite
        self.task: Task = apply(get_suite(cfg.task_suite).task_from_file(cfg.task_path, cfg.kb_tolerance), cfg.profile)
        self.device = cfg.device
        self.on_gpu = cfg.device.startswith("cuda")
        self.checks: dict[str, Check] = {}
        self.trials: list[dict[str, Any]] = []
        self.cand_path = str(Path(cfg.candidate_path).resolve())
        self.result: dict[str, Any] = {"schema": 1, "task": self.task.key, "candidate": self.cand_path,
                                       "device": cfg.device, "compiled": False, "correct": False,
                                       "correct_shown": None, "correct_heldout": None,
                                       "tolerance": {**self.task.tolerance, "rule": self._tolerance_rule()},
                                       "profile": cfg.profile}
        self._ref_ops: dict[str, set[str]] = {}
        # what the checked calls did, per size key: kernel names per call (GPU) and ops (both)
        self._checked_kernels: dict[str, list[tuple[str, ...]]] = {}
        self._checked_ops: dict[str, set[str]] = {}
        self._cand_warmed = False

    def _tolerance_rule(self) -> str:
        from kernelpro.suites.kernelbench import tolerance_text

        return tolerance_text(self.task, self.cfg.kb_tolerance)

    # -- verdict bookkeeping ----------------------------------------------------------------------
    def fail(self, name: str, detail: str) -> None:
        c = self.checks.get(name)
        if c is None or c.ok or c.severity == "warn":
            self.checks[name] = Check(name, False, detail, "fail")

    def warn(self, name: str, detail: str) -> None:
        if name not in self.checks:
            self.checks[name] = Check(name, True, detail, "warn")

    def passed(self, name: str) -> None:
        self.checks.setdefault(name, Check(name, True))

    def failed_names(self) -> list[str]:
        names = [c.name for c in self.checks.values() if not c.ok]
        return sorted(names, key=lambda n: PRIORITY.index(n) if n in PRIORITY else len(PRIORITY))

    # -- setup ------------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    def _empty_cache(self) -> None:
        gc.collect()
        if self.on_gpu:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def _task_module(self, size: dict[str, Any]) -> Any:
        mod = import_module_from(self.task.path, f"kp_task_{os.getpid()}_{abs(hash(json.dumps(size, sort_keys=True)))}")
        mod.__dict__.update(size)
        return mod

    def _inputs(self, mod: Any, seed: int, own: bool = False) -> list[Any]:
        """One input set drawn with `seed`. A task whose inputs are fixed data (a workload's blob) may define
        `get_fresh_inputs`, a set of the same kind drawn anew: only the first trial of each size (`own`)
        gets the task's own data; every other draw (trials, probes, timed calls, the recheck) a fresh set, so
        no call past the first can be answered from a table of the fixed data's outputs."""
        torch.manual_seed(seed)
        random.seed(seed)
        draw = mod.get_inputs if own else getattr(mod, "get_fresh_inputs", mod.get_inputs)
        with torch.device(self.device):
            xs = list(draw())
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in xs]

    def _models(self, mod: Any, cand_mod: Any, seed: int, judge: bool = True) -> tuple[Any, Any]:
        """(reference, candidate) built from one seed, then given the same perturbed parameter values;
        `judge=False` (a rival of `compare`) leaves a mismatch out of this candidate's verdict."""
        with torch.device(self.device):
            init = list(mod.get_init_inputs())
            torch.manual_seed(seed)
            ref = mod.Model(*init).to(self.device)
            torch.manual_seed(seed)
            cand = cand_mod.ModelNew(*init)
            if isinstance(cand, torch.nn.Module):
                cand = cand.to(self.device)
        # Fresh modules hold ones and zeros (LayerNorm, BatchNorm): give both the same other values.
        mapping = perturb_pair(ref, cand, seed)
        if not mapping.ok and judge:
            self.fail("param_mismatch", f"reference tensor(s) {', '.join(mapping.missing[:4])} have no place in ModelNew "
                      "(none of that name and shape, nor a unique one of that shape)")
        return ref, cand

    def import_candidate(self) -> Any:
        t0 = _perf_counter()
        with _Audit.watch() as events:
            try:
                mod = import_module_from(Path(self.cand_path), f"kp_candidate_{os.getpid()}")
            except BaseException as e:  # noqa: BLE001 - whatever the candidate raises at import
                name, detail = classify_exception(e)
                if name != "oom":
                    name = "compile_error"
                raise CandidateFailure(name, detail) from None
            seen = list(events)
        self.result["compile_s"] = _perf_counter() - t0
        # Import is judged too: processes started then (other than compilers) and frame access (the
        # evaluator's own frames are on the stack during import).
        spawns = [e for e in seen if e.startswith(_AUDIT_SPAWN)]
        if spawns:
            self.fail("spawned_process", f"import: {spawns[0]}")
        writes = [e for e in seen if e.startswith("write ")]
        if writes:
            self.fail("writes_outside", f"import: {writes[0][6:]}")
        frames = [e for e in seen if e.startswith(_AUDIT_FRAME_EVENTS)]
        if frames:
            self.fail("frame_access", f"import: candidate code called {frames[0]}")
        if not hasattr(mod, "ModelNew"):
            raise CandidateFailure("compile_error", "the candidate defines no ModelNew")
        return mod

    def run(self) -> dict[str, Any]:
        t_start = _perf_counter()
        try:
            self._run()
        except CandidateFailure as f:
            self.fail(f.name, f.detail)
        except Exception as e:  # noqa: BLE001 - a bug of ours must still produce a result record
            # Out of memory in the harness's own work (the reference, clones, poison blocks) is still out
            # of memory: on a GPU shared with other processes it is the first sign, not a crash.
            name = "oom" if classify_exception(e)[0] == "oom" else "crash"
            self.fail(name, f"evaluator error: {type(e).__name__}: {e}"[:300])
            self.result["evaluator_traceback"] = traceback.format_exc()[-2000:]
        self.result["wall_s"] = _perf_counter() - t_start
        return self.finish()

    def finish(self) -> dict[str, Any]:
        failed = self.failed_names()
        r = self.result
        r["checks"] = [c.to_dict() for c in self.checks.values()]
        r["failed_checks"] = failed
        r["warnings"] = [c.name for c in self.checks.values() if c.severity == "warn"]
        r["reason"] = failed[0] if failed else None
        r["detail"] = self.checks[failed[0]].detail if failed else ""
        r["ok"] = not failed
        r["status"] = "passed" if not failed else "failed"
        r["correctness"] = self.trials
        if failed and r.get("correct"):
            r["correct"] = False  # an anti-gaming failure voids correctness
        return r

    def _run(self) -> None:
        _Audit.install()
        _Audit.candidate_files = {self.cand_path}
        self._start_watch()
        try:
            self._run_watched()
        finally:
            self._stop_watch()

    def _run_watched(self) -> None:
        cfg, task = self.cfg, self.task
        self.result["dtype"] = task.dtype
        self.result["precision"] = set_precision_policy(task.dtype)
        if self.on_gpu:
            self.result["gpu"] = torch.cuda.get_device_name()
        self.result["torch"] = torch.__version__
        policy = precision_flags()
        before = snapshot()
        cand_mod = self.import_candidate()
        self.result["compiled"] = True
        self._check_identity(before, "import")
        self._check_precision(policy, "import")

        sizes = [("default", s) for s in task.sizes("default")]
        if cfg.sizes in ("shown", "all"):
            sizes += [("shown", s) for s in task.sizes("shown")]
        if cfg.sizes in ("heldout", "all"):
            sizes += [("heldout", s) for s in task.sizes("heldout")]
        if cfg.sizes == "default":
            sizes = sizes[:1]
        ok_by_which: dict[str, bool] = {}
        trials = 1 if cfg.check_only else max(1, cfg.trials)
        self.phase("import", self.result.get("compile_s") or 0.0)
        t0 = _perf_counter()
        for which, size in sizes:
            ok = self._check_size(cand_mod, which, size, trials, before, policy)
            ok_by_which[which] = ok_by_which.get(which, True) and ok
        self.phase("correctness", _perf_counter() - t0)
        self.result["correct_shown"] = ok_by_which.get("shown", ok_by_which.get("default"))
        self.result["correct_heldout"] = ok_by_which.get("heldout")
        self.result["correct"] = all(ok_by_which.values()) and not self.failed_names()
        if cfg.check_only or not self.result["correct"]:
            return
        if cfg.timing:
            self._time(cand_mod, before, policy)

    def phase(self, name: str, seconds: float) -> None:
        """Wall seconds spent in one stage of the evaluation, so a slow judge shows where its time goes."""
        phases = self.result.setdefault("phases", {})
        phases[name] = round(phases.get(name, 0.0) + seconds, 3)

    def _check_identity(self, before: dict, ctx: str) -> None:
        for name, what in compare_snapshot(before):
            self.fail(name, f"{ctx}: {what} was replaced")

    def _check_precision(self, policy: dict[str, Any], ctx: str) -> None:
        now = precision_flags()
        changed = [k for k in PRECISION_FLAGS if now[k] != policy[k]]
        if changed:
            self.fail("lower_precision", f"{ctx}: candidate changed precision flags {changed}")
            restore_precision(policy)

    def _size_keys(self) -> set[str]:
        keys = set()
        for s in self.task.shown_sizes + self.task.heldout_sizes:
            keys |= set(s)
        return keys or set(self.task.default_size)


def source_warnings(source: str) -> list[str]:
    """Hints from the source text; never a verdict on their own."""
    hints = []
    if re.search(r"\bexcept\b", source):
        hints.append("source has try/except (fallbacks are checked at run time)")
    if re.search(r"\b(threading|multiprocessing|subprocess|concurrent\.futures)\b", source):
        hints.append("source imports threading/multiprocessing/subprocess")
    if re.search(r"gc\.get_objects|inspect\.stack|sys\._getframe", source):
        hints.append("source inspects the interpreter (gc/frames)")
    return hints


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    ev = Evaluator(cfg)
    r = ev.run()
    try:
        r["source_warnings"] = source_warnings(Path(cfg.candidate_path).read_text())
    except OSError:
        r["source_warnings"] = []
    return r


def clean_for_json(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): clean_for_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set):
        return [clean_for_json(v) for v in x]
    return x
