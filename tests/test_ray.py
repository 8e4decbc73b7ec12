"""`kernelpro bench --ray` on a local Ray cluster with CPU resources only: the same verdicts and the same
store rows as the local pool."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from kernelpro.cli import main

ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dev]')")

HERE = Path(__file__).parent
TASKS = HERE / "tasks"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A real local cluster started as a user would (`ray start --head`), joined through RAY_ADDRESS."""
    tmp = tmp_path_factory.mktemp("ray")
    exe = shutil.which("ray")
    if exe is None:
        pytest.skip("the `ray` command is not on PATH")
    port = "6391"
    start = subprocess.run([exe, "start", "--head", "--port", port, "--num-cpus", "2", "--num-gpus", "0",
                            "--include-dashboard=false", "--temp-dir", str(tmp)], capture_output=True, text=True,
                           timeout=180)
    if start.returncode != 0:
        pytest.skip(f"ray start failed here: {start.stderr[-300:]}")
    yield f"127.0.0.1:{port}"
    if ray.is_initialized():
        ray.shutdown()
    subprocess.run([exe, "stop", "--force"], capture_output=True, timeout=120)


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT c.task, c.hash, e.ok, json_extract(e.payload, '$.reason'), "
                         "json_extract(e.payload, '$.correct'), e.arch FROM candidates c "
                         "JOIN evaluations e ON e.candidate_id = c.id ORDER BY c.task").fetchall()


def test_ray_matches_the_local_pool(cluster, tmp_path, monkeypatch):
    sol = tmp_path / "sol"
    sol.mkdir()
    shutil.copy(HERE / "candidates/honest/vector_add_torch.py", sol / "vector_add.py")
    shutil.copy(HERE / "candidates/adversarial/library_fallback.py", sol / "matmul_fp32.py")
    common = ["bench", str(TASKS), "--solutions", str(sol), "--device", "cpu", "--baselines", "eager",
              "--trials", "1", "--sizes", "shown", "--arch", "sm_90a"]
    assert main([*common, "--db", str(tmp_path / "local.db")]) == 0
    monkeypatch.setenv("RAY_ADDRESS", cluster)
    assert main([*common, "--ray", "--db", str(tmp_path / "ray.db")]) == 0
    local, remote = _rows(tmp_path / "local.db"), _rows(tmp_path / "ray.db")
    assert local == remote and len(local) == 2
    assert {r[0].split("/")[-1]: r[3] for r in remote} == {"vector_add": None, "matmul_fp32": "library_fallback"}
