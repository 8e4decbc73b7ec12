"""kill -9 of a CPU bench in the build stage and in the evaluation stage, each followed by --resume that
finishes without redoing what was recorded, and says what it skipped; the killed run reads 'interrupted'."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelpro.results.store import Store

HERE = Path(__file__).parent
ROOT = HERE.parent
TASKS = HERE / "tasks"
# Three candidates that each take seconds on the CPU (vector_add_big's timing alone took 223 s there, and
# twice in each test it was most of the suite's time); a kill between the first and the last row of a stage
# is all either test needs.
SOLUTIONS = {"vector_add": "vector_add_torch.py", "matmul_fp32": "matmul_fp32_broadcast.py",
             "matmul_bf16": "matmul_bf16_broadcast.py"}


def _solutions(tmp_path: Path) -> Path:
    d = tmp_path / "sol"
    d.mkdir()
    for task, cand in SOLUTIONS.items():
        shutil.copy(HERE / "candidates/honest" / cand, d / f"{task}.py")
    return d


def _bench(db: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), KERNELPRO_CACHE=str(db.parent / "cache"))
    return subprocess.Popen([sys.executable, "-m", "kernelpro.cli", "bench", *extra, "--db", str(db)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return int(c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    except sqlite3.OperationalError:
        return 0   # the schema is not there yet


def _kill_when(db: Path, proc: subprocess.Popen, table: str, at_least: int, below: int, limit_s: float) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        n = _count(db, table)
        if at_least <= n < below:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return n
        if proc.poll() is not None:
            pytest.fail(f"bench ended before the kill ({table}={n}):\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"no {table} row within {limit_s} s")


def _resume(db: Path, run_id: int) -> str:
    p = _bench(db, "--resume", str(run_id))
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    return out


def _args(sol: Path) -> list[str]:
    return [str(TASKS), "--solutions", str(sol), "--device", "cpu", "--baselines", "eager", "--trials", "1",
            "--sizes", "shown", "--arch", "sm_90a", "--build-jobs", "1"]


def _per_candidate(db: Path, table: str) -> list[int]:
    with sqlite3.connect(db) as c:
        return [int(r[0]) for r in c.execute(
            f"SELECT COUNT(t.id) FROM candidates c LEFT JOIN {table} t ON t.candidate_id = c.id GROUP BY c.id")]


def test_kill9_in_build_stage_then_resume(tmp_path):
    db = tmp_path / "runs.db"
    p = _bench(db, *_args(_solutions(tmp_path)))
    built = _kill_when(db, p, "builds", 1, len(SOLUTIONS), 600)
    st = Store(db)
    run = st.runs("bench")[-1]
    assert run["status"] == "interrupted"     # its pid is gone: not left 'running'
    out = _resume(db, run["id"])
    assert f"skipping {built} builds" in out, out[-2000:]
    assert Store(db).get_run(run["id"])["status"] == "done"
    assert _per_candidate(db, "builds") == [1] * len(SOLUTIONS)         # no build redone
    assert _per_candidate(db, "evaluations") == [1] * len(SOLUTIONS)
    assert _per_candidate(db, "verifications") == [1] * len(SOLUTIONS)


def test_kill9_in_evaluation_stage_then_resume(tmp_path):
    db = tmp_path / "runs.db"
    p = _bench(db, *_args(_solutions(tmp_path)))
    done = _kill_when(db, p, "evaluations", 1, len(SOLUTIONS), 900)
    st = Store(db)
    run = st.runs("bench")[-1]
    assert run["status"] == "interrupted"
    out = _resume(db, run["id"])
    assert f"{done} evaluations already recorded" in out, out[-2000:]
    assert _per_candidate(db, "evaluations") == [1] * len(SOLUTIONS)     # no evaluation redone
    assert _per_candidate(db, "builds") == [1] * len(SOLUTIONS)
    assert "[gpu " in out    # without a TTY: a plain line per finished candidate
