"""System-level view of a Python candidate through the PyTorch profiler: kernel launches per call,
distinct kernels, GPU busy time vs wall time (gaps), and host synchronizations.

Runs in a child process (`python -m kernelpro.profile.system CAND TASK SIZE CALLS`) so a crashing
candidate cannot take the caller down; prints one JSON object.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelpro import sandbox
from kernelpro.errors import KernelProError

SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
              "cuCtxSynchronize")


@dataclass
class SystemView:
    calls: int
    launches_per_call: float
    kernels: dict[str, int] = field(default_factory=dict)   # kernel name -> launches over all calls
    gpu_us_per_call: float = 0.0                            # sum of kernel durations
    wall_us_per_call: float = 0.0
    gap_us_per_call: float = 0.0                            # GPU idle between the first and last kernel
    syncs_per_call: float = 0.0

    @property
    def mean_kernel_us(self) -> float:
        return self.gpu_us_per_call / self.launches_per_call if self.launches_per_call else 0.0

    @property
    def gpu_busy_share(self) -> float:
        return self.gpu_us_per_call / self.wall_us_per_call if self.wall_us_per_call else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(kernels: list[tuple[str, float, float]], syncs: int, calls: int, wall_us: float) -> SystemView:
    """kernels: (name, start_us, end_us) over `calls` calls."""
    ks = sorted(kernels, key=lambda k: k[1])
    busy = sum(e - s for _, s, e in ks)
    gaps = sum(max(0.0, ks[i + 1][1] - ks[i][2]) for i in range(len(ks) - 1))
    counts: dict[str, int] = {}
    for name, _, _ in ks:
        counts[name] = counts.get(name, 0) + 1
    n = max(calls, 1)
    return SystemView(calls, len(ks) / n, counts, busy / n, wall_us / n, gaps / n, syncs / n)


def _child(candidate: str, task_path: str, size_json: str, calls: str) -> None:
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernelpro.suites.task import import_module_from, instantiate, load_task

    task = load_task(task_path)
    mod, _ref, inputs = instantiate(task, json.loads(size_json), device="cuda", seed=0)
    cand = import_module_from(Path(candidate), "kp_system_candidate")
    with torch.device("cuda"):
        model = cand.ModelNew(*mod.get_init_inputs()).cuda()
    n = int(calls)
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(n):
                model(*inputs)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e6
    kernels, syncs = [], 0
    for e in prof.events():
        dev = str(getattr(e, "device_type", ""))
        if dev.endswith("CUDA") and e.time_range.elapsed_us() >= 0 and not e.name.startswith(("Memcpy", "Memset")):
            kernels.append((e.name, float(e.time_range.start), float(e.time_range.end)))
        elif any(s in e.name for s in SYNC_NAMES):
            syncs += 1
    syncs = max(0, syncs - 1)  # the one synchronize after the timed calls is the harness's
    print(json.dumps(summarize(kernels, syncs, n, wall).to_dict()))


def system_view(candidate: Path, task_path: Path, size: dict[str, Any], calls: int = 5, timeout: float = 300) -> SystemView:
    from kernelpro.profile.collect import _build_access, candidate_target

    candidate, task_path = Path(candidate).resolve(), Path(task_path).resolve()  # the child runs in a temp dir
    # The same compile cache as the ncu pass (TORCH_EXTENSIONS_DIR for this exact source, seen through a
    # private copy): a load_inline candidate neither rebuilds nor writes to a read-only home.
    target = candidate_target(candidate, task_path, size, calls)
    env = {**os.environ, **target.env}
    with tempfile.TemporaryDirectory(prefix="kp-system-") as tmp:
        writable, binds = _build_access(target, Path(tmp))
        try:
            r = sandbox.run([sys.executable, "-m", "kernelpro.profile.system", str(candidate), str(task_path),
                             json.dumps(size), str(calls)], timeout_s=timeout, env=env, cwd=tmp, writable=writable,
                            binds=binds)
        finally:
            for src, _dst in binds:  # the private copy of the build: this pass's alone
                shutil.rmtree(src.parent, ignore_errors=True)
    if r.timed_out:
        raise KernelProError(f"the PyTorch-profiler pass did not finish in {timeout:.0f} s (candidate hangs?)")
    if r.rc != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        raise KernelProError(f"the candidate failed under the PyTorch profiler: {last}")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return SystemView(**d)


if __name__ == "__main__":
    _child(*sys.argv[1:5])
