"""Spread evaluation jobs over the GPUs of this host (one worker process per GPU at a time), or over a
Ray cluster with `--ray` (Ray schedules one GPU per job across hosts; we do not write a scheduler).

Each job still runs through `worker.run_job`, so isolation, timeouts and result records are identical
whichever way jobs are spread. Results come back through `on_result(index, result)` as they finish (the
caller records each one in the store immediately, which is what makes a run resumable).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from kernelpro.errors import KernelProError
from kernelpro.harness.job import Job
from kernelpro.harness.worker import run_job
from kernelpro.results.record import Result


def run_jobs(jobs: list[Job], *, gpus: list[int | None], timeout_s: float,
             on_result: Callable[[int, Result], None], cache_dir: str | None = None,
             sanitizer: str | None = None, per_gpu: int = 1) -> None:
    """Run `jobs` with `per_gpu` concurrent workers on each entry of `gpus` (None = CPU / no pinning)."""
    q: queue.Queue[int] = queue.Queue()
    for i in range(len(jobs)):
        q.put(i)
    results: queue.Queue[tuple[int, Result | BaseException]] = queue.Queue()

    def lane(gpu: int | None) -> None:
        while True:
            try:
                i = q.get_nowait()
            except queue.Empty:
                return
            try:
                results.put((i, run_job(jobs[i], timeout_s=jobs[i].timeout_s or timeout_s, gpu=gpu,
                                        cache_dir=cache_dir, sanitizer=sanitizer)))
            except BaseException as e:  # noqa: BLE001 - surfaced on the caller's thread
                results.put((i, e))
                return

    lanes = [threading.Thread(target=lane, args=(g,), daemon=True, name=f"kp-lane-{g}-{k}")
             for g in (gpus or [None]) for k in range(max(1, per_gpu))]
    for t in lanes:
        t.start()
    # results are handed over on the caller's thread (SQLite connections are per-thread)
    for _ in range(len(jobs)):
        i, r = results.get()
        if isinstance(r, BaseException):
            raise r
        on_result(i, r)
    for t in lanes:
        t.join()


def run_jobs_ray(jobs: list[Job], *, timeout_s: float,
                 on_result: Callable[[int, Result], None], cache_dir: str | None = None,
                 sanitizer: str | None = None, address: str | None = None) -> None:
    """Same contract as run_jobs, with Ray placing each job on a GPU of some host in the cluster."""
    try:
        import ray
    except ImportError:
        raise KernelProError("--ray needs Ray: `pip install 'ray[default]'`, start a cluster, or drop --ray") from None
    if not ray.is_initialized():
        ray.init(address=address or "auto", ignore_reinit_error=True)

    @ray.remote(num_gpus=1)
    def one(job: Job) -> Result:
        # Ray sets CUDA_VISIBLE_DEVICES for the task; the worker inherits it (gpu=None keeps it).
        return run_job(job, timeout_s=job.timeout_s or timeout_s, gpu=None, cache_dir=cache_dir,
                       sanitizer=sanitizer)

    pending = {one.remote(j): i for i, j in enumerate(jobs)}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            on_result(pending.pop(ref), ray.get(ref))
