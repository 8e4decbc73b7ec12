"""Warm the harness's compile cache for the suite's reference solutions, all builds at once.

The worker builds each candidate in its own process, one after another; on a 16-core GPU machine that
leaves most cores idle while nvcc runs. This script builds the same extensions in parallel, into the
same per-candidate cache folders the worker uses (kernelpro.harness.worker: <cache>/torch_extensions/<hash16>),
by running each ModelNew once on the task's smallest size. Timings are untouched: the worker still
loads, checks and times every candidate itself.

    export PYTHONPATH=$PWD; python3 docs/measurements/recipes/prebuild_refs.py [ptxbench] [--jobs 16]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

BUILD = """
import sys, torch
from kernelpro.suites.task import find_task, instantiate, import_module_from
task = find_task(sys.argv[1])
sizes = sorted(task.sizes("shown") or task.sizes("default"), key=lambda s: sum(v for v in s.values() if isinstance(v, int)))
tmod, model, inputs = instantiate(task, sizes[0], device="cuda")
mod = import_module_from(__import__("pathlib").Path(sys.argv[2]), "kp_prebuild")
with torch.device("cuda"):
    new = mod.ModelNew(*tmod.get_init_inputs()).cuda()
new(*inputs)
torch.cuda.synchronize()
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", nargs="?", default="ptxbench")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--search-root", action="append", default=[], metavar="TASK",
                    help="also build the parameter search's start node for TASK (make_source(PARAMS), the exact "
                         "file `kernelpro optimize --policy param` evaluates first)")
    args = ap.parse_args()
    from kernelpro.harness.worker import extension_dir
    from kernelpro.suites.candidate import load_candidate
    from kernelpro.suites.task import load_suite

    ref_dir = ROOT / "kernelpro" / "suites" / args.suite / "reference"
    work = []
    for t in load_suite(args.suite):
        p = ref_dir / f"{t.name}.py"
        if p.exists():
            work.append((t, p, load_candidate(p).hash))

    import tempfile

    from kernelpro.agent.policy_param import load_template
    from kernelpro.suites.task import find_task

    for key in args.search_root:
        task = find_task(key)
        tpl = load_template(task)
        p = Path(tempfile.mkdtemp(prefix="kp-root-")) / f"{task.name}_root.py"
        p.write_text(tpl.make_source(tpl.params))
        work.append((task, p, load_candidate(p).hash))

    def build(item):
        t, p, h = item
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(extension_dir(h)))
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-c", BUILD, t.key, str(p)], env=env, capture_output=True, text=True,
                           timeout=600, cwd=str(p.parent))
        return t.name, r.returncode, time.monotonic() - t0, (r.stderr or "").strip().splitlines()[-1:]

    with ThreadPoolExecutor(args.jobs) as ex:
        for name, rc, s, tail in ex.map(build, work):
            print(f"prebuild {name:32s} rc={rc} {s:6.1f}s {'' if rc == 0 else tail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
