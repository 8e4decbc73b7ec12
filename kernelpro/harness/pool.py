"""Spread evaluation jobs over the GPUs of this host (one worker process per GPU at a time), or over a
Ray cluster with `--ray` (Ray schedules one GPU per job across hosts; we do not write a scheduler).

Each job still runs through `worker.run_job`, so isolation, timeouts and result records are identical
whichever way jobs are spread. `Lanes` / `RayLanes` take jobs as they are submitted (the bench pipeline
submits each candidate the moment its build is done) and hand each result to `done(key, result)` from
their own threads; `run_jobs` / `run_jobs_ray` run a fixed list and call `on_result(index, result)` on
the caller's thread (the caller records each one in the store immediately, which is what makes a run
resumable).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable
from typing import Any

from kernelpro.errors import KernelProError
from kernelpro.harness.job import Job
from kernelpro.harness.worker import run_job
from kernelpro.results.record import Result

Done = Callable[[Hashable, "Result | BaseException"], None]


class Lanes:
    """`per_gpu` worker lanes on each entry of `gpus` (None = CPU / no pinning), fed by `submit`."""

    def __init__(self, gpus: list[int | None], *, timeout_s: float, done: Done, cache_dir: str | None = None,
                 sanitizer: str | None = None, per_gpu: int = 1):
        self._q: queue.Queue[tuple[Hashable, Job] | None] = queue.Queue()
        self._done, self._timeout, self._cache, self._san = done, timeout_s, cache_dir, sanitizer
        self._threads = [threading.Thread(target=self._lane, args=(g,), daemon=True, name=f"kp-lane-{g}-{k}")
                         for g in (gpus or [None]) for k in range(max(1, per_gpu))]
        for t in self._threads:
            t.start()

    @property
    def width(self) -> int:
        return len(self._threads)

    def _lane(self, gpu: int | None) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            key, job = item
            try:
                r: Result | BaseException = run_job(job, timeout_s=job.timeout_s or self._timeout, gpu=gpu,
                                                    cache_dir=self._cache, sanitizer=self._san)
            except BaseException as e:  # noqa: BLE001 - surfaced on the caller's thread by `done`
                r = e
            self._done(key, r)

    def submit(self, key: Hashable, job: Job) -> None:
        self._q.put((key, job))

    def close(self) -> None:
        """No more jobs: the lanes finish what is queued and stop."""
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()


class RayLanes:
    """The same contract as `Lanes`, with Ray placing each job on a GPU (or, with gpus_per_job=0, a CPU
    slot) of some host in the cluster; `address` None means $RAY_ADDRESS or a running local cluster."""

    def __init__(self, *, timeout_s: float, done: Done, cache_dir: str | None = None,
                 sanitizer: str | None = None, address: str | None = None, gpus_per_job: float = 1):
        try:
            import ray
        except ImportError:
            raise KernelProError("--ray needs Ray: `pip install 'ray>=2.9'`, start a cluster (`ray start --head`), "
                                 "or drop --ray") from None
        if not ray.is_initialized():
            try:
                ray.init(address=address or "auto", ignore_reinit_error=True, log_to_driver=False)
            except ConnectionError as e:
                raise KernelProError(f"--ray: no Ray cluster to join ({e}); start one with `ray start --head` "
                                     "or set RAY_ADDRESS") from None
        self._ray = ray
        self._done = done
        self._remote = ray.remote(num_gpus=gpus_per_job)(_ray_one)
        self._timeout, self._cache, self._san = timeout_s, cache_dir, sanitizer
        self._pending: dict[Any, Hashable] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._waiter = threading.Thread(target=self._wait, daemon=True, name="kp-ray-wait")
        self._waiter.start()

    @property
    def width(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("GPU", 0)) or 1)

    def submit(self, key: Hashable, job: Job) -> None:
        ref = self._remote.remote(job, job.timeout_s or self._timeout, self._cache, self._san)
        with self._lock:
            self._pending[ref] = key
        self._wake.set()

    def _wait(self) -> None:
        while True:
            with self._lock:
                refs = list(self._pending)
            if not refs:
                if self._closing:
                    return
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            ready, _ = self._ray.wait(refs, num_returns=1, timeout=0.5)
            for ref in ready:
                with self._lock:
                    key = self._pending.pop(ref)
                try:
                    r: Result | BaseException = self._ray.get(ref)
                except BaseException as e:  # noqa: BLE001 - a lost node or task: surfaced by `done`
                    r = e
                self._done(key, r)

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._waiter.join()


def _ray_one(job: Job, timeout_s: float, cache_dir: str | None, sanitizer: str | None) -> Result:
    # Ray sets CUDA_VISIBLE_DEVICES for the task; the worker inherits it (gpu=None keeps it).
    return run_job(job, timeout_s=timeout_s, gpu=None, cache_dir=cache_dir, sanitizer=sanitizer)


def _drain(jobs: list[Job], lanes_for: Callable[[Done], Lanes | RayLanes],
           on_result: Callable[[int, Result], None]) -> None:
    results: queue.Queue[tuple[Hashable, Result | BaseException]] = queue.Queue()
    lanes = lanes_for(lambda k, r: results.put((k, r)))
    for i, j in enumerate(jobs):
        lanes.submit(i, j)
    try:
        # results are handed over on the caller's thread (SQLite connections are per-thread)
        for _ in range(len(jobs)):
            i, r = results.get()
            if isinstance(r, BaseException):
                raise r
            on_result(int(i), r)   # type: ignore[call-overload]
    finally:
        lanes.close()


def run_jobs(jobs: list[Job], *, gpus: list[int | None], timeout_s: float,
             on_result: Callable[[int, Result], None], cache_dir: str | None = None,
             sanitizer: str | None = None, per_gpu: int = 1) -> None:
    """Run `jobs` with `per_gpu` concurrent workers on each entry of `gpus` (None = CPU / no pinning)."""
    _drain(jobs, lambda done: Lanes(gpus, timeout_s=timeout_s, done=done, cache_dir=cache_dir,
                                    sanitizer=sanitizer, per_gpu=per_gpu), on_result)


def run_jobs_ray(jobs: list[Job], *, timeout_s: float,
                 on_result: Callable[[int, Result], None], cache_dir: str | None = None,
                 sanitizer: str | None = None, address: str | None = None, gpus_per_job: float = 1) -> None:
    """Same contract as run_jobs, with Ray placing each job on a GPU of some host in the cluster."""
    _drain(jobs, lambda done: RayLanes(timeout_s=timeout_s, done=done, cache_dir=cache_dir, sanitizer=sanitizer,
                                       address=address, gpus_per_job=gpus_per_job), on_result)
