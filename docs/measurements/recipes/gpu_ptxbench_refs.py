"""GPU check of the ptxbench reference Models (run on the H200; prints one compact table).

For every task: run the reference at each shown / held-out size and at the timed size, report output
shapes, time the timed size with CUDA events, and list the kernels it launched (torch.profiler). The last
column says whether the task's own `forbid_kernels` regex catches the reference's library kernels — it must,
or a candidate could fall back to exactly that path unnoticed.

    export PYTHONPATH=$PWD && python3 docs/measurements/recipes/gpu_ptxbench_refs.py [task ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from kernelpro.suites.task import instantiate, load_suite  # noqa: E402


def kernels_of(model, inputs) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        model(*inputs)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def time_ms(model, inputs, reps: int = 10) -> float:
    for _ in range(3):
        model(*inputs)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        model(*inputs)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main(names: list[str]) -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print("| task | sizes ok | timed ms | TFLOP/s | GB/s | forbid_kernels catches reference | kernels |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for task in load_suite("ptxbench"):
        if names and task.name not in names:
            continue
        try:
            for size in task.sizes("shown") + task.sizes("heldout"):
                _, model, inputs = instantiate(task, size, "cuda", 0)
                with torch.no_grad():
                    out = model(*inputs)
                outs = out if isinstance(out, tuple) else (out,)
                assert all(torch.isfinite(o.float()).all() for o in outs), f"non-finite output at {size}"
                del model, inputs, out, outs
            _, model, inputs = instantiate(task, None, "cuda", 0)
            with torch.no_grad():
                ms = time_ms(model, inputs)
                kernels = kernels_of(model, inputs)
            flops, nbytes = task.work()
            pattern = re.compile(task.forbid_kernels)
            caught = [k for k in kernels if pattern.search(k)]
            verdict = "yes" if caught else "NO"
            bad += not caught
            tf = f"{flops / ms / 1e9:.0f}" if flops else "-"
            print(f"| {task.name} | yes | {ms:.3f} | {tf} | {nbytes / ms / 1e6:.0f} | {verdict} | "
                  f"{'; '.join(k[:70] for k in kernels)} |")
            del model, inputs
            torch.cuda.empty_cache()
        except Exception as e:  # report and keep going: one broken reference must not hide the others
            bad += 1
            print(f"| {task.name} | FAILED: {type(e).__name__}: {str(e)[:160]} | | | | | |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
