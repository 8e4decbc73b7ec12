"""The isolated worker: `python -m kernelpro.harness.worker JOBFILE RESULTFILE` evaluates one candidate.

The parent (`run_job`) writes the job as JSON, starts this module in a new session (process group) with
`CUDA_VISIBLE_DEVICES` set to one GPU and `TORCH_EXTENSIONS_DIR` pointing into a compile cache keyed by
the candidate's content hash, and waits with a wall-clock timeout; on timeout it kills the whole group.
The worker caps GPU memory with `torch.cuda.set_per_process_memory_fraction` (allocations through
PyTorch only: a raw cudaMalloc in a candidate is not capped) and, on the CPU, the address space with
RLIMIT_AS. It writes its result atomically (temp file + rename), so the parent sees a whole record or
none. No record means the process died: the exit signal names the reason (segfault, abort, kill).

Stages are also appended to RESULTFILE.stage as they start, so a crash can be placed (compile vs. run).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError
from kernelpro.harness.job import Job
from kernelpro.results.record import RESULT_SCHEMA, Result
from kernelpro.results.record import failure_record as _failure

DEFAULT_TIMEOUT_S = 300.0


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with __import__("contextlib").suppress(OSError):
            os.unlink(tmp)
        raise


def default_cache_dir() -> Path:
    from kernelpro import paths

    return paths.cache_root()


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def extension_dir(candidate_hash: str, cache_dir: str | Path | None = None) -> Path:
    """The candidate's compile cache (TORCH_EXTENSIONS_DIR), keyed by its content hash; shared by the
    worker and the profilers so an ncu pass loads the build the worker made instead of rebuilding."""
    d = (Path(cache_dir) if cache_dir else default_cache_dir()) / "torch_extensions" / candidate_hash[:16]
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_job(job: Job, *, timeout_s: float = DEFAULT_TIMEOUT_S, gpu: int | None = None,
            cache_dir: str | Path | None = None, sanitizer: str | None = None,
            workdir: str | Path | None = None) -> Result:
    """Run one evaluation job in a fresh worker process; always returns a result record (never raises
    for anything the candidate does)."""
    if not isinstance(job, Job):
        raise TypeError(f"run_job takes a Job, not {type(job).__name__}; build it with Job(...) or Job.from_dict")
    from kernelpro import isolation
    from kernelpro.harness.build import (
        arch_list_env,
        build_candidate,
        builds_extensions,
        cached_build,
        private_view,
    )

    tmp = Path(tempfile.mkdtemp(prefix="kp-job-", dir=workdir))
    jobfile, resultfile = tmp / "job.json", tmp / "result.json"
    write_json_atomic(jobfile, job.to_dict())
    # The shared build (made by the build stage, or by the first worker of this candidate) is seen at its
    # own path, which ninja's log keys on; with a bind the worker writes into its private copy, so it
    # cannot poison what the ncu pass, compare and re-runs load. Without one (no bubblewrap) nothing
    # outside the worker is write-protected anyway, and it uses the shared folder directly.
    shared = extension_dir(job.candidate_hash or "nohash", cache_dir)
    binds: list[tuple[Path, Path]] = []
    writable = [tmp]
    build_info: dict[str, Any] = {"ext_dir": str(shared)}
    if isolation.can_bind():
        if (job.candidate_hash and builds_extensions(job.candidate_path)
                and cached_build(job.candidate_hash, cache_dir) is None):
            # No shared build yet (compare, optimize, a first run outside bench): make it once, in the build
            # sandbox and on its own limit, so this worker's private copy and every later one start built.
            b = build_candidate(job.task_path, job.candidate_path, job.candidate_hash, cache_dir=cache_dir)
            build_info.update(built_here=True, build_ok=b.ok, build_s=round(b.wall_s, 2))
        shared, mine, copy_s = private_view(job.candidate_hash or "nohash", tmp, cache_dir)
        binds.append((mine, shared))
        build_info.update(view="private copy", copy_s=round(copy_s, 4))
    else:
        writable.append(shared)
        build_info.update(view="shared (no bind in this isolation mode)")
    for r in job.rivals:       # compare's rivals load their own shared builds the same way
        rdir = Path(r["ext_dir"])
        if not rdir.is_dir():
            continue
        if isolation.can_bind():
            rmine = tmp / f"rival-ext-{len(binds)}"
            shutil.copytree(rdir, rmine, symlinks=True, ignore=shutil.ignore_patterns("lock"))
            binds.append((rmine, rdir))
        else:
            writable.append(rdir)
    env = dict(os.environ)
    env.update(arch_list_env())
    env["TORCH_EXTENSIONS_DIR"] = str(shared)
    env["PYTHONUNBUFFERED"] = "1"
    # JIT caches the candidate may fill go to its private folder: the sandbox leaves nothing else writable.
    env["TRITON_CACHE_DIR"] = str(tmp / "triton")
    env["CUDA_CACHE_PATH"] = str(tmp / "nv")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "kernelpro.harness.worker", str(jobfile), str(resultfile)]
    if sanitizer:
        from kernelpro.toolchain import require_tool

        cmd = [str(require_tool("compute-sanitizer")), "--tool", sanitizer, "--error-exitcode", "86",
               "--print-limit", "20"] + cmd
    from kernelpro import sandbox

    t0 = time.monotonic()
    with open(tmp / "stderr.txt", "wb") as errf:
        fin = sandbox.run(cmd, timeout_s=timeout_s, cwd=tmp, env=env, gpu=gpu, writable=writable,
                          stdout=errf, binds=binds)
    timed_out, rc = fin.timed_out, fin.rc
    wall = time.monotonic() - t0
    log = (tmp / "stderr.txt").read_bytes()[-4000:].decode(errors="replace")
    stages = (tmp / "result.json.stage").read_text().split() if (tmp / "result.json.stage").exists() else []
    result: dict[str, Any] | None = None
    if resultfile.exists():
        try:
            result = json.loads(resultfile.read_text())
        except (OSError, json.JSONDecodeError):
            result = None
    parsed: Result | None = None
    bad_record = ""
    if result is not None and not timed_out:
        try:
            parsed = Result.from_dict(result)
        except KernelProError as e:   # the file sits in the candidate's folder: it may have rewritten it
            bad_record = f"; its result file was not a result record ({e})"[:300]
    if timed_out:
        parsed = failure_record(job, "timeout", f"killed after {timeout_s:g} s (stage: {stages[-1] if stages else 'start'})",
                          compiled=("compiled" in stages))
    elif parsed is None:
        if rc < 0:
            detail = f"worker died with {_signal_name(rc)} (stage: {stages[-1] if stages else 'start'})"
        else:
            detail = f"worker exited with code {rc} and no result (stage: {stages[-1] if stages else 'start'})"
        detail += bad_record
        tail = [ln for ln in log.splitlines() if ln.strip()][-3:]
        if tail:
            detail += ": " + " | ".join(tail)[-300:]
        low = log.lower()
        name = "oom" if ("out of memory" in low or "memoryerror" in low or rc == -signal.SIGKILL) and not timed_out else "crash"
        parsed = failure_record(job, name, detail, compiled=("compiled" in stages))
    elif sanitizer and rc == 86:
        check = {"name": "sanitizer", "ok": False, "severity": "fail",
                 "detail": f"compute-sanitizer {sanitizer}: " + _sanitizer_summary(log)}
        parsed = parsed.with_(checks=[*parsed.checks, check],
                              failed_checks=["sanitizer"] + [n for n in parsed.failed_checks if n != "sanitizer"],
                              ok=False, status="failed", reason="sanitizer", correct=False)
    assert parsed is not None
    parsed = parsed.with_(worker={"rc": rc, "wall_s": wall, "timeout_s": timeout_s, "gpu": gpu,
                                  "log_tail": log[-1500:], "sanitizer": sanitizer, "isolation": fin.isolation},
                          build={**(parsed.build or {}), **build_info})
    _cleanup(tmp)
    return parsed


def _sanitizer_summary(log: str) -> str:
    lines = [ln for ln in log.splitlines() if "=========" in ln and ("ERROR SUMMARY" in ln or "Invalid" in ln or "Race" in ln)]
    return " | ".join(lines[:3])[:300] or "errors reported"


def _cleanup(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)


def failure_record(job: Job, name: str, detail: str, compiled: bool = False) -> Result:
    """The record of `job` when the worker produced none of its own (timeout, crash, no CUDA)."""
    return _failure(job.task_key, job.candidate_path, job.device, name, detail, compiled=compiled)


def _worker_main(jobfile: str, resultfile: str) -> int:
    stage_path = resultfile + ".stage"

    def stage(name: str) -> None:
        with open(stage_path, "a") as f:
            f.write(name + "\n")

    stage("start")
    job = Job.from_dict(json.loads(Path(jobfile).read_text()))
    # Gone before the candidate is imported: what kind of pass this is (check-only under the sanitizer,
    # timed, its sizes) is not for the candidate to read.
    Path(jobfile).unlink(missing_ok=True)
    device = job.device
    if device == "cpu":
        import resource

        # Default: half the machine, so one oversized candidate (or task) fails as `oom` instead of
        # taking the host down (seen: a KernelBench level-1 problem at full size wanted 16 GiB).
        half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        lim = int(float(job.cpu_mem_limit_gb) * 2**30) if job.cpu_mem_limit_gb else half
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            write_json_atomic(resultfile, failure_record(job, "crash", "worker sees no CUDA device").to_dict())
            return 0
        torch.cuda.set_device(0)
        torch.cuda.set_per_process_memory_fraction(float(job.mem_fraction))
    # Import Triton before the identity snapshot so triton.testing is in it; dynamo's own lazy re-wrapping
    # of torch functions is recognised as benign by guards.compare_snapshot.
    if device.startswith("cuda"):
        try:
            import triton  # noqa: F401
            import triton.testing  # noqa: F401
        except ImportError:
            pass
    if job.preimport_dynamo:
        import torch._dynamo  # noqa: F401
    from kernelpro.harness.evaluate import Evaluator, clean_for_json, source_warnings

    cfg = job.eval_config()
    ev = Evaluator(cfg)
    orig_import = ev.import_candidate

    def import_with_stage() -> Any:
        stage("compile")
        mod = orig_import()
        stage("compiled")
        return mod

    ev.import_candidate = import_with_stage  # type: ignore[method-assign]
    result = ev.run()
    try:
        result["source_warnings"] = source_warnings(Path(cfg.candidate_path).read_text())
    except OSError:
        result["source_warnings"] = []
    result["task_key"] = job.task_key
    result["schema"] = RESULT_SCHEMA
    result["memory"] = _peaks(device)
    stage("done")
    # parsed before it is written: an undeclared key fails here, in the harness's own tests
    write_json_atomic(resultfile, Result.from_dict(clean_for_json(result)).to_dict())
    sys.stdout.flush()
    # a candidate's stray non-daemon threads must not keep the worker alive past its verdict
    os._exit(0)


def _peaks(device: str) -> dict[str, Any]:
    """The worker's high-water marks: what the harness and the candidate held together at the peak
    (PyTorch's allocator on the GPU; the process's resident set on the host)."""
    import resource

    import torch

    peaks: dict[str, Any] = {"rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if device.startswith("cuda") and torch.cuda.is_available():
        peaks["gpu_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        peaks["gpu_reserved_peak_bytes"] = int(torch.cuda.max_memory_reserved())
    return peaks


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m kernelpro.harness.worker JOBFILE RESULTFILE", file=sys.stderr)
        sys.exit(2)
    sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
