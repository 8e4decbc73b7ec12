"""Figures of the bench pipeline, as a user runs it, printed as an 80-column table.

    python3 benchmarks/pipeline_bench.py --part main        # cold cache, warm cache, one cached re-run
    python3 benchmarks/pipeline_bench.py --part kernelbench --kb CHECKOUT [--level 1] [--slice 1/2]
    python3 benchmarks/pipeline_bench.py --part scaling [--jobs 16,8,4,2] [--n 16]
    python3 benchmarks/pipeline_bench.py --part kill [--kill-stage build|gpu]   # kill -9, then --resume

Each part fits one 9-minute device call on a 16-core H200 machine (KernelBench: a level in two slices).
Every command is `python3 -m kernelpro.cli ...` in a fresh store under --work (default a temp dir);
"cold" means a fresh KERNELPRO_CACHE, so every extension is built. Nothing here asserts a target: it
prints what it measured, next to the target it is measured against.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS: list[tuple[str, str, str, str]] = []


def kp(args: list[str], *, cache: Path, db: Path, timeout: float = 560, log: Path | None = None) -> tuple[int, float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELPRO_CACHE=str(cache))
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "kernelpro.cli", *args, "--db", str(db)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    wall = time.monotonic() - t0
    if log:
        log.write_text(out)
    return rc, wall, out


def verdicts(db: Path) -> str:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT e.ok, COUNT(*) FROM evaluations e GROUP BY e.ok").fetchall()
    d = {bool(ok): n for ok, n in rows}
    return f"{d.get(True, 0)} ok/{d.get(False, 0)} failed"


def count(db: Path, table: str) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def row(what: str, wall: float | None, target: str, note: str) -> None:
    ROWS.append((what, "-" if wall is None else f"{wall:7.1f}", target, note))
    print(f"  {what}: {'-' if wall is None else f'{wall:.1f} s'} ({note})", flush=True)


def part_main(work: Path) -> None:
    cache = work / "cache-main"
    base = ["bench", "ptxbench", "--solutions", "reference"]
    rc, wall, out = kp(base, cache=cache, db=work / "cold.db", log=work / "cold.log")
    row("main job, cold cache", wall, "<= 180 s", f"rc {rc}, {verdicts(work / 'cold.db')}")
    rc, wall, out = kp(base, cache=cache, db=work / "warm.db", log=work / "warm.log")
    row("main job, warm cache", wall, "<= 60 s", f"rc {rc}, {verdicts(work / 'warm.db')}")
    rc, wall, out = kp([*base, "--task", "rmsnorm_bf16", "--executed", "off"], cache=cache, db=work / "one.db",
                       log=work / "one.log")
    row("re-evaluate one cached", wall, "<= 5 s", f"rc {rc}, rmsnorm_bf16, {verdicts(work / 'one.db')}")


def part_kernelbench(work: Path, kb: str, level: int, sl: str) -> None:
    sol = work / f"kb-sol-{level}"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/kernelbench_solutions.py"), "--path", kb, "--level",
                    str(level), "--out", str(sol)], check=True)
    sys.path.insert(0, str(ROOT))
    from kernelpro.suites.kernelbench import load_kernelbench

    tasks = load_kernelbench(kb, level=level)
    i, n = (int(x) for x in sl.split("/"))
    mine = tasks[(i - 1) * len(tasks) // n: i * len(tasks) // n]
    sel = [a for t in mine for a in ("--task", t.name)]
    db = work / f"kb{level}-{i}of{n}.db"
    rc, wall, out = kp(["bench", "kernelbench", "--path", kb, "--level", str(level), "--solutions", str(sol),
                        "--executed", "off", *sel], cache=work / "cache-kb", db=db, log=work / f"kb{level}-{i}.log")
    row(f"KernelBench L{level} slice {i}/{n}", wall, "<=1200/lvl",
        f"rc {rc}, {len(mine)} probs, {verdicts(db)}")


SCALING_SRC = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="kp_scaling_{i}", cpp_sources="torch::Tensor add{i}(torch::Tensor a, torch::Tensor b);",
                   cuda_sources=r"""
#include <torch/extension.h>
__global__ void k(const float* a, const float* b, float* c, long n) {{
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i] * {i}.0f * 0.f;
}}
torch::Tensor add{i}(torch::Tensor a, torch::Tensor b) {{
  auto c = torch::empty_like(a);
  long n = a.numel();
  k<<<(unsigned)((n + 255) / 256), 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
  return c;
}}""", functions=["add{i}"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return _ext.add{i}(a, b)
'''


def part_scaling(work: Path, jobs: list[int], n: int) -> None:
    """n distinct load_inline candidates (one task file each, copies of tests/tasks/vector_add.py) built by
    `kernelpro build` with 1..16 parallel builds, each from a cold cache."""
    tasks, sol = work / "scale-tasks", work / "scale-sol"
    tasks.mkdir(exist_ok=True)
    sol.mkdir(exist_ok=True)
    src = (ROOT / "tests/tasks/vector_add.py").read_text()
    for i in range(n):
        (tasks / f"vadd{i:02d}.py").write_text(src.replace('"name": "vector_add"', f'"name": "vadd{i:02d}"'))
        (sol / f"vadd{i:02d}.py").write_text(SCALING_SRC.format(i=i))
    base = None
    for j in jobs:
        db = work / f"scale-{j}.db"
        rc, wall, out = kp(["build", str(tasks), "--solutions", str(sol), "--build-jobs", str(j), "--arch", "sm_90a"],
                           cache=work / f"cache-scale-{j}", db=db, log=work / f"scale-{j}.log")
        with sqlite3.connect(db) as c:
            ok = c.execute("SELECT COUNT(*) FROM builds WHERE ok=1").fetchone()[0]
        base = base or (wall * j if j == 1 else None)
        row(f"{n} builds, {j:2d} parallel", wall, "~1/jobs",
            f"rc {rc}, {ok}/{n} built, {n / wall * 60:.1f}/min")


def _kill_when(proc: subprocess.Popen, db: Path, table: str, at_least: int, below: int, limit: float) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit and proc.poll() is None:
        k = count(db, table)
        if at_least <= k < below:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return k
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return -1


def part_kill(work: Path, stages: list[str]) -> None:
    base = ["bench", "ptxbench", "--solutions", "reference", "--executed", "off"]
    for stage, table in (("build", "builds"), ("GPU", "evaluations")):
        if stage.lower() not in stages:
            continue
        cache, db = work / f"cache-kill-{stage}", work / f"kill-{stage}.db"
        env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELPRO_CACHE=str(cache))
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "kernelpro.cli", *base, "--db", str(db)], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        n_cand = 10
        killed_at = _kill_when(p, db, table, 2, n_cand - 2, 400)
        before = {t: count(db, t) for t in ("builds", "verifications", "evaluations")}
        with sqlite3.connect(db) as c:
            (run_id,) = c.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        status = subprocess.run([sys.executable, "-c", f"from kernelpro.results.store import Store;"
                                 f"print(Store({str(db)!r}).get_run({run_id})['status'])"],
                                cwd=ROOT, env=env, capture_output=True, text=True).stdout.strip()
        print(f"kill -9 in the {stage} stage after {time.monotonic() - t0:.0f} s with {killed_at} {table} rows: "
              f"run {run_id} reads {status!r}; recorded {before}", flush=True)
        rc, wall, out = kp(["bench", "--resume", str(run_id)], cache=cache, db=db, log=work / f"resume-{stage}.log")
        after = {t: count(db, t) for t in ("builds", "verifications", "evaluations")}
        said = next((ln for ln in out.splitlines() if "resumed: skipping" in ln), "(no resume line)")
        print(f"  resume rc {rc} in {wall:.0f} s: {said.strip()}", flush=True)
        with sqlite3.connect(db) as c:
            dup = c.execute(f"SELECT COUNT(*) FROM (SELECT candidate_id FROM {table} GROUP BY candidate_id "
                            "HAVING COUNT(*) > 1)").fetchone()[0]
        print(f"  after: {after}; candidates with a {table} row recorded twice: {dup}", flush=True)
        row(f"kill -9 in {stage} + resume", wall, "no redone work",
            f"rc {rc}, {before[table]}->{after[table]} {table}, {dup} redone")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("main", "kernelbench", "scaling", "kill"), action="append", required=True)
    ap.add_argument("--work", help="folder for stores, caches and logs (default: a temp dir)")
    ap.add_argument("--kb", help="KernelBench checkout (--part kernelbench)")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--slice", default="1/1", help="I/N: the I-th of N equal slices of the level's problems")
    ap.add_argument("--jobs", default="16,8,4,2,1", help="parallel builds to measure (--part scaling)")
    ap.add_argument("--n", type=int, default=16, help="candidates to build (--part scaling)")
    ap.add_argument("--kill-stage", default="build,gpu", help="where --part kill kills: build, gpu or both")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="kp-pipeline-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"pipeline bench: {os.cpu_count()} cores, work {work}", flush=True)
    for part in args.part:
        if part == "main":
            part_main(work)
        elif part == "kernelbench":
            if not args.kb:
                ap.error("--part kernelbench needs --kb CHECKOUT")
            part_kernelbench(work, args.kb, args.level, args.slice)
        elif part == "scaling":
            part_scaling(work, [int(j) for j in args.jobs.split(",")], args.n)
        else:
            part_kill(work, args.kill_stage.lower().split(","))
    print()
    print(f"{'measurement':<28} {'wall s':>7} {'target':<10} note")
    print("-" * 80)
    for what, wall, target, note in ROWS:
        print(f"{what:<28} {wall:>7} {target:<10} {note}"[:80])
    return 0


if __name__ == "__main__":
    sys.exit(main())
